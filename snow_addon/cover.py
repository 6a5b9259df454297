"""Snow cover on the heightmap grid: deposit of the flakes' hits (the snowfall rate imposed
at the sky, shared by each step's landings), redistribution down-slope, and the volume books
(deposited volume from an exact integer total).

Model and the snowfall-rate calibration: docs/flakes_and_cover.md.
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.contract import (FRESH_LIFTS, GRAIN_COUNT_SLOTS, GRAIN_LANDINGS, GRAINS_ALOFT,
                                LEGACY_GRAIN_COUNT_SLOTS, LIFTED_EXITS,
                                PROBE_GRAIN_COUNT_SLOTS, UPWIND_SETTLES, WEIGHT_UNITS)
from . import stages
from .backend import StageTimer
from .errors import SnowInputError, SnowMemoryError
from .grid import OPEN_HEIGHT, HeightmapGrid, WindGrid
from .terrain import fill_open_heights

#: Device bytes per heightmap node: height, snow depth and its redistribution twin, deposit
#: scale, the wind's filled height where nodes lack a surface (float32), two hit-count buffers
#: (int32), surface mask (1 byte).
BYTES_PER_NODE = 4 * 7 + 1


def nearest_node_areas(heightmap: HeightmapGrid, grid: WindGrid) -> np.ndarray:
    """Host float64 (ny, nx): XY area (m^2) of the wind domain whose nearest heightmap node
    (clamped, as the flakes' hit rule picks it) is each node."""
    def lengths(origin, count, spacing, domain_origin, domain_length):
        edges = origin + (np.arange(count + 1) - 0.5) * spacing
        edges[0], edges[-1] = -np.inf, np.inf
        low = np.clip(edges[:-1], domain_origin, domain_origin + domain_length)
        high = np.clip(edges[1:], domain_origin, domain_origin + domain_length)
        return high - low

    lx, ly, _lz = grid.size
    ax = lengths(heightmap.x0, heightmap.nx, heightmap.spacing, grid.x0, lx)
    ay = lengths(heightmap.y0, heightmap.ny, heightmap.spacing, grid.y0, ly)
    return ay[:, None] * ax[None, :]


def volume_per_hit(settings, heightmap: HeightmapGrid, height, has_surface, grid: WindGrid) -> float:
    """Volume (m^3) one ground hit deposits so that the mean snow depth over the surface
    nodes grows at ``snowfall_rate`` (m/h) in steady fall.

    Flakes spawn uniformly over the wind domain's XY area A at mean height top - h/2 and
    fall at Vt, so the hits per second landing on node n are N E[Vt] a_n / (A f_n), with
    a_n the domain area nearest to n and f_n its fall height. Setting the deposited volume
    per second equal to snowfall_rate/3600 * (surface nodes * node area) gives the value.
    """
    if settings.snowfall_rate == 0.0:
        return 0.0
    surface = np.asarray(has_surface, bool)
    heights = np.asarray(height, np.float64)[surface]
    spawn_height = grid.top - 0.5 * grid.cell_size
    fall = np.maximum(spawn_height - heights, 0.5 * grid.cell_size)
    areas = nearest_node_areas(heightmap, grid)[surface]
    lx, ly, _lz = grid.size
    vt_mean = 0.5 * sum(settings.terminal_speed_range)
    hits_per_second = settings.flake_count * vt_mean * float(np.sum(areas / fall)) / (lx * ly)
    target_volume_rate = settings.snowfall_rate / 3600.0 * surface.sum() * heightmap.node_area
    return target_volume_rate / hits_per_second


def snowfall_units(settings, volume_per_hit: float, surface_nodes: int, node_area: float,
                   dt: float) -> int:
    """The snowfall of a step of ``dt`` s over the surface nodes, in 1/WEIGHT_UNITS of
    ``volume_per_hit``, rounded to an integer (the deposit's books are exact); the
    deposit shares it among the step's landings (kernels.reference.cover.landing_units)."""
    if volume_per_hit <= 0.0:
        return 0
    volume = settings.snowfall_rate / 3600.0 * surface_nodes * node_area * float(dt)
    return int(round(WEIGHT_UNITS * volume / volume_per_hit))


class SnowCover:
    """Snow on the heightmap: ``height`` (float32, OPEN_HEIGHT at open nodes), ``has_surface``
    (bool), ``snow_depth`` (float32, m), ``hit_counts`` (int32), all (ny, nx) backend arrays."""

    def __init__(self, settings, heightmap, grid: WindGrid, backend):
        settings.validate()
        hm = heightmap.grid
        height = np.asarray(heightmap.height)
        has_surface = np.asarray(heightmap.has_surface)
        if height.shape != hm.shape or has_surface.shape != hm.shape:
            raise SnowInputError("terrain", f"heightmap arrays have shapes {height.shape} and "
                                 f"{has_surface.shape}, expected {hm.shape}", "a rebuilt heightmap")
        if not has_surface.any():
            raise SnowInputError("terrain", "has no surface node where snow can land",
                                 "a mesh with faces seen from above")
        needed = self.estimate_bytes(settings, hm)
        available = backend.memory_available()
        if needed > available:
            raise SnowMemoryError("heightmap_resolution", f"the snow cover needs {needed / 2**20:,.0f} MiB, "
                                  f"{available / 2**20:,.0f} MiB are free", "a lower resolution",
                                  needed, available)
        self.settings, self.heightmap_grid, self.grid, self.backend = settings, hm, grid, backend
        self.kernels = backend.kernel_module("cover")
        self.volume_per_hit = float(volume_per_hit(settings, hm, height, has_surface, grid))
        self.node_area = hm.node_area
        self.surface_nodes = int(has_surface.sum())
        self.threshold = np.float32(math.tan(math.radians(settings.angle_of_repose)) * hm.spacing)
        xp = backend.xp
        surface_height = np.where(has_surface, height, OPEN_HEIGHT).astype(np.float32)
        self.height = backend.asarray(surface_height)
        #: the terrain as the wind sees it: open nodes take the nearest surface's height
        #: (the same array as ``height`` when every node has a surface)
        self.wind_height = self.height if has_surface.all() else \
            backend.asarray(fill_open_heights(surface_height, has_surface))
        self.has_surface = backend.asarray(has_surface.astype(bool))
        self.snow_depth = xp.zeros(hm.shape, dtype=xp.float32)
        self.hit_counts = xp.zeros(hm.shape, dtype=xp.int32)
        self.spare_hit_counts = xp.zeros(hm.shape, dtype=xp.int32)  # zeroed by the deposit
        self.deposit_scale = backend.asarray(self.kernels.deposit_scale(
            has_surface.astype(bool), self.volume_per_hit, self.node_area))
        self.spare_depth = xp.zeros(hm.shape, dtype=xp.float32)  # redistribution target
        self.hit_total = xp.zeros(1, dtype=xp.int64)
        #: deposited snow in 1/WEIGHT_UNITS of a hit; the ledger (units still owed, hit total
        #: at the last deposit) and the grains aloft the flakes count are swapped buffers, as
        #: the hits (kernels.reference.cover.deposit_hits)
        self.weighted_total = xp.zeros(1, dtype=xp.int64)
        self.ledger = xp.zeros(2, dtype=xp.int64)
        self.spare_ledger = xp.zeros(2, dtype=xp.int64)
        #: the flakes' grain counts (kernels.contract.GRAINS_ALOFT ...), swapped as the hits
        self.grain_count = xp.zeros(GRAIN_COUNT_SLOTS, dtype=xp.int32)
        self.spare_grain_count = xp.zeros(GRAIN_COUNT_SLOTS, dtype=xp.int32)
        #: with an open upwind fetch the landings also share the suspension's net inflow
        #: (kernels.reference.cover.deposit_weight): what it added (units, as weighted_total)
        self.books_suspension = settings.upwind_fetch != "wrap"
        self.suspended_total = xp.zeros(1, dtype=xp.int64)
        self.timer = StageTimer(backend)  # the Simulation shares its own when profiling

    @staticmethod
    def estimate_bytes(settings, heightmap_grid: HeightmapGrid) -> int:
        return heightmap_grid.nx * heightmap_grid.ny * BYTES_PER_NODE

    def step(self, dt, transport=None) -> None:
        """Deposit this step's hits over their footprints, sharing the snowfall of ``dt``
        seconds among them (the same launch zeroes the spare hit buffer, which then becomes
        ``hit_counts``), then ``transport()`` when given (the wind-driven drift), then one
        redistribution pass (the fraction is per step, as in the theses), which also lays the
        drift's fresh deposits down to the angle of repose. ``hit_counts`` and ``snow_depth`` are swapped buffers: read the
        attributes after each step."""
        k = self.kernels
        with self.timer.stage(stages.DEPOSIT):
            k.deposit_hits(self.hit_counts, self.deposit_scale, self.has_surface, self.snow_depth,
                           self.hit_total, self.spare_hit_counts, self.weighted_total,
                           self.ledger, self.spare_ledger, self.nominal_units(dt),
                           self.spare_grain_count,
                           self.grain_count if self.books_suspension else None,
                           self.suspended_total if self.books_suspension else None)
            self.hit_counts, self.spare_hit_counts = self.spare_hit_counts, self.hit_counts
            self.ledger, self.spare_ledger = self.spare_ledger, self.ledger
            self.grain_count, self.spare_grain_count = self.spare_grain_count, self.grain_count
        if transport is not None:
            with self.timer.stage(stages.DRIFT):
                transport()
        if self.settings.redistribution_fraction > 0.0:
            with self.timer.stage(stages.REDISTRIBUTE):
                self.redistribute()

    def nominal_units(self, dt: float) -> int:
        """The snowfall a step of ``dt`` seconds owes, in 1/WEIGHT_UNITS of a hit (each
        step's landings share it, so snow lands at snowfall_rate however long flakes stay
        aloft)."""
        return snowfall_units(self.settings, self.volume_per_hit, self.surface_nodes,
                              self.node_area, dt)

    def redistribute(self) -> None:
        """One pass of pairwise, mass-conserving redistribution toward the repose slope.
        Writes into the spare depth array and swaps: read ``snow_depth`` after each step."""
        s = self.settings
        self.kernels.redistribute(self.height, self.has_surface, self.snow_depth, self.threshold,
                                  np.float32(s.redistribution_min_depth),
                                  np.float32(s.redistribution_fraction), self.spare_depth)
        self.snow_depth, self.spare_depth = self.spare_depth, self.snow_depth

    def hits(self) -> int:
        """Ground hits deposited since the start (exact integer; a device read)."""
        return int(self.backend.to_host(self.hit_total)[0])

    def deposited_volume(self) -> float:
        """m^3 deposited since the start: the exact weighted hit total (each step's landings
        share that step's snowfall, so it lands at ``snowfall_rate``) times
        ``volume_per_hit``; with an open upwind fetch also the blowing snow's net deposit
        (``suspended_volume``)."""
        units = int(self.backend.to_host(self.weighted_total)[0])
        return units / WEIGHT_UNITS * self.volume_per_hit

    def suspended_volume(self) -> float:
        """m^3: what the suspended drift brought onto the terrain (open upwind fetch; 0 with
        the wrap): the grains from upwind that settled less the grains lifted off the
        terrain that left it, at the snowfall's weight per fresh touch."""
        units = int(self.backend.to_host(self.suspended_total)[0])
        return units / WEIGHT_UNITS * self.volume_per_hit

    def snow_volume(self) -> float:
        """m^3: float64 sum of snow_depth times the node area."""
        total = self.backend.xp.sum(self.snow_depth, dtype=self.backend.xp.float64)
        return float(self.backend.to_host(total)) * self.node_area

    def state_dict(self) -> dict:
        to_host = self.backend.to_host
        return {"snow_depth": np.array(to_host(self.snow_depth), copy=True),
                "hit_counts": np.array(to_host(self.hit_counts), copy=True),
                "hit_total": np.array(to_host(self.hit_total), copy=True),
                "weighted_total": np.array(to_host(self.weighted_total), copy=True),
                "ledger": np.array(to_host(self.ledger), copy=True),
                "suspended_total": np.array(to_host(self.suspended_total), copy=True),
                # what the last step counted (the other buffer is zeroed for the next)
                "grain_counts": np.array(to_host(self.spare_grain_count), copy=True)}

    def load_state_dict(self, state) -> None:
        expected = {"snow_depth": (self.snow_depth.shape, np.float32),
                    "hit_counts": (self.hit_counts.shape, np.int32), "hit_total": ((1,), np.int64),
                    "weighted_total": ((1,), np.int64), "ledger": ((2,), np.int64)}
        for name, (shape, dtype) in expected.items():
            if name not in state:
                raise SnowInputError("state", f"snow cover state lacks {name!r}", "a state saved by this version")
            array = np.asarray(state[name])
            if array.shape != shape or array.dtype != dtype:
                raise SnowInputError("state", f"snow {name} has shape {array.shape} {array.dtype}, "
                                     f"expected {shape} {np.dtype(dtype)}",
                                     "a state saved with the same heightmap_resolution")
        # a state saved before the blowing snow's books has none: nothing was booked; one
        # saved before the probe has the grains aloft alone ("grains_aloft", int32 (1,))
        suspended = (np.asarray(state["suspended_total"]) if "suspended_total" in state
                     else np.zeros(1, np.int64))
        counts = np.zeros(GRAIN_COUNT_SLOTS, np.int32)
        saved_slots = np.asarray(state["grain_counts"]).shape if "grain_counts" in state else None
        if saved_slots in ((PROBE_GRAIN_COUNT_SLOTS,), (LEGACY_GRAIN_COUNT_SLOTS,)):
            # saved with the suspension probe's counts (nothing reads them now): the first
            # three slots as today, the grains from upwind that settled and the lifted ones
            # that left at 5 and 6 (0 when saved before they were counted)
            saved = np.asarray(state["grain_counts"])
            counts = np.zeros(GRAIN_COUNT_SLOTS, saved.dtype)
            for slot in (GRAINS_ALOFT, GRAIN_LANDINGS, FRESH_LIFTS):
                counts[slot] = saved[slot]
            if saved_slots == (PROBE_GRAIN_COUNT_SLOTS,):
                counts[UPWIND_SETTLES], counts[LIFTED_EXITS] = saved[5], saved[6]
        elif "grain_counts" in state:
            counts = np.asarray(state["grain_counts"])
        elif "grains_aloft" in state and np.asarray(state["grains_aloft"]).shape == (1,):
            counts[GRAINS_ALOFT] = np.asarray(state["grains_aloft"])[0]
        else:
            raise SnowInputError("state", "snow cover state lacks 'grain_counts'",
                                 "a state saved by this version")
        if suspended.shape != (1,) or suspended.dtype != np.int64:
            raise SnowInputError("state", "the snow cover's 'suspended_total' must be int64 (1,)",
                                 "a state saved by this version")
        if counts.shape != (GRAIN_COUNT_SLOTS,) or counts.dtype != np.int32:
            raise SnowInputError("state", f"the snow cover's 'grain_counts' must be int32 "
                                 f"({GRAIN_COUNT_SLOTS},)", "a state saved by this version")
        for name in expected:
            getattr(self, name)[...] = self.backend.asarray(state[name])
        self.suspended_total[...] = self.backend.asarray(suspended)
        self.spare_grain_count[...] = self.backend.asarray(counts)
        self.grain_count[...] = 0
