"""Snowflakes: struct-of-arrays state on the backend, stepped by the flakes kernels.

Model, integrator, random streams and the GPU's spatial sort: docs/flakes_and_cover.md.
"""
from __future__ import annotations

import numpy as np

from ..kernels.reference.flakes import COUNT_BITS
from .errors import SnowInputError, SnowMemoryError
from .grid import HeightmapGrid, WindGrid

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
        self.sort_interval = int(getattr(self.kernels, "SORT_INTERVAL", 0))
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
        xp = backend.xp
        for name in FLOAT_STATE:
            setattr(self, name, xp.zeros(self.count, dtype=xp.float32))
        self.respawn_count = xp.zeros(self.count, dtype=xp.uint32)
        self.flake_id = xp.arange(self.count, dtype=xp.uint32)
        self.in_id_order = True
        self.steps_since_sort = self.sort_interval  # sort before the next step, as initialize
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

    def _state(self):
        return tuple(getattr(self, name) for name in STATE_NAMES)

    def _common_arguments(self, wind, height, snow_depth):
        g, h = self.grid, self.heightmap
        return (wind.u, wind.v, wind.w, np.float32(g.x0), np.float32(g.y0), np.float32(g.z0),
                np.float32(g.cell_size), height, snow_depth, np.float32(h.x0), np.float32(h.y0),
                np.float32(h.spacing))

    def initialize(self, wind, height, snow_depth) -> None:
        """Place the flakes (counter 0): XY uniform, z uniform between the ground and the
        top of the wind grid, velocity = local wind + (0, 0, -Vt)."""
        if not self.in_id_order:
            self.flake_id[...] = self.backend.xp.arange(self.count, dtype=self.backend.xp.uint32)
            self.in_id_order = True
        self.kernels.initialize_flakes(self.flake_id, *self._state(),
                                       *self._common_arguments(wind, height, snow_depth),
                                       int(self.settings.seed), self.vt_min, self.vt_max,
                                       np.float32(self.settings.spiral_radius))
        # id order is random in space: sort before the first step, not after SORT_INTERVAL
        # slow ones (100M flakes on an H100: 42 ms per step in id order, 4.2 ms sorted)
        self.steps_since_sort = self.sort_interval

    def step(self, wind, height, snow_depth, hit_counts, time, dt, lift=None) -> None:
        """Advance every flake by ``dt`` seconds; ground hits add 1 to int32 ``hit_counts``
        (heightmap shape) at the nearest node. ``time`` is unused (the flakes do not depend
        on it); it is part of the common step signature. ``lift``: keyword arguments for
        blowing snow (SnowDrift.lift_arguments), or None for none."""
        if self.sort_interval > 0 and self.steps_since_sort >= self.sort_interval:
            self.sort_by_cell()
        self.kernels.step_flakes(self.flake_id, *self._state(),
                                 *self._common_arguments(wind, height, snow_depth), hit_counts,
                                 int(self.settings.seed), self.vt_min, self.vt_max,
                                 np.float32(self.settings.spiral_radius),
                                 np.float32(self.settings.gravity), np.float32(dt),
                                 **(lift or {}))
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
    def _in_id_order(self, arrays):
        xp = self.backend.xp
        stacked = xp.stack(arrays, axis=-1) if len(arrays) > 1 else arrays[0]
        if not self.in_id_order:
            ordered = xp.empty_like(stacked)
            ordered[self.flake_id.astype(xp.int64)] = stacked
            stacked = ordered
        host = self.backend.to_host(stacked)
        if host is arrays[0]:              # the live state itself (one array, CPU, id order)
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
