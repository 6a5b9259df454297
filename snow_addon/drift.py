"""Wind-driven snow transport (saltation) on the heightmap grid: the near-surface wind
gives a friction velocity (log law), above the threshold a saltation flux (Pomeroy and
Gray 1990) moves snow along the surface wind, pairwise between neighbour nodes so volume
stays exact. Model, constants and sources: docs/drift.md; kernels: kernels/*/drift.py.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import SnowInputError
from .wind import base_wind

KARMAN = 0.41
"""von Karman's constant."""
AIR_DENSITY = 1.23
"""kg/m^3, air near 0 C."""
SALTATION_COEFFICIENT = 0.68
"""Pomeroy and Gray (1990): Q = 0.68 rho u*_t (u*^2 - u*_t^2) / (g u*), kg/m/s."""
DRIFT_SNOW_DENSITY = 150.0
"""kg/m^3 of the snow the flux moves in and out of the cover (fresh, wind-packed snow)."""
STORM_SNOWFALL_RATE = 0.02
"""m/h of snowfall in the storm a bake depicts (2 cm/h, a heavy snowfall). Bakes run as
time-lapses (snowfall_rate is often tens of m/h so that a few seconds show a storm); the
drift runs at the same time-lapse, snowfall_rate / STORM_SNOWFALL_RATE, so that drift and
snowfall keep the ratio they have in such a storm."""
THRESHOLD_FRICTION_VELOCITY = {"dry": 0.32, "wet": 0.41}
"""m/s: u*_t from the mean 10 m threshold wind speeds of Li and Pomeroy (1997), 7.7 m/s
for dry and 9.9 m/s for wet snow, through the log law with z0 = 5e-4 m; both inside the
0.27-0.69 m/s that Clifton et al. (2006) measured in a snow wind tunnel."""


def threshold(settings) -> float:
    """u*_t (m/s): the setting, or the snow type's value."""
    if settings.drift_threshold is not None:
        return float(settings.drift_threshold)
    return THRESHOLD_FRICTION_VELOCITY[settings.snow_type]


def ustar_per_speed(settings, cell_size: float) -> float:
    """u* / |U| of the log law between the surface and the first open cell's centre, taken
    half a cell above the surface: kappa / ln(h / 2 / z0)."""
    return KARMAN / math.log(0.5 * cell_size / float(settings.roughness_length))


def flux_scale(settings) -> float:
    """m^2/s per (u*^2 - u*_t^2) / u* (m/s): Pomeroy and Gray's constants over the snow
    density, times the time-lapse and the user's strength."""
    time_lapse = max(float(settings.snowfall_rate), STORM_SNOWFALL_RATE) / STORM_SNOWFALL_RATE
    return (SALTATION_COEFFICIENT * AIR_DENSITY * threshold(settings) / settings.gravity
            / DRIFT_SNOW_DENSITY * time_lapse * float(settings.drift_strength))


def check_roughness(settings, cell_size: float) -> None:
    """SnowInputError when the roughness length is not below half a wind cell (the log law
    needs the first cell's centre above z0)."""
    z0 = float(settings.roughness_length)
    if not z0 < 0.5 * cell_size:
        raise SnowInputError("roughness_length", f"({z0:g} m) must be below half a wind cell "
                             f"({0.5 * cell_size:g} m)", "5e-4 (fresh snow)")


class SnowDrift:
    """Saltation transport for one SnowCover and WindSolver. Buffers: the surface wind per
    wind column (ny_w, nx_w) and the flux per heightmap node (ny, nx), float32 m/s and
    m^2/s; ``exported`` (ny, nx) float32 m of depth that left through the grid's edge."""

    def __init__(self, settings, cover, grid, backend):
        check_roughness(settings, grid.cell_size)
        self.settings, self.cover, self.grid, self.backend = settings, cover, grid, backend
        self.kernels = backend.kernel_module("drift")
        xp = backend.xp
        self.wind_x = xp.zeros((grid.ny, grid.nx), xp.float32)
        self.wind_y = xp.zeros((grid.ny, grid.nx), xp.float32)
        shape = cover.heightmap_grid.shape
        self.flux_x = xp.zeros(shape, xp.float32)
        self.flux_y = xp.zeros(shape, xp.float32)
        self.exported = xp.zeros(shape, xp.float32)
        self.ustar_per_speed = np.float32(ustar_per_speed(settings, grid.cell_size))
        self.threshold = np.float32(threshold(settings))
        self.flux_scale = np.float32(flux_scale(settings))

    @staticmethod
    def estimate_bytes(heightmap_grid, grid) -> int:
        return 4 * (2 * grid.nx * grid.ny + 3 * heightmap_grid.nx * heightmap_grid.ny)

    def step(self, wind, dt: float, time: float) -> None:
        """Move snow along the surface wind of ``wind`` (a WindSolver) for ``dt`` seconds at
        simulated ``time`` s (the heading of the wind before gusts tells lee eddies apart);
        writes the cover's spare depth and swaps it in."""
        k, g, c = self.kernels, self.grid, self.cover
        hm = c.heightmap_grid
        _speed, heading = base_wind(self.settings, time)
        heading_x, heading_y = math.cos(math.radians(heading)), math.sin(math.radians(heading))
        k.surface_wind(wind.u, wind.v, wind.solid, self.wind_x, self.wind_y)
        k.saltation_flux(self.wind_x, self.wind_y, g.x0, g.y0, g.cell_size, hm.x0, hm.y0,
                         hm.spacing, c.has_surface, self.ustar_per_speed, self.threshold,
                         self.flux_scale, heading_x, heading_y, self.flux_x, self.flux_y)
        k.drift_transport(self.flux_x, self.flux_y, c.height, c.has_surface, c.snow_depth,
                          np.float32(dt / hm.spacing), c.threshold, c.spare_depth, self.exported)
        c.snow_depth, c.spare_depth = c.spare_depth, c.snow_depth

    def exported_volume(self) -> float:
        """m^3 that left through the grid's edge (negative: more blew in)."""
        total = self.backend.xp.sum(self.exported, dtype=self.backend.xp.float64)
        return float(self.backend.to_host(total)) * self.cover.node_area

    def friction_velocity(self) -> np.ndarray:
        """Host (ny, nx) u* (m/s) of the latest step's surface wind (for plots and tests)."""
        from ..kernels.reference.sampling import sample_bilinear

        hm, g = self.cover.heightmap_grid, self.grid
        x = hm.x0 + np.arange(hm.nx, dtype=np.float32)[None, :] * np.float32(hm.spacing)
        y = hm.y0 + np.arange(hm.ny, dtype=np.float32)[:, None] * np.float32(hm.spacing)
        x, y = np.broadcast_to(x, hm.shape), np.broadcast_to(y, hm.shape)
        half = 0.5 * g.cell_size
        sx = sample_bilinear(self.backend.to_host(self.wind_x), g.x0 + half, g.y0 + half,
                             g.cell_size, x, y)
        sy = sample_bilinear(self.backend.to_host(self.wind_y), g.x0 + half, g.y0 + half,
                             g.cell_size, x, y)
        return (float(self.ustar_per_speed) * np.hypot(sx, sy)).astype(np.float32)

    def state_dict(self) -> dict:
        return {"exported": np.array(self.backend.to_host(self.exported), copy=True)}

    def load_state_dict(self, state) -> None:
        array = np.asarray(state.get("exported")) if "exported" in state else None
        if array is None or array.shape != tuple(self.exported.shape) or array.dtype != np.float32:
            raise SnowInputError("state", "the drift state lacks 'exported' of the heightmap's "
                                 "shape", "a state saved with the same settings")
        self.exported[...] = self.backend.asarray(array)
