"""Wind-driven snow transport on the heightmap grid: the near-surface wind gives a
friction velocity (log law); above the threshold a saltation flux (Pomeroy and Gray 1990)
moves snow along the surface wind, pairwise between neighbour nodes so volume stays exact,
and snow that falls there is lifted again and blown on as flakes (blowing snow) until it
lands in shelter. Model, constants and sources: docs/drift.md; kernels:
kernels/*/drift.py and the lift in kernels/*/flakes.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.contract import (BARE_GROUND, INFLOW_HEIGHT_BINS, OPEN_SNOWFIELD, WRAP,
                                BlowingSnow, wrap_buffer_size)
from .errors import SnowInputError
from .suspension import OpenSnowfieldSuspension
from .wind import KARMAN, MIXING_HEIGHT, base_wind  # noqa: F401 (one home: the wind's)

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
SEPARATION_SLOPE = 1.0 / 12.0
"""Drop of the dividing streamline per metre downwind of an obstacle's top: flow behind a
solid fence reattaches about 12 fence heights downwind, where its lee drift ends (Tabler
1991, 1994: a solid fence's drift is 10-15 H long)."""
SEPARATION_RISE = 0.2
"""How the dividing streamline first climbs above the obstacle's top before it comes down
(kernels.reference.drift.separation_bubble): the air that the windward face turns upward
leaves the top edge heading up, so a separated shear layer first rises and then bends
down to reattach. With 0.2 and SEPARATION_SLOPE it is H (1 - x / 12 H)(1 + 0.2 x / H)
over flat ground behind a bluff obstacle of height H (SEPARATION_EDGE): 1.2 H high 3.5 H
downwind, closing at 12 H as before. Chosen on the validation scenes (docs/drift.md, "Why
the climb"); 0 is the straight line of SEPARATION_SLOPE alone."""
WAKE_SPREAD = 2.0
"""Half-width of the crosswind window, per metre downwind, over which an obstacle's
height is averaged: a narrow obstacle's wake closes sooner because air flows in from its
sides. 2 closes a cube's bubble 1.7 H behind it (Martinuzzi and Tropea 1993 measured
1.6 H behind a wall-mounted cube); a long fence keeps its 12 H."""

EDDY_TIME = 1.0
"""s between the independent nodes of the turbulent air velocity a flake feels (linear in
time between them, so flakes swirl smoothly): with node values of variance 2 K / EDDY_TIME
the flakes spread with the surface layer's eddy diffusivity K = kappa u* l (l: the mixing
length, see kernels.reference.flakes; the random displacement model's spread, Wilson and
Sawford 1996, without a random jump per frame)."""

GRAIN_FALL_SPEED = 0.3
"""m/s: the terminal fall speed of lifted (blowing) snow. Wind breaks the crystals it
lifts into grains of 50-100 um radius (Schmidt 1982), which settle at about 0.2-0.7 m/s
(Pomeroy and Male 1992), not at the 1-2 m/s of falling flakes; with the surface layer's
eddies (K = kappa u* z) they stay aloft and cross obstacles instead of hopping along the
ground."""

MAX_BUBBLE_CELLS = 128
"""The upwind march of the bubble stops after this many wind cells (its cost)."""

VORTEX_REACH = 0.8
"""Obstacle heights from a bluff obstacle's windward foot and sides over which its
horseshoe vortex speeds up the surface wind: the vortex sits about 0.5-1 H in front of a
wall-mounted cube (Martinuzzi and Tropea 1993); 0.8 was chosen among 0.6, 0.8 and 1.0 on
the cube of docs/drift_validation.md (three seeds each). Only rises steeper than
1 / VORTEX_REACH (51 degrees) count."""
SEPARATION_EDGE = 1.0 / VORTEX_REACH
"""Rise per metre of the face below an obstacle's top (one wind cell of run) from which the
streamline leaving that top climbs (SEPARATION_RISE): a bluff face, 51 degrees and
steeper (1.25), the faces the horseshoe vortex wraps. Air that flows up a smooth hill
leaves its crest along the lee slope, without the upward kick of a sharp edge."""
VORTEX_GAIN = 1.0
"""Extra surface wind at the obstacle's foot, as a share of the approach flow's (the
larger of the resolved and the open fetch's; falling linearly to 0 at VORTEX_REACH):
1 doubles u*, four times the surface stress, the
amplification of the bed shear stress at the sides of a bridge pier under its horseshoe
vortex (Hjorth 1975, in Sumer and Fredsoe 2002)."""
VORTEX_LEG = 2.0
"""Obstacle heights behind an obstacle's lee face over which the legs of its horseshoe
vortex, trailing downwind beside its sides, still speed up the surface wind (fading
linearly to nothing; none straight behind it, in the wake). Where the band stopped at the
lee face its load piled beside the lee corners (3-4 times the far field) and the ground
right behind the block stayed short of snow; 2 was chosen among 0, 2 and 4 on the cube
of docs/drift_validation.md (three seeds each, CPU)."""
MAX_VORTEX_CELLS = 8
"""The vortex's window reaches this many wind cells around a column (its cost)."""


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
    m^2/s. With ``upwind_fetch`` "wrap" the transport wraps around the grid's edges as the
    flakes do, so the snow volume stays in the grid; what leaves downwind comes back spread
    evenly across the upwind edge (a flake comes back at a random crosswind place). With an
    open fetch the edges across the wind are open: snow blows in at the open snowfield's
    transport (none from bare ground) and out downwind, booked in ``books``."""

    def __init__(self, settings, cover, grid, backend, relief: float, mean_ground: float):
        check_roughness(settings, grid.cell_size)
        self.settings, self.cover, self.grid, self.backend = settings, cover, grid, backend
        self.kernels = backend.kernel_module("drift")
        self.wind_kernels = backend.kernel_module("wind")
        xp = backend.xp
        self.wind_x = xp.zeros((grid.ny, grid.nx), xp.float32)
        self.wind_y = xp.zeros((grid.ny, grid.nx), xp.float32)
        shape = cover.heightmap_grid.shape
        self.flux_x = xp.zeros(shape, xp.float32)
        self.flux_y = xp.zeros(shape, xp.float32)
        self.column_top = xp.zeros((grid.ny, grid.nx), xp.float32)
        self.column_height = xp.zeros((grid.ny, grid.nx), xp.float32)
        self.bubble_top = xp.zeros((grid.ny, grid.nx), xp.float32)
        self.scour = xp.ones((grid.ny, grid.nx), xp.float32)
        # the transport's wrap: the even inflow per node of the upwind and downwind edge
        # (m) and the GPU's scratch (kernels.contract.wrap_buffer_size)
        self.wrap = xp.zeros(wrap_buffer_size(shape), xp.float32)
        #: the upwind fetch (settings.upwind_fetch): the edges across the wind wrap, or are
        #: open with snow blowing in from an open snowfield or from bare ground
        self.boundary = {"open_snowfield": OPEN_SNOWFIELD, "bare_ground": BARE_GROUND,
                         "wrap": WRAP}[settings.upwind_fetch]
        #: float64 (2,): the snow (m of depth summed over nodes) the open edges let in and
        #: out since the start; times the node area, m^3 (``boundary_volumes``)
        self.books = xp.zeros(2, xp.float64)
        self.time = 0.0
        relief = max(float(relief), float(cover.heightmap_grid.spacing))
        self.max_distance = np.float32(min(relief / SEPARATION_SLOPE,
                                           math.hypot(*grid.size[:2]),
                                           MAX_BUBBLE_CELLS * grid.cell_size))
        self.relief = relief
        self.ustar_per_speed = np.float32(ustar_per_speed(settings, grid.cell_size))
        self.threshold = np.float32(threshold(settings))
        self.flux_scale = np.float32(flux_scale(settings))
        self.eddy_scale = np.float32(KARMAN * float(settings.turbulence))
        self.eddy_steps = np.uint32(max(1, round(EDDY_TIME / float(settings.time_step))))
        self.heading = (1.0, 0.0)
        # the eddies' u* floor (m/s): the open fetch's, from the wind before gusts
        self.eddy_floor = np.float32(0.0)
        #: with an open snowfield upwind: its suspension's grains that enter across the
        #: upwind edge (snow_addon.suspension), their heights on the device (int32 bins of
        #: whole wind cells) and the host's copy of what was sent
        self.suspension = None
        self.inflow_heights = xp.zeros(INFLOW_HEIGHT_BINS, xp.int32)
        self._sent_heights = np.zeros(INFLOW_HEIGHT_BINS, np.int32)
        if self.boundary == OPEN_SNOWFIELD:
            self.suspension = OpenSnowfieldSuspension(
                settings, grid, grid.top - float(mean_ground), float(self.ustar_per_speed),
                float(self.threshold), float(self.eddy_scale), MIXING_HEIGHT,
                int(self.eddy_steps), GRAIN_FALL_SPEED, backend)

    @staticmethod
    def estimate_bytes(heightmap_grid, grid) -> int:
        return 4 * (6 * grid.nx * grid.ny + 2 * heightmap_grid.nx * heightmap_grid.ny
                    + wrap_buffer_size((heightmap_grid.ny, heightmap_grid.nx)))

    def update_shelter(self, time: float) -> None:
        """Rebuild the top of the lee's separation bubble per wind column from the
        cover's surface (terrain + snow) for the storm's heading at simulated ``time`` s.
        Called with the obstacle refresh: air below it is still, snow below it stays. Also
        the horseshoe vortex's factor on the surface wind per column (``scour``)."""
        c, hm, g = self.cover, self.cover.heightmap_grid, self.grid
        _speed, heading = base_wind(self.settings, time)
        hx, hy = math.cos(math.radians(heading)), math.sin(math.radians(heading))
        self.kernels.column_surface(c.height, c.snow_depth, c.has_surface, hm.x0, hm.y0,
                                    hm.spacing, g.x0, g.y0, g.cell_size, self.column_top)
        self.wind_kernels.obstacle_surface(c.height, c.snow_depth, hm.x0, hm.y0, hm.spacing,
                                           g.x0, g.y0, g.cell_size, self.column_top,
                                           self.column_height)
        self.kernels.separation_bubble(self.column_height, g.x0, g.y0, g.cell_size, hx, hy,
                                       SEPARATION_SLOPE, SEPARATION_RISE, SEPARATION_EDGE,
                                       WAKE_SPREAD, self.max_distance,
                                       self.bubble_top)
        cells = min(MAX_VORTEX_CELLS, math.ceil(max(VORTEX_REACH, VORTEX_LEG) * self.relief
                                                / g.cell_size))
        self.kernels.horseshoe_vortex(self.column_height, g.cell_size, hx, hy, VORTEX_REACH,
                                      VORTEX_GAIN, VORTEX_LEG, cells, self.scour)

    def update_surface_wind(self, wind, time: float) -> None:
        """Read the surface wind of ``wind`` (a WindSolver) per column and the storm's
        heading at simulated ``time`` s (the heading tells lee eddies apart): what this
        step's blowing snow (``blowing_snow``) and transport (``step``) use."""
        speed, heading = base_wind(self.settings, time)
        self.time = float(time)
        self.heading = (math.cos(math.radians(heading)), math.sin(math.radians(heading)))
        # the horseshoe vortex scales the approach flow's surface wind (the open fetch's,
        # the wind before gusts), not the stagnated air at the obstacle's face
        self.kernels.surface_wind(wind.u, wind.v, wind.w, wind.fractions, self.wind_x,
                                  self.wind_y, self.scour, speed, *self.heading)
        self.eddy_floor = np.float32(float(self.ustar_per_speed) * speed)

    def blowing_snow(self, step_index: int, inflow=None) -> BlowingSnow:
        """The flakes kernels' blowing snow and surface layer's eddies at step
        ``step_index`` (see kernels.reference.flakes): landing flakes are lifted again where
        u* > u*_t, and every flake swirls with eddies that grow with u* and height, u* at
        least the open fetch's (the wind before gusts through the log law): behind an
        obstacle the slowed surface wind would otherwise calm the eddies of its wake.
        ``inflow``: the flakes' upwind fetch this step (kernels.contract.Inflow, from
        FlakeSystem.inflow); with an open snowfield upwind its suspension's grains enter
        across the upwind edge (snow_addon.suspension)."""
        share, exponent = 0.0, 0
        if self.suspension is not None and inflow is not None:
            wind_x, wind_y = float(inflow.wind_x), float(inflow.wind_y)
            length_x, length_y, _ = self.grid.size
            along = length_x if abs(np.float32(wind_x)) >= abs(np.float32(wind_y)) else length_y
            share, exponent, heights = self.suspension.inflow(math.hypot(wind_x, wind_y), along,
                                                              float(inflow.margin))
            if share > 0.0 and not np.array_equal(heights, self._sent_heights):
                self.inflow_heights[...] = self.backend.asarray(heights)
                self._sent_heights = heights
        return BlowingSnow(
            surface_x=self.wind_x, surface_y=self.wind_y,
            ustar_per_speed=self.ustar_per_speed, threshold=self.threshold,
            heading_x=np.float32(self.heading[0]), heading_y=np.float32(self.heading[1]),
            lift_strength=np.float32(self.settings.drift_strength),
            step_index=np.uint32(step_index & 0xFFFFFFFF), bubble_top=self.bubble_top,
            eddy_scale=self.eddy_scale, mixing_height=np.float32(MIXING_HEIGHT),
            eddy_steps=self.eddy_steps, grain_speed=np.float32(GRAIN_FALL_SPEED),
            eddy_floor=self.eddy_floor, inflow_share=np.float32(share),
            inflow_exponent=np.uint32(exponent), inflow_heights=self.inflow_heights)

    def step(self, dt: float) -> None:
        """Move snow along the surface wind read by ``update_surface_wind`` for ``dt``
        seconds; writes the cover's spare depth and swaps it in."""
        k, g, c = self.kernels, self.grid, self.cover
        hm = c.heightmap_grid
        heading_x, heading_y = self.heading
        k.saltation_flux(self.wind_x, self.wind_y, g.x0, g.y0, g.cell_size, hm.x0, hm.y0,
                         hm.spacing, c.has_surface, self.ustar_per_speed, self.threshold,
                         self.flux_scale, heading_x, heading_y, self.flux_x, self.flux_y,
                         c.height, c.snow_depth, self.bubble_top)
        # wrap: what leaves downwind comes back spread across the upwind edge, as the flakes
        # do; open: snow blows in at the open snowfield's transport and out downwind
        downwind_axis = 1 if abs(heading_x) >= abs(heading_y) else 0
        k.drift_transport(self.flux_x, self.flux_y, c.height, c.has_surface, c.snow_depth,
                          np.float32(dt / hm.spacing), c.threshold, c.spare_depth,
                          downwind_axis, self.wrap, self.boundary,
                          self.inflow_limit(self.time + float(dt)), self.books)
        c.snow_depth, c.spare_depth = c.spare_depth, c.snow_depth

    def inflow_limit(self, time: float) -> np.float32:
        """m: the most snow an open edge's face lets in per step, a quarter of the open
        snowfield's depth at simulated ``time`` s (the snowfall so far: open level ground
        keeps it, since it gains from upwind what it loses downwind), as a pair's donor
        gives at most a quarter of its snow (docs/drift.md, "Open inflow")."""
        return np.float32(0.25 * float(self.settings.snowfall_rate) / 3600.0 * float(time))

    def boundary_volumes(self) -> tuple[float, float]:
        """(in, out) m^3: the snow the open edges let in and out since the start (0, 0 when
        the edges wrap; a device read)."""
        books = np.asarray(self.backend.to_host(self.books), dtype=np.float64)
        area = self.cover.node_area
        return float(books[0]) * area, float(books[1]) * area

    def state_dict(self) -> dict:
        host = self.backend.to_host
        return {name: np.array(host(getattr(self, name)), copy=True)
                for name in ("bubble_top", "scour", "books")}

    def load_state_dict(self, state) -> None:
        """Restore ``state_dict``'s arrays (a state saved before the transport wrapped around
        also holds 'exported', the snow that had left through the edge: not needed)."""
        columns = {}
        for name in ("bubble_top", "scour"):
            value = np.asarray(state.get(name)) if name in state else None
            if value is None or value.shape != tuple(self.scour.shape) or value.dtype != np.float32:
                raise SnowInputError("state", f"the drift state lacks '{name}' of the wind "
                                     "grid's columns", "a state saved by this version")
            columns[name] = value
        # the open edges' books (a state saved before open inflow has none: nothing crossed)
        books = np.asarray(state["books"]) if "books" in state else np.zeros(2, np.float64)
        if books.shape != (2,) or books.dtype != np.float64:
            raise SnowInputError("state", "the drift state's 'books' must be float64 (2,)",
                                 "a state saved by this version")
        for name, value in columns.items():
            getattr(self, name)[...] = self.backend.asarray(value)
        self.books[...] = self.backend.asarray(books)
