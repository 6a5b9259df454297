"""The public engine API: build a simulation from settings and terrain arrays, step it,
read its state. Composes the wind solver, the flakes and the snow cover; knows no bpy.

Per step: wind (advect, solve, project; ``wind_schedule``: every few steps by that many
steps' time, or in sub-steps) -> surface wind (with drift) -> flakes (sample,
integrate, collide, lift again where the wind blows snow, count hits, respawn) -> cover
(deposit the hits, drift along the surface wind, redistribute); every
``obstacle_refresh_steps`` steps
the solid-cell mask is rebuilt from terrain + snow.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from . import stages
from .backend import Backend, StageTimer, host_kernels, select_backend
from .cover import SnowCover
from .drift import SnowDrift, check_roughness
from .errors import SnowInputError, SnowMemoryError, SnowSimulationError
from .fences import check_fences, fence_columns
from .flakes import FlakeSystem
from .grid import WindGrid
from .options import SolverOptions
from .settings import SnowSettings
from .terrain import Heightmap, build_heightmap, vertex_snow_depth
from .threads import cpu_thread_governor
from .wind import WindSolver, WindStepInfo, fastest_inflow, wind_schedule

#: Share of the backend's free memory a bake may plan to use (the rest is headroom for
#: allocator slack, temporaries and the host side).
MEMORY_HEADROOM = 0.85
WIND_SPEED_LIMIT = 5.0
"""check_health stops a run whose wind is faster than this many times the storm's fastest
inflow (plus 10 m/s): terrain speeds a wind up 2x at most (a ridge's crest, potential flow),
a wind solve gone unstable grows without bound within a few steps."""
SNOW_CLEARANCE = 0.5
"""check_health stops a run whose snow has risen to within this many wind cells of the wind
grid's top: the top cells are the sky the flakes start from and the wind leaves by."""

STATE_FORMAT_VERSION = 2


@dataclass
class StepDiagnostics:
    """What one step did. Volumes in m^3, divergence in 1/s."""

    step: int
    time: float
    wind: WindStepInfo | None
    hits: int = 0
    deposited_volume: float = 0.0
    """m^3 of snow brought onto the terrain since the start: snowfall_volume +
    suspended_volume + inflow_volume - outflow_volume."""
    snow_volume: float = 0.0
    """m^3 of snow on the ground; the books balance as deposited_volume == snow_volume (to
    float32 rounding)."""
    grains_aloft: int = 0
    """Flakes blowing about as grains of blowing snow after the step (drift on)."""
    snowfall_volume: float = 0.0
    """m^3 of snowfall landed since the start (settings.snowfall_rate over the terrain)."""
    inflow_volume: float = 0.0
    """m^3 of drifting snow blown in across the open upwind edge since the start (0 with
    upwind_fetch "wrap" or "bare_ground", or the drift off)."""
    outflow_volume: float = 0.0
    """m^3 of drifting snow blown out across the open edges since the start (0 with
    upwind_fetch "wrap", or the drift off)."""
    suspended_volume: float = 0.0
    """m^3 the blowing snow in suspension (grains) brought onto the terrain since the start:
    the grains from upwind that settled less the grains lifted off the terrain that left it
    (0 with upwind_fetch "wrap", or the drift off; docs/drift.md, "Time-lapse books").
    deposited_volume = snowfall + suspended + inflow - outflow."""


@dataclass
class WindField:
    """Host copy of the wind state: MAC faces (m/s), kinematic pressure, solid cells."""

    grid: WindGrid
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    pressure: np.ndarray
    solid: np.ndarray


@dataclass
class MemoryPlan:
    """Bytes each part of a simulation will allocate on the backend."""

    wind: int
    flakes: int
    cover: int
    available: int

    @property
    def total(self) -> int:
        return self.wind + self.flakes + self.cover

    @property
    def fits(self) -> bool:
        return self.total <= MEMORY_HEADROOM * self.available


def plan_memory(settings: SnowSettings, heightmap_grid, grid: WindGrid, backend: Backend,
                flakes: bool = True) -> MemoryPlan:
    return MemoryPlan(
        wind=WindSolver.estimate_bytes(settings, grid),
        flakes=FlakeSystem.estimate_bytes(settings) if flakes else 0,
        cover=SnowCover.estimate_bytes(settings, heightmap_grid)
        + (SnowDrift.estimate_bytes(heightmap_grid, grid) if settings.drift_enabled else 0),
        available=backend.memory_available(),
    )


def _raise_if_too_big(plan: MemoryPlan, settings: SnowSettings, grid: WindGrid,
                      backend: Backend) -> None:
    if plan.fits:
        return
    budget = MEMORY_HEADROOM * plan.available
    gib = 1024.0**3
    where = f"{backend.name} memory ({plan.available / gib:.1f} GiB free)"
    if plan.flakes and plan.flakes >= plan.wind + plan.cover:
        per_flake = plan.flakes / settings.flake_count
        largest = int(max(0.0, budget - plan.wind - plan.cover) // per_flake)
        raise SnowMemoryError(
            "flake_count", f"{settings.flake_count:,} flakes need {plan.total / gib:.2f} GiB, "
            f"more than fits in {where}", f"flake_count <= {largest:,}", plan.total, plan.available)
    per_cell = plan.wind / grid.cell_count
    cells_fit = max(0.0, budget - plan.flakes - plan.cover) / per_cell
    scale = (cells_fit / grid.cell_count) ** (1.0 / 3.0)
    raise SnowMemoryError(
        "wind_cell_size", f"a {grid.nx}x{grid.ny}x{grid.nz} wind grid with these flakes needs "
        f"{plan.total / gib:.2f} GiB, more than fits in {where}",
        f"wind_cell_size >= {grid.cell_size / max(scale, 1e-9):.4g} m", plan.total, plan.available)


class Simulation:
    """A snowfall simulation over one terrain. See docs/architecture.md for the API."""

    def __init__(self, settings: SnowSettings, vertices, triangles, backend: str = "auto",
                 flakes: bool = True, profile: bool = False, fences=None,
                 options: SolverOptions | None = None):
        if not isinstance(settings, SnowSettings):
            raise SnowInputError("settings", f"expected SnowSettings, got {type(settings).__name__}",
                                 "SnowSettings()")
        settings.validate()
        fences = check_fences(fences)
        self.settings = settings
        self.backend = select_backend(backend)
        # The heightmap is built once, on the host: the reference or the Numba build.
        self.heightmap: Heightmap = build_heightmap(
            vertices, triangles, settings.heightmap_resolution,
            backend_name="numpy" if self.backend.name == "numpy" else "cpu")
        self.grid = WindGrid.for_terrain(self.heightmap.grid, self.heightmap.z_min,
                                         self.heightmap.z_max, settings)
        if settings.drift_enabled:
            check_roughness(settings, self.grid.cell_size)
        self.memory_plan = plan_memory(settings, self.heightmap.grid, self.grid, self.backend,
                                       flakes)
        _raise_if_too_big(self.memory_plan, settings, self.grid, self.backend)

        self.timer = StageTimer(self.backend, enabled=profile)
        #: the CPU kernels' thread count, chosen from the step times (snow_addon.threads;
        #: None on the GPU): a busy core costs the bake less
        self.thread_governor = cpu_thread_governor(self.backend)
        self.cover = SnowCover(settings, self.heightmap, self.grid, self.backend)
        self.cover.timer = self.timer
        self.wind = WindSolver(settings, self.grid, self.backend, options)
        self.fences = fences
        """The porous fences (snow_addon.fences.PorousFence): only the wind feels them."""
        if fences:
            self.wind.set_fences(*fence_columns(fences, self.grid))
        self.wind.update_obstacles(self.cover.wind_height, self.cover.snow_depth, self.heightmap.grid)
        self.drift: SnowDrift | None = None
        if settings.drift_enabled and flakes:
            self.drift = SnowDrift(settings, self.cover, self.grid, self.backend,
                                   self.heightmap.z_max - self.heightmap.z_min,
                                   self.heightmap.mean_height)
            self.drift.update_shelter(0.0)
        self.flakes: FlakeSystem | None = None
        if flakes:
            self.flakes = FlakeSystem(settings, self.grid, self.heightmap.grid, self.backend)
            self.flakes.initialize(self.wind, self.cover.height, self.cover.snow_depth)
        self.step_index = 0
        self.time = 0.0
        #: the latest wind solve's schedule (``wind_schedule``): ``wind_substeps`` solves,
        #: the next at step ``_next_wind_step`` = its step + ``wind_interval``
        self.wind_interval, self.wind_substeps = 1, 1
        self._next_wind_step = 0
        #: the next wind step, begun ahead (_prefetch_wind) and finished at its step
        self._pending_wind = None
        #: wind steps begun ahead so far (not part of the state: for tests and benchmarks)
        self.wind_prefetches = 0
        #: wind solves so far in this process (not part of the state: for the benchmark)
        self.wind_solves = 0
        self._last_wind: WindStepInfo | None = None
        # device copy of the hit total before the latest step: hits per step without a sync
        self._hit_total_before = self.cover.hit_total.copy()

    # --- stepping -------------------------------------------------------------------------
    def step(self, count: int = 1) -> StepDiagnostics:
        """Advance ``count`` steps of ``settings.time_step`` seconds; return the last step's
        diagnostics."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise SnowInputError("count", f"must be a whole number >= 0, got {count!r}", "1")
        dt = self.settings.time_step
        timer = self.timer
        last_step = self.step_index + int(count)
        governor = self.thread_governor
        previous = governor.apply() if governor is not None else None
        try:
            for index in range(int(count)):
                started = time.perf_counter()
                if index == count - 1:
                    self._hit_total_before[...] = self.cover.hit_total
                if self.step_index >= self._next_wind_step:
                    self._step_wind(dt)
                    self._prefetch_wind(dt, last_step)
                elif self._pending_wind is not None:
                    self.wind.poll_step(self._pending_wind)
                if self.flakes is not None:
                    blowing = grain_count = None
                    if self.drift is not None:
                        with timer.stage(stages.COVER):
                            self.drift.update_surface_wind(self.wind, self.time)
                        blowing = self.drift.blowing_snow(self.step_index,
                                                          self.flakes.inflow(self.time))
                        grain_count = self.cover.grain_count
                    with timer.stage(stages.FLAKES):
                        self.flakes.step(self.wind, self.cover.height, self.cover.snow_depth,
                                         self.cover.hit_counts, self.time, dt, blowing,
                                         grain_count)
                    with timer.stage(stages.COVER):
                        self.cover.step(dt, None if self.drift is None else self._drift_step)
                self.step_index += 1
                self.time = self.step_index * dt
                if self.step_index % self.settings.obstacle_refresh_steps == 0:
                    with timer.stage(stages.OBSTACLES):
                        self.wind.update_obstacles(self.cover.wind_height,
                                                   self.cover.snow_depth, self.heightmap.grid)
                        if self.drift is not None:
                            self.drift.update_shelter(self.time)
                if governor is not None:
                    governor.step_done(time.perf_counter() - started)
        finally:
            if governor is not None:
                governor.restore(previous)
        return self.diagnostics

    def _step_wind(self, dt: float) -> None:
        """Solve the wind on its schedule at this step: ``wind_substeps`` solves covering
        ``wind_interval`` steps (the first of them begun ahead by _prefetch_wind, if it
        was)."""
        interval, substeps = wind_schedule(self.settings, self.grid.cell_size, self.time)
        self.wind_interval, self.wind_substeps = interval, substeps
        wind_dt = interval * dt / substeps
        for sub in range(substeps):
            with self.timer.stage(stages.WIND):
                if sub == 0 and self._pending_wind is not None:
                    pending, self._pending_wind = self._pending_wind, None
                    self._last_wind = self.wind.finish_step(pending)
                else:
                    self._last_wind = self.wind.step(self.time + sub * wind_dt, wind_dt)
            self.wind_solves += 1
        self._next_wind_step = self.step_index + interval

    def _prefetch_wind(self, dt: float, last_step: int) -> None:
        """Begin the next wind step's solve now, while the flakes and the snow cover of the
        steps before it are still to be queued: its reads of the CG scalars then arrive
        while the device works on those, instead of leaving it idle while the host waits
        (the device-to-host reads are what holds a GPU step back). The same operations on
        the same data as without it, so the same results, bit for bit. Only where nothing
        in between changes what the solve reads: a single solve, no obstacle refresh
        before it, and within this call of ``step`` (no solve left under way between
        calls: a checkpoint never sees one)."""
        if not (self.wind.options.prefetch_wind and self.flakes is not None):
            return
        target = self._next_wind_step
        if target >= last_step:
            return
        refresh = self.settings.obstacle_refresh_steps
        if any(k % refresh == 0 for k in range(self.step_index + 1, target + 1)):
            return
        time = target * dt
        interval, substeps = wind_schedule(self.settings, self.grid.cell_size, time)
        if substeps != 1:
            return
        with self.timer.stage(stages.WIND):
            self._pending_wind = self.wind.begin_step(time, interval * dt, keep_current=True)
        self.wind_prefetches += 1

    def _drift_step(self) -> None:
        self.drift.step(self.settings.time_step)

    @property
    def diagnostics(self) -> StepDiagnostics:
        """The last step's diagnostics (reads a few scalars from the device)."""
        hits = self.cover.hits() - int(self.backend.to_host(self._hit_total_before)[0])
        grains = 0
        if self.drift is not None and self.step_index > 0:
            grains = int(self.backend.to_host(self.cover.spare_grain_count)[0])
        landed = self.cover.deposited_volume()
        suspended = self.cover.suspended_volume()
        inflow, outflow = (0.0, 0.0) if self.drift is None else self.drift.boundary_volumes()
        return StepDiagnostics(self.step_index, self.time, self._last_wind, hits,
                               landed + inflow - outflow, self.cover.snow_volume(), grains,
                               landed - suspended, inflow, outflow, suspended)

    @property
    def stage_seconds(self) -> dict:
        return dict(self.timer.seconds)

    # --- reading state ------------------------------------------------------------------------
    def _require_flakes(self) -> FlakeSystem:
        if self.flakes is None:
            raise SnowInputError("flakes", "this simulation was built without flakes",
                                 "Simulation(..., flakes=True)")
        return self.flakes

    def check_health(self) -> None:
        """Raise SnowSimulationError when the run has left the range its model holds: the
        wind or the snow not finite, the wind faster than WIND_SPEED_LIMIT times the
        storm's fastest inflow (plus 10 m/s), or snow risen to within SNOW_CLEARANCE wind
        cells of the wind grid's top (the flakes start there, and a column filled with
        snow leaves the wind no way through). Seven reductions on the device, read back in
        one copy: a bake calls it once per frame, before it writes the frame."""
        xp = self.backend.xp
        # the largest and the smallest of each part (no temporary as large as the wind
        # grid; a NaN anywhere makes them NaN), and the highest snow surface
        extremes = [reduce() for part in (self.wind.u, self.wind.v, self.wind.w)
                    for reduce in (part.max, part.min)]
        extremes.append(xp.max(self.cover.height + self.cover.snow_depth))
        values = self.backend.to_host(xp.stack(extremes))
        wind = [abs(float(value)) for value in values[:6]]
        surface = float(values[6])
        frame = f"at {self.time:.2f} s (step {self.step_index})"
        if not all(np.isfinite(wind)):
            raise SnowSimulationError(
                "wind_speed", f"the wind stopped being a number {frame}: the bake stops here "
                "and keeps what it baked before", "a lower Wind Speed or Gust Strength")
        if not np.isfinite(surface):
            raise SnowSimulationError(
                "snowfall_rate", f"the snow depth stopped being a number {frame}: the bake "
                "stops here and keeps what it baked before", "a lower Snowfall Rate")
        limit = WIND_SPEED_LIMIT * fastest_inflow(self.settings) + 10.0
        if max(wind) > limit:
            raise SnowSimulationError(
                "wind_speed", f"the wind reached {max(wind):.0f} m/s {frame}, more than "
                f"{limit:.0f} m/s for this storm: the wind solve has become unstable; the "
                "bake stops here and keeps what it baked before",
                "a lower Wind Speed or Gust Strength")
        lid = float(self.grid.top)
        if surface > lid - SNOW_CLEARANCE * float(self.grid.cell_size):
            depth = self.snow_depth()
            row, column = np.unravel_index(int(np.argmax(depth)), depth.shape)
            hm = self.heightmap.grid
            wrapped = self.settings.upwind_fetch == "wrap"
            raise SnowSimulationError(
                "wind_speed" if wrapped else "upwind_fetch",
                f"the snow piled up to {surface:.1f} m {frame}, "
                f"{'above' if surface > lid else 'up to'} the wind grid's top ({lid:.1f} m); "
                f"the deepest snow, {float(depth[row, column]):.1f} m, is at x "
                f"{hm.x0 + column * hm.spacing:.1f} m, y {hm.y0 + row * hm.spacing:.1f} m. "
                "Drifting snow collects there faster than this model can carry it on: the "
                "bake stops here and keeps what it baked before",
                "a lower Wind Speed or Drift Strength" if wrapped
                else "Upwind Fetch 'Wrap Around' or a lower Wind Speed")

    def flake_positions(self) -> np.ndarray:
        return self._require_flakes().positions()

    def flake_velocities(self) -> np.ndarray:
        return self._require_flakes().velocities()

    def flake_respawn_counts(self) -> np.ndarray:
        return self._require_flakes().respawn_counts()

    def snow_depth(self) -> np.ndarray:
        return np.array(self.backend.to_host(self.cover.snow_depth), dtype=np.float32)

    def vertex_snow_depth(self, vertices) -> np.ndarray:
        vertices = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
        return vertex_snow_depth(self.heightmap, self.snow_depth(), vertices)

    def solid_mask(self) -> np.ndarray:
        return self.backend.to_host(self.wind.solid).astype(bool)

    def wind_field(self) -> WindField:
        host = self.backend.to_host
        return WindField(self.grid, np.array(host(self.wind.u)), np.array(host(self.wind.v)),
                         np.array(host(self.wind.w)), np.array(host(self.wind.pressure)),
                         self.solid_mask())

    def wind_at(self, points) -> np.ndarray:
        """Wind velocity (m/s) at world points (N, 3), trilinear on the MAC faces."""
        sample_wind = host_kernels("sampling").sample_wind

        points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
        field_ = self.wind_field()
        g = self.grid
        vx, vy, vz = sample_wind(field_.u, field_.v, field_.w, g.x0, g.y0, g.z0, g.cell_size,
                                 points[:, 0], points[:, 1], points[:, 2])
        return np.stack([vx, vy, vz], axis=1)

    # --- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Complete host copy of the state: loading it and stepping reproduces an
        uninterrupted run exactly."""
        if self._pending_wind is not None:
            # only after an exception inside step(): a wind solve begun ahead is half done
            raise SnowInputError("state", "a wind step begun ahead is still under way (a step "
                                 "was interrupted)", "step on to the end of that wind step")
        state = {"format_version": np.int64(STATE_FORMAT_VERSION),
                 "step_index": np.int64(self.step_index),
                 "next_wind_step": np.int64(self._next_wind_step),
                 "hit_total_before": np.array(self.backend.to_host(self._hit_total_before))}
        for prefix, part in (("wind", self.wind), ("cover", self.cover), ("flakes", self.flakes),
                             ("drift", self.drift)):
            if part is None:
                continue
            for key, value in part.state_dict().items():
                state[f"{prefix}.{key}"] = np.asarray(value)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Replace the state by ``state`` (from ``state_dict``). All or nothing: when any
        part is rejected (SnowInputError), the simulation is left as it was."""
        version = int(state.get("format_version", -1))
        if version != STATE_FORMAT_VERSION:
            raise SnowInputError("state", f"format version {version} is not supported",
                                 f"a state saved by this version ({STATE_FORMAT_VERSION})")
        if "step_index" not in state:
            raise SnowInputError("state", "has no step_index", "a file written by save_state")
        parts = {"wind": self.wind, "cover": self.cover, "flakes": self.flakes,
                 "drift": self.drift}
        split: dict[str, dict] = {name: {} for name in parts}
        for key, value in state.items():
            prefix, _, rest = key.partition(".")
            if prefix in split and rest:
                split[prefix][rest] = value
        if (self.flakes is not None) != bool(split["flakes"]):
            have = "has" if self.flakes is not None else "has no"
            raise SnowInputError("state", f"does not match this simulation, which {have} flakes",
                                 "a state saved from a simulation built the same way")
        backup = self.state_dict()
        try:
            self._assign_state(parts, split, state)
        except BaseException:
            backup_split = {name: {} for name in parts}
            for key, value in backup.items():
                prefix, _, rest = key.partition(".")
                if prefix in backup_split and rest:
                    backup_split[prefix][rest] = value
            self._assign_state(parts, backup_split, backup)
            raise

    def _assign_state(self, parts: dict, split: dict, state: dict) -> None:
        for name, part in parts.items():
            if part is not None:
                part.load_state_dict(split[name])
        self.step_index = int(state["step_index"])
        self.time = self.step_index * self.settings.time_step
        # states saved before the wind had its own schedule: solve at the next step
        self._next_wind_step = int(state.get("next_wind_step", self.step_index))
        if "hit_total_before" in state:
            self._hit_total_before[...] = self.backend.asarray(state["hit_total_before"])

    def save_state(self, path: str | os.PathLike) -> str:
        """Write the state to ``path`` (.npz) atomically: a temporary file in the same
        folder, flushed to disk, then renamed over the target."""
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **self.state_dict())
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)  # mkstemp makes it private; a checkpoint is an ordinary file
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    def load_state(self, path: str | os.PathLike) -> None:
        with np.load(os.fspath(path)) as data:
            self.load_state_dict({key: data[key] for key in data.files})
