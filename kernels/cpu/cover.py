"""Snow cover kernels, Numba build (same names and arguments as kernels.reference.cover)."""
import numba
import numpy as np

from ..reference.cover import FOOTPRINT, deposit_scale  # noqa: F401  (host-side, once per bake)


@numba.njit(parallel=True, cache=True)
def _deposit(hit_counts, scale, has_surface, snow_depth, footprint):
    ny, nx = hit_counts.shape
    for j in numba.prange(ny):
        for i in range(nx):
            if not has_surface[j, i]:
                continue
            added = np.float32(0.0)
            for dj in range(5):
                sj = j + 2 - dj
                for di in range(5):
                    si = i + 2 - di
                    if 0 <= sj < ny and 0 <= si < nx:
                        source = np.float32(np.float32(hit_counts[sj, si]) * scale[sj, si])
                    else:
                        source = np.float32(0.0)
                    added = np.float32(added + np.float32(source * footprint[dj, di]))
            snow_depth[j, i] = np.float32(snow_depth[j, i] + added)


def deposit_hits(hit_counts, scale, has_surface, snow_depth, hit_total):
    """See kernels.reference.cover.deposit_hits."""
    _deposit(hit_counts, scale, has_surface, snow_depth, FOOTPRINT)
    hit_total[0] += np.int64(hit_counts.sum(dtype=np.int64))


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


@numba.njit(parallel=True, cache=True)
def redistribution_fluxes(height, has_surface, snow_depth, threshold, min_depth, fraction,
                          flux_x, flux_y):
    """See kernels.reference.cover.redistribution_fluxes."""
    ny, nx = snow_depth.shape
    t, m, k = np.float32(threshold), np.float32(min_depth), np.float32(fraction)
    for j in numba.prange(ny):
        for i in range(nx):
            here = np.float32(height[j, i] + snow_depth[j, i])
            if i + 1 < nx:
                flux = np.float32(0.0)
                if has_surface[j, i] and has_surface[j, i + 1]:
                    flux = _pair_flux(here, np.float32(height[j, i + 1] + snow_depth[j, i + 1]),
                                      snow_depth[j, i], snow_depth[j, i + 1], t, m, k)
                flux_x[j, i] = flux
            if j + 1 < ny:
                flux = np.float32(0.0)
                if has_surface[j, i] and has_surface[j + 1, i]:
                    flux = _pair_flux(here, np.float32(height[j + 1, i] + snow_depth[j + 1, i]),
                                      snow_depth[j, i], snow_depth[j + 1, i], t, m, k)
                flux_y[j, i] = flux


@numba.njit(parallel=True, cache=True)
def apply_fluxes(flux_x, flux_y, snow_depth):
    """See kernels.reference.cover.apply_fluxes."""
    ny, nx = snow_depth.shape
    zero = np.float32(0.0)
    for j in numba.prange(ny):
        for i in range(nx):
            left = flux_x[j, i - 1] if i > 0 else zero
            right = flux_x[j, i] if i + 1 < nx else zero
            down = flux_y[j - 1, i] if j > 0 else zero
            up = flux_y[j, i] if j + 1 < ny else zero
            outflow = np.float32(max(-left, zero) + max(right, zero))
            outflow = np.float32(outflow + max(-down, zero))
            outflow = np.float32(outflow + max(up, zero))
            inflow = np.float32(max(left, zero) + max(-right, zero))
            inflow = np.float32(inflow + max(down, zero))
            inflow = np.float32(inflow + max(-up, zero))
            snow_depth[j, i] = np.float32(max(np.float32(snow_depth[j, i] - outflow), zero) + inflow)
