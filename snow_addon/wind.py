"""The wind solver: incompressible flow on the MAC grid, density 1.

One step: self-advection (semi-Lagrangian with a MacCormack correction, sampling only
open faces so that obstacles are free-slip) with the boundary conditions (inflow sides,
outflow sides, ground, lid, obstacles), the eddy viscosity's diffusion (Prandtl's
mixing length; wind_mixing), divergence, pressure Poisson solve
(multigrid-preconditioned CG to a relative tolerance, or the theses' fixed five
red-black SOR sweeps), projection. See docs/wind_solver.md for the model and the
numbers behind it.
"""
from __future__ import annotations

import collections
import functools
import math

import numpy as np

from ..kernels.contract import (BB, COARSE_VCYCLE_CELLS, DIVERGENCE_AFTER, DIVERGENCE_BEFORE,
                                DONE, DQ, INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS,
                                INFLOW_Y_PLUS, ITERATIONS, OPEN_LIMIT, RELATIVE, RR, RZ, RZ_NEXT,
                                SCALAR_SLOTS, inflow_sides_of)
from .backend import host_kernels
from .errors import SnowInputError
from .options import SolverOptions
from .settings import SOR5_RELAXATION

#: random_uniform streams of the gust keys (index = key number, counter = 0).
GUST_SPEED_STREAM = 0x4757_0001
GUST_DIRECTION_STREAM = 0x4757_0002

#: An axis is halved on the next coarser level while it has at least this many cells.
COARSEN_MIN_CELLS = 4

F32 = np.float32

KARMAN = 0.41
"""von Karman's constant."""
MIXING_HEIGHT = 10.0
"""m above the ground where the mixing length stops growing with height (the surface
layer's top for the scenes' storms): the wind's eddy viscosity and the flakes' eddies."""
MIXING_STABILITY = 0.125
"""Largest eddy viscosity as a share of h^2 / dt: the explicit diffusion step stays
monotone (6 neighbours x 0.125 < 1). Where l^2 |S| is larger (the shear layer over a
fence at 0.5 m cells) the cap is the viscosity; docs/wind_solver.md says how much that
matters."""


class PendingStep:
    """A wind step begun (WindSolver.begin_step) and not yet finished: the new wind's
    buffers, the pressure solve under way (or its result), the inflow and time step."""

    __slots__ = ("dt", "inflow", "new", "solve", "result")

    def __init__(self, dt, inflow, new):
        self.dt, self.inflow, self.new = dt, inflow, new
        self.solve = None    # the CG solve's state (WindSolver._solve_begin), "mgpcg"
        self.result = None   # (iterations, relative residual, converged) once known


class WindStepInfo:
    """What one wind step did. The iteration count and the residual are host values; the
    two divergence maxima stay on the device until first read (reading them waits for the
    step to finish), so a step needs no host read for its diagnostics."""

    __slots__ = ("iterations", "relative_residual", "converged", "inflow", "_maxima",
                 "_to_host", "_before_scale", "_host")

    def __init__(self, iterations, relative_residual, converged, inflow, maxima, to_host,
                 before_scale=1.0):
        self.iterations = int(iterations)
        """Pressure iterations: CG iterations ("mgpcg") or 5 sweeps ("sor5")."""
        self.relative_residual = float(relative_residual)
        """||b - A p|| / ||b|| of the pressure system when the solve stopped."""
        self.converged = bool(converged)
        """relative_residual <= pressure_tolerance."""
        self.inflow = tuple(inflow)
        """(vx, vy) inflow wind (m/s), gusts included."""
        self._maxima = maxima  # backend array: (max |rhs| before, max |div u| after)
        self._to_host = to_host
        self._before_scale = float(before_scale)
        self._host = None

    def _read(self):
        if self._host is None:
            self._host = np.asarray(self._to_host(self._maxima), dtype=np.float64)
            self._maxima = self._to_host = None
        return self._host

    @property
    def divergence_before(self) -> float:
        """max |div u| over fluid cells after advection, before projection (1/s)."""
        return float(self._read()[0]) * self._before_scale

    @property
    def divergence_after(self) -> float:
        """max |div u| over fluid cells after projection (1/s)."""
        return float(self._read()[1])

    def as_tuple(self) -> tuple:
        """(iterations, relative_residual, converged, inflow, divergence_before,
        divergence_after): every field, host values."""
        return (self.iterations, self.relative_residual, self.converged, self.inflow,
                self.divergence_before, self.divergence_after)

    def __eq__(self, other):
        if not isinstance(other, WindStepInfo):
            return NotImplemented
        return self.as_tuple() == other.as_tuple()

    __hash__ = None

    def __repr__(self):
        return (f"WindStepInfo(iterations={self.iterations}, relative_residual="
                f"{self.relative_residual:.3g}, converged={self.converged}, inflow={self.inflow})")


def base_wind(settings, time: float) -> tuple[float, float]:
    """(speed m/s, heading degrees) before gusts: the keys when given, else the settings."""
    keys = settings.wind_keys
    if not keys:
        return float(settings.wind_speed), float(settings.wind_direction)
    times = [float(k[0]) for k in keys]
    speed = float(np.interp(time, times, [float(k[1]) for k in keys]))
    # Unwrapped so that keys at 350 and 10 degrees turn the short way, through 0.
    headings = np.degrees(np.unwrap(np.radians([float(k[2]) for k in keys])))
    heading = float(np.interp(time, times, headings))
    return speed, heading


#: Most simulation steps per wind solve, and most wind sub-steps per simulation step.
MAX_WIND_INTERVAL = 4
MAX_WIND_SUBSTEPS = 8


def peak_inflow_speed(settings, time: float) -> float:
    """The fastest inflow the storm blows at ``time`` s (m/s): the speed before gusts (the
    keys or ``wind_speed``) with the strongest gust, speed * (1 + gust_strength)."""
    speed, _heading = base_wind(settings, time)
    return speed * (1.0 + float(settings.gust_strength))


def fastest_inflow(settings) -> float:
    """The fastest inflow of the whole storm (m/s): the fastest speed before gusts (of
    ``wind_speed`` or the keys) with the strongest gust."""
    speeds = [float(key[1]) for key in settings.wind_keys] or [float(settings.wind_speed)]
    return max(speeds) * (1.0 + float(settings.gust_strength))


def wind_schedule(settings, cell_size: float, time: float) -> tuple[int, int]:
    """(interval, substeps) of the wind solve at simulated ``time`` s: ``substeps`` solves
    of ``interval * time_step / substeps`` s each, then none until ``interval`` steps
    later, so that the Courant number of the inflow (``peak_inflow_speed`` at ``time``)
    per solve comes as close to ``settings.wind_courant`` as whole numbers allow without
    passing it (interval up to MAX_WIND_INTERVAL, substeps up to MAX_WIND_SUBSTEPS; one of
    the two is 1). It depends on the wind at that time only, so a bake extended with more
    wind keys repeats its first part. The flakes step every ``time_step`` and read the
    latest wind."""
    target = float(settings.wind_courant)
    per_step = peak_inflow_speed(settings, time) * float(settings.time_step) / float(cell_size)
    if per_step <= target:
        if per_step <= 0.0:
            return MAX_WIND_INTERVAL, 1
        return max(1, min(MAX_WIND_INTERVAL, int(math.floor(target / per_step * (1 + 1e-9))))), 1
    return 1, min(MAX_WIND_SUBSTEPS, int(math.ceil(per_step / target * (1 - 1e-9))))


def inflow_at(settings, time: float) -> tuple[float, float]:
    """Inflow wind (vx, vy) in m/s at ``time`` s with gusts: gust keys every gust_period
    seconds, key n drawn with random_uniform(seed, n, 0, stream), linear in between:
    speed * (1 + gust_strength * (2u - 1)), heading + gust_direction_jitter * (2u' - 1).
    (A cosine ease between the keys was measured: the warm start's extrapolation then
    misses a little on every step instead of only at the keys, 4 CG iterations per step
    instead of 1-2 on profile-2013.)"""
    speed, heading = base_wind(settings, time)
    t = max(float(time), 0.0) / float(settings.gust_period)
    key = int(math.floor(t))
    frac = t - key
    (us0, ud0), (us1, ud1) = (_gust_draws(int(settings.seed), k) for k in (key, key + 1))
    strength, jitter = float(settings.gust_strength), float(settings.gust_direction_jitter)
    factors = (1.0 + strength * (2.0 * us0 - 1.0), 1.0 + strength * (2.0 * us1 - 1.0))
    offsets = (jitter * (2.0 * ud0 - 1.0), jitter * (2.0 * ud1 - 1.0))
    speed *= (1.0 - frac) * factors[0] + frac * factors[1]
    heading += (1.0 - frac) * offsets[0] + frac * offsets[1]
    return _components(speed, heading)


@functools.lru_cache(maxsize=64)
def _gust_draws(seed: int, key: int) -> tuple[float, float]:
    """The uniform draws (speed, direction) of gust key ``key`` (a pure function, cached:
    the host asks for the same two keys at every solve between them)."""
    keys = np.array([key], dtype=np.uint64)
    random_uniform = host_kernels("rng").random_uniform
    return (float(random_uniform(seed, keys, 0, GUST_SPEED_STREAM)[0]),
            float(random_uniform(seed, keys, 0, GUST_DIRECTION_STREAM)[0]))


def inflow_turned(settings, time: float, dt: float) -> bool:
    """Whether the inflow's rate of change may jump between the solves at ``time - 3 dt``
    and ``time - dt`` s: a gust key (gusts on) or a wind key strictly between them, where
    the linear pieces of the inflow meet. The step's warm start 2 p_n - p_(n-1) assumes a
    steady rate: the pressure holds the change of the inflow since the solve before, so
    after a jump p_n - p_(n-1) is that jump's, and extrapolating it repeats the miss one
    solve later (profile-2013, 2 smoothing pairs: 11 CG iterations in each of the two
    solves after a gust key, 4-6 otherwise); p_n alone starts the second one right. Pure
    arithmetic on the key times (the host runs it every solve)."""
    low, high = time - 3.0 * dt, time - dt
    margin = 1e-6 * dt
    if high - low <= 2.0 * margin:
        return False
    if float(settings.gust_strength) > 0.0 or float(settings.gust_direction_jitter) > 0.0:
        period = float(settings.gust_period)
        first_key = math.floor((low + margin) / period) + 1  # the first key above low
        if first_key * period < high - margin and first_key * period > 0.0:
            return True
    return any(low + margin < float(key[0]) < high - margin for key in settings.wind_keys or ())


def _components(speed: float, heading: float) -> tuple[float, float]:
    """(vx, vy) m/s of a wind of ``speed`` m/s toward ``heading`` degrees; components below
    1e-7 of the speed are 0, so a heading along an axis gives exactly one inflow side, not
    a second one at 1e-16 m/s."""
    angle = math.radians(heading)
    vx, vy = speed * math.cos(angle), speed * math.sin(angle)
    return (0.0 if abs(vx) < 1e-7 * speed else vx), (0.0 if abs(vy) < 1e-7 * speed else vy)


def inflow_sides(settings, time: float) -> int:
    """The domain sides the wind blows in through at ``time`` s (bit mask, see
    kernels/reference/wind.py): those of the wind before gusts (``base_wind``). Gusts change
    the inflow's speed and direction, not which sides take it, so a gust never switches a
    side between inflow (prescribed velocity) and outflow (p = 0): such a switch changes
    the pressure field everywhere at once. With ``side_walls`` the sides the wind runs
    parallel to are a closed, free-slip pair."""
    return inflow_sides_of(*_components(*base_wind(settings, time)), walls=settings.side_walls)


def multigrid_levels(shape: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """[(cell shape (nz, ny, nx), factors (fz, fy, fx) to the next coarser level)]; the
    last level's factors are (1, 1, 1). Each axis is halved (rounding up) while it has at
    least COARSEN_MIN_CELLS cells."""
    levels = []
    while True:
        factors = tuple(2 if n >= COARSEN_MIN_CELLS else 1 for n in shape)
        if factors == (1, 1, 1):
            levels.append((shape, factors))
            return levels
        levels.append((shape, factors))
        shape = tuple((n + f - 1) // f for n, f in zip(shape, factors))


def _dirichlet_scale(ratio: float) -> float:
    """Coefficient multiplier of a Dirichlet side face on a level whose cells are ``ratio``
    fine cells wide: the fine system has p = 0 at the ghost centre h/2 outside the side,
    a coarse face with the plain coefficient would put it H/2 outside; scaling by
    H / (H/2 + h/2) puts it back where the fine level has it."""
    return 2.0 * ratio / (ratio + 1.0)


def boundary_corrections(spacing, factors) -> tuple[float, float]:
    """(x, y) multipliers of the Dirichlet side faces going from a level with cells
    ``spacing`` (sz, sy, sx) fine cells wide to the next coarser one."""
    _sz, sy, sx = spacing
    _fz, fy, fx = factors
    return (_dirichlet_scale(sx * fx) / _dirichlet_scale(sx),
            _dirichlet_scale(sy * fy) / _dirichlet_scale(sy))


def _coarsest_pairs(shape) -> int:
    """Red-black pairs (each way) that solve the coarsest level of the V-cycle."""
    return 2 * max(shape) + 4


def _face_shapes(shape):
    nz, ny, nx = shape
    return (nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)


def _scaled_transfers(index, shape, factors, coarse_vcycle_cells) -> bool:
    """Whether level ``index`` restricts to and prolongs from the next level with the
    renormalized transfers: the levels the V-cycle walks one by one (the finest and those
    above coarse_vcycle_cells cells), not the last level. The coarse end done by
    coarse_vcycle keeps the plain transfers (measured: renormalizing there too gave the
    same iteration counts)."""
    cells = shape[0] * shape[1] * shape[2]
    return factors != (1, 1, 1) and (index == 0 or cells > coarse_vcycle_cells)


class _Level:
    """Arrays of one multigrid level: face coefficients, right-hand side, solution, residual."""

    def __init__(self, xp, shape, factors, spacing, scaled_transfers, rhs=None, solution=None):
        self.shape = shape
        self.factors = factors  # (fz, fy, fx)
        self.spacing = spacing  # cell size in fine cells (sz, sy, sx)
        # the finest level's coefficients, the open fractions (multiples of 1/128), are
        # stored as uint8 128 A_f: a quarter of float32's traffic in the smoother, the same
        # values (kernels.reference.pressure.coefficient_values)
        dtype = np.uint8 if spacing == (1, 1, 1) else F32
        self.coef = tuple(xp.zeros(s, dtype) for s in _face_shapes(shape))
        self.rhs = rhs if rhs is not None else xp.zeros(shape, F32)
        self.solution = solution if solution is not None else xp.zeros(shape, F32)
        self.residual = xp.zeros(shape, F32)
        # transfers to the next level renormalized over its active cells (transfer_scale);
        # only on the levels the V-cycle walks one by one (see WindSolver._vcycle)
        self.transfer_scale = xp.zeros(shape, F32) if scaled_transfers else None


class WindSolver:
    """Wind on the MAC grid of ``grid``: u, v, w (m/s), kinematic pressure (m^2/s^2), the
    faces' open fractions against the terrain, and the solid mask (cells whose centre lies
    below the terrain: what the drift's surface wind and the preview read)."""

    def __init__(self, settings, grid, backend, options: SolverOptions | None = None):
        settings.validate()
        #: How the solve runs (options.SolverOptions, each None resolved for ``backend``).
        self.options = (options or SolverOptions()).validate().for_backend(backend)
        if min(grid.nx, grid.ny, grid.nz) < 2:
            raise SnowInputError("wind_resolution", f"the wind grid {grid.nx}x{grid.ny}x{grid.nz}"
                                 " needs at least 2 cells along each axis", "64")
        self.settings = settings
        self.grid = grid
        self.backend = backend
        self.xp = xp = backend.xp
        self._wind = backend.kernel_module("wind")
        self._pressure = backend.kernel_module("pressure")
        shape = grid.shape
        u_shape, v_shape, w_shape = _face_shapes(shape)
        vx, vy = self.inflow(0.0)
        self._last_sides = inflow_sides(settings, 0.0)  # those project_obstacles builds for
        self.obstacle_projection = None
        """(iterations, relative residual, converged) of the latest update_obstacles'
        projection, None when it made none."""
        self.u = xp.full(u_shape, vx, dtype=F32)
        self.v = xp.full(v_shape, vy, dtype=F32)
        self.w = xp.zeros(w_shape, F32)
        self._column_top = xp.zeros(shape[1:], F32)   # highest surface per column
        self._no_snow = None                          # zeros of the heightmap's shape
        self._next = (xp.zeros(u_shape, F32), xp.zeros(v_shape, F32), xp.zeros(w_shape, F32))
        # the semi-Lagrangian result the MacCormack correction starts from
        self._advected = ((xp.zeros(u_shape, F32), xp.zeros(v_shape, F32), xp.zeros(w_shape, F32))
                          if settings.advection == "maccormack" else None)
        self.mixing = KARMAN * float(settings.wind_mixing)
        """The eddy viscosity's mixing length per metre of height (kappa * wind_mixing)."""
        self.eddy_viscosity = xp.zeros(shape, F32) if self.mixing > 0 else None
        """nu (m^2/s) of each cell at the latest step (None with wind_mixing = 0)."""
        # with mixing, a third velocity buffer: begin_step(keep_current=True) builds the
        # mixed wind there while the current one is still read
        self._third = ((xp.zeros(u_shape, F32), xp.zeros(v_shape, F32), xp.zeros(w_shape, F32))
                       if self.mixing > 0 else None)
        self.pressure = xp.zeros(shape, F32)
        # the pressure of the step before: the warm start extrapolates 2 p_n - p_(n-1)
        self.pressure_previous = xp.zeros(shape, F32)
        self.solid = xp.zeros(shape, np.uint8)
        self.cut_cells = settings.wind_boundary == "cut_cells"
        # open area fraction of every face (u, v, w shapes): all open until update_obstacles
        self.fractions = tuple(xp.ones(s, F32) for s in (u_shape, v_shape, w_shape))
        self._block_tops = xp.zeros(shape[1:], F32)   # thin obstacles' tops (cut cells)
        # porous fences per column (set_fences): bottom and top (m), drag along x, y, z (1/m);
        # None without fences
        self.fence_bottom = self.fence_top = self.fence_resistance = None
        # open_blocks(fractions): where the advection's samples need no mask (derived by
        # update_obstacles and load_state_dict; all open while nothing is closed)
        self._open_blocks = xp.full(shape, 7, np.uint8)
        self._rhs = xp.zeros(shape, F32)
        self._divergence = xp.zeros(shape, F32)
        # CG vectors: residual, preconditioned residual, search direction, A * direction
        self._r, self._z, self._d, self._q = (xp.zeros(shape, F32) for _ in range(4))
        self.levels = []
        spacing = (1, 1, 1)
        coarse_cells = self.options.coarse_vcycle_cells
        for index, (level_shape, factors) in enumerate(multigrid_levels(shape)):
            scaled = _scaled_transfers(index, level_shape, factors, coarse_cells)
            if index == 0:  # the V-cycle preconditions the CG residual into z
                self.levels.append(_Level(xp, level_shape, factors, spacing, scaled, self._r,
                                          self._z))
            else:
                self.levels.append(_Level(xp, level_shape, factors, spacing, scaled))
            spacing = tuple(s * f for s, f in zip(spacing, factors))
        self._coefficients_for = None  # outflow sides the coefficients were built for
        self._scalars = xp.zeros(SCALAR_SLOTS, np.float64)  # CG dot products
        # the host copy they are read into (page-locked on the GPU: read without a stall)
        self._scalars_host = backend.host_buffer(SCALAR_SLOTS, np.float64)
        self._graphs = {}  # recorded launch sequences of the solve (see _replay)
        # CG iterations of the latest solves of each kind: the fewest is how many the next
        # one queues before its first read of the scalars (_solve_mgpcg)
        self._solved = {kind: collections.deque(maxlen=self.options.read_ahead_history)
                        for kind in ("step", "obstacles")}
        # (b.b, dt s) of the latest step's solve: project_obstacles solves to its accuracy
        self._step_rhs = (0.0, float(settings.time_step))
        self._rhs_norm2 = 0.0  # b.b of the latest solve

    # --- sizes -------------------------------------------------------------------------
    @staticmethod
    def estimate_bytes(settings, grid) -> int:
        """Device bytes the solver allocates for ``grid``."""
        total = 0
        coarse_cells = COARSE_VCYCLE_CELLS
        fine_coefficient = 1  # uint8 on the finest level
        for index, (shape, factors) in enumerate(multigrid_levels(grid.shape)):
            cells = shape[0] * shape[1] * shape[2]
            faces = sum(a * b * c for a, b, c in _face_shapes(shape))
            total += ((fine_coefficient if index == 0 else 4) * faces
                      + 4 * cells * (1 if index == 0 else 3))
            if _scaled_transfers(index, shape, factors, coarse_cells):
                total += 4 * cells
        cells = grid.cell_count
        faces = sum(a * b * c for a, b, c in _face_shapes(grid.shape))
        # u, v, w, their advection buffers (two for MacCormack) and the open fractions;
        # pressure, previous pressure, rhs, divergence, 4 CG vectors; solid and open blocks
        # plus the CG scalars (float64); the highest surface and block top per column
        buffers = 4 if settings.advection == "maccormack" else 3
        mixing = 0
        if float(settings.wind_mixing) > 0:  # the eddy viscosity and a third velocity buffer
            mixing = 4 * cells
            buffers += 1
        return (total + 4 * buffers * faces + 4 * 8 * cells + 2 * cells + 8 * SCALAR_SLOTS
                + 8 * grid.nx * grid.ny + mixing)

    # --- inputs ------------------------------------------------------------------------
    def inflow(self, time: float) -> tuple[float, float]:
        """Inflow (vx, vy) m/s at ``time`` s, gusts included (host floats)."""
        return inflow_at(self.settings, time)

    def update_obstacles(self, height, snow_depth, heightmap) -> None:
        """Mark cells whose centre lies below the bilinear height + snow depth (backend
        arrays (ny, nx) float32 m on ``heightmap``, a HeightmapGrid) as solid, and whole
        columns up to a thin obstacle of the terrain inside them that no centre sees (a
        fence thinner than a cell: its top more than half a cell above the heights at this
        and the neighbouring centres); then the faces' open fractions: against that
        surface, the thin obstacles' columns filled, with cut cells, or 0/1 from the solid
        mask with voxels. When solid cells changed and the solver is "mgpcg", the wind is
        made divergence free around the new obstacles at once (see project_obstacles); a
        fraction that changes alone is left to the next step's solve."""
        for name, array in (("height", height), ("snow_depth", snow_depth)):
            if tuple(array.shape) != tuple(heightmap.shape):
                raise SnowInputError(name, f"has shape {tuple(array.shape)} but the heightmap is"
                                     f" {heightmap.shape}", "the cover's arrays")
        height = self.backend.asarray(height, dtype=np.float32)  # no copy when already so
        snow_depth = self.backend.asarray(snow_depth, dtype=np.float32)
        g = self.grid
        before = self.solid.copy()
        # the terrain's thin obstacles only: narrow snow ridges stay sampled at the centres
        # (taken as obstacles they block the wind, catch more snow and grow into walls)
        if self._no_snow is None or self._no_snow.shape != height.shape:
            self._no_snow = self.xp.zeros(height.shape, F32)
        self.backend.kernel_module("drift").column_surface(
            height, self._no_snow, height > np.float32(OPEN_LIMIT), heightmap.x0, heightmap.y0,
            heightmap.spacing, g.x0, g.y0, g.cell_size, self._column_top)
        self._wind.solid_from_heightmap(height, snow_depth, float(heightmap.x0), float(heightmap.y0),
                                        float(heightmap.spacing), float(g.x0), float(g.y0),
                                        float(g.z0), float(g.cell_size), self.solid,
                                        self._column_top)
        if self.cut_cells:
            self._wind.block_tops(height, snow_depth, float(heightmap.x0), float(heightmap.y0),
                                  float(heightmap.spacing), float(g.x0), float(g.y0),
                                  float(g.cell_size), self._column_top, self._block_tops)
            self._wind.face_fractions(height, snow_depth, float(heightmap.x0),
                                      float(heightmap.y0), float(heightmap.spacing),
                                      float(g.x0), float(g.y0), float(g.z0), float(g.cell_size),
                                      self._block_tops, *self.fractions)
        else:
            self._wind.voxel_fractions(self.solid, *self.fractions)
        self._wind.open_blocks(self.fractions, self._open_blocks)
        self._coefficients_for = None
        self.obstacle_projection = None
        if self.settings.pressure_solver == "mgpcg" and bool((before != self.solid).any()):
            self.obstacle_projection = self.project_obstacles()

    def set_fences(self, fence_bottom, fence_top, fence_resistance) -> None:
        """The porous fences, per wind column (host or backend float32 arrays from
        snow_addon.fences.fence_columns): the lowest and the highest fence point (m), (ny, nx)
        each, and the drag coefficients (1/m) along x, y and z, (3, ny, nx), parts of
        0.5 k / h. Every step then takes the fences' drag from the wind between the mixing
        and the projection; a resistance of 0 everywhere removes them."""
        shape = (self.grid.ny, self.grid.nx)
        arrays = {"fence_bottom": fence_bottom, "fence_top": fence_top,
                  "fence_resistance": fence_resistance}
        for name, array in arrays.items():
            expected = (3,) + shape if name == "fence_resistance" else shape
            if tuple(np.shape(array)) != expected:
                raise SnowInputError(name, f"has shape {tuple(np.shape(array))} but the wind grid "
                                     f"needs {expected}", "fence_columns(fences, grid)")
        host = {name: np.asarray(self.backend.to_host(array), dtype=np.float32)
                for name, array in arrays.items()}
        for name, array in host.items():
            if not np.isfinite(array).all():
                raise SnowInputError(name, "holds NaN or infinite values",
                                     "fence_columns(fences, grid)")
        fenced = (host["fence_resistance"] > 0).any(axis=0)
        upside_down = (host["fence_bottom"] > host["fence_top"])[fenced]
        if (host["fence_resistance"] < 0).any() or upside_down.any():
            raise SnowInputError("fence_resistance", "must be >= 0, with each fenced column's "
                                 "bottom at most its top", "fence_columns(fences, grid)")
        if not bool(fenced.any()):
            self.fence_bottom = self.fence_top = self.fence_resistance = None
            return
        self.fence_bottom, self.fence_top, self.fence_resistance = (
            self.backend.asarray(host[name]) for name in arrays)

    def project_obstacles(self) -> tuple[int, float, bool]:
        """Zero the velocity on every closed face (open fraction 0) and project the wind to
        divergence free ("mgpcg" from 0), with the sides and time step of the latest
        step, to the accuracy that step's solve reached: the residual relative to the larger
        of this right-hand side and that step's (the blocked flux is local and small; solved
        to its own relative tolerance it took 8-11 CG iterations on profile-2013, twice a
        step's). Cells that turn solid under new snow would otherwise inject their
        blocked flux into the next step's pressure solve, and through the warm start into
        the two after it. The pressure and its history are left as they were: this
        correction is not part of the pressure's evolution. Returns (iterations, relative
        residual, converged)."""
        self._ensure_coefficients(self._last_sides)
        for velocity, fraction in zip((self.u, self.v, self.w), self.fractions):
            velocity *= fraction > 0
        h = float(self.grid.cell_size)
        step_rhs_norm2, dt = self._step_rhs
        self._wind.divergence(self.u, self.v, self.w, self.fractions, -h / dt, self._rhs)
        kept = self._divergence  # scratch until the next step's final divergence
        kept[...] = self.pressure
        self.pressure.fill(0)
        result = self._solve_mgpcg("obstacles", step_rhs_norm2)
        cx, cy, cz = self.levels[0].coef
        self._wind.project(self.u, self.v, self.w, self.pressure, cx, cy, cz, dt / h)
        self.pressure[...] = kept
        return result

    # --- stepping ----------------------------------------------------------------------
    def step(self, time: float, dt: float) -> WindStepInfo:
        """Advance the wind by ``dt`` s at simulated ``time`` s."""
        return self.finish_step(self.begin_step(time, dt))

    def begin_step(self, time: float, dt: float, keep_current: bool = False) -> "PendingStep":
        """The first part of ``step``: advect, mix, the porous fences' drag, the pressure
        system's right-hand side, and the pressure solve queued (its first read of the CG
        scalars under way, not waited for). ``finish_step`` completes it. With
        ``keep_current`` the wind (``u``, ``v``, ``w``) stays as it is until then, so other
        work queued meanwhile (the flakes of the steps before) still reads it: the new wind
        is built in the spare buffers. Nothing else may change the wind, the obstacles or
        the pressure before ``finish_step``."""
        if not (math.isfinite(dt) and dt > 0):
            raise SnowInputError("time_step", f"must be a positive number of seconds, got {dt!r}",
                                 "1/24")
        h = float(self.grid.cell_size)
        vx, vy = self.inflow(time)
        sides = self._last_sides = inflow_sides(self.settings, time)
        current = (self.u, self.v, self.w)
        advected = self._next
        if self._advected is None:
            self._wind.advect_velocity(*current, self.fractions, vx, vy, sides, h, dt,
                                       *advected, blocks=self._open_blocks)
        else:
            self._wind.advect_velocity(*current, self.fractions, vx, vy, sides, h, dt,
                                       *self._advected, blocks=self._open_blocks)
            self._wind.correct_advection(*current, self.fractions, vx, vy, sides, h, dt,
                                         *self._advected, *advected, blocks=self._open_blocks)
        # the mixing goes into the buffer the current wind held (or the third one while
        # the current wind must stay)
        new = self.mix_and_drag(advected, self._third if keep_current else current, dt)
        self._ensure_coefficients(sides)

        # A p = -(h^2 / dt) div u  makes  u -= (dt / h) * grad_h p  divergence free
        kp = self._pressure
        self._wind.divergence(*new, self.fractions, -h / dt, self._rhs)
        kp.max_abs(self._rhs, self._scalars, DIVERGENCE_BEFORE)
        pending = PendingStep(float(dt), (vx, vy), new)
        if self.settings.pressure_solver == "sor5":
            pending.result = self._solve_sor5()
        else:
            if self.options.extrapolate_pressure and not inflow_turned(self.settings, time, dt):
                kp.extrapolate(self.pressure, self.pressure_previous)
            else:
                self.pressure_previous[...] = self.pressure
            pending.solve = self._solve_begin("step")
        return pending

    def mix_and_drag(self, advected, spare, dt: float):
        """The turbulent mixing of the ``advected`` wind (backend arrays u, v, w), written
        into ``spare`` (three more such arrays), then the porous fences' drag on the result,
        in place, for a step of ``dt`` s. Returns the arrays holding the result: ``spare``,
        or ``advected`` when the wind is not mixed."""
        h = float(self.grid.cell_size)
        new = advected
        if self.eddy_viscosity is not None:
            # nu = l^2 |S| of the advected wind (l = mixing * the height above the column's
            # surface, at most MIXING_HEIGHT; nu at most MIXING_STABILITY h^2 / dt), then one
            # explicit diffusion step
            g = self.grid
            self._wind.eddy_viscosity(*advected, self.solid, self._column_top, float(g.z0), h,
                                      self.mixing, MIXING_HEIGHT,
                                      MIXING_STABILITY * h * h / dt, self.eddy_viscosity)
            new = spare
            self._wind.diffuse_velocity(*advected, self.fractions, self.eddy_viscosity,
                                        dt / (h * h), *new)
        if self.fence_resistance is not None:
            g = self.grid
            self._wind.porous_drag(*new, self.solid, self.fence_bottom, self.fence_top,
                                   self.fence_resistance, float(g.z0), h, dt)
        return new

    def poll_step(self, pending: "PendingStep") -> None:
        """Wait for the pending solve's latest read of the CG scalars and, when the solve
        is not done, queue its next iteration (and read again). Called between the steps
        before the solve's own (Simulation.step): the work queued after the read (the
        flakes and snow of the step before) keeps the device busy meanwhile, and the
        iteration runs ahead of the next step's flakes instead of after all of them."""
        if pending.solve is not None:
            self._solve_poll(pending.solve)

    def finish_step(self, pending: "PendingStep") -> WindStepInfo:
        """The rest of ``step``: the pressure solve to its end, the projection of the new
        wind, which then becomes ``u``, ``v``, ``w``; the divergence diagnostics."""
        kp = self._pressure
        h, dt = float(self.grid.cell_size), pending.dt
        if pending.solve is not None:
            pending.result = self._solve_end(pending.solve)
            self._step_rhs = (self._rhs_norm2, dt)
        iterations, relative, converged = pending.result
        new = pending.new
        buffers = [(self.u, self.v, self.w), self._next] + ([self._third] if self._third else [])
        spare = [b for b in buffers if b[0] is not new[0]]
        self.u, self.v, self.w = new
        self._next = spare[0]
        if self._third is not None:
            self._third = spare[1]
        cx, cy, cz = self.levels[0].coef
        self._wind.project(self.u, self.v, self.w, self.pressure, cx, cy, cz, dt / h)
        self._wind.divergence(self.u, self.v, self.w, self.fractions, 1.0 / h, self._divergence)
        kp.max_abs(self._divergence, self._scalars, DIVERGENCE_AFTER)
        maxima = self._scalars[DIVERGENCE_BEFORE:DIVERGENCE_AFTER + 1].copy()
        return WindStepInfo(iterations, relative, converged, pending.inflow, maxima,
                            self.backend.to_host, before_scale=dt / (h * h))

    def _ensure_coefficients(self, sides: int) -> None:
        """(Re)build the face coefficients of every level when the obstacles or the inflow
        sides (bit mask) changed: the other sides are outflow (Dirichlet) sides."""
        outflow = tuple(not sides & bit for bit in (INFLOW_X_MINUS, INFLOW_X_PLUS,
                                                    INFLOW_Y_MINUS, INFLOW_Y_PLUS))
        if outflow == self._coefficients_for:
            return
        kp = self._pressure
        fine = self.levels[0]
        kp.face_coefficients(self.fractions, *[int(o) for o in outflow], *fine.coef)
        for level, coarse in zip(self.levels[:-1], self.levels[1:]):
            fz, fy, fx = level.factors
            kp.restrict_coefficients(*level.coef, fx, fy, fz,
                                     *boundary_corrections(level.spacing, level.factors),
                                     *coarse.coef)
            if level.transfer_scale is not None:
                kp.transfer_scale(*coarse.coef, *level.coef, fx, fy, fz, level.transfer_scale)
        # The solve never changes the pressure of a cell with no open face: without this, a
        # cell that got buried would keep drifting by p_n - p_(n-1) every step.
        fu, fv, fw = self.fractions
        buried = (((fu[:, :, :-1] + fu[:, :, 1:]) + (fv[:, :-1, :] + fv[:, 1:, :]))
                  + (fw[:-1] + fw[1:])) == 0
        self.xp.copyto(self.pressure_previous, self.pressure, where=buried)
        self._coefficients_for = outflow

    # --- pressure ----------------------------------------------------------------------
    def _replay(self, name, function) -> None:
        """Run ``function``. It launches the same kernels on the same buffers every time, so
        after a first plain run it is recorded once (pressure.capture: a CUDA graph on the
        GPU, the function itself elsewhere) and replayed: one launch instead of dozens."""
        replay = self._graphs.get(name)
        if replay is None:
            function()
            self._graphs[name] = self._pressure.capture(function)
        else:
            replay()

    def _vcycle(self, index: int = 0) -> None:
        """level.solution = V(level.rhs): one symmetric V-cycle from a zero guess
        (red-black Gauss-Seidel: red-black pairs before, black-red pairs after)."""
        kp = self._pressure
        level = self.levels[index]
        nz, ny, nx = level.shape
        if index > 0 and nz * ny * nx <= self.options.coarse_vcycle_cells:
            # the same sequence as the recursion below, in one call (one launch on the GPU)
            rest = self.levels[index:]
            kp.coarse_vcycle([lv.solution for lv in rest], [lv.rhs for lv in rest],
                             [lv.residual for lv in rest], [lv.coef for lv in rest],
                             [lv.factors for lv in rest], self.options.smoothing_pairs,
                             _coarsest_pairs(self.levels[-1].shape))
            return
        if index == len(self.levels) - 1:
            pairs = _coarsest_pairs(level.shape)
            kp.redblack_pairs_from_zero(level.solution, level.rhs, *level.coef, 1.0, 0, pairs)
            kp.redblack_pairs(level.solution, level.rhs, *level.coef, 1.0, 1, pairs)
            return
        # solution = 0, then the pre-smoothing (one pass for both on the GPU)
        kp.redblack_pairs_from_zero(level.solution, level.rhs, *level.coef, 1.0, 0,
                                    self.options.smoothing_pairs)
        kp.residual(level.solution, level.rhs, *level.coef, level.residual)
        coarse = self.levels[index + 1]
        fz, fy, fx = level.factors
        kp.restrict_scaled_residual(level.residual, level.transfer_scale, fx, fy, fz, coarse.rhs)
        self._vcycle(index + 1)
        kp.prolong_scaled_add(coarse.solution, level.transfer_scale, fx, fy, fz, level.solution)
        kp.redblack_pairs(level.solution, level.rhs, *level.coef, 1.0, 1,
                          self.options.smoothing_pairs)

    def _cg_advance(self, tolerance: float, limit: int) -> None:
        """q = A d; alpha = rz / (d.q); x += alpha d; r -= alpha q; rr = r.r; then the
        convergence check (on the device; once the solve is done, x and r stay as they are)."""
        kp = self._pressure
        # each dot product fused into the pass that writes its operand (GPU: one pass less)
        kp.apply_operator_dot(self._d, *self.levels[0].coef, self._q, self._scalars, DQ)
        kp.cg_update_check(self.pressure, self._r, self._d, self._q, self._scalars,
                           tolerance, limit)

    def _cg_direction(self) -> None:
        """z = V(r); beta = (r.z)_new / (r.z); d = z + beta d (on the device)."""
        kp = self._pressure
        self._vcycle()
        kp.dot(self._r, self._z, self._scalars, RZ_NEXT)
        kp.cg_direction(self._d, self._z, self._scalars)

    def _cg_start(self) -> None:
        """r = b - A p; bb = b.b; z = V(r); rz = r.z; d = z; a new solve's count (on the
        device)."""
        kp = self._pressure
        s, x, b, r = self._scalars, self.pressure, self._rhs, self._r
        kp.cg_begin(s)
        kp.residual_norm(x, b, *self.levels[0].coef, r, s, BB)
        self._vcycle()
        kp.dot(r, self._z, s, RZ)
        self._d[...] = self._z

    def _solve_mgpcg(self, kind: str = "step", floor_norm2: float = 0.0):
        """CG on A p = rhs preconditioned by one V-cycle, started from the pressure (the
        step extrapolates it first), to the relative tolerance. The convergence check runs
        on the device after every iteration (cg_update_check), so the iterations are the
        same however many are queued before the host reads the scalars. The GPU (each read
        a synchronisation) queues the fewest iterations of the latest options.read_ahead_history
        solves of this ``kind`` ("step" or "obstacles") and reads once, then one at a time;
        the other backends read after each. Returns (iterations, relative residual,
        converged). With ``floor_norm2`` > b.b the residual is relative to that instead
        (and so is the relative residual returned)."""
        return self._solve_end(self._solve_begin(kind, floor_norm2))

    def _solve_begin(self, kind: str, floor_norm2: float = 0.0) -> dict:
        """Start a solve and queue its first iterations and read (see _solve_mgpcg)."""
        tolerance = float(self.settings.pressure_tolerance)
        limit = int(self.settings.pressure_max_iterations)
        self._replay("start", self._cg_start)
        if floor_norm2 > 0.0:
            bb = self._scalars[BB:BB + 1]
            bb[...] = self.xp.maximum(bb, floor_norm2)
        solve = {"kind": kind, "tolerance": tolerance, "limit": limit, "queued": 0,
                 "host": None, "read": None}
        history = self._solved[kind]
        ahead = max(1, min(min(history, default=1), limit)) if self.options.read_ahead else 1
        self._solve_queue(solve, ahead)
        return solve

    def _solve_queue(self, solve: dict, count: int) -> None:
        """Queue ``count`` more CG iterations of ``solve`` and a read of the scalars."""
        tolerance, limit = solve["tolerance"], solve["limit"]
        advance = ("advance", tolerance, limit)
        for _ in range(count):
            if solve["queued"]:
                self._replay("direction", self._cg_direction)
            self._replay(advance, lambda: self._cg_advance(tolerance, limit))
            solve["queued"] += 1
        solve["read"] = self.backend.read_async(self._scalars, self._scalars_host)

    def _solve_poll(self, solve: dict) -> bool:
        """True once ``solve`` is done. Waits for its latest read and, when the solve is
        neither converged nor at its limit, queues the next iteration and read."""
        if solve["host"] is not None:
            return True
        host = solve["read"].wait()
        if host[DONE] != 0 or solve["queued"] >= solve["limit"]:
            solve["host"] = np.array(host, copy=True)
            return True
        self._solve_queue(solve, 1)
        return False

    def _solve_end(self, solve: dict):
        """Wait for ``solve`` to finish; (iterations, relative residual, converged)."""
        while not self._solve_poll(solve):
            pass
        host = solve["host"]
        iterations = int(host[ITERATIONS])
        self._solved[solve["kind"]].append(max(iterations, 1))
        self._rhs_norm2 = float(host[BB])
        if float(host[BB]) == 0.0:  # no divergence: the pressure is 0
            self.pressure.fill(0)
            return 0, 0.0, True
        relative = float(host[RELATIVE])
        return iterations, relative, relative <= solve["tolerance"]

    def _solve_sor5(self):
        """The theses' five red-black SOR sweeps (no convergence check)."""
        kp = self._pressure
        coef = self.levels[0].coef
        for omega in SOR5_RELAXATION:
            kp.redblack_sweep(self.pressure, self._rhs, *coef, float(omega), 0)
            kp.redblack_sweep(self.pressure, self._rhs, *coef, float(omega), 1)
        kp.residual(self.pressure, self._rhs, *coef, self._r)
        kp.dot(self._rhs, self._rhs, self._scalars, BB)
        kp.dot(self._r, self._r, self._scalars, RR)
        host = self.backend.to_host(self._scalars)
        b_norm2, r_norm2 = float(host[BB]), float(host[RR])
        relative = math.sqrt(r_norm2 / b_norm2) if b_norm2 > 0 else 0.0
        return len(SOR5_RELAXATION), relative, relative <= float(self.settings.pressure_tolerance)

    # --- state -------------------------------------------------------------------------
    _STATE_KEYS = ("u", "v", "w", "pressure", "pressure_previous", "solid")
    _FRACTION_KEYS = ("fraction_u", "fraction_v", "fraction_w")

    def _state_arrays(self) -> dict:
        """The arrays of the state by name (the fractions under _FRACTION_KEYS)."""
        arrays = {name: getattr(self, name) for name in self._STATE_KEYS}
        arrays.update(zip(self._FRACTION_KEYS, self.fractions))
        return arrays

    def state_dict(self) -> dict:
        """Host copies of everything a resumed run needs (the coefficients are rebuilt)."""
        state = {name: np.array(self.backend.to_host(array), copy=True)
                 for name, array in self._state_arrays().items()}
        state["step_rhs"] = np.array(self._step_rhs, np.float64)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Load a state_dict. A state saved before the wind had open fractions gets those of
        its solid mask (0/1) until the next obstacle refresh."""
        for name in self._STATE_KEYS:
            if name not in state:
                raise SnowInputError("state", f"has no wind array {name!r}", "a saved wind state")
        saved = all(name in state for name in self._FRACTION_KEYS)
        arrays = {name: array for name, array in self._state_arrays().items()
                  if saved or name not in self._FRACTION_KEYS}
        for name, current in arrays.items():
            if tuple(np.shape(state[name])) != tuple(current.shape):
                raise SnowInputError("state", f"wind array {name!r} has shape "
                                     f"{tuple(np.shape(state[name]))}, expected {tuple(current.shape)}",
                                     "a state saved from the same scene and settings")
        step_rhs = np.asarray(state.get("step_rhs", (0.0, self.settings.time_step)), np.float64)
        if step_rhs.shape != (2,):
            raise SnowInputError("state", f"wind 'step_rhs' has shape {step_rhs.shape}, expected (2,)",
                                 "a state saved from the same scene and settings")
        for name, current in arrays.items():
            current[...] = self.backend.asarray(state[name], dtype=current.dtype)
        self._step_rhs = (float(step_rhs[0]), float(step_rhs[1]))
        if not saved:
            self._wind.voxel_fractions(self.solid, *self.fractions)
        self._wind.open_blocks(self.fractions, self._open_blocks)
        self._coefficients_for = None
