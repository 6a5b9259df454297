"""Snowflakes: struct-of-arrays state on the backend, stepped by the flakes kernels.

Model, integrator, random streams and the GPU's spatial sort: docs/flakes_and_cover.md.
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.contract import (BARE_GROUND, COUNT_BITS, NO_INFLOW, OPEN_SNOWFIELD,
                                WRAP, FlakeLaw, FlakeState, Ground, Inflow, WindField)
from .errors import SnowInputError, SnowMemoryError
from .grid import HeightmapGrid, WindGrid
from .terrain import surface_mean_height
from .wind import base_wind, peak_inflow_speed

#: ``settings.upwind_fetch`` -> the kernels' ``inflow_mode``.
INFLOW_MODES = {"open_snowfield": OPEN_SNOWFIELD, "bare_ground": BARE_GROUND, "wrap": WRAP}
INFLOW_MARGIN = 0.25
"""With an open upwind fetch, the flakes' landing targets reach this share of the longest
way the wind carries a flake while it falls (the slowest flake in the strongest gust) beyond
both ends of the domain along the wind: the spread of where flakes land around their
targets (gusts, eddies, the slower air near the ground, the spawn layer's depth) then
thins neither edge."""

#: Per-flake state arrays (all 4 bytes per element), in the order the kernels take them.
STATE_NAMES = ("pos_x", "pos_y", "pos_z", "vel_x", "vel_y", "vel_z", "phase", "respawn_count")
FLOAT_STATE = STATE_NAMES[:7]
#: Bytes per flake: 7 float32 + uint32 respawn count + uint32 flake id, plus two uint32
#: scratch arrays (sort keys, permutation buffer) where the backend sorts flakes.
STATE_BYTES_PER_FLAKE = 36
SORT_BYTES_PER_FLAKE = 8


class FlakeSystem:
    """Every snowflake of a bake. Arrays are backend arrays of shape (N,), in storage order
    (which the GPU permutes when it sorts flakes by wind cell); ``flake_id[n]`` names the
    flake stored at ``n``. Host views (``positions`` ...) are always in flake-id order."""

    def __init__(self, settings, grid: WindGrid, heightmap: HeightmapGrid, backend):
        settings.validate()
        self.settings, self.grid, self.heightmap, self.backend = settings, grid, heightmap, backend
        self.kernels = backend.kernel_module("flakes")
        self.count = int(settings.flake_count)
        self.sort_interval = int(self.kernels.SORT_INTERVAL)
        sorting = self.sort_interval > 0
        needed = self.count * self._bytes_per_flake(sorting) + (grid.cell_count * 4 if sorting else 0)
        available = backend.memory_available()
        if needed > available:
            fits = max(1, int(self.count * available / needed * 0.9))
            raise SnowMemoryError("flake_count", f"{self.count:,} flakes need {needed / 2**20:,.0f} MiB, "
                                  f"{available / 2**20:,.0f} MiB are free on {backend.name}",
                                  f"{fits:,} or fewer", needed, available)
        vt_min, vt_max = settings.terminal_speed_range
        self.vt_min, self.vt_max = np.float32(vt_min), np.float32(vt_max)
        self.law = FlakeLaw(int(settings.seed), self.vt_min, self.vt_max,
                            np.float32(settings.spiral_radius), np.float32(settings.gravity))
        xp = backend.xp
        for name in FLOAT_STATE:
            setattr(self, name, xp.zeros(self.count, dtype=xp.float32))
        self.respawn_count = xp.zeros(self.count, dtype=xp.uint32)
        self.flake_id = xp.arange(self.count, dtype=xp.uint32)
        self.in_id_order = True
        self.steps_since_sort = self.sort_interval  # sort before the next step, as initialize
        self.inflow_mode = INFLOW_MODES[settings.upwind_fetch]
        #: mean fall (m) from the spawn layer's middle to the surface nodes (from the first
        #: heights the flakes see: ``initialize`` or, after a resume, ``step``)
        self.fall_height = None
        if self.sort_interval > 0:
            self.sort_keys = xp.zeros(self.count, dtype=xp.uint32)
            self.sort_scratch = xp.zeros(self.count, dtype=xp.uint32)
            self.cell_counts = xp.zeros(grid.cell_count, dtype=xp.uint32)

    @staticmethod
    def _bytes_per_flake(sorting: bool) -> int:
        return STATE_BYTES_PER_FLAKE + (SORT_BYTES_PER_FLAKE if sorting else 0)

    @staticmethod
    def estimate_bytes(settings) -> int:
        """Upper bound of the flakes' memory (bytes), sort scratch included."""
        return int(settings.flake_count) * (STATE_BYTES_PER_FLAKE + SORT_BYTES_PER_FLAKE)

    def _state(self) -> FlakeState:
        return FlakeState(self.flake_id, *(getattr(self, name) for name in STATE_NAMES))

    def _fields(self, wind, height, snow_depth) -> tuple:
        """(WindField, Ground) of the wind ``wind`` and the ground's arrays."""
        g, h = self.grid, self.heightmap
        return (WindField(wind.u, wind.v, wind.w, np.float32(g.x0), np.float32(g.y0),
                          np.float32(g.z0), np.float32(g.cell_size)),
                Ground(height, snow_depth, np.float32(h.x0), np.float32(h.y0),
                       np.float32(h.spacing)))

    def _measure_fall(self, height) -> None:
        """Set ``fall_height`` from the terrain ``height`` (a host read, once)."""
        if self.inflow_mode == WRAP or self.fall_height is not None:
            return
        mean = surface_mean_height(self.backend.to_host(height))
        spawn = self.grid.top - 0.5 * self.grid.cell_size
        mean = mean if math.isfinite(mean) else self.grid.z0
        self.fall_height = max(spawn - mean, 0.5 * self.grid.cell_size)

    def inflow(self, time: float) -> Inflow:
        """The upwind fetch at simulated ``time`` s for the flakes' kernels
        (kernels.contract.Inflow): the mode, the wind before gusts (m/s) and the targets'
        margins (m, from the mean fall height: the longest drift)."""
        if self.inflow_mode == WRAP:
            return NO_INFLOW
        speed, heading = base_wind(self.settings, time)
        angle = math.radians(heading)
        longest = self.fall_height * peak_inflow_speed(self.settings, time) / float(self.vt_min)
        return Inflow(self.inflow_mode, np.float32(speed * math.cos(angle)),
                      np.float32(speed * math.sin(angle)), np.float32(INFLOW_MARGIN * longest))

    def initialize(self, wind, height, snow_depth) -> None:
        """Place the flakes (counter 0): XY uniform, z uniform between the ground and the
        top of the wind grid, velocity = local wind + (0, 0, -Vt); with an open upwind
        fetch each as far upwind of its landing target as it drifts while it falls."""
        if not self.in_id_order:
            self.flake_id[...] = self.backend.xp.arange(self.count, dtype=self.backend.xp.uint32)
            self.in_id_order = True
        self._measure_fall(height)
        self.kernels.initialize_flakes(self._state(), *self._fields(wind, height, snow_depth),
                                       self.law, self.inflow(0.0))
        # id order is random in space: sort before the first step, not after SORT_INTERVAL
        # slow ones (100M flakes on an H100: 42 ms per step in id order, 4.2 ms sorted)
        self.steps_since_sort = self.sort_interval

    def step(self, wind, height, snow_depth, hit_counts, time, dt, blowing=None,
             grain_count=None) -> None:
        """Advance every flake by ``dt`` seconds; ground hits add 1 to int32 ``hit_counts``
        (heightmap shape) at the nearest node. ``time`` (s) gives the wind before gusts that
        an open upwind fetch's flakes spawn upwind by (``inflow``). ``blowing``: the blowing
        snow and eddies (kernels.contract.BlowingSnow from SnowDrift.blowing_snow) or None;
        int32 ``grain_count`` (kernels.contract.GRAIN_COUNT_SLOTS,) then gains the grains
        aloft, settled and lifted, from upwind settled and lifted gone."""
        if self.sort_interval > 0 and self.steps_since_sort >= self.sort_interval:
            self.sort_by_cell()
        self._measure_fall(height)
        self.kernels.step_flakes(self._state(), *self._fields(wind, height, snow_depth),
                                 self.law, np.float32(dt), hit_counts, blowing,
                                 self.inflow(time), grain_count)
        self.steps_since_sort += 1

    def sort_by_cell(self) -> None:
        """Permute the state arrays so flakes in the same wind cell sit together (better
        cache use of the wind lookups). Results never depend on the storage order."""
        g = self.grid
        xp = self.backend.xp
        if not hasattr(self, "sort_keys"):
            self.sort_keys = xp.zeros(self.count, dtype=xp.uint32)
            self.sort_scratch = xp.zeros(self.count, dtype=xp.uint32)
            self.cell_counts = xp.zeros(g.cell_count, dtype=xp.uint32)
        self.kernels.cell_keys(self.pos_x, self.pos_y, self.pos_z, np.float32(g.x0),
                               np.float32(g.y0), np.float32(g.z0), np.float32(g.cell_size),
                               g.nx, g.ny, g.nz, self.sort_keys)
        # destination index of each flake, written over the keys
        self.kernels.sort_permutation(self.sort_keys, self.cell_counts, self.sort_keys)
        for name in STATE_NAMES + ("flake_id",):
            array = getattr(self, name)
            out = self.sort_scratch.view(array.dtype)
            self.kernels.scatter(array.view(xp.uint32), self.sort_keys, out.view(xp.uint32))
            self.sort_scratch = array.view(xp.uint32)
            setattr(self, name, out)
        self.in_id_order = False
        self.steps_since_sort = 0

    # --- host views in flake-id order -------------------------------------------------
    def copy_in_id_order(self, array, out) -> None:
        """Copy ``array``, one of the state arrays in storage order, into ``out`` (the same
        backend, shape and 4-byte dtype) in flake-id order. Out of id order it is the sort's
        scatter run backwards, out[flake_id[n]] = array[n]: a kernel of the build (on the
        CPU without the GIL, so a frame's copy leaves Blender's thread be)."""
        xp = self.backend.xp
        if self.in_id_order:
            out[...] = array
        else:
            self.kernels.scatter(array.view(xp.uint32), self.flake_id, out.view(xp.uint32))

    def _in_id_order(self, arrays):
        xp = self.backend.xp
        live = arrays[0]
        if not self.in_id_order:
            ordered = []
            for array in arrays:
                out = xp.empty_like(array)
                self.copy_in_id_order(array, out)
                ordered.append(out)
            arrays = tuple(ordered)
        stacked = xp.stack(arrays, axis=-1) if len(arrays) > 1 else arrays[0]
        host = self.backend.to_host(stacked)
        if host is live:                   # the live state itself (one array, CPU, id order)
            return np.array(host, copy=True)
        return np.asarray(host)            # already a new array: no second pass over it

    def positions(self) -> np.ndarray:
        """Host (N, 3) float32 positions (m), flake-id order."""
        return self._in_id_order((self.pos_x, self.pos_y, self.pos_z))

    def velocities(self) -> np.ndarray:
        """Host (N, 3) float32 velocities (m/s), flake-id order."""
        return self._in_id_order((self.vel_x, self.vel_y, self.vel_z))

    def respawn_counts(self) -> np.ndarray:
        """Host (N,) uint32: how often each flake respawned (flake-id order); a lifted
        flake keeps its count (the kernels' BLOWING bit is masked off)."""
        return self._in_id_order((self.respawn_count,)) & COUNT_BITS

    # --- resume -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Host arrays in flake-id order: enough to continue bit for bit."""
        return {name: self._in_id_order((getattr(self, name),)) for name in STATE_NAMES}

    def load_state_dict(self, state) -> None:
        for name in STATE_NAMES:
            if name not in state:
                raise SnowInputError("state", f"flake state lacks {name!r}", "a state saved by this version")
            array = np.asarray(state[name])
            dtype = np.uint32 if name == "respawn_count" else np.float32
            if array.shape != (self.count,) or array.dtype != dtype:
                raise SnowInputError("state", f"flake {name} has shape {array.shape} {array.dtype}, "
                                     f"expected ({self.count},) {np.dtype(dtype)}",
                                     "a state saved with the same flake_count")
        xp = self.backend.xp
        for name in STATE_NAMES:
            setattr(self, name, self.backend.asarray(state[name]))
        self.flake_id = xp.arange(self.count, dtype=xp.uint32)
        self.in_id_order = True
        self.steps_since_sort = self.sort_interval  # sort before the next step, as initialize
