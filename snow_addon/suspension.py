"""The open snowfield's suspended blowing snow: what crosses the upwind edge of a terrain
that is a piece of a larger landscape (``upwind_fetch`` "open_snowfield", issue 36).

Over an endless, level snowfield in a steady storm the suspension is in equilibrium: a
landing flake is lifted again with the chance p = strength (1 - u*_t^2 / u*^2) of the
fetch's friction velocity (kernels.reference.flakes.lift_share), so for every snowfall
flake that lands p / (1 - p) grains are lifted (the flake, then each grain that lands
again), and each lifted grain flies a mean distance D downwind before it lands. The flux
across a line across the wind is then p / (1 - p) * D grains per metre of the line for
every snowfall flake per square metre. D and the heights at which the grains cross the
line come from the grains' own flights, stepped with the flakes' own rules over level
ground in the storm's wind (``grain_flights``: over open ground the resolved wind is the
inflow's at every height, with the surface layer's eddies of
kernels.reference.flakes.eddy_velocity), once per wind speed. So the inflow is the
model's own equilibrium at the inflow's friction velocity and the snow type's threshold,
with no feedback from inside the terrain (the probe before it let in what crossed it a
step earlier, a loop that wandered with few flakes).

Model and figures: docs/drift.md, "The suspension from upwind".
"""
from __future__ import annotations

import math

import numpy as np

from ..kernels.contract import INFLOW_HEIGHT_BINS, MAX_GRAIN_WEIGHT_EXPONENT
from .backend import select_backend

FLIGHT_SAMPLES = 1024
"""Grain flights stepped per wind speed (the mean distance to about 3 %)."""
LONGEST_FLIGHT = 120.0
"""s: a flight still aloft after this long ends there (the wind grid's lid keeps a grain
within the eddies' reach: at 16 m/s on 3 m cells 5 % of flights last that long)."""
SPEED_STEP = 0.25
"""m/s: the flights are stepped at multiples of this and interpolated between (wind keys
change the speed every step)."""
HEIGHT_UNITS = 1 << 20
"""The entering grains' height histogram sums to about this (int32 counts)."""


def grain_flights(backend, speed: float, ustar: float, cell_size: float, column: float,
                  dt: float, eddy_scale: float, mixing_height: float, eddy_steps: int,
                  grain_speed: float, gravity: float) -> tuple[float, tuple[int, ...]]:
    """(mean distance downwind a lifted grain flies before it lands, m; the heights at
    which such grains cross a line across the wind, int counts per whole wind cell above
    the ground, INFLOW_HEIGHT_BINS of them, the last taking the rest) over level ground
    ``column`` m below the wind grid's top in a wind of ``speed`` m/s at every height,
    u* ``ustar`` m/s: FLIGHT_SAMPLES grains lifted to a uniform height within a cell
    (``cell_size`` m) with the wind's velocity, stepped every ``dt`` s with the flakes'
    drag (terminal speed ``grain_speed``) and eddies until they land or LONGEST_FLIGHT
    (the flights kernel of ``backend``, a snow_addon.backend.Backend: the same bits on
    each, kernels.reference.flakes.grain_flights). Deterministic (seed 0; the same on
    every machine)."""
    xp = backend.xp
    travelled = xp.empty(FLIGHT_SAMPLES, xp.float64)     # the kernel writes every value
    crossings = xp.empty((FLIGHT_SAMPLES, INFLOW_HEIGHT_BINS), xp.float64)
    backend.kernel_module("flakes").grain_flights(
        speed, ustar, cell_size, column, dt, eddy_scale, mixing_height, eddy_steps,
        grain_speed, gravity, int(LONGEST_FLIGHT / float(dt)), travelled, crossings)
    travelled, crossings = backend.to_host(travelled), backend.to_host(crossings)
    # exactly rounded sums: the same whatever order a build's threads summed the grains in
    distance = math.fsum(travelled.tolist()) / FLIGHT_SAMPLES
    per_cell = np.array([math.fsum(column_sums) for column_sums in crossings.T.tolist()])
    heights = np.floor(per_cell / math.fsum(per_cell.tolist()) * HEIGHT_UNITS).astype(np.int64)
    return distance, tuple(int(value) for value in heights)


def lift_chance(ustar: float, threshold: float, strength: float) -> float:
    """p: the chance that snow landing on open ground at friction velocity ``ustar`` is
    lifted again (kernels.reference.flakes.lift_share; 0 at or below ``threshold``)."""
    if ustar <= threshold:
        return 0.0
    return float(strength) * (1.0 - (threshold / ustar) ** 2)


def entering_share(grains_per_flake: float) -> tuple[float, int]:
    """(chance that a respawning flake enters as a grain across the upwind edge, the
    exponent k of the 2^k grains each stands for) so that 2^k * entering / snowfall
    flakes = ``grains_per_flake``: k the smallest (at most MAX_GRAIN_WEIGHT_EXPONENT) with
    q = grains_per_flake / 2^k <= 1, the chance q / (1 + q) (at most 1/2: at least half the
    respawning flakes stay snowfall). (0, 0) when nothing enters."""
    if not grains_per_flake > 0.0:
        return 0.0, 0
    exponent = 0
    while exponent < MAX_GRAIN_WEIGHT_EXPONENT and grains_per_flake > float(1 << exponent):
        exponent += 1
    q = min(grains_per_flake / float(1 << exponent), 1.0)
    return q / (1.0 + q), exponent


class OpenSnowfieldSuspension:
    """The grains that enter across the upwind edge per respawning flake for one
    simulation (snow_addon.drift.SnowDrift builds it with an open snowfield upwind; the
    grains' flights run on ``backend``, a snow_addon.backend.Backend, by default the NumPy
    reference's)."""

    def __init__(self, settings, grid, column: float, ustar_per_speed: float,
                 threshold: float, eddy_scale: float, mixing_height: float, eddy_steps: int,
                 grain_speed: float, backend=None):
        self.settings, self.grid = settings, grid
        self.backend = select_backend("numpy") if backend is None else backend
        #: the flights flown so far: speed (a multiple of SPEED_STEP, m/s) -> grain_flights
        self.flown: dict[float, tuple[float, tuple[int, ...]]] = {}
        #: m from the terrain's mean height to the wind grid's top
        self.column = max(float(column), float(grid.cell_size))
        self.ustar_per_speed, self.threshold = float(ustar_per_speed), float(threshold)
        self._flight_constants = (float(grid.cell_size), self.column, float(settings.time_step),
                                  float(eddy_scale), float(mixing_height), int(eddy_steps),
                                  float(grain_speed), float(settings.gravity))

    def _flights(self, speed: float) -> tuple[float, np.ndarray]:
        """(mean flight m, heights float64 (INFLOW_HEIGHT_BINS,)) at ``speed`` m/s, linear
        between the multiples of SPEED_STEP around it (grain_flights)."""
        low = math.floor(speed / SPEED_STEP) * SPEED_STEP
        weight = (speed - low) / SPEED_STEP
        result_distance, result_heights = 0.0, np.zeros(INFLOW_HEIGHT_BINS)
        for node, share in ((low, 1.0 - weight), (low + SPEED_STEP, weight)):
            if share <= 1e-9:
                continue
            if node not in self.flown:
                self.flown[node] = grain_flights(self.backend, node, self.ustar_per_speed * node,
                                                 *self._flight_constants)
            distance, heights = self.flown[node]
            result_distance += share * distance
            result_heights += share * np.asarray(heights, np.float64)
        return result_distance, result_heights

    def _lift(self, speed: float) -> float:
        """p at the open fetch for the wind ``speed`` m/s (at most 0.99: every landing
        lifted again would never settle)."""
        return min(lift_chance(self.ustar_per_speed * speed, self.threshold,
                               float(self.settings.drift_strength)), 0.99)

    def inflow(self, speed: float, along_length: float, margin: float
               ) -> tuple[float, int, np.ndarray]:
        """(chance a respawning flake enters as a grain, its weight exponent, the heights'
        int32 histogram) for the storm's wind before gusts ``speed`` m/s, the terrain
        ``along_length`` m along the wind and the snowfall's targets spread ``margin`` m
        beyond both of its ends (FlakeSystem.inflow: the snowfall flakes per square metre
        are the respawns over that longer strip)."""
        p = self._lift(speed)
        if p <= 0.0 or speed <= 0.0:
            return 0.0, 0, np.zeros(INFLOW_HEIGHT_BINS, np.int32)
        distance, heights = self._flights(speed)
        # per snowfall flake that lands on open ground p / (1 - p) grains are lifted (it
        # and every grain that lands again, each with chance p), each flying ``distance``
        per_flake = p / (1.0 - p) * distance / (float(along_length) + 2.0 * float(margin))
        share, exponent = entering_share(per_flake)
        return share, exponent, np.floor(heights).astype(np.int32)
