"""Snow cover kernels, CUDA build through CuPy (same names, arguments and float32 operation
order as kernels.reference.cover). One thread per heightmap node."""
import functools

import numpy as np

from ..contract import (FOOTPRINT, FRESH_LIFTS, GRAIN_LANDINGS, LIFTED_EXITS,
                        MAX_LANDING_UNITS, UPWIND_SETTLES, WEIGHT_UNITS, cuda_defines)
# the deposit's host-side books are the reference's own
from ..reference.cover import check_books, deposit_scale  # noqa: F401
from .common import compile_module

BLOCK = 256
#: CUDA's limit on a grid's y size: the most heightmap rows one launch takes (the default
#: of the kernels' ``max_grid_rows``).
MAX_GRID_ROWS = 65535

SOURCE = cuda_defines(BLOCK=BLOCK, WEIGHT_UNITS=np.int64(WEIGHT_UNITS),
                      MAX_LANDING_UNITS=np.int64(MAX_LANDING_UNITS),
                      GRAIN_LANDINGS=GRAIN_LANDINGS, FRESH_LIFTS=FRESH_LIFTS,
                      UPWIND_SETTLES=UPWIND_SETTLES, LIFTED_EXITS=LIFTED_EXITS) + r"""
__constant__ float FOOTPRINT[25] = {""" + ", ".join(repr(float(x)) + "f" for x in FOOTPRINT.ravel()) + r"""};

// Add this step's hits to *hit_total: one integer atomic per block (a per-warp atomic on
// one address serialises in L2). Grid: (x blocks, ny rows).
extern "C" __global__ void __launch_bounds__(BLOCK) count_hits(const int* __restrict__ hit_counts,
        unsigned long long* __restrict__ hit_total, int row0, int nx, int ny) {
    __shared__ int warp_hits[BLOCK / 32];
    int i = blockIdx.x * BLOCK + threadIdx.x, j = row0 + blockIdx.y;
    int own_hits = i < nx ? __ldg(hit_counts + j * nx + i) : 0;
    for (int offset = 16; offset > 0; offset >>= 1)
        own_hits += __shfl_down_sync(0xffffffffu, own_hits, offset);
    if ((threadIdx.x & 31) == 0) warp_hits[threadIdx.x >> 5] = own_hits;
    __syncthreads();
    if (threadIdx.x == 0) {
        int block_hits = 0;
        for (int k = 0; k < BLOCK / 32; ++k) block_hits += warp_hits[k];
        if (block_hits != 0) atomicAdd(hit_total, (unsigned long long)(long long)block_hits);
    }
}

// Gather every hit's footprint into the surface nodes and zero next_hit_counts (the buffer
// the flakes fill next step). With imposed, each hit weighs landing_units (kernels.reference
// .cover) units: ledger = (units owed, hit_total at the last deposit) is read by every
// thread, thread 0 of the first launch writes next_ledger and *weighted_total; else
// WEIGHT_UNITS. With use_kinds the landings also share the suspension's net inflow
// (reference suspension_units and deposit_weight: the grains from upwind that settled less
// the lifted grains that left, at the snowfall's units per fresh touch, the landings less
// the grains that settled plus the fresh lifts; the snowfall alone is owed on), and that
// thread adds what the suspension added to
// *suspended_total. It also zeroes the
// grain_slots of next_grain_count. Runs after count_hits. Grid: (x blocks, ny rows).
extern "C" __global__ void __launch_bounds__(BLOCK) deposit_hits(const int* __restrict__ hit_counts,
        const float* __restrict__ scale, const bool* __restrict__ has_surface,
        float* __restrict__ snow_depth, const unsigned long long* __restrict__ hit_total,
        int* __restrict__ next_hit_counts, unsigned long long* __restrict__ weighted_total,
        const long long* __restrict__ ledger, long long* __restrict__ next_ledger,
        long long nominal_units, int imposed, int* __restrict__ next_grain_count,
        int grain_slots, const int* __restrict__ kinds, int use_kinds,
        long long* __restrict__ suspended_total, int row0, int nx, int ny) {
    long long units = WEIGHT_UNITS;
    if (imposed) {
        long long landings = (long long)hit_total[0] - ledger[1];
        long long total = ledger[0] + nominal_units;
        long long suspended = 0;
        if (use_kinds) {
            long long fresh = landings - (long long)kinds[GRAIN_LANDINGS]
                              + (long long)kinds[FRESH_LIFTS];
            long long net = (long long)kinds[UPWIND_SETTLES] - (long long)kinds[LIFTED_EXITS];
            if (fresh > 0) {
                long long per_touch = total / fresh;    // total >= 0: floor
                if (per_touch > MAX_LANDING_UNITS) per_touch = MAX_LANDING_UNITS;
                suspended = per_touch * net;
                if (suspended < -total) suspended = -total;
            }
        }
        // the snowfall's share first (it alone is owed on), then the suspension's on top
        units = 0;
        long long shared = 0;
        if (landings > 0) {
            units = total / landings;
            if (units > MAX_LANDING_UNITS) units = MAX_LANDING_UNITS;
            shared = (total + suspended) / landings;
            if (shared > MAX_LANDING_UNITS) shared = MAX_LANDING_UNITS;
        }
        if (row0 == 0 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
            next_ledger[0] = total - units * (landings > 0 ? landings : 0);
            next_ledger[1] = (long long)hit_total[0];
            if (use_kinds && landings > 0) suspended_total[0] += (shared - units) * landings;
        }
        if (use_kinds) units = shared;
        if (row0 == 0 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && landings > 0)
            weighted_total[0] += (unsigned long long)(units * landings);
    }
    if (row0 == 0 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        for (int slot = 0; slot < grain_slots; ++slot) next_grain_count[slot] = 0;
    const float factor = (float)units / (float)WEIGHT_UNITS;
    int i = blockIdx.x * BLOCK + threadIdx.x, j = row0 + blockIdx.y;
    if (i >= nx) return;
    int n = j * nx + i;
    next_hit_counts[n] = 0;
    if (!has_surface[n]) return;
    float added = 0.0f;
    #pragma unroll
    for (int dj = 0; dj < 5; ++dj) {
        int sj = j + 2 - dj;
        #pragma unroll
        for (int di = 0; di < 5; ++di) {
            int si = i + 2 - di;
            float source = 0.0f;
            if (sj >= 0 && sj < ny && si >= 0 && si < nx) {
                int s = sj * nx + si;
                source = ((float)__ldg(hit_counts + s) * __ldg(scale + s)) * factor;
            }
            added = added + source * FOOTPRINT[dj * 5 + di];
        }
    }
    snow_depth[n] = snow_depth[n] + added;
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

// Flux from node a to node b (b the higher index), recomputed identically by both nodes.
__device__ __forceinline__ float node_pair_flux(const float* __restrict__ height,
        const bool* __restrict__ has_surface, const float* __restrict__ snow_depth, int a, int b,
        float t, float m, float k) {
    if (!(has_surface[a] && has_surface[b])) return 0.0f;
    float snow_a = snow_depth[a], snow_b = snow_depth[b];
    return pair_flux(height[a] + snow_a, height[b] + snow_b, snow_a, snow_b, t, m, k);
}

// One pass: every node recomputes the fluxes of its four pairs and applies them (no flux
// arrays, one launch; both sides of a pair get the same bits, so snow is conserved).
extern "C" __global__ void __launch_bounds__(BLOCK) redistribute(const float* __restrict__ height,
        const bool* __restrict__ has_surface, const float* __restrict__ snow_depth,
        float t, float m, float k, float* __restrict__ snow_out, int row0, int nx, int ny) {
    int i = blockIdx.x * BLOCK + threadIdx.x, j = row0 + blockIdx.y;
    if (i >= nx) return;
    int n = j * nx + i;
    float left = i > 0 ? node_pair_flux(height, has_surface, snow_depth, n - 1, n, t, m, k) : 0.0f;
    float right = i + 1 < nx ? node_pair_flux(height, has_surface, snow_depth, n, n + 1, t, m, k) : 0.0f;
    float down = j > 0 ? node_pair_flux(height, has_surface, snow_depth, n - nx, n, t, m, k) : 0.0f;
    float up = j + 1 < ny ? node_pair_flux(height, has_surface, snow_depth, n, n + nx, t, m, k) : 0.0f;
    float outflow = fmaxf(-left, 0.0f) + fmaxf(right, 0.0f);
    outflow = outflow + fmaxf(-down, 0.0f);
    outflow = outflow + fmaxf(up, 0.0f);
    float inflow = fmaxf(left, 0.0f) + fmaxf(-right, 0.0f);
    inflow = inflow + fmaxf(down, 0.0f);
    inflow = inflow + fmaxf(-up, 0.0f);
    snow_out[n] = fmaxf(snow_depth[n] - outflow, 0.0f) + inflow;
}
"""


@functools.lru_cache(maxsize=None)
def _kernel(source, name):
    return compile_module(source).get_function(name)


def _launch(name, shape, arguments, max_grid_rows):
    """One thread per node: blocks of BLOCK along x, one grid row per heightmap row (in
    launches of at most ``max_grid_rows`` rows: 1 to MAX_GRID_ROWS, CUDA's limit on the
    grid's y size)."""
    if not (isinstance(max_grid_rows, (int, np.integer)) and not isinstance(max_grid_rows, bool)
            and 1 <= max_grid_rows <= MAX_GRID_ROWS):
        raise ValueError(f"max_grid_rows must be a whole number from 1 to {MAX_GRID_ROWS}, "
                         f"got {max_grid_rows!r}")
    ny, nx = shape
    kernel = _kernel(SOURCE, name)
    for row0 in range(0, ny, max_grid_rows):
        rows = min(max_grid_rows, ny - row0)
        kernel(((nx + BLOCK - 1) // BLOCK, rows), (BLOCK,),
               tuple(arguments) + (np.int32(row0), np.int32(nx), np.int32(ny)))


def deposit_hits(hit_counts, scale, has_surface, snow_depth, hit_total, next_hit_counts,
                 weighted_total=None, ledger=None, next_ledger=None, nominal_units=0,
                 next_grain_count=None, landing_kinds=None, suspended_total=None, *,
                 max_grid_rows=MAX_GRID_ROWS):
    """See kernels.reference.cover.deposit_hits: two launches, the hit count then the
    deposit, which computes the landings' units on the device (no host read). Stand-ins
    for the buffers not given are never read or written, except next_hit_counts[0], which
    the kernel zeroes in place of ``next_grain_count`` (it zeroes it anyway).
    ``max_grid_rows`` (this build only, keyword-only): the most heightmap rows a launch
    takes; a taller heightmap is launched in bands of rows (the same bits)."""
    check_books(weighted_total, ledger, next_ledger, landing_kinds, suspended_total)
    imposed = ledger is not None
    if not imposed:
        ledger = next_ledger = weighted_total = hit_total
    _launch("count_hits", hit_counts.shape, (hit_counts, hit_total), max_grid_rows)
    use_kinds = landing_kinds is not None
    _launch("deposit_hits", hit_counts.shape,
            (hit_counts, scale, has_surface, snow_depth, hit_total, next_hit_counts,
             weighted_total, ledger, next_ledger, np.int64(nominal_units), np.int32(imposed),
             next_hit_counts if next_grain_count is None else next_grain_count,
             np.int32(1 if next_grain_count is None else next_grain_count.size),
             landing_kinds if use_kinds else hit_counts, np.int32(use_kinds),
             suspended_total if use_kinds else ledger),
            max_grid_rows)


def redistribute(height, has_surface, snow_depth, threshold, min_depth, fraction, snow_out,
                 *, max_grid_rows=MAX_GRID_ROWS):
    """See kernels.reference.cover.redistribute (one launch, or one per band of
    ``max_grid_rows`` rows: see deposit_hits)."""
    _launch("redistribute", snow_depth.shape,
            (height, has_surface, snow_depth, np.float32(threshold), np.float32(min_depth),
             np.float32(fraction), snow_out), max_grid_rows)
