"""Snow cover kernels, Numba build (same names and arguments as kernels.reference.cover)."""
import numba
import numpy as np

from ..contract import FOOTPRINT, MAX_LANDING_UNITS, WEIGHT_UNITS  # noqa: F401
# the deposit's host-side books are the reference's own
from ..reference.cover import (book_deposit, check_books, deposit_scale,  # noqa: F401
                               deposit_weight, landing_units)


@numba.njit(parallel=True, cache=True, nogil=True)
def _deposit(hit_counts, scale, has_surface, snow_depth, footprint, factor, source):
    ny, nx = hit_counts.shape
    # each node's deposit once (the gather below reads it 25 times)
    for j in numba.prange(ny):
        for i in range(nx):
            source[j, i] = np.float32(np.float32(np.float32(hit_counts[j, i]) * scale[j, i])
                                      * factor)
    # a row's nodes gather side by side (i innermost): each node adds its 25 taps in the
    # order (dj, di) as the reference, and the nodes' chains of additions overlap
    for j in numba.prange(ny):
        added = np.zeros(nx, np.float32)
        for dj in range(5):
            sj = j + 2 - dj
            for di in range(5):
                weight = footprint[dj, di]
                for i in range(nx):
                    si = i + 2 - di
                    if 0 <= sj < ny and 0 <= si < nx:
                        tap = source[sj, si]
                    else:
                        tap = np.float32(0.0)
                    added[i] = np.float32(added[i] + np.float32(tap * weight))
        for i in range(nx):
            if has_surface[j, i]:
                snow_depth[j, i] = np.float32(snow_depth[j, i] + added[i])


def deposit_hits(hit_counts, scale, has_surface, snow_depth, hit_total, next_hit_counts,
                 weighted_total=None, ledger=None, next_ledger=None, nominal_units=0,
                 next_grain_count=None, landing_kinds=None, suspended_total=None):
    """See kernels.reference.cover.deposit_hits."""
    check_books(weighted_total, ledger, next_ledger, landing_kinds, suspended_total)
    hits = int(hit_counts.sum(dtype=np.int64))
    hit_total[0] += hits
    units, landings, owed, suspended = deposit_weight(hit_total, hits, ledger, nominal_units,
                                                      landing_kinds)
    _deposit(hit_counts, scale, has_surface, snow_depth, FOOTPRINT,
             np.float32(np.float32(units) / np.float32(WEIGHT_UNITS)),
             np.empty(hit_counts.shape, np.float32))
    book_deposit(units, landings, owed, hit_total, weighted_total, next_ledger, next_hit_counts,
                 next_grain_count, suspended, suspended_total)


@numba.njit(inline="always", cache=True)
def _pair_flux(surface_a, surface_b, snow_a, snow_b, threshold, min_depth, fraction):
    difference = np.float32(surface_a - surface_b)
    from_a = min(np.float32(snow_a - min_depth), np.float32(difference - threshold))
    if from_a > 0:
        return np.float32(fraction * from_a)
    from_b = min(np.float32(snow_b - min_depth), np.float32(-difference - threshold))
    if from_b > 0:
        return np.float32(-np.float32(fraction * from_b))
    return np.float32(0.0)


@numba.njit(inline="always", cache=True)
def _pair(height, has_surface, snow_depth, ja, ia, jb, ib, threshold, min_depth, fraction):
    """Flux from node a to node b (b has the higher index): the same bits from either side."""
    if not (has_surface[ja, ia] and has_surface[jb, ib]):
        return np.float32(0.0)
    surface_a = np.float32(height[ja, ia] + snow_depth[ja, ia])
    surface_b = np.float32(height[jb, ib] + snow_depth[jb, ib])
    return _pair_flux(surface_a, surface_b, snow_depth[ja, ia], snow_depth[jb, ib],
                      threshold, min_depth, fraction)


@numba.njit(parallel=True, cache=True, nogil=True)
def redistribute(height, has_surface, snow_depth, threshold, min_depth, fraction, snow_out):
    """See kernels.reference.cover.redistribute (each node recomputes its four pair fluxes)."""
    ny, nx = snow_depth.shape
    t, m, k = np.float32(threshold), np.float32(min_depth), np.float32(fraction)
    zero = np.float32(0.0)
    for j in numba.prange(ny):
        for i in range(nx):
            left = _pair(height, has_surface, snow_depth, j, i - 1, j, i, t, m, k) if i > 0 else zero
            right = _pair(height, has_surface, snow_depth, j, i, j, i + 1, t, m, k) if i + 1 < nx else zero
            down = _pair(height, has_surface, snow_depth, j - 1, i, j, i, t, m, k) if j > 0 else zero
            up = _pair(height, has_surface, snow_depth, j, i, j + 1, i, t, m, k) if j + 1 < ny else zero
            outflow = np.float32(max(-left, zero) + max(right, zero))
            outflow = np.float32(outflow + max(-down, zero))
            outflow = np.float32(outflow + max(up, zero))
            inflow = np.float32(max(left, zero) + max(-right, zero))
            inflow = np.float32(inflow + max(down, zero))
            inflow = np.float32(inflow + max(-up, zero))
            snow_out[j, i] = np.float32(max(np.float32(snow_depth[j, i] - outflow), zero) + inflow)
