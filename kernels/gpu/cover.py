"""Snow cover kernels, CUDA build through CuPy (same names, arguments and float32 operation
order as kernels.reference.cover). One thread per heightmap node."""
import numpy as np

from ..reference.cover import FOOTPRINT, deposit_scale  # noqa: F401  (host-side, once per bake)
from .common import compile_module

SOURCE = r"""
__constant__ float FOOTPRINT[25] = {""" + ", ".join(repr(float(x)) + "f" for x in FOOTPRINT.ravel()) + r"""};

// Gather every hit's footprint into the surface nodes; add the hit count to *hit_total.
extern "C" __global__ void deposit_hits(const int* __restrict__ hit_counts,
        const float* __restrict__ scale, const bool* __restrict__ has_surface,
        float* __restrict__ snow_depth, unsigned long long* __restrict__ hit_total, int nx, int ny) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int own_hits = 0;
    if (n < nx * ny) {
        own_hits = hit_counts[n];
        int j = n / nx, i = n - j * nx;
        if (has_surface[n]) {
            float added = 0.0f;
            for (int dj = 0; dj < 5; ++dj) {
                int sj = j + 2 - dj;
                for (int di = 0; di < 5; ++di) {
                    int si = i + 2 - di;
                    float source = 0.0f;
                    if (sj >= 0 && sj < ny && si >= 0 && si < nx) {
                        int s = sj * nx + si;
                        source = (float)__ldg(hit_counts + s) * __ldg(scale + s);
                    }
                    added = added + source * FOOTPRINT[dj * 5 + di];
                }
            }
            snow_depth[n] = snow_depth[n] + added;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        own_hits += __shfl_down_sync(0xffffffffu, own_hits, offset);
    if ((threadIdx.x & 31) == 0 && own_hits != 0)
        atomicAdd(hit_total, (unsigned long long)(long long)own_hits);
}

__device__ __forceinline__ float pair_flux(float surface_a, float surface_b, float snow_a,
        float snow_b, float t, float m, float k) {
    float difference = surface_a - surface_b;
    float from_a = fminf(snow_a - m, difference - t);
    if (from_a > 0.0f) return k * from_a;
    float from_b = fminf(snow_b - m, -difference - t);
    if (from_b > 0.0f) return -(k * from_b);
    return 0.0f;
}

extern "C" __global__ void redistribution_fluxes(const float* __restrict__ height,
        const bool* __restrict__ has_surface, const float* __restrict__ snow_depth,
        float t, float m, float k, float* __restrict__ flux_x, float* __restrict__ flux_y,
        int nx, int ny) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= nx * ny) return;
    int j = n / nx, i = n - j * nx;
    float here = height[n] + snow_depth[n];
    if (i + 1 < nx) {
        float flux = 0.0f;
        if (has_surface[n] && has_surface[n + 1])
            flux = pair_flux(here, height[n + 1] + snow_depth[n + 1], snow_depth[n], snow_depth[n + 1], t, m, k);
        flux_x[j * (nx - 1) + i] = flux;
    }
    if (j + 1 < ny) {
        float flux = 0.0f;
        if (has_surface[n] && has_surface[n + nx])
            flux = pair_flux(here, height[n + nx] + snow_depth[n + nx], snow_depth[n], snow_depth[n + nx], t, m, k);
        flux_y[n] = flux;
    }
}

extern "C" __global__ void apply_fluxes(const float* __restrict__ flux_x, const float* __restrict__ flux_y,
                                        float* __restrict__ snow_depth, int nx, int ny) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= nx * ny) return;
    int j = n / nx, i = n - j * nx;
    float left = i > 0 ? flux_x[j * (nx - 1) + i - 1] : 0.0f;
    float right = i + 1 < nx ? flux_x[j * (nx - 1) + i] : 0.0f;
    float down = j > 0 ? flux_y[n - nx] : 0.0f;
    float up = j + 1 < ny ? flux_y[n] : 0.0f;
    float outflow = fmaxf(-left, 0.0f) + fmaxf(right, 0.0f);
    outflow = outflow + fmaxf(-down, 0.0f);
    outflow = outflow + fmaxf(up, 0.0f);
    float inflow = fmaxf(left, 0.0f) + fmaxf(-right, 0.0f);
    inflow = inflow + fmaxf(down, 0.0f);
    inflow = inflow + fmaxf(-up, 0.0f);
    snow_depth[n] = fmaxf(snow_depth[n] - outflow, 0.0f) + inflow;
}
"""

BLOCK = 256


def _launch(name, shape, arguments):
    ny, nx = shape
    kernel = compile_module(SOURCE).get_function(name)
    kernel(((nx * ny + BLOCK - 1) // BLOCK,), (BLOCK,), tuple(arguments) + (np.int32(nx), np.int32(ny)))


def deposit_hits(hit_counts, scale, has_surface, snow_depth, hit_total):
    """See kernels.reference.cover.deposit_hits (the hit total is summed on the device)."""
    _launch("deposit_hits", hit_counts.shape, (hit_counts, scale, has_surface, snow_depth, hit_total))


def redistribution_fluxes(height, has_surface, snow_depth, threshold, min_depth, fraction,
                          flux_x, flux_y):
    """See kernels.reference.cover.redistribution_fluxes."""
    _launch("redistribution_fluxes", snow_depth.shape,
            (height, has_surface, snow_depth, np.float32(threshold), np.float32(min_depth),
             np.float32(fraction), flux_x, flux_y))


def apply_fluxes(flux_x, flux_y, snow_depth):
    """See kernels.reference.cover.apply_fluxes."""
    _launch("apply_fluxes", snow_depth.shape, (flux_x, flux_y, snow_depth))
