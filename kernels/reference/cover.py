"""Snow cover kernels, NumPy reference (the test oracle).

Arrays live on the heightmap grid, shape (ny, nx): ``height`` float32 (m, OPEN_HEIGHT at
open nodes), ``has_surface`` bool, ``snow_depth`` float32 (m), ``hit_counts`` int32.
Redistribution writes into a second depth array (the caller swaps the two).
"""
import numpy as np

# One home for the footprint and the deposit's units: kernels.contract.
from ..contract import (FOOTPRINT, FRESH_LIFTS, GRAIN_LANDINGS, LIFTED_EXITS,  # noqa: F401
                        MAX_LANDING_UNITS, UPWIND_SETTLES, WEIGHT_UNITS)


def deposit_scale(has_surface, volume_per_hit, node_area):
    """Depth (m) per unit footprint weight that one hit at each node adds, float32 (ny, nx):
    volume_per_hit / (node_area * sum of the footprint weights over in-grid surface nodes),
    so each hit adds exactly ``volume_per_hit`` (m^3). 0 where no weight lands. Host, once."""
    ny, nx = has_surface.shape
    padded = np.zeros((ny + 4, nx + 4), np.float64)
    padded[2:-2, 2:-2] = has_surface
    weight_sum = np.zeros((ny, nx), np.float64)
    for dj in range(5):
        for di in range(5):
            weight_sum += float(FOOTPRINT[dj, di]) * padded[dj:dj + ny, di:di + nx]
    scale = np.zeros((ny, nx), np.float64)
    np.divide(float(volume_per_hit) / float(node_area), weight_sum, out=scale, where=weight_sum > 0)
    return scale.astype(np.float32)


def landing_units(owed_units, nominal_units, landings):
    """(units each landing of this step deposits, units still owed after it), integers.

    The snowfall is imposed at the sky: each step owes ``nominal_units`` (the snowfall
    rate's volume per step, in 1/WEIGHT_UNITS of a hit) on top of what earlier steps still
    owe, and this step's ``landings`` share it equally: floor(owed / landings) units each,
    at most MAX_LANDING_UNITS; the remainder (and everything, when nothing landed) is owed
    on. So the snow lands at ``snowfall_rate`` however long the flakes stay aloft (eddies,
    blowing snow, updrafts), and where it lands is where the flakes land. The same integer
    arithmetic on every backend.

    With blowing-snow grains counted (``deposit_hits``' ``landing_kinds``) the landings
    also share the suspension's net inflow (``deposit_weight``)."""
    total = int(owed_units) + int(nominal_units)
    landings = int(landings)
    if landings <= 0:
        return 0, total
    units = min(total // landings, MAX_LANDING_UNITS)
    return units, total - units * landings


def suspension_units(total_units, fresh_touches, net_grains):
    """Units (int) the suspended drift brings onto the terrain in a step: ``net_grains``
    (the grains from upwind that settled less the grains lifted off the terrain that left
    it unsettled, weighted) at the snowfall's units per fresh touch, min(``total_units`` //
    ``fresh_touches``, MAX_LANDING_UNITS), and at least -``total_units`` (0 without fresh
    touches). A lifted grain's snow stays with the step's landings until the grain leaves;
    a grain from upwind brings its snow when it settles (docs/drift.md, "Time-lapse
    books"). What the landings cannot take (rounding, MAX_LANDING_UNITS) is not owed on."""
    total, fresh = int(total_units), int(fresh_touches)
    if fresh <= 0:
        return 0
    return max(min(total // fresh, MAX_LANDING_UNITS) * int(net_grains), -total)


def deposit_hits(hit_counts, scale, has_surface, snow_depth, hit_total, next_hit_counts,
                 weighted_total=None, ledger=None, next_ledger=None, nominal_units=0,
                 next_grain_count=None, landing_kinds=None, suspended_total=None):
    """Gather the footprints of this step's hits into ``snow_depth`` (surface nodes only)
    and zero ``next_hit_counts`` (int32, the buffer the flakes fill next step; must not
    alias ``hit_counts``, which is left as is) and ``next_grain_count`` (int32, every slot,
    when given). ``hit_total`` (int64 (1,)) gains the hits.

    With ``ledger`` (int64 (2,): units still owed, ``hit_total`` when the last deposit was
    booked) each hit weighs ``landing_units(ledger[0], nominal_units, landings)`` units
    (1/WEIGHT_UNITS of the volume ``scale`` was made for) and ``next_ledger`` receives the
    new pair (swapped buffers: every GPU thread reads the old one), and ``weighted_total``
    (int64 (1,)) gains hits times units. Without, each hit weighs WEIGHT_UNITS (a plain
    deposit, no books beyond ``hit_total``).

    With ``landing_kinds`` (the step's int32 grain counts, kernels.contract.GRAIN_LANDINGS,
    FRESH_LIFTS, UPWIND_SETTLES, LIFTED_EXITS) the landings share the snowfall and the
    suspension's net inflow (``suspension_units``: the grains from upwind that settled less
    the lifted grains that left, at the snowfall's units per fresh touch, the fresh flakes'
    landings plus their lifts). Every grain that is lifted or comes in and does not leave
    settles, so in a steady storm a landing weighs the snowfall's units per fresh touch: an
    obstacle that traps blowing snow from upwind gets it on top of the snowfall, and its
    fetch keeps the snowfall. What the grains aloft carry is not held back: while the
    suspension builds up at a storm's start the landings weigh more. ``suspended_total``
    (int64 (1,)) gains what the suspension's share added: the blowing snow's net inflow."""
    check_books(weighted_total, ledger, next_ledger, landing_kinds, suspended_total)
    hits = int(hit_counts.sum(dtype=np.int64))
    hit_total[0] += hits
    units, landings, owed, suspended = deposit_weight(hit_total, hits, ledger, nominal_units,
                                                      landing_kinds)
    factor = np.float32(np.float32(units) / np.float32(WEIGHT_UNITS))
    ny, nx = hit_counts.shape
    source = np.zeros((ny + 4, nx + 4), np.float32)
    source[2:-2, 2:-2] = ((hit_counts.astype(np.float32) * scale).astype(np.float32)
                          * factor).astype(np.float32)
    added = np.zeros((ny, nx), np.float32)
    for dj in range(5):           # fixed order: the sum is the same on every backend
        for di in range(5):
            added = (added + source[4 - dj:4 - dj + ny, 4 - di:4 - di + nx] * FOOTPRINT[dj, di]
                     ).astype(np.float32)
    snow_depth[...] = np.where(has_surface, snow_depth + added, snow_depth).astype(np.float32)
    book_deposit(units, landings, owed, hit_total, weighted_total, next_ledger, next_hit_counts,
                 next_grain_count, suspended, suspended_total)


def check_books(weighted_total, ledger, next_ledger, landing_kinds=None, suspended_total=None):
    """Raise ValueError unless ``ledger``, ``next_ledger`` and ``weighted_total`` are all
    given (the imposed snowfall) or the two ledgers are both left out (a plain deposit),
    and ``landing_kinds`` comes with ``suspended_total`` and the ledgers (or is left out)."""
    if (ledger is None) != (next_ledger is None) or (ledger is not None and weighted_total is None):
        raise ValueError("deposit_hits takes ledger, next_ledger and weighted_total together")
    if (landing_kinds is None) != (suspended_total is None) or (
            landing_kinds is not None and ledger is None):
        raise ValueError("deposit_hits takes landing_kinds and suspended_total together, "
                         "with the ledgers")


def deposit_weight(hit_total, hits, ledger, nominal_units, landing_kinds=None):
    """(units per hit, landings, units owed after, the suspension's units) of
    ``deposit_hits`` once the hits are in ``hit_total`` (host arrays)."""
    if ledger is None:
        return WEIGHT_UNITS, hits, 0, 0
    landings = int(hit_total[0]) - int(ledger[1])
    # the snowfall's share first (it alone is owed on), then the suspension's on top
    units, owed = landing_units(ledger[0], nominal_units, landings)
    if landing_kinds is None or landings <= 0:
        return units, landings, owed, 0
    total = int(ledger[0]) + int(nominal_units)
    fresh = landings - int(landing_kinds[GRAIN_LANDINGS]) + int(landing_kinds[FRESH_LIFTS])
    net = int(landing_kinds[UPWIND_SETTLES]) - int(landing_kinds[LIFTED_EXITS])
    shared = min((total + suspension_units(total, fresh, net)) // landings, MAX_LANDING_UNITS)
    return shared, landings, owed, (shared - units) * landings


def book_deposit(units, landings, owed, hit_total, weighted_total, next_ledger, next_hit_counts,
                 next_grain_count, suspended=0, suspended_total=None):
    """The books of ``deposit_hits`` (host arrays) and the zeroed buffers."""
    if next_ledger is not None:
        weighted_total[0] += np.int64(units) * np.int64(max(landings, 0))
        next_ledger[0] = np.int64(owed)
        next_ledger[1] = hit_total[0]
        if suspended_total is not None:
            suspended_total[0] += np.int64(suspended)
    next_hit_counts[...] = 0
    if next_grain_count is not None:
        next_grain_count[...] = 0


def redistribute(height, has_surface, snow_depth, threshold, min_depth, fraction, snow_out):
    """One redistribution pass from ``snow_depth`` into ``snow_out`` (both (ny, nx) float32,
    m; must not alias). Each 4-neighbour pair of surface nodes whose surface (height + snow)
    difference d exceeds ``threshold`` (tan(angle of repose) * spacing, m), with the higher
    node holding more than ``min_depth``, moves fraction * min(snow_high - min_depth,
    d - threshold) from high to low. The flux of a pair is a pure function of its two nodes,
    so the GPU and Numba builds recompute it on both sides (same bits) in one pass; here it is
    computed once per pair. Then snow_out = max(snow - outflow, 0) + inflow (fixed order)."""
    f32 = np.float32
    ny, nx = snow_depth.shape
    surface = (height + snow_depth).astype(np.float32)
    flux_x = _pair_flux(surface[:, :-1], surface[:, 1:], snow_depth[:, :-1], snow_depth[:, 1:],
                        has_surface[:, :-1] & has_surface[:, 1:],
                        f32(threshold), f32(min_depth), f32(fraction))
    flux_y = _pair_flux(surface[:-1, :], surface[1:, :], snow_depth[:-1, :], snow_depth[1:, :],
                        has_surface[:-1, :] & has_surface[1:, :],
                        f32(threshold), f32(min_depth), f32(fraction))
    # positive flux: toward the higher index
    zero = np.float32(0.0)
    fx = np.zeros((ny, nx + 1), np.float32)
    fx[:, 1:-1] = flux_x
    fy = np.zeros((ny + 1, nx), np.float32)
    fy[1:-1, :] = flux_y
    left, right, down, up = fx[:, :-1], fx[:, 1:], fy[:-1, :], fy[1:, :]
    outflow = (np.maximum(-left, zero) + np.maximum(right, zero)).astype(np.float32)
    outflow = (outflow + np.maximum(-down, zero)).astype(np.float32)
    outflow = (outflow + np.maximum(up, zero)).astype(np.float32)
    inflow = (np.maximum(left, zero) + np.maximum(-right, zero)).astype(np.float32)
    inflow = (inflow + np.maximum(down, zero)).astype(np.float32)
    inflow = (inflow + np.maximum(-up, zero)).astype(np.float32)
    # outflows come off first so float rounding cannot leave a negative depth; the max only
    # absorbs such rounding (outflow <= depth in exact arithmetic for fraction <= 0.25)
    snow_out[...] = (np.maximum(snow_depth - outflow, zero) + inflow).astype(np.float32)


def _pair_flux(surface_a, surface_b, snow_a, snow_b, both, threshold, min_depth, fraction):
    difference = (surface_a - surface_b).astype(np.float32)
    from_a = np.minimum(snow_a - min_depth, difference - threshold).astype(np.float32)
    from_b = np.minimum(snow_b - min_depth, -difference - threshold).astype(np.float32)
    flux = np.where(from_a > 0, fraction * from_a,
                    np.where(from_b > 0, -(fraction * from_b), np.float32(0.0)))
    return np.where(both, flux, np.float32(0.0)).astype(np.float32)
