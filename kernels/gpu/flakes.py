"""Snowflake kernels, CUDA build through CuPy (same names, arguments, streams and float32
operation order as kernels.reference.flakes; compiled with --fmad=false).

One fused kernel per step and flake: sample the wind, integrate, wrap, collide, count the
hit (integer atomic), respawn. ``step_flakes`` is a template instantiated for whether the
eddies and the shelter are on and whether every grid allows 32-bit indices with fixed corner
offsets (``COMPACT_INDEXING``): no branch separates the gathers at a flake's start point, and
the per-launch parts (1 / cell size, 1 / spacing, each random stream's first hash, the magic
number dividing by ``eddy_steps``) come from the host, the same bits as before (issue 39:
big-100M's flakes 6.23 -> 4.61 ms on an H100, docs/benchmarks.md). Flakes are sorted by wind cell every ``SORT_INTERVAL``
steps by a counting sort (histogram, scan, scatter) so neighbouring threads read the same
wind cells; the order inside a cell is arbitrary, which changes storage order only.
"""
import functools

import numpy as np

from ..contract import (BARE_GROUND, BLOWING, CONSTANT_COUNTER, COUNT_BITS, FRESH_LIFTS,
                        FROM_UPWIND, GRAIN_LANDINGS, LIFTED_EXITS, UPWIND_SETTLES,
                        GRAIN_WEIGHT_BITS, GRAIN_WEIGHT_SHIFT, GRAINS_ALOFT,
                        INFLOW_HEIGHT_BINS, MAX_GRAIN_WEIGHT_EXPONENT, OMEGA_MAX,
                        STREAM_INJECT, STREAM_INJECT_HEIGHT,
                        OMEGA_MIN, OPEN_LIMIT, OPEN_SNOWFIELD, SPAWN_MARGIN, SQRT3,
                        STREAM_EDDY_X, STREAM_EDDY_Y, STREAM_EDDY_Z, STREAM_LIFT,
                        STREAM_LIFT_HEIGHT, STREAM_OMEGA, STREAM_OMEGA_SIGN, STREAM_PHASE,
                        STREAM_RADIUS, STREAM_REENTRY, STREAM_TERMINAL_SPEED, STREAM_X,
                        STREAM_Y, STREAM_Z, TWO_PI, cuda_defines)
from ..contract import flake_kernels
from .common import compile_module


def kernel_source(block, min_blocks_per_sm=0):
    """CUDA source with ``step_flakes`` built for ``block`` threads per block and, when
    ``min_blocks_per_sm`` > 0, at least that many resident blocks per SM (a register cap)."""
    bounds = f"{int(block)}, {int(min_blocks_per_sm)}" if min_blocks_per_sm else f"{int(block)}"
    return _SOURCE_TEMPLATE.replace("STEP_LAUNCH_BOUNDS", bounds)


# the constants and random streams shared with the other builds (kernels.contract)
_DEFINES = cuda_defines(
    OPEN_LIMIT=OPEN_LIMIT, OMEGA_MIN=OMEGA_MIN, OMEGA_MAX=OMEGA_MAX, TWO_PI=TWO_PI,
    SPAWN_MARGIN=SPAWN_MARGIN, CONSTANT_COUNTER=np.uint32(CONSTANT_COUNTER), BLOWING=BLOWING,
    COUNT_BITS=COUNT_BITS, SQRT3=SQRT3, OPEN_SNOWFIELD=OPEN_SNOWFIELD, BARE_GROUND=BARE_GROUND,
    GRAINS_ALOFT=np.int32(GRAINS_ALOFT), GRAIN_LANDINGS=np.int32(GRAIN_LANDINGS),
    FRESH_LIFTS=np.int32(FRESH_LIFTS),
    GRAIN_WEIGHT_BITS=GRAIN_WEIGHT_BITS, GRAIN_WEIGHT_SHIFT=np.uint32(GRAIN_WEIGHT_SHIFT),
    MAX_GRAIN_WEIGHT_EXPONENT=np.uint32(MAX_GRAIN_WEIGHT_EXPONENT),
    UPWIND_SETTLES=np.int32(UPWIND_SETTLES),
    LIFTED_EXITS=np.int32(LIFTED_EXITS), FROM_UPWIND=FROM_UPWIND,
    INFLOW_HEIGHT_BINS=np.int32(INFLOW_HEIGHT_BINS),
    **{name: np.uint32(value) for name, value in (
        ("STREAM_TERMINAL_SPEED", STREAM_TERMINAL_SPEED), ("STREAM_RADIUS", STREAM_RADIUS),
        ("STREAM_OMEGA", STREAM_OMEGA), ("STREAM_OMEGA_SIGN", STREAM_OMEGA_SIGN),
        ("STREAM_X", STREAM_X), ("STREAM_Y", STREAM_Y), ("STREAM_Z", STREAM_Z),
        ("STREAM_PHASE", STREAM_PHASE), ("STREAM_LIFT", STREAM_LIFT),
        ("STREAM_LIFT_HEIGHT", STREAM_LIFT_HEIGHT), ("STREAM_REENTRY", STREAM_REENTRY),
        ("STREAM_INJECT", STREAM_INJECT), ("STREAM_INJECT_HEIGHT", STREAM_INJECT_HEIGHT),
        ("STREAM_EDDY_X", STREAM_EDDY_X), ("STREAM_EDDY_Y", STREAM_EDDY_Y),
        ("STREAM_EDDY_Z", STREAM_EDDY_Z))})

_SOURCE_TEMPLATE = _DEFINES + r"""

// random_uniform of common with the per-launch part, hash_u32(seed + 0x9E3779B9 * stream),
// passed in (computed once on the host): the same bits, two hashes per draw instead of three
__device__ __forceinline__ float random_uniform_from(unsigned int stream_hash, unsigned int index,
                                                     unsigned int counter) {
    unsigned int r = hash_u32(stream_hash ^ index);
    r = hash_u32(r ^ counter);
    return (float)(r >> 8) * (1.0f / 16777216.0f);
}

// kernels.reference.flakes.eddy_velocity from its key frames on: the eddies (m/s) of flake
// fid between the noise's key frames node and after (frac of the way), at above_ground m
// over the ground and below_top m under the lid; gradient = eddy_scale * u*, period the key
// frames' spacing (s); hash_x, hash_y, hash_z the eddy streams' first hashes
// (hash_u32(seed + 0x9E3779B9 * stream)). One home for step_flakes and grain_flights.
__device__ __forceinline__ float3 eddy_between(unsigned int hash_x, unsigned int hash_y,
        unsigned int hash_z, unsigned int fid, unsigned int node, unsigned int after, float frac,
        float above_ground, float below_top, float gradient, float mixing_height, float period) {
    float d = fmaxf(above_ground, 0.0f);
    float lid = fmaxf(below_top, 0.0f);
    bool ground_wins = d <= mixing_height && d <= lid;
    bool lid_wins = !ground_wins && lid < mixing_height;
    float mixing = ground_wins ? d : (lid_wins ? lid : mixing_height);
    float half_gradient = 0.5f * gradient;
    float diffusivity = gradient * mixing;
    float sigma = sqrtf(2.0f * diffusivity / period) * SQRT3;
    float3 e;
    e.x = sigma * ((1.0f - frac) * (2.0f * random_uniform_from(hash_x, fid, node) - 1.0f)
                   + frac * (2.0f * random_uniform_from(hash_x, fid, after) - 1.0f));
    e.y = sigma * ((1.0f - frac) * (2.0f * random_uniform_from(hash_y, fid, node) - 1.0f)
                   + frac * (2.0f * random_uniform_from(hash_y, fid, after) - 1.0f));
    e.z = sigma * ((1.0f - frac) * (2.0f * random_uniform_from(hash_z, fid, node) - 1.0f)
                   + frac * (2.0f * random_uniform_from(hash_z, fid, after) - 1.0f));
    if (ground_wins) e.z = e.z + half_gradient;
    else if (lid_wins) e.z = e.z - half_gradient;
    return e;
}

// the velocity (m/s) after one semi-implicit step of dt s of quadratic drag toward the air's
// velocity (terminal speed fall m/s) and gravity g m/s^2 (the CPU build's _drag)
__device__ __forceinline__ float3 drag(float vx, float vy, float vz, float3 wind, float fall,
                                       float g, float dt) {
    float rx = wind.x - vx, ry = wind.y - vy, rz = wind.z - vz;
    float k = g * sqrtf(rx * rx + ry * ry + rz * rz) / (fall * fall);
    float denominator = 1.0f + k * dt;
    return make_float3((vx + dt * (k * wind.x)) / denominator,
                       (vy + dt * (k * wind.y)) / denominator,
                       (vz + dt * (k * wind.z - g)) / denominator);
}

__device__ __forceinline__ void flake_constants(unsigned int seed, unsigned int fid, float vt_min,
        float vt_max, float spiral_radius, float &vt, float &radius, float &omega) {
    vt = vt_min + random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_TERMINAL_SPEED) * (vt_max - vt_min);
    radius = random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_RADIUS) * spiral_radius;
    omega = OMEGA_MIN + random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_OMEGA) * (OMEGA_MAX - OMEGA_MIN);
    if (random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_OMEGA_SIGN) < 0.5f) omega = -omega;
}

// kernels.reference.flakes.column_wind at one point: the surface wind (sx, sy) and its u*
__device__ __forceinline__ float3 column_wind(const float* __restrict__ surface_x,
        const float* __restrict__ surface_y, int nx, int ny, float wx0, float wy0, float h,
        float x, float y, float ustar_per_speed) {
    float inv = 1.0f / h;
    int i = min(max((int)floorf((x - wx0) * inv), 0), nx - 1);
    int j = min(max((int)floorf((y - wy0) * inv), 0), ny - 1);
    float sx = __ldg(surface_x + (long long)j * nx + i), sy = __ldg(surface_y + (long long)j * nx + i);
    return make_float3(sx, sy, ustar_per_speed * sqrtf(sx * sx + sy * sy));
}

// kernels.reference.flakes.lift_share at one point
__device__ __forceinline__ float lift_share(const float* __restrict__ surface_x,
        const float* __restrict__ surface_y, int nx, int ny, float wx0, float wy0, float h,
        float x, float y, float ustar_per_speed, float threshold, float heading_x,
        float heading_y, float strength) {
    float3 surface = column_wind(surface_x, surface_y, nx, ny, wx0, wy0, h, x, y, ustar_per_speed);
    float ustar = surface.z;
    float along = surface.x * heading_x + surface.y * heading_y;
    if (!(ustar > threshold && along > 0.0f)) return 0.0f;
    float square = ustar * ustar;
    return strength * ((square - threshold * threshold) / square);
}

// bilinear terrain + snow surface (m) at (x, y)
__device__ __forceinline__ float ground_at(const float* __restrict__ height,
        const float* __restrict__ snow, int hnx, int hny, float hx0, float hy0, float spacing,
        float x, float y) {
    return sample_bilinear(height, hnx, hny, hx0, hy0, spacing, x, y)
         + sample_bilinear(snow, hnx, hny, hx0, hy0, spacing, x, y);
}

// index of the heightmap node nearest to a coordinate (m) along one axis, clamped
__device__ __forceinline__ int nearest_node(float c, float origin, float inv_spacing, int count) {
    return min(max((int)floorf((c - origin) * inv_spacing + 0.5f), 0), count - 1);
}

__device__ __forceinline__ float wrap_coordinate(float c, float origin, float length) {
    float end = origin + length;
    if (c >= origin && c < end) return c;
    float offset = c - origin;
    offset = offset - length * floorf(offset / length);
    float wrapped = origin + offset;
    if (wrapped >= end || wrapped < origin) wrapped = origin;
    return wrapped;
}

// the landing target of a (re)spawned flake with an open fetch (reference _target_xy)
__device__ __forceinline__ float2 target_xy(unsigned int seed, unsigned int fid,
        unsigned int counter, float x0, float y0, float length_x, float length_y, bool along_x,
        float margin) {
    float rx = random_uniform(seed, fid, counter, STREAM_X);
    float ry = random_uniform(seed, fid, counter, STREAM_Y);
    if (along_x) {
        float low = x0 - margin;
        float span = length_x + (margin + margin);
        return make_float2(low + rx * span, y0 + ry * length_y);
    }
    float low = y0 - margin;
    float span = length_y + (margin + margin);
    return make_float2(x0 + rx * length_x, low + ry * span);
}

// adds the sum of 2^exponent over the converged lanes where flag holds to *slot (one lane's
// integer atomic); every lane of active takes part (the ballots' results are the same in all)
__device__ __forceinline__ void add_weighted(int* slot, unsigned int active, bool flag,
                                             unsigned int exponent) {
    if (__ballot_sync(active, flag) == 0u) return;
    int total = 0;
    for (unsigned int k = 0u; k <= MAX_GRAIN_WEIGHT_EXPONENT; ++k)
        total += __popc(__ballot_sync(active, flag && exponent == k)) << k;
    if ((threadIdx.x & 31) == __ffs(active) - 1) atomicAdd(slot, total);
}

// where a grain enters across the upwind edge (reference _entry_point)
__device__ float3 entry_point(unsigned int seed, unsigned int fid, unsigned int counter,
        const int* __restrict__ inflow_heights, bool open_x, float origin, float length,
        float ahead,
        float dt, float x0, float y0, float length_x, float length_y, float h, float top,
        const float* __restrict__ height, const float* __restrict__ snow, int hnx, int hny,
        float hx0, float hy0, float spacing) {
    float travel = fabsf(ahead) * dt;
    float offset = random_uniform(seed, fid, counter, STREAM_X) * travel;
    float along = ahead > 0.0f ? origin + offset : (origin + length) - offset;
    float x, y;
    if (open_x) {
        x = along;
        y = y0 + random_uniform(seed, fid, counter, STREAM_Y) * length_y;
    } else {
        y = along;
        x = x0 + random_uniform(seed, fid, counter, STREAM_Y) * length_x;
    }
    long long total = 0;
    for (int b = 0; b < INFLOW_HEIGHT_BINS; ++b) total += inflow_heights[b];
    float draw = random_uniform(seed, fid, counter, STREAM_INJECT_HEIGHT);
    long long rank = (long long)floorf(draw * (float)total);
    int chosen = 0;
    long long running = inflow_heights[0];
    while (chosen < INFLOW_HEIGHT_BINS - 1 && running <= rank) {
        ++chosen;
        running += inflow_heights[chosen];
    }
    float ground = ground_at(height, snow, hnx, hny, hx0, hy0, spacing, x, y);
    float lift = ((float)chosen + random_uniform(seed, fid, counter, STREAM_Z)) * h;
    return make_float3(x, y, fminf(ground + lift, top - 0.5f * h));
}

// (x, y) moved upwind by fall * inflow / vt, the crosswind coordinate wrapped (_upwind_of)
__device__ __forceinline__ float2 upwind_of(float x, float y, float fall, float vt, float x0,
        float y0, float length_x, float length_y, float inflow_x, float inflow_y, bool along_x) {
    float dx = (fall * inflow_x) / vt;
    float dy = (fall * inflow_y) / vt;
    x = x - dx;
    y = y - dy;
    if (along_x) return make_float2(x, wrap_coordinate(y, y0, length_y));
    return make_float2(wrap_coordinate(x, x0, length_x), y);
}

extern "C" __global__ void initialize_flakes(
        const unsigned int* __restrict__ flake_id, float* pos_x, float* pos_y, float* pos_z,
        float* vel_x, float* vel_y, float* vel_z, float* phase, unsigned int* respawn_count,
        const float* __restrict__ u, const float* __restrict__ v, const float* __restrict__ w,
        int nx, int ny, int nz, float wx0, float wy0, float wz0, float h,
        const float* __restrict__ height, const float* __restrict__ snow, int hnx, int hny,
        float hx0, float hy0, float spacing, unsigned int seed, float vt_min, float vt_max,
        float spiral_radius, int opened, float inflow_x, float inflow_y, float margin,
        int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= count) return;
    unsigned int fid = flake_id[n];
    float vt, radius, omega;
    flake_constants(seed, fid, vt_min, vt_max, spiral_radius, vt, radius, omega);
    float length_x = (float)nx * h, length_y = (float)ny * h, top = wz0 + (float)nz * h;
    bool along_x = fabsf(inflow_x) >= fabsf(inflow_y);
    float x, y;
    if (opened) {
        float2 target = target_xy(seed, fid, 0u, wx0, wy0, length_x, length_y, along_x,
                                  margin);
        x = target.x; y = target.y;
    } else {
        x = wx0 + random_uniform(seed, fid, 0u, STREAM_X) * length_x;
        y = wy0 + random_uniform(seed, fid, 0u, STREAM_Y) * length_y;
    }
    float ground = ground_at(height, snow, hnx, hny, hx0, hy0, spacing, x, y);
    float low = fmaxf(ground, wz0) + SPAWN_MARGIN * h;
    low = fminf(low, top - h);
    float z = low + random_uniform(seed, fid, 0u, STREAM_Z) * (top - low);
    if (opened) {
        // upwind of its target, unless that is inside the terrain (a ridge between)
        float2 start = upwind_of(x, y, z - low, vt, wx0, wy0, length_x, length_y, inflow_x,
                                 inflow_y, along_x);
        if (ground_at(height, snow, hnx, hny, hx0, hy0, spacing, start.x, start.y) < z) {
            x = start.x; y = start.y;
        }
    }
    float3 wind = sample_wind(u, v, w, nx, ny, nz, wx0, wy0, wz0, h, x, y, z);
    pos_x[n] = x; pos_y[n] = y; pos_z[n] = z;
    vel_x[n] = wind.x; vel_y[n] = wind.y; vel_z[n] = wind.z - vt;
    phase[n] = random_uniform(seed, fid, 0u, STREAM_PHASE) * TWO_PI;
    respawn_count[n] = 0u;
}

// n / d and n % d for a launch-wide divisor d >= 1 through its host-computed magic number
// (exact for every 32-bit n: libdivide's branch-free unsigned algorithm)
__device__ __forceinline__ unsigned int divide_by(unsigned int n, unsigned int magic,
                                                  unsigned int shift1, unsigned int shift2) {
    unsigned int t = __umulhi(n, magic);
    return (t + ((n - t) >> shift1)) >> shift2;
}

// sample_bilinear of common (1 / spacing passed in), keeping the four corner values: the
// node nearest to (x, y) is one of them. COMPACT: nx, ny >= 2 (so i1 = i0 + 1, j1 = j0 + 1)
// and fewer than 2^31 nodes: one 32-bit index, the other corners at fixed offsets.
struct Corners { int i0, i1, j0, j1; float c00, c01, c10, c11; };

template <bool COMPACT>
__device__ __forceinline__ float bilinear_keep(const float* __restrict__ field, int nx, int ny,
        float x0, float y0, float inv, float x, float y, Corners &k) {
    float tx, ty;
    axis_weights((x - x0) * inv, nx, k.i0, k.i1, tx);
    axis_weights((y - y0) * inv, ny, k.j0, k.j1, ty);
    if (COMPACT) {
        const float* r0 = field + (k.j0 * nx + k.i0);
        k.c00 = __ldg(r0); k.c01 = __ldg(r0 + 1);
        k.c10 = __ldg(r0 + nx); k.c11 = __ldg(r0 + nx + 1);
    } else {
        const float* r0 = field + (long long)k.j0 * nx;
        const float* r1 = field + (long long)k.j1 * nx;
        k.c00 = __ldg(r0 + k.i0); k.c01 = __ldg(r0 + k.i1);
        k.c10 = __ldg(r1 + k.i0); k.c11 = __ldg(r1 + k.i1);
    }
    return (k.c00 * (1.0f - tx) + k.c01 * tx) * (1.0f - ty) + (k.c10 * (1.0f - tx) + k.c11 * tx) * ty;
}

template <bool COMPACT>
__device__ __forceinline__ float bilinear_at(const float* __restrict__ field, int nx, int ny,
        float x0, float y0, float inv, float x, float y) {
    Corners k;
    return bilinear_keep<COMPACT>(field, nx, ny, x0, y0, inv, x, y, k);
}

// sample_trilinear of common; COMPACT as for bilinear_keep (ni, nj, nk >= 2, < 2^31 values)
template <bool COMPACT>
__device__ __forceinline__ float trilinear(const float* __restrict__ field, int ni, int nj, int nk,
                                           float gx, float gy, float gz) {
    if (!COMPACT) return sample_trilinear(field, ni, nj, nk, gx, gy, gz);
    int i0, i1, j0, j1, k0, k1; float tx, ty, tz;
    axis_weights(gx, ni, i0, i1, tx);
    axis_weights(gy, nj, j0, j1, ty);
    axis_weights(gz, nk, k0, k1, tz);
    const float* p = field + ((k0 * nj + j0) * ni + i0);
    const float* q = p + ni * nj;
    float a = __ldg(p) * (1.0f - tx) + __ldg(p + 1) * tx;
    float b = __ldg(p + ni) * (1.0f - tx) + __ldg(p + ni + 1) * tx;
    float c = __ldg(q) * (1.0f - tx) + __ldg(q + 1) * tx;
    float d = __ldg(q + ni) * (1.0f - tx) + __ldg(q + ni + 1) * tx;
    return (a * (1.0f - ty) + b * ty) * (1.0f - tz) + (c * (1.0f - ty) + d * ty) * tz;
}

// sample_wind of common with 1 / cell_size passed in
template <bool COMPACT>
__device__ __forceinline__ float3 wind_at(const float* __restrict__ u, const float* __restrict__ v,
        const float* __restrict__ w, int nx, int ny, int nz, float x0, float y0, float z0,
        float inv, float x, float y, float z) {
    float gx = (x - x0) * inv, gy = (y - y0) * inv, gz = (z - z0) * inv;
    return make_float3(trilinear<COMPACT>(u, nx + 1, ny, nz, gx, gy - 0.5f, gz - 0.5f),
                       trilinear<COMPACT>(v, nx, ny + 1, nz, gx - 0.5f, gy, gz - 0.5f),
                       trilinear<COMPACT>(w, nx, ny, nz + 1, gx - 0.5f, gy - 0.5f, gz));
}

// One step of every flake. EDDY (eddy_scale > 0) and SHELTER (a bubble_top) are template
// constants, so every gather at the flake's start point (wind, bubble top, surface wind,
// ground) is issued together with no branch between them; COMPACT: every grid has at least
// 2 nodes along each axis and fewer than 2^31 values (32-bit indices, fixed corner offsets).
template <bool EDDY, bool SHELTER, bool COMPACT>
__global__ void __launch_bounds__(STEP_LAUNCH_BOUNDS) step_flakes(
        const unsigned int* __restrict__ flake_id, float* __restrict__ pos_x,
        float* __restrict__ pos_y, float* __restrict__ pos_z, float* __restrict__ vel_x,
        float* __restrict__ vel_y, float* __restrict__ vel_z, float* __restrict__ phase,
        unsigned int* __restrict__ respawn_count,
        const float* __restrict__ u, const float* __restrict__ v, const float* __restrict__ w,
        int nx, int ny, int nz, float wx0, float wy0, float wz0, float h,
        const float* __restrict__ height, const float* __restrict__ snow, int hnx, int hny,
        float hx0, float hy0, float spacing, int* __restrict__ hit_counts, unsigned int seed,
        float vt_min, float vt_max, float spiral_radius, float g, float dt,
        const float* __restrict__ surface_x, const float* __restrict__ surface_y,
        float ustar_per_speed, float threshold, float heading_x, float heading_y,
        float lift_strength, unsigned int step_index,
        const float* __restrict__ bubble_top, float eddy_scale, float mixing_height,
        unsigned int eddy_steps, float grain_speed, int* __restrict__ grain_count,
        int count_grains, int reentry, float eddy_floor, int inflow_mode, float inflow_x,
        float inflow_y, float margin,
        const int* __restrict__ inflow_heights, int entering, float inflow_share,
        unsigned int inflow_exponent, float inv_h, float inv_spacing, unsigned int s0, unsigned int s1, unsigned int s2,
        unsigned int s3, unsigned int s10, unsigned int s11, unsigned int s12,
        unsigned int steps_magic, unsigned int steps_shift1, unsigned int steps_shift2,
        int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= count) return;
    unsigned int fid = __ldg(flake_id + n);
    float x = pos_x[n], y = pos_y[n], z = pos_z[n];
    float vx = vel_x[n], vy = vel_y[n], vz = vel_z[n];
    float th = phase[n];
    unsigned int respawns = respawn_count[n];
    // the gathers at the start point
    float3 wind = wind_at<COMPACT>(u, v, w, nx, ny, nz, wx0, wy0, wz0, inv_h, x, y, z);
    // bubble_top lives on the wind columns' centres
    float bx = wx0 + 0.5f * h, by = wy0 + 0.5f * h;
    float bubble_here = 0.0f, ground_here = 0.0f, ustar_here = 0.0f;
    if (SHELTER) bubble_here = bilinear_at<COMPACT>(bubble_top, nx, ny, bx, by, inv_h, x, y);
    if (EDDY) {
        // kernels.reference.flakes.column_wind at the start point
        int ci = min(max((int)floorf((x - wx0) * inv_h), 0), nx - 1);
        int cj = min(max((int)floorf((y - wy0) * inv_h), 0), ny - 1);
        float sx = __ldg(surface_x + (long long)cj * nx + ci);
        float sy = __ldg(surface_y + (long long)cj * nx + ci);
        ustar_here = ustar_per_speed * sqrtf(sx * sx + sy * sy);
        ground_here = bilinear_at<COMPACT>(height, hnx, hny, hx0, hy0, inv_spacing, x, y)
                    + bilinear_at<COMPACT>(snow, hnx, hny, hx0, hy0, inv_spacing, x, y);
    }
    // flake_constants with the stream hashes passed in
    float vt = vt_min + random_uniform_from(s0, fid, CONSTANT_COUNTER) * (vt_max - vt_min);
    float radius = random_uniform_from(s1, fid, CONSTANT_COUNTER) * spiral_radius;
    float omega = OMEGA_MIN + random_uniform_from(s2, fid, CONSTANT_COUNTER) * (OMEGA_MAX - OMEGA_MIN);
    if (random_uniform_from(s3, fid, CONSTANT_COUNTER) < 0.5f) omega = -omega;
    bool grains = grain_speed > 0.0f;
    bool was_grain = (respawns & BLOWING) != 0u;
    unsigned int weight_exponent = (respawns & GRAIN_WEIGHT_BITS) >> GRAIN_WEIGHT_SHIFT;
    int weight = 1 << weight_exponent;
    float fall = (grains && was_grain) ? grain_speed : vt;
    bool fresh_lift = false;
    if (SHELTER && z < bubble_here) wind = make_float3(0.0f, 0.0f, 0.0f);
    if (EDDY) {
        float ustar = fmaxf(ustar_here, eddy_floor);
        // eddy_velocity's key frames (fid % steps and the division through the magic number)
        unsigned int steps = eddy_steps;
        unsigned int fq = divide_by(fid, steps_magic, steps_shift1, steps_shift2);
        unsigned int shifted = step_index + (fid - fq * steps);
        unsigned int node = divide_by(shifted, steps_magic, steps_shift1, steps_shift2);
        float frac = (float)(shifted - node * steps) / (float)steps;
        float3 e = eddy_between(s10, s11, s12, fid, node, node + 1u, frac, z - ground_here,
                                (wz0 + (float)nz * h) - z, eddy_scale * ustar, mixing_height,
                                (float)steps * dt);
        wind.x = wind.x + e.x; wind.y = wind.y + e.y; wind.z = wind.z + e.z;
    }
    float3 nv = drag(vx, vy, vz, wind, fall, g, dt);
    float nvx = nv.x, nvy = nv.y, nvz = nv.z;
    float rx = wind.x - nvx, ry = wind.y - nvy, rz = wind.z - nvz;
    float relative_speed = sqrtf(rx * rx + ry * ry + rz * rz);
    float speed = fmaxf(sqrtf(nvx * nvx + nvy * nvy + nvz * nvz), 1.0f);
    float spiral = relative_speed / speed * omega * radius;
    double s, c;
    sincos((double)th, &s, &c);
    float circle_x = -spiral * (float)s;
    float circle_y = spiral * (float)c;
    float x_start = x, y_start = y;
    x = x + (0.5f * (vx + nvx) + circle_x) * dt;
    y = y + (0.5f * (vy + nvy) + circle_y) * dt;
    z = z + 0.5f * (vz + nvz) * dt;
    if (EDDY) z = fminf(z, wz0 + (float)nz * h);
    float new_phase = th + omega * dt;
    new_phase = new_phase - TWO_PI * floorf(new_phase / TWO_PI);
    float length_x = (float)nx * h, length_y = (float)ny * h;
    bool out_x = !(x >= wx0 && x < wx0 + length_x), out_y = !(y >= wy0 && y < wy0 + length_y);
    bool opened = inflow_mode == OPEN_SNOWFIELD || inflow_mode == BARE_GROUND;
    bool open_x = fabsf(inflow_x) >= fabsf(inflow_y);
    bool outside = false, beyond = false;
    if (opened) {
        // open along the wind's axis: no wrap there; a flake downwind of the domain is done
        float ahead = open_x ? inflow_x : inflow_y;
        bool past;
        if (open_x) {
            y = wrap_coordinate(y, wy0, length_y);
            outside = out_x;
            past = ahead > 0.0f ? x >= wx0 + length_x : (ahead < 0.0f ? x < wx0 : true);
        } else {
            x = wrap_coordinate(x, wx0, length_x);
            outside = out_y;
            past = ahead > 0.0f ? y >= wy0 + length_y : (ahead < 0.0f ? y < wy0 : true);
        }
        beyond = outside && past;
    } else {
        x = wrap_coordinate(x, wx0, length_x);
        y = wrap_coordinate(y, wy0, length_y);
    }
    // a flake that leaves downwind comes back upwind at a random crosswind place
    bool along_x = fabsf(heading_x) >= fabsf(heading_y);
    if (reentry && !opened && ((out_x && along_x) || (out_y && !along_x))) {
        float draw = random_uniform(seed, fid, step_index, STREAM_REENTRY);
        if (along_x) y = wy0 + draw * length_y;
        else x = wx0 + draw * length_x;
    }

    Corners hk;
    float ground = bilinear_keep<COMPACT>(height, hnx, hny, hx0, hy0, inv_spacing, x, y, hk)
                 + bilinear_at<COMPACT>(snow, hnx, hny, hx0, hy0, inv_spacing, x, y);
    int ni = nearest_node(x, hx0, inv_spacing, hnx);
    int nj = nearest_node(y, hy0, inv_spacing, hny);
    // the nearest node is one of the four corners just read (a read only if it were not)
    float node_height = nj == hk.j0 ? (ni == hk.i0 ? hk.c00 : hk.c01) : (ni == hk.i0 ? hk.c10 : hk.c11);
    if (!((ni == hk.i0 || ni == hk.i1) && (nj == hk.j0 || nj == hk.j1)))
        node_height = __ldg(height + (long long)nj * hnx + ni);
    bool hit = z < ground && node_height > OPEN_LIMIT;
    if (hit && !(out_x || out_y)) {
        float surface = node_height + snow[(long long)nj * hnx + ni];
        if (surface - z > spacing) {
            // struck a wall: the snow slides to its foot on the side the flake came from
            int oi = nearest_node(x_start, hx0, inv_spacing, hnx);
            int oj = nearest_node(y_start, hy0, inv_spacing, hny);
            if (__ldg(height + (long long)oj * hnx + oi) + snow[(long long)oj * hnx + oi] < surface) {
                ni = oi; nj = oj;
            }
        }
    }
    if (hit && lift_strength > 0.0f
            && !(SHELTER && ground < bilinear_at<COMPACT>(bubble_top, nx, ny, bx, by, inv_h, x, y))
            && !(outside && opened)) {
        float share = lift_share(surface_x, surface_y, nx, ny, wx0, wy0, h, x, y,
                                 ustar_per_speed, threshold, heading_x, heading_y, lift_strength);
        if (random_uniform(seed, fid, step_index, STREAM_LIFT) < share) {
            hit = false;
            z = ground + random_uniform(seed, fid, step_index, STREAM_LIFT_HEIGHT) * h;
            float3 lift_wind = sample_wind(u, v, w, nx, ny, nz, wx0, wy0, wz0, h, x, y, z);
            nvx = lift_wind.x; nvy = lift_wind.y; nvz = lift_wind.z;
            if (grains) respawns = respawns | BLOWING;
            fresh_lift = grains && !was_grain && !outside;
        }
    }
    if (hit && !outside) atomicAdd(hit_counts + (long long)nj * hnx + ni, weight);
    bool grain_landing = hit && !outside && grains && was_grain;
    // a grain from upwind that settled, a grain lifted off the terrain that ends without
    // settling on it (left, or landed outside)
    bool from_upwind = (respawns & FROM_UPWIND) != 0u;
    bool upwind_settle = grain_landing && from_upwind, lifted_exit = false;
    if (hit || z < wz0 || beyond) {
        lifted_exit = grains && (respawns & BLOWING) != 0u && !(hit && !outside) && !from_upwind;
        unsigned int counter = (respawns & COUNT_BITS) + 1u;
        float top = wz0 + (float)nz * h;
        z = (top - h) + random_uniform(seed, fid, counter, STREAM_Z) * h;
        if (opened) {
            float2 target = target_xy(seed, fid, counter, wx0, wy0, length_x, length_y, open_x,
                                      margin);
            // as far upwind as the wind carries it while it falls to its target's ground
            float fall = fmaxf(z - fmaxf(ground_at(height, snow, hnx, hny, hx0, hy0, spacing,
                                                   target.x, target.y), wz0), 0.0f);
            float2 start = upwind_of(target.x, target.y, fall, vt, wx0, wy0, length_x,
                                     length_y, inflow_x, inflow_y, open_x);
            x = start.x; y = start.y;
        } else {
            x = wx0 + random_uniform(seed, fid, counter, STREAM_X) * length_x;
            y = wy0 + random_uniform(seed, fid, counter, STREAM_Y) * length_y;
        }
        bool fresh = true;
        if (entering && random_uniform(seed, fid, counter, STREAM_INJECT) < inflow_share) {
            // enters as a grain of the open snowfield's suspension across the upwind edge
            fresh = false;
            float3 entry = entry_point(seed, fid, counter, inflow_heights, open_x,
                                       open_x ? wx0 : wy0, open_x ? length_x : length_y,
                                       open_x ? inflow_x : inflow_y, dt, wx0, wy0,
                                       length_x, length_y, h, top, height, snow, hnx, hny,
                                       hx0, hy0, spacing);
            x = entry.x; y = entry.y; z = entry.z;
            counter = counter | BLOWING | FROM_UPWIND | (inflow_exponent << GRAIN_WEIGHT_SHIFT);
        }
        float3 spawn_wind = sample_wind(u, v, w, nx, ny, nz, wx0, wy0, wz0, h, x, y, z);
        nvx = spawn_wind.x; nvy = spawn_wind.y; nvz = fresh ? spawn_wind.z - vt : spawn_wind.z;
        respawns = counter;
    }
    respawn_count[n] = respawns;
    pos_x[n] = x; pos_y[n] = y; pos_z[n] = z;
    vel_x[n] = nvx; vel_y[n] = nvy; vel_z[n] = nvz;
    phase[n] = new_phase;
    if (count_grains) {
        // one integer atomic per group of converged lanes (integer sums: any order)
        unsigned int active = __activemask();
        unsigned int votes = __ballot_sync(active, (respawns & BLOWING) != 0u);
        unsigned int lifted = __ballot_sync(active, fresh_lift);
        if ((threadIdx.x & 31) == __ffs(active) - 1) {
            if (votes != 0u) atomicAdd(grain_count + GRAINS_ALOFT, __popc(votes));
            if (lifted != 0u) atomicAdd(grain_count + FRESH_LIFTS, __popc(lifted));
        }
        add_weighted(grain_count + GRAIN_LANDINGS, active, grain_landing, weight_exponent);
        add_weighted(grain_count + UPWIND_SETTLES, active, upwind_settle, weight_exponent);
        add_weighted(grain_count + LIFTED_EXITS, active, lifted_exit, weight_exponent);
    }
}

// kernels.reference.flakes.grain_flights: one thread per grain (seed 0, id n)
extern "C" __global__ void grain_flights(float speed, float ustar, float h, float top, float dt,
        float eddy_scale, float mixing_height, unsigned int eddy_steps, float fall, float g,
        int steps, double* __restrict__ travelled, double* __restrict__ crossings, int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= count) return;
    unsigned int fid = (unsigned int)n;
    float z = random_uniform(0u, fid, 0u, STREAM_LIFT_HEIGHT) * h;
    float vx = speed, vy = 0.0f, vz = 0.0f;
    double distance = 0.0;
    double* row = crossings + (size_t)n * INFLOW_HEIGHT_BINS;
    for (int b = 0; b < INFLOW_HEIGHT_BINS; ++b) row[b] = 0.0;
    float gradient = eddy_scale * ustar;
    float period = (float)eddy_steps * dt;
    // the eddy streams' first hashes for seed 0
    unsigned int hash_x = hash_u32(0x9E3779B9u * STREAM_EDDY_X);
    unsigned int hash_y = hash_u32(0x9E3779B9u * STREAM_EDDY_Y);
    unsigned int hash_z = hash_u32(0x9E3779B9u * STREAM_EDDY_Z);
    for (int step = 0; step < steps; ++step) {
        unsigned int shifted = (unsigned int)step + fid % eddy_steps;
        unsigned int node = shifted / eddy_steps;
        float frac = (float)(shifted % eddy_steps) / (float)eddy_steps;
        float3 e = eddy_between(hash_x, hash_y, hash_z, fid, node, node + 1u, frac, z, top - z,
                                gradient, mixing_height, period);
        float3 nv = drag(vx, vy, vz, make_float3(speed + e.x, e.y, e.z), fall, g, dt);
        float nvx = nv.x, nvy = nv.y, nvz = nv.z;
        float advance = 0.5f * (vx + nvx) * dt;
        distance += (double)advance;
        int cell = min(max((int)floorf(z / h), 0), INFLOW_HEIGHT_BINS - 1);
        row[cell] += (double)advance;
        z = fminf(z + 0.5f * (vz + nvz) * dt, top);
        vx = nvx; vy = nvy; vz = nvz;
        if (!(z >= 0.0f)) break;
    }
    travelled[n] = distance;
}

extern "C" __global__ void cell_keys(const float* __restrict__ pos_x, const float* __restrict__ pos_y,
        const float* __restrict__ pos_z, float wx0, float wy0, float wz0, float h, int nx, int ny,
        int nz, unsigned int* __restrict__ keys, int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= count) return;
    float inv = 1.0f / h;
    int i = min(max((int)floorf((pos_x[n] - wx0) * inv), 0), nx - 1);
    int j = min(max((int)floorf((pos_y[n] - wy0) * inv), 0), ny - 1);
    int k = min(max((int)floorf((pos_z[n] - wz0) * inv), 0), nz - 1);
    keys[n] = (unsigned int)((k * ny + j) * nx + i);
}

extern "C" __global__ void count_keys(const unsigned int* __restrict__ keys,
                                      unsigned int* __restrict__ cell_counts, int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < count) atomicAdd(cell_counts + keys[n], 1u);
}

// cell_end: inclusive prefix sums of the counts; each flake takes the next free slot of
// its cell from the end (order inside a cell is arbitrary). destination may alias keys.
extern "C" __global__ void place_keys(const unsigned int* keys, unsigned int* __restrict__ cell_end,
                                      unsigned int* destination, int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < count) destination[n] = atomicSub(cell_end + keys[n], 1u) - 1u;
}

extern "C" __global__ void scatter(const unsigned int* __restrict__ source,
                                   const unsigned int* __restrict__ destination,
                                   unsigned int* __restrict__ out, int count) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < count) out[destination[n]] = source[n];
}
"""

#: Steps between spatial sorts (measured on an H100: see docs/flakes_and_cover.md).
SORT_INTERVAL = 32
#: Threads per block of every flake kernel and the occupancy hint of step_flakes (measured:
#: docs/flakes_and_cover.md, benchmarks/flakes_gpu.py).
BLOCK = 128
MIN_BLOCKS_PER_SM = 0
SOURCE = kernel_source(BLOCK, MIN_BLOCKS_PER_SM)


#: The instantiations of the templated ``step_flakes<EDDY, SHELTER>`` (each compiled on first
#: use, alone: a bake uses one).
_NAMES = tuple(f"step_flakes<{e}, {s}, {c}>" for e in ("false", "true") for s in ("false", "true")
               for c in ("false", "true"))
#: Whether step_flakes may use 32-bit indices and fixed corner offsets where every grid allows
#: (False: always the general indexing; the results are the same bits either way).
COMPACT_INDEXING = True


@functools.lru_cache(maxsize=None)
def _kernel(source, name):
    if name in _NAMES:
        return compile_module(source, (name,)).get_function(name)
    return compile_module(source).get_function(name)


def _hash_u32(x):
    """common's hash_u32 on a Python int (uint32 arithmetic)."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x


@functools.lru_cache(maxsize=64)
def _stream_hashes(seed, streams=(STREAM_TERMINAL_SPEED, STREAM_RADIUS, STREAM_OMEGA,
                                  STREAM_OMEGA_SIGN, STREAM_EDDY_X, STREAM_EDDY_Y, STREAM_EDDY_Z)):
    """hash_u32(seed + 0x9E3779B9 * stream): the per-launch first hash of random_uniform."""
    return tuple(np.uint32(_hash_u32((int(seed) + 0x9E3779B9 * s) & 0xFFFFFFFF)) for s in streams)


@functools.lru_cache(maxsize=64)
def _divide_magic(divisor):
    """(magic, shift1, shift2) of ``divide_by`` for a uint32 ``divisor`` >= 1: n / d as
    (t + ((n - t) >> shift1)) >> shift2 with t = umulhi(n, magic), exact for every uint32 n."""
    d = int(divisor)
    ceil_log2 = (d - 1).bit_length()
    magic = ((1 << 32) * ((1 << ceil_log2) - d)) // d + 1
    return np.uint32(magic), np.uint32(min(ceil_log2, 1)), np.uint32(max(ceil_log2 - 1, 0))


def _launch(name, count, arguments):
    if count == 0:
        return
    kernel = _kernel(SOURCE, name)
    kernel(((count + BLOCK - 1) // BLOCK,), (BLOCK,), tuple(arguments) + (np.int32(count),))


def _wind_arguments(u, v, w, wx0, wy0, wz0, cell_size):
    nz, ny, nx1 = u.shape
    return (u, v, w, np.int32(nx1 - 1), np.int32(ny), np.int32(nz), np.float32(wx0),
            np.float32(wy0), np.float32(wz0), np.float32(cell_size))


def _ground_arguments(height, snow_depth, hx0, hy0, spacing):
    hny, hnx = height.shape
    return (height, snow_depth, np.int32(hnx), np.int32(hny), np.float32(hx0), np.float32(hy0),
            np.float32(spacing))


def _initialize_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase,
                     respawn_count, u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth,
                     hx0, hy0, spacing, seed, vt_min, vt_max, spiral_radius, inflow_mode=0,
                     inflow_x=0.0, inflow_y=0.0, margin=0.0):
    """See kernels.reference.flakes._initialize_flat."""
    _launch("initialize_flakes", flake_id.size,
            (flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count)
            + _wind_arguments(u, v, w, wx0, wy0, wz0, cell_size)
            + _ground_arguments(height, snow_depth, hx0, hy0, spacing)
            + (np.uint32(seed), np.float32(vt_min), np.float32(vt_max), np.float32(spiral_radius),
               np.int32(int(inflow_mode) in (OPEN_SNOWFIELD, BARE_GROUND)),
               np.float32(inflow_x), np.float32(inflow_y), np.float32(margin)))


def _step_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count,
               u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth, hx0, hy0, spacing,
               hit_counts, seed, vt_min, vt_max, spiral_radius, gravity, dt,
               surface_x=None, surface_y=None, ustar_per_speed=0.0, threshold=0.0,
               heading_x=1.0, heading_y=0.0, lift_strength=0.0, step_index=0,
               bubble_top=None, eddy_scale=0.0, mixing_height=10.0, eddy_steps=24,
               grain_speed=0.0, grain_count=None, eddy_floor=0.0, inflow_mode=0,
               inflow_x=0.0, inflow_y=0.0, margin=0.0,
               inflow_share=0.0, inflow_exponent=0, inflow_heights=None):
    """See kernels.reference.flakes._step_flat (one fused kernel, instantiated for whether
    the eddies and the shelter are on and whether the grids allow compact indexing)."""
    reentry = surface_x is not None
    ahead = inflow_y if abs(np.float32(inflow_x)) < abs(np.float32(inflow_y)) else inflow_x
    entering = (int(inflow_mode) == OPEN_SNOWFIELD and np.float32(grain_speed) > 0
                and np.float32(ahead) != 0 and np.float32(inflow_share) > 0
                and inflow_heights is not None)
    if surface_x is None:
        surface_x = surface_y = u          # never read: lift_strength and eddy_scale are 0
        lift_strength = eddy_scale = 0.0
    shelter = bubble_top is not None
    if not shelter:
        bubble_top = height  # never read: shelter is off
    eddy = float(np.float32(eddy_scale)) > 0.0
    steps = max(int(eddy_steps), 1)
    cell_size, spacing = np.float32(cell_size), np.float32(spacing)
    nz, ny, nx1 = u.shape
    hny, hnx = height.shape
    compact = (COMPACT_INDEXING and min(nx1 - 1, ny, nz, hnx, hny) >= 2
               and max(u.size, v.size, w.size, height.size) < 2**31)
    name = "step_flakes<" + ", ".join("true" if flag else "false"
                                      for flag in (eddy, shelter, compact)) + ">"
    _launch(name, flake_id.size,
            (flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count)
            + _wind_arguments(u, v, w, wx0, wy0, wz0, cell_size)
            + _ground_arguments(height, snow_depth, hx0, hy0, spacing)
            + (hit_counts, np.uint32(seed), np.float32(vt_min), np.float32(vt_max),
               np.float32(spiral_radius), np.float32(gravity), np.float32(dt),
               surface_x, surface_y, np.float32(ustar_per_speed), np.float32(threshold),
               np.float32(heading_x), np.float32(heading_y), np.float32(lift_strength),
               np.uint32(step_index), bubble_top, np.float32(eddy_scale),
               np.float32(mixing_height), np.uint32(steps),
               np.float32(grain_speed), hit_counts if grain_count is None else grain_count,
               np.int32(grain_count is not None and grain_speed > 0), np.int32(reentry),
               np.float32(eddy_floor), np.int32(inflow_mode), np.float32(inflow_x),
               np.float32(inflow_y), np.float32(margin),
               inflow_heights if entering else hit_counts,     # never read unless entering
               np.int32(entering), np.float32(inflow_share), np.uint32(inflow_exponent),
               # 1 / cell_size and 1 / spacing as the kernels' own float32 divisions give them
               np.float32(1.0) / cell_size, np.float32(1.0) / spacing)
            + _stream_hashes(int(seed) & 0xFFFFFFFF) + _divide_magic(steps))


def cell_keys(pos_x, pos_y, pos_z, wx0, wy0, wz0, cell_size, nx, ny, nz, keys):
    """See kernels.reference.flakes.cell_keys."""
    _launch("cell_keys", pos_x.size, (pos_x, pos_y, pos_z, np.float32(wx0), np.float32(wy0),
                                      np.float32(wz0), np.float32(cell_size), np.int32(nx),
                                      np.int32(ny), np.int32(nz), keys))


def sort_permutation(keys, cell_counts, destination):
    """Counting sort: destination slot of each flake so keys ascend (arbitrary order inside
    a cell). ``destination`` may be ``keys``; ``cell_counts`` (uint32 per cell) is scratch."""
    import cupy

    cell_counts.fill(0)
    _launch("count_keys", keys.size, (keys, cell_counts))
    cell_end = cupy.cumsum(cell_counts, dtype=cupy.uint32)
    _launch("place_keys", keys.size, (keys, cell_end, destination))


def scatter(source, destination, out):
    """out[destination[n]] = source[n] (4-byte words)."""
    _launch("scatter", source.size, (source, destination, out))


def grain_flights(speed, ustar, cell_size, column, dt, eddy_scale, mixing_height, eddy_steps,
                  grain_speed, gravity, steps, travelled, crossings):
    """See kernels.reference.flakes.grain_flights (a thread per grain)."""
    _launch("grain_flights", travelled.shape[0],
            (np.float32(speed), np.float32(ustar), np.float32(cell_size), np.float32(column),
             np.float32(dt), np.float32(eddy_scale), np.float32(mixing_height),
             np.uint32(max(int(eddy_steps), 1)), np.float32(grain_speed), np.float32(gravity),
             np.int32(steps), travelled, crossings))


#: The records-taking entry points (kernels.contract.FlakesKernels) of the bodies above.
initialize_flakes, step_flakes = flake_kernels(_initialize_flat, _step_flat)
