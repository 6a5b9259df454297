"""Simulation settings: one flat dataclass, SI units, Z up, world space.

Every length that should scale with the scene defaults to ``None`` and is then derived
from the terrain's extent (see ``resolve``), so a 20 m garden and a 5 km valley both work.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import SnowInputError

GRAVITY = 9.81  # m/s^2

#: Per-flake terminal fall speed ranges (m/s), from the theses' table of flake properties.
TERMINAL_SPEED_RANGE = {"wet": (0.5, 1.5), "dry": (1.0, 2.0)}

#: The theses' fixed SOR schedule: one red-black sweep per relaxation factor.
SOR5_RELAXATION = (1.7, 1.5, 1.2, 1.1, 1.1)

PRESSURE_SOLVERS = ("mgpcg", "sor5")
ADVECTION_SCHEMES = ("maccormack", "semi_lagrangian")
WIND_BOUNDARIES = ("cut_cells", "voxels")
SNOW_TYPES = ("dry", "wet")
#: What lies upwind of the terrain (``upwind_fetch``): docs/drift.md, "Open inflow".
UPWIND_FETCHES = ("open_snowfield", "bare_ground", "wrap")


def _wind_keys(keys) -> tuple:
    """``keys`` as a tuple of (time_s, speed, direction_deg) float triples, or
    SnowInputError naming ``wind_keys``."""
    example = "((0.0, 5.0, 0.0), (2.0, 8.0, 30.0))"
    try:
        triples = tuple(tuple(float(x) for x in key) for key in keys)
    except (TypeError, ValueError) as error:
        raise SnowInputError("wind_keys", f"must be a sequence of (time_s, speed, direction_deg)"
                             f" numbers ({error})", example) from None
    for index, key in enumerate(triples):
        if len(key) != 3 or not all(math.isfinite(x) for x in key):
            raise SnowInputError("wind_keys", f"key {index} must be (time_s, speed, direction_deg)"
                                 f" with finite numbers, got {key!r}", example)
    return triples


@dataclass
class SnowSettings:
    """Everything a bake needs besides the terrain arrays.

    Units: metres, seconds, m/s, degrees for angles a user types.
    """

    # --- grids -----------------------------------------------------------------------
    heightmap_resolution: int = 256
    """Heightmap nodes along the longer XY side of the terrain (square spacing)."""
    wind_resolution: int = 64
    """Wind cells along the longer XY side, used when ``wind_cell_size`` is None."""
    wind_cell_size: float | None = None
    """Edge of the cubic wind cells (m). None: longer XY extent / ``wind_resolution``."""
    sky_height: float | None = None
    """Height of the wind domain above the highest terrain point (m).
    None: a quarter of the longer XY extent, at least 8 wind cells."""

    # --- wind ------------------------------------------------------------------------
    wind_speed: float = 5.0
    """Inflow wind speed (m/s) before gusts."""
    wind_direction: float = 0.0
    """Heading the wind blows toward, degrees counter-clockwise from +X (90 = toward +Y)."""
    wind_keys: tuple = ()
    """Optional keyframes ((time_s, speed_m_s, direction_deg), ...) sorted by time; when
    given they replace ``wind_speed``/``wind_direction`` (linear interpolation, held at the
    ends). The add-on samples its animated properties into these."""
    gust_strength: float = 0.3
    """Relative speed variation of gusts, 0 = steady (speed * (1 + strength * noise))."""
    gust_period: float = 2.0
    """Seconds between gust keys; the inflow is interpolated linearly between them."""
    gust_direction_jitter: float = 10.0
    """Largest deviation of a gust from the mean direction (degrees)."""
    pressure_solver: str = "mgpcg"
    """"mgpcg" (multigrid-preconditioned CG to a relative tolerance) or "sor5" (the
    theses' fixed five red-black SOR sweeps, kept for comparison)."""
    side_walls: bool = True
    """Sides the wind (before gusts) runs parallel to are free-slip walls that carry the
    gusts' crosswind (True: a uniform wind stays uniform up to them, as if the terrain
    went on) or open outflow sides at p = 0 (False: they let the gusts' crosswind out but
    not in, and the flakes and drifting snow pile or scour along them)."""
    advection: str = "maccormack"
    """Wind self-advection: "maccormack" (semi-Lagrangian plus a clamped MacCormack
    correction; keeps the speed-up over crests) or "semi_lagrangian" (first order, the
    theses' scheme; its numerical viscosity grows a slow layer over terrain)."""
    wind_boundary: str = "cut_cells"
    """How the terrain meets the wind: "cut_cells" (every face open by the share of it
    above the terrain: the wind follows slopes, with the potential flow's speed-up over a
    crest) or "voxels" (a cell is solid when its centre lies below the terrain: a
    staircase, whose corners slow the wind over crests and band it on slopes; the
    engine's model before cut cells). docs/wind_solver.md compares them."""
    wind_mixing: float = 1.0
    """Multiplier on the mixing length of the wind's eddy viscosity (nu = l^2 |S|, l =
    kappa z up to 10 m, Prandtl's mixing length): the turbulence the grid does not
    resolve mixes fast air down into wakes, so the lee of a fence or a block recovers
    (1 = the log law's length; 0 = the theses' inviscid Euler wind, whose wakes never
    close). docs/wind_solver.md."""
    pressure_tolerance: float = 1e-4
    """Relative residual ||b - A p|| / ||b|| at which the pressure solve stops."""
    pressure_max_iterations: int = 100
    """Iteration cap of the pressure solve; the diagnostics say how far it got."""
    obstacle_refresh_steps: int = 24
    """Rebuild the solid-cell mask from terrain + snow every this many steps."""
    wind_courant: float = 0.25
    """Courant number the wind is stepped at (inflow speed with the strongest gust x wind
    time step / cell size, at the time of each solve). The wind's time step is the
    simulation's ``time_step`` times a whole number of steps (one wind solve every few
    steps, up to 4) or divided into a whole number of sub-steps (up to 8), whichever comes
    closest to it from below (``snow_addon.wind.wind_schedule``). The clamped MacCormack
    advection keeps the speed-up over crests at Courant numbers up to about 0.25 and loses
    most of it above 0.4 (docs/wind_solver.md)."""

    # --- flakes ----------------------------------------------------------------------
    flake_count: int = 100_000
    snow_type: str = "dry"
    """"dry" (terminal speed 1-2 m/s) or "wet" (0.5-1.5 m/s)."""
    spiral_radius: float = 0.5
    """Largest spiral radius of the flutter motion (m); each flake draws one in (0, this)."""

    # --- snow cover ------------------------------------------------------------------
    snowfall_rate: float = 1.0
    """Snow depth added per hour on open level ground (m/h), spread over the flakes' hits."""
    angle_of_repose: float = 38.0
    """Steepest stable snow slope (degrees); steeper snow slides down-slope."""
    redistribution_min_depth: float = 0.0
    """Snow thinner than this (m) stays put."""
    redistribution_fraction: float = 0.2
    """Fraction of the unstable snow moved per step and neighbour pair, in (0, 0.25]."""

    # --- drift (wind-driven transport) ----------------------------------------------
    drift_enabled: bool = True
    """Saltation moves snow along the near-surface wind: scoured crests and windward
    slopes, drifts in the lee (docs/drift.md)."""
    drift_threshold: float | None = None
    """Threshold friction velocity u*_t (m/s) above which snow moves. None: by snow type,
    0.32 dry, 0.41 wet (Li and Pomeroy 1997)."""
    drift_strength: float = 1.0
    """Multiplier on the saltation flux (1 = Pomeroy and Gray 1990 at the bake's
    time-lapse; 0 = no drift)."""
    roughness_length: float = 5e-4
    """Aerodynamic roughness length z0 of the snow surface (m), 1e-4 to 1e-3 for snow."""
    turbulence: float = 1.0
    """Multiplier on the surface layer's eddy diffusivity K = kappa u* l that swirls the
    flakes and mixes them into the lee of obstacles (1 = the log law's; 0 = the flakes
    follow the resolved wind alone). Part of the drift: it needs drift_enabled."""

    upwind_fetch: str = "open_snowfield"
    """What lies upwind of the terrain: "open_snowfield" (the default: the terrain is a
    piece of a larger landscape; the snowfall comes in with the wind from the sky upwind,
    and blowing snow comes in across the upwind edge at the open snowfield's equilibrium
    transport at that wind; what blows off downwind leaves), "bare_ground" (the same
    snowfall, no blowing snow comes in) or "wrap" (the terrain repeats along the wind,
    what leaves downwind comes back upwind; the default before issue 36). docs/drift.md,
    "Open inflow"."""

    # --- stepping --------------------------------------------------------------------
    time_step: float = 1.0 / 24.0
    """Seconds per simulation step (a Blender frame maps to a whole number of steps)."""
    seed: int = 0
    gravity: float = GRAVITY

    def replace(self, **changes) -> "SnowSettings":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "SnowSettings":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise SnowInputError(sorted(unknown)[0], "is not a setting",
                                 "one of " + ", ".join(sorted(names)))
        values = dict(values)
        if "wind_keys" in values:
            values["wind_keys"] = _wind_keys(values["wind_keys"])
        return cls(**values)

    def validate(self) -> "SnowSettings":
        """Raise SnowInputError naming the first bad setting; return self when all are fine."""
        def positive_int(name, suggestion):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int,)) or value <= 0:
                raise SnowInputError(name, f"must be a positive whole number, got {value!r}",
                                     str(suggestion))

        def finite(name, suggestion, low=None, high=None, low_open=False, allow_none=False):
            value = getattr(self, name)
            if value is None and allow_none:
                return
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise SnowInputError(name, f"must be a number, got {value!r}", str(suggestion))
            if not math.isfinite(number):
                raise SnowInputError(name, f"must be finite, got {value!r}", str(suggestion))
            if low is not None and (number < low or (low_open and number <= low)):
                rel = ">" if low_open else ">="
                raise SnowInputError(name, f"must be {rel} {low}, got {value!r}", str(suggestion))
            if high is not None and number > high:
                raise SnowInputError(name, f"must be <= {high}, got {value!r}", str(suggestion))

        positive_int("heightmap_resolution", 256)
        if self.heightmap_resolution < 4:
            raise SnowInputError("heightmap_resolution", "must be at least 4 nodes", "256")
        positive_int("wind_resolution", 64)
        if self.wind_resolution < 4:
            raise SnowInputError("wind_resolution", "must be at least 4 cells", "64")
        finite("wind_cell_size", "None (derived from the terrain)", 0.0, low_open=True,
               allow_none=True)
        finite("sky_height", "None (derived from the terrain)", 0.0, low_open=True,
               allow_none=True)
        finite("wind_speed", 5.0, 0.0, 200.0)
        finite("wind_direction", 0.0)
        finite("gust_strength", 0.3, 0.0, 1.0)
        finite("gust_period", 2.0, 0.0, low_open=True)
        finite("gust_direction_jitter", 10.0, 0.0, 180.0)
        keys = _wind_keys(self.wind_keys)
        for index, key in enumerate(keys):
            if key[1] < 0:
                raise SnowInputError("wind_keys", f"key {index} has a negative speed", "0 or more")
            if index and key[0] < keys[index - 1][0]:
                raise SnowInputError("wind_keys", "keys must be sorted by time",
                                     "sorted((t, speed, dir) ...)")
        if self.pressure_solver not in PRESSURE_SOLVERS:
            raise SnowInputError("pressure_solver", f"unknown solver {self.pressure_solver!r}",
                                 " or ".join(repr(s) for s in PRESSURE_SOLVERS))
        if not isinstance(self.side_walls, bool):
            raise SnowInputError("side_walls", f"must be True or False, got {self.side_walls!r}",
                                 "False")
        if self.advection not in ADVECTION_SCHEMES:
            raise SnowInputError("advection", f"unknown scheme {self.advection!r}",
                                 " or ".join(repr(s) for s in ADVECTION_SCHEMES))
        if self.wind_boundary not in WIND_BOUNDARIES:
            raise SnowInputError("wind_boundary", f"unknown boundary {self.wind_boundary!r}",
                                 " or ".join(repr(s) for s in WIND_BOUNDARIES))
        finite("wind_mixing", 1.0, 0.0, 10.0)
        finite("pressure_tolerance", 1e-4, 0.0, 0.5, low_open=True)
        positive_int("pressure_max_iterations", 100)
        positive_int("obstacle_refresh_steps", 24)
        finite("wind_courant", 0.25, 0.0, 2.0, low_open=True)
        positive_int("flake_count", 100_000)
        if self.snow_type not in SNOW_TYPES:
            raise SnowInputError("snow_type", f"unknown snow type {self.snow_type!r}",
                                 "'dry' or 'wet'")
        finite("spiral_radius", 0.5, 0.0)
        finite("snowfall_rate", 1.0, 0.0)
        finite("angle_of_repose", 38.0, 0.0, 89.0, low_open=True)
        finite("redistribution_min_depth", 0.0, 0.0)
        finite("redistribution_fraction", 0.2, 0.0, 0.25)
        if not isinstance(self.drift_enabled, bool):
            raise SnowInputError("drift_enabled", f"must be True or False, got "
                                 f"{self.drift_enabled!r}", "True")
        finite("drift_threshold", "None (by snow type) or 0.32", 0.0, 5.0, allow_none=True)
        finite("drift_strength", 1.0, 0.0, 1000.0)
        finite("roughness_length", 5e-4, 0.0, low_open=True)
        finite("turbulence", 1.0, 0.0, 100.0)
        if not isinstance(self.upwind_fetch, str) or self.upwind_fetch not in UPWIND_FETCHES:
            raise SnowInputError("upwind_fetch", f"unknown upwind fetch {self.upwind_fetch!r}",
                                 " or ".join(repr(f) for f in UPWIND_FETCHES))
        finite("time_step", 1.0 / 24.0, 0.0, 10.0, low_open=True)
        finite("gravity", GRAVITY, 0.0, low_open=True)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (0 <= self.seed < 2**32):
            raise SnowInputError("seed", f"must be a whole number in [0, 2**32), got {self.seed!r}", "0")
        return self

    @property
    def terminal_speed_range(self) -> tuple[float, float]:
        return TERMINAL_SPEED_RANGE[self.snow_type]
