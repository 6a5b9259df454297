"""Wind kernels, CUDA build through CuPy (same names, signatures and rules as
kernels.reference.wind). Each function is one kernel launch on the current stream; all
arrays are C-contiguous CuPy arrays (float32 faces, uint8 solid)."""
import numpy as np

from ..contract import (FRACTION_HIGH, FRACTION_LOW, FRACTION_MIN, FRACTION_SAMPLES,
                        FRACTION_STEP, FRACTION_STEPS, NO_BLOCK, OPEN_LIMIT,
                        SAMPLE_WEIGHT_SCALE, cuda_defines)
from .common import LAUNCH_BLOCK, blocks, get_kernel, template_names


SOURCE = cuda_defines(SAMPLE_WEIGHT_SCALE=SAMPLE_WEIGHT_SCALE,
                      FRACTION_SAMPLES=FRACTION_SAMPLES,
                      FRACTION_STEPS=np.float32(FRACTION_STEPS),
                      FRACTION_STEP=FRACTION_STEP) + r"""
__device__ __forceinline__ float quarter(float a, float b, float c, float d) {
    return 0.25f * ((a + b) + (c + d));
}

// Face (k, j, i) of a component whose arrays are ni x nj wide is open: open fraction > 0.
__device__ __forceinline__ float open_mask(const float* __restrict__ fraction, int k, int j,
                                           int i, int ni, int nj) {
    return __ldg(fraction + (k * nj + j) * ni + i) > 0.0f ? 1.0f : 0.0f;
}

// A face's weight in sample_open: min(1, SAMPLE_WEIGHT_SCALE * its open fraction)
// (kernels.contract.SAMPLE_WEIGHT_SCALE, a #define from cuda_defines).
__device__ __forceinline__ float open_weight(const float* __restrict__ fraction, int k, int j,
                                             int i, int ni, int nj) {
    return fminf(__ldg(fraction + (k * nj + j) * ni + i) * SAMPLE_WEIGHT_SCALE, 1.0f);
}

struct Corners {
    int i0, i1, j0, j1, k0, k1;
    float tx, ty, tz;
};

__device__ __forceinline__ Corners corners(int ni, int nj, int nk, float gx, float gy, float gz) {
    Corners c;
    axis_weights(gx, ni, c.i0, c.i1, c.tx);
    axis_weights(gy, nj, c.j0, c.j1, c.ty);
    axis_weights(gz, nk, c.k0, c.k1, c.tz);
    return c;
}

__device__ __forceinline__ float mix(float a, float b, float t) { return a * (1.0f - t) + b * t; }

// Bit C of blocks[k0][j0][i0] (open_blocks): all faces of component C in the 2 x 2 x 2
// block from (k0, j0, i0) have the full sample weight, so the corners need no weights
// (the plain trilinear path).
template <int C>
__device__ __forceinline__ bool block_open(const unsigned char* __restrict__ blocks, const Corners& q,
                                           int nx, int ny) {
    return (__ldg(blocks + (q.k0 * ny + q.j0) * nx + q.i0) >> C) & 1;
}

// Trilinear value over the open faces only, weighted by open_weight
// (kernels.reference.sampling.sample_open).
template <int C>
__device__ __forceinline__ float sample_open(const float* __restrict__ field, int ni, int nj, int nk,
                                             const float* __restrict__ fraction,
                                             const unsigned char* __restrict__ blocks,
                                             int nx, int ny, int nz,
                                             float gx, float gy, float gz, float fallback) {
    Corners q = corners(ni, nj, nk, gx, gy, gz);
    float value[4];
    if (block_open<C>(blocks, q, nx, ny)) {
        // all eight weights 1: the same operations as below (same bits)
        for (int r = 0; r < 4; ++r) {
            int k = r < 2 ? q.k0 : q.k1, j = (r & 1) ? q.j1 : q.j0;
            const float* row = field + (k * nj + j) * ni;
            value[r] = __ldg(row + q.i0) * (1.0f - q.tx) + __ldg(row + q.i1) * q.tx;
        }
        return mix(mix(value[0], value[1], q.ty), mix(value[2], value[3], q.ty), q.tz);
    }
    float m[8];
    float weight[4];
    for (int r = 0; r < 4; ++r) {
        int k = r < 2 ? q.k0 : q.k1, j = (r & 1) ? q.j1 : q.j0;
        m[2 * r] = open_weight(fraction, k, j, q.i0, ni, nj);
        m[2 * r + 1] = open_weight(fraction, k, j, q.i1, ni, nj);
        float w0 = m[2 * r] * (1.0f - q.tx), w1 = m[2 * r + 1] * q.tx;
        const float* row = field + (k * nj + j) * ni;
        value[r] = __ldg(row + q.i0) * w0 + __ldg(row + q.i1) * w1;
        weight[r] = w0 + w1;
    }
    float v = mix(mix(value[0], value[1], q.ty), mix(value[2], value[3], q.ty), q.tz);
    float count = (((m[0] + m[1]) + (m[2] + m[3])) + (m[4] + m[5])) + (m[6] + m[7]);
    if (count == 8.0f) return v;
    float wsum = mix(mix(weight[0], weight[1], q.ty), mix(weight[2], weight[3], q.ty), q.tz);
    return wsum > 0.0f ? v / wsum : fallback;
}

// Smallest and largest open corner sample (kernels.reference.sampling.open_range).
template <int C>
__device__ __forceinline__ void open_range(const float* __restrict__ field, int ni, int nj, int nk,
                                           const float* __restrict__ fraction,
                                           const unsigned char* __restrict__ blocks,
                                           int nx, int ny, int nz, float gx, float gy, float gz,
                                           float fallback, float &low, float &high) {
    Corners q = corners(ni, nj, nk, gx, gy, gz);
    low = __int_as_float(0x7f800000); high = -low;  // +inf, -inf
    if (block_open<C>(blocks, q, nx, ny)) {  // all eight open, the same order
        for (int r = 0; r < 8; ++r) {
            int k = r < 4 ? q.k0 : q.k1, j = (r & 2) ? q.j1 : q.j0, i = (r & 1) ? q.i1 : q.i0;
            float f = __ldg(field + (k * nj + j) * ni + i);
            low = fminf(low, f); high = fmaxf(high, f);
        }
        return;
    }
    bool found = false;
    for (int r = 0; r < 8; ++r) {
        int k = r < 4 ? q.k0 : q.k1, j = (r & 2) ? q.j1 : q.j0, i = (r & 1) ? q.i1 : q.i0;
        if (open_mask(fraction, k, j, i, ni, nj) != 0.0f) {
            float f = __ldg(field + (k * nj + j) * ni + i);
            low = fminf(low, f); high = fmaxf(high, f); found = true;
        }
    }
    if (!found) { low = fallback; high = fallback; }
}

// The semi-Lagrangian value of a face (CORRECT false) or its MacCormack correction.
template <int C, bool CORRECT>
__device__ __forceinline__ float interior(const float* __restrict__ field, const float* __restrict__ adv,
                                          int ni, int nj, int nk,
                                          const float* __restrict__ fraction,
                                          const unsigned char* __restrict__ blocks, int nx, int ny, int nz,
                                          float x, float y, float z, float vx, float vy, float vz,
                                          float h, float dt, float sx, float sy, float sz,
                                          float own, float adv_own) {
    float inv = 1.0f / h;
    float gx = (x - dt * vx) * inv, gy = (y - dt * vy) * inv, gz = (z - dt * vz) * inv;
    if (!CORRECT)
        return sample_open<C>(field, ni, nj, nk, fraction, blocks, nx, ny, nz, gx - sx, gy - sy, gz - sz, own);
    float low, high;
    open_range<C>(field, ni, nj, nk, fraction, blocks, nx, ny, nz, gx - sx, gy - sy, gz - sz, own, low, high);
    float back_dt = -dt;
    float bx = (x - back_dt * vx) * inv, by = (y - back_dt * vy) * inv, bz = (z - back_dt * vz) * inv;
    float back = sample_open<C>(adv, ni, nj, nk, fraction, blocks, nx, ny, nz, bx - sx, by - sy, bz - sz, adv_own);
    float value = adv_own + 0.5f * (own - back);
    return fminf(fmaxf(value, low), high);
}

// one thread per cell (k, j, i) = t
#define CELL3                                                             \
    const int i = blockIdx.x * blockDim.x + threadIdx.x;                  \
    const int j = blockIdx.y * blockDim.y + threadIdx.y;                  \
    const int k = blockIdx.z;                                             \
    if (i >= nx || j >= ny) return;                                       \
    const int t = (k * ny + j) * nx + i;

// The face kernels run one thread per (i, j, k) of an (nx + 1) x (ny + 1) x (nz + 1) 3D
// launch (x fastest, one z slice per block) and handle the u, v and w faces with those
// indices that exist: no index division, coalesced rows in all three arrays. 32-bit
// indices (the launchers refuse grids of 2^31 faces or more).
#define FACE3                                                             \
    const int i = blockIdx.x * blockDim.x + threadIdx.x;                  \
    const int j = blockIdx.y * blockDim.y + threadIdx.y;                  \
    const int k = blockIdx.z;                                             \
    if (i > nx || j > ny) return;

// Side flags: a prescribed side whose opposite is not is an inflow side, which also sets
// the tangential faces of its first column; a prescribed pair is a closed (free-slip) pair.
#define SIDE_FLAGS                                                        \
    const bool x_minus = sides & 1, x_plus = sides & 2;                   \
    const bool y_minus = sides & 4, y_plus = sides & 8;                   \
    const bool x_in_minus = x_minus && !x_plus, x_in_plus = x_plus && !x_minus; \
    const bool y_in_minus = y_minus && !y_plus, y_in_plus = y_plus && !y_minus; \
    (void)x_in_minus; (void)x_in_plus; (void)y_in_minus; (void)y_in_plus;

template <bool CORRECT>
__device__ __forceinline__ float advect_u(const float* __restrict__ u, const float* __restrict__ v,
                                         const float* __restrict__ w, const float* __restrict__ ua,
                                         const float* __restrict__ fraction,
                                         const unsigned char* __restrict__ blocks,
                                         float vx, float vy, int sides, float h, float dt,
                                         int i, int j, int k, int nx, int ny, int nz) {
    SIDE_FLAGS
    float val;
    if (i == 0 && x_minus) val = vx;
    else if (i == nx && x_plus) val = vx;
    else if ((j == 0 && y_in_minus) || (j == ny - 1 && y_in_plus)) val = vx;
    else {
        int src = i == 0 ? 1 : (i == nx ? nx - 1 : i);
        int il = max(src - 1, 0), ir = min(src, nx - 1);
        int v0 = (k * (ny + 1) + j) * nx, v1 = v0 + nx;
        int w0 = (k * ny + j) * nx, w1 = w0 + ny * nx;
        float fy = quarter(__ldg(v + v0 + il), __ldg(v + v0 + ir), __ldg(v + v1 + il), __ldg(v + v1 + ir));
        float fz = quarter(__ldg(w + w0 + il), __ldg(w + w0 + ir), __ldg(w + w1 + il), __ldg(w + w1 + ir));
        int f = (k * ny + j) * (nx + 1) + src;
        float fx = __ldg(u + f);
        float y = ((float)j + 0.5f) * h, z = ((float)k + 0.5f) * h;
        val = interior<0, CORRECT>(u, ua, nx + 1, ny, nz, fraction, blocks, nx, ny, nz, (float)src * h, y, z,
                                   fx, fy, fz, h, dt, 0.0f, 0.5f, 0.5f, fx, CORRECT ? __ldg(ua + f) : 0.0f);
        // an outflow side: no backflow
        if (i == 0) val = val < 0.0f ? val : 0.0f;
        else if (i == nx) val = val > 0.0f ? val : 0.0f;
    }
    if (!(__ldg(fraction + (k * ny + j) * (nx + 1) + i) > 0.0f)) val = 0.0f;  // closed: wins
    return val;
}

template <bool CORRECT>
__device__ __forceinline__ float advect_v(const float* __restrict__ u, const float* __restrict__ v,
                                         const float* __restrict__ w, const float* __restrict__ va,
                                         const float* __restrict__ fraction,
                                         const unsigned char* __restrict__ blocks,
                                         float vx, float vy, int sides, float h, float dt,
                                         int i, int j, int k, int nx, int ny, int nz) {
    SIDE_FLAGS
    float val;
    if (j == 0 && y_minus) val = vy;
    else if (j == ny && y_plus) val = vy;
    else if ((i == 0 && x_in_minus) || (i == nx - 1 && x_in_plus)) val = vy;
    else {
        int src = j == 0 ? 1 : (j == ny ? ny - 1 : j);
        int jl = max(src - 1, 0), jr = min(src, ny - 1);
        int ul = (k * ny + jl) * (nx + 1) + i, ur = (k * ny + jr) * (nx + 1) + i;
        int wl = (k * ny + jl) * nx + i, wr = (k * ny + jr) * nx + i;
        const int wk = ny * nx;
        float fx = quarter(__ldg(u + ul), __ldg(u + ul + 1), __ldg(u + ur), __ldg(u + ur + 1));
        float fz = quarter(__ldg(w + wl), __ldg(w + wr), __ldg(w + wl + wk), __ldg(w + wr + wk));
        int f = (k * (ny + 1) + src) * nx + i;
        float fy = __ldg(v + f);
        float x = ((float)i + 0.5f) * h, z = ((float)k + 0.5f) * h;
        val = interior<1, CORRECT>(v, va, nx, ny + 1, nz, fraction, blocks, nx, ny, nz, x, (float)src * h, z,
                                   fx, fy, fz, h, dt, 0.5f, 0.0f, 0.5f, fy, CORRECT ? __ldg(va + f) : 0.0f);
        // an outflow side: no backflow
        if (j == 0) val = val < 0.0f ? val : 0.0f;
        else if (j == ny) val = val > 0.0f ? val : 0.0f;
    }
    if (!(__ldg(fraction + (k * (ny + 1) + j) * nx + i) > 0.0f)) val = 0.0f;
    return val;
}

template <bool CORRECT>
__device__ __forceinline__ float advect_w(const float* __restrict__ u, const float* __restrict__ v,
                                         const float* __restrict__ w, const float* __restrict__ wa,
                                         const float* __restrict__ fraction,
                                         const unsigned char* __restrict__ blocks,
                                         float vx, float vy, int sides, float h, float dt,
                                         int i, int j, int k, int nx, int ny, int nz) {
    SIDE_FLAGS
    if (k == 0 || k == nz) return 0.0f;
    if ((i == 0 && x_in_minus) || (i == nx - 1 && x_in_plus) ||
        (j == 0 && y_in_minus) || (j == ny - 1 && y_in_plus)) return 0.0f;
    if (!(__ldg(fraction + (k * ny + j) * nx + i) > 0.0f)) return 0.0f;
    // 0 < k < nz here: the cells below and above exist
    int ul = ((k - 1) * ny + j) * (nx + 1) + i, ur = ul + ny * (nx + 1);
    int vl = ((k - 1) * (ny + 1) + j) * nx + i, vr = vl + (ny + 1) * nx;
    float fx = quarter(__ldg(u + ul), __ldg(u + ul + 1), __ldg(u + ur), __ldg(u + ur + 1));
    float fy = quarter(__ldg(v + vl), __ldg(v + vl + nx), __ldg(v + vr), __ldg(v + vr + nx));
    int f = (k * ny + j) * nx + i;
    float fz = __ldg(w + f);
    float x = ((float)i + 0.5f) * h, y = ((float)j + 0.5f) * h, z = (float)k * h;
    return interior<2, CORRECT>(w, wa, nx, ny, nz + 1, fraction, blocks, nx, ny, nz, x, y, z, fx, fy, fz, h, dt,
                                0.5f, 0.5f, 0.0f, fz, CORRECT ? __ldg(wa + f) : 0.0f);
}

// advect<false>: semi-Lagrangian step (ua, va, wa unused); advect<true>: its MacCormack
// correction, (ua, va, wa) being the semi-Lagrangian result.
template <bool CORRECT>
__global__ void advect(const float* __restrict__ u, const float* __restrict__ v,
                       const float* __restrict__ w, const float* __restrict__ fu,
                       const float* __restrict__ fv, const float* __restrict__ fw,
                       const unsigned char* __restrict__ blocks,
                       float vx, float vy, int sides, float h, float dt,
                       const float* __restrict__ ua, const float* __restrict__ va,
                       const float* __restrict__ wa,
                       float* __restrict__ uo, float* __restrict__ vo,
                       float* __restrict__ wo, int nx, int ny, int nz) {
    FACE3
    if (j < ny && k < nz)
        uo[(k * ny + j) * (nx + 1) + i] = advect_u<CORRECT>(u, v, w, ua, fu, blocks, vx, vy, sides, h, dt, i, j, k, nx, ny, nz);
    if (i < nx && k < nz)
        vo[(k * (ny + 1) + j) * nx + i] = advect_v<CORRECT>(u, v, w, va, fv, blocks, vx, vy, sides, h, dt, i, j, k, nx, ny, nz);
    if (i < nx && j < ny)
        wo[(k * ny + j) * nx + i] = advect_w<CORRECT>(u, v, w, wa, fw, blocks, vx, vy, sides, h, dt, i, j, k, nx, ny, nz);
}

extern "C" __global__ void divergence(const float* __restrict__ u, const float* __restrict__ v,
                                      const float* __restrict__ w,
                                      const float* __restrict__ fu, const float* __restrict__ fv,
                                      const float* __restrict__ fw, float s,
                                      float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    const int cu = t + k * ny + j;   // (k, j, i) in u
    const int cv = t + k * nx;       // (k, j, i) in v
    float x = __ldg(fu + cu + 1) * __ldg(u + cu + 1) - __ldg(fu + cu) * __ldg(u + cu);
    float y = __ldg(fv + cv + nx) * __ldg(v + cv + nx) - __ldg(fv + cv) * __ldg(v + cv);
    float z = __ldg(fw + t + ny * nx) * __ldg(w + t + ny * nx) - __ldg(fw + t) * __ldg(w + t);
    out[t] = s * ((x + y) + z);
}

// p at cell (k, j, i) = t, 0 outside the grid
#define PAT(cond, t) ((cond) ? __ldg(p + (t)) : 0.0f)

template <typename C>
__global__ void project(float* __restrict__ u, float* __restrict__ v, float* __restrict__ w,
                        const float* __restrict__ p, const C* __restrict__ cx,
                        const C* __restrict__ cy, const C* __restrict__ cz,
                        float s, int nx, int ny, int nz) {
    FACE3
    const int t = (k * ny + j) * nx + i;  // cell (k, j, i); may lie outside the grid
    const bool in = i < nx && j < ny && k < nz;
    if (j < ny && k < nz) {
        const int f = t + k * ny + j;
        float c = (float)cx[f];
        if (c != 0.0f)
            u[f] = u[f] - s * (PAT(in, t) - PAT(i > 0, t - 1));
    }
    if (i < nx && k < nz) {
        const int f = t + k * nx;
        float c = (float)cy[f];
        if (c != 0.0f)
            v[f] = v[f] - s * (PAT(in, t) - PAT(j > 0, t - nx));
    }
    if (i < nx && j < ny) {
        float c = (float)cz[t];
        if (c != 0.0f)
            w[t] = w[t] - s * (PAT(in, t) - PAT(k > 0, t - nx * ny));
    }
}

// all faces (k..k+1, j..j+1, i..i+1) of a component's ni x nj x nk array that exist have
// the full sample weight
__device__ __forceinline__ bool block_of_faces_open(const float* __restrict__ f, int k, int j, int i,
                                                    int ni, int nj, int nk) {
    for (int kk = k; kk < min(k + 2, nk); ++kk)
        for (int jj = j; jj < min(j + 2, nj); ++jj)
            for (int ii = i; ii < min(i + 2, ni); ++ii)
                if (!(open_weight(f, kk, jj, ii, ni, nj) >= 1.0f)) return false;
    return true;
}

// out[k][j][i] bit C (1 u, 2 v, 4 w): every face of component C in the 2 x 2 x 2 block from
// face index (k, j, i) that exists has the full sample weight (see open_weight).
extern "C" __global__ void open_blocks(const float* __restrict__ fu, const float* __restrict__ fv,
                                       const float* __restrict__ fw,
                                       unsigned char* __restrict__ out, int nx, int ny, int nz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z;
    if (i >= nx || j >= ny) return;
    bool u = block_of_faces_open(fu, k, j, i, nx + 1, ny, nz);
    bool v = block_of_faces_open(fv, k, j, i, nx, ny + 1, nz);
    bool w = block_of_faces_open(fw, k, j, i, nx, ny, nz + 1);
    out[(k * ny + j) * nx + i] = (u ? 1 : 0) | (v ? 2 : 0) | (w ? 4 : 0);
}

__device__ __forceinline__ float centre_ground(const float* __restrict__ height,
        const float* __restrict__ snow, int hnx, int hny, float hx0, float hy0, float spacing,
        float x0, float y0, float h, int i, int j) {
    float cx = x0 + ((float)i + 0.5f) * h;
    float cy = y0 + ((float)j + 0.5f) * h;
    return sample_bilinear(height, hnx, hny, hx0, hy0, spacing, cx, cy)
         + sample_bilinear(snow, hnx, hny, hx0, hy0, spacing, cx, cy);
}

// column_top stands more than half a cell above the ground at this column's centre and
// at its four neighbours' (clamped at the grid's edge): a thin obstacle no centre sees
__device__ __forceinline__ bool thin_obstacle(const float* __restrict__ height,
        const float* __restrict__ snow, int hnx, int hny, float hx0, float hy0, float spacing,
        float x0, float y0, float h, int i, int j, int nx, int ny, float ground, float top) {
    float limit = 0.5f * h;
    bool thin = top - ground > limit;
    const int di[4] = {-1, 1, 0, 0}, dj[4] = {0, 0, -1, 1};
    for (int n = 0; n < 4 && thin; ++n) {
        int ni = min(max(i + di[n], 0), nx - 1), nj = min(max(j + dj[n], 0), ny - 1);
        thin = top - centre_ground(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h,
                                   ni, nj) > limit;
    }
    return thin;
}

extern "C" __global__ void block_tops(const float* __restrict__ height,
                                      const float* __restrict__ snow, int hnx, int hny,
                                      float hx0, float hy0, float spacing, float x0, float y0,
                                      float h, const float* __restrict__ column_top,
                                      float no_block, float* __restrict__ out, int nx, int ny) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)ny * nx) return;
    int i = (int)(t % nx); int j = (int)(t / nx);
    float ground = centre_ground(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j);
    out[t] = thin_obstacle(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j, nx, ny,
                           ground, column_top[t]) ? column_top[t] : no_block;
}

extern "C" __global__ void obstacle_surface(const float* __restrict__ height,
                                            const float* __restrict__ snow, int hnx, int hny,
                                            float hx0, float hy0, float spacing, float x0,
                                            float y0, float h,
                                            const float* __restrict__ column_top,
                                            float open_limit, float* __restrict__ out, int nx,
                                            int ny) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)ny * nx) return;
    int i = (int)(t % nx); int j = (int)(t / nx);
    float ground = centre_ground(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j);
    float top = column_top[t];
    bool use_top = thin_obstacle(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j,
                                 nx, ny, ground, top) || !(ground > open_limit);
    out[t] = use_top ? top : ground;
}

// below low 0, above high 1, else the nearest multiple of FRACTION_STEP = 1/FRACTION_STEPS,
// at least ``least`` (the reference's _snap: a * FRACTION_STEPS exact, + 0.5 rounded once)
__device__ __forceinline__ float snap_fraction(float a, float low, float high, float least) {
    return a < low ? 0.0f : (a > high ? 1.0f : fmaxf(floorf(a * FRACTION_STEPS + 0.5f) * FRACTION_STEP, least));
}

__device__ __forceinline__ float terrain_at(const float* __restrict__ height,
        const float* __restrict__ snow, int hnx, int hny, float hx0, float hy0, float spacing,
        float x, float y, float block) {
    float t = sample_bilinear(height, hnx, hny, hx0, hy0, spacing, x, y)
            + sample_bilinear(snow, hnx, hny, hx0, hy0, spacing, x, y);
    return fmaxf(t, block);
}


// out[k * stride] for k < layers: snapped mean over the samples of clamp((top_k - t) / h, 0, 1)
__device__ __forceinline__ void vertical_fractions(const float* t, float* __restrict__ out,
                                                   long long stride, int layers, float z0,
                                                   float h, float step, float low, float high,
                                                   float least) {
    for (int k = 0; k < layers; ++k) {
        float top = z0 + (float)(k + 1) * h;
        float total = 0.0f;
        for (int s = 0; s < FRACTION_SAMPLES; ++s)
            total = total + fminf(fmaxf((top - t[s]) / h, 0.0f), 1.0f);
        out[k * stride] = snap_fraction(total * step, low, high, least);
    }
}

// One thread per face column (i, j) of the (nx + 1) x (ny + 1) launch: the u, v and w faces
// with those indices that exist (kernels.reference.wind.face_fractions).
extern "C" __global__ void face_fractions(const float* __restrict__ height,
                                          const float* __restrict__ snow, int hnx, int hny,
                                          float hx0, float hy0, float spacing, float x0,
                                          float y0, float z0, float h,
                                          const float* __restrict__ blocks, float no_block,
                                          float low, float high, float least,
                                          float* __restrict__ fu, float* __restrict__ fv,
                                          float* __restrict__ fw, int nx, int ny, int nz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i > nx || j > ny) return;
    const float step = 1.0f / (float)FRACTION_SAMPLES;
    float t[FRACTION_SAMPLES];
    if (j < ny) {                                   // u face column
        float block = no_block;
        if (i > 0) block = fmaxf(block, blocks[j * nx + i - 1]);
        if (i < nx) block = fmaxf(block, blocks[j * nx + i]);
        float x = x0 + (float)i * h;
        for (int s = 0; s < FRACTION_SAMPLES; ++s) {
            float y = y0 + ((float)j + ((float)s + 0.5f) * step) * h;
            t[s] = terrain_at(height, snow, hnx, hny, hx0, hy0, spacing, x, y, block);
        }
        vertical_fractions(t, fu + (long long)j * (nx + 1) + i, (long long)ny * (nx + 1), nz,
                           z0, h, step, low, high, least);
    }
    if (i < nx) {                                   // v face column
        float block = no_block;
        if (j > 0) block = fmaxf(block, blocks[(j - 1) * nx + i]);
        if (j < ny) block = fmaxf(block, blocks[j * nx + i]);
        float y = y0 + (float)j * h;
        for (int s = 0; s < FRACTION_SAMPLES; ++s) {
            float x = x0 + ((float)i + ((float)s + 0.5f) * step) * h;
            t[s] = terrain_at(height, snow, hnx, hny, hx0, hy0, spacing, x, y, block);
        }
        vertical_fractions(t, fv + (long long)j * nx + i, (long long)(ny + 1) * nx, nz, z0, h,
                           step, low, high, least);
    }
    if (i < nx && j < ny) {                         // w face column: the column's footprint
        float block = blocks[j * nx + i];
        float ts[FRACTION_SAMPLES][FRACTION_SAMPLES + 1];
        float lowest = __int_as_float(0x7f800000), highest = -lowest;
        for (int r = 0; r < FRACTION_SAMPLES; ++r) {
            float y = y0 + ((float)j + ((float)r + 0.5f) * step) * h;
            for (int e = 0; e <= FRACTION_SAMPLES; ++e) {
                float x = x0 + ((float)i + (float)e * step) * h;
                float value = terrain_at(height, snow, hnx, hny, hx0, hy0, spacing, x, y, block);
                ts[r][e] = value;
                lowest = fminf(lowest, value);
                highest = fmaxf(highest, value);
            }
        }
        const float area = step * step;
        const long long slice = (long long)ny * nx;
        float* column = fw + (long long)j * nx + i;
        for (int k = 0; k <= nz; ++k) {
            float z = z0 + (float)k * h;
            float value;
            if (z > highest) value = 1.0f;
            else if (z <= lowest) value = 0.0f;
            else {
                float total = 0.0f;
                for (int r = 0; r < FRACTION_SAMPLES; ++r)
                    for (int s = 0; s < FRACTION_SAMPLES; ++s) {
                        float lo = fminf(ts[r][s], ts[r][s + 1]), hi = fmaxf(ts[r][s], ts[r][s + 1]);
                        float span = hi - lo;
                        float part = span > 0.0f ? fminf(fmaxf((z - lo) / span, 0.0f), 1.0f)
                                                 : (lo < z ? 1.0f : 0.0f);
                        total = total + part;
                    }
                value = snap_fraction(total * area, low, high, least);
            }
            column[k * slice] = value;
        }
    }
}

extern "C" __global__ void voxel_fractions(const unsigned char* __restrict__ solid,
                                           float* __restrict__ fu, float* __restrict__ fv,
                                           float* __restrict__ fw, int nx, int ny, int nz) {
    FACE3
#define SOLID(k, j, i) (solid[((k) * ny + (j)) * nx + (i)] != 0)
    if (j < ny && k < nz)
        fu[(k * ny + j) * (nx + 1) + i] =
            ((i > 0 && SOLID(k, j, i - 1)) || (i < nx && SOLID(k, j, i))) ? 0.0f : 1.0f;
    if (i < nx && k < nz)
        fv[(k * (ny + 1) + j) * nx + i] =
            ((j > 0 && SOLID(k, j - 1, i)) || (j < ny && SOLID(k, j, i))) ? 0.0f : 1.0f;
    if (i < nx && j < ny)
        fw[(k * ny + j) * nx + i] =
            ((k > 0 && SOLID(k - 1, j, i)) || (k < nz && SOLID(k, j, i))) ? 0.0f : 1.0f;
#undef SOLID
}

extern "C" __global__ void solid_from_heightmap(const float* __restrict__ height,
                                                const float* __restrict__ snow, int hnx, int hny,
                                                float hx0, float hy0, float spacing,
                                                float x0, float y0, float z0, float h,
                                                unsigned char* __restrict__ solid,
                                                int nx, int ny, int nz, int use_top,
                                                const float* __restrict__ column_top) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)ny * nx) return;
    int i = (int)(t % nx); int j = (int)(t / nx);
    float ground = centre_ground(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j);
    // a thin obstacle that neither this centre nor a neighbour's sees: solid to its top
    if (use_top && thin_obstacle(height, snow, hnx, hny, hx0, hy0, spacing, x0, y0, h, i, j, nx,
                                 ny, ground, column_top[t]))
        ground = column_top[t];
    for (int k = 0; k < nz; ++k) {
        float cz = z0 + ((float)k + 0.5f) * h;
        solid[((long long)k * ny + j) * nx + i] = cz < ground ? 1 : 0;
    }
}

// --- turbulent mixing (see the reference for the model) ---------------------------------
__device__ __forceinline__ float cross_derivative(float qm, float q, float qp, bool ok_m,
                                                  bool ok_p, float inv_h, float half_inv_h) {
    if (ok_m && ok_p) return (qp - qm) * half_inv_h;
    if (ok_p) return (qp - q) * inv_h;
    if (ok_m) return (q - qm) * inv_h;
    return 0.0f;
}

// the centred wind of cell (k, j, i)
__device__ __forceinline__ float3 centre_wind(const float* __restrict__ u,
                                              const float* __restrict__ v,
                                              const float* __restrict__ w,
                                              int nx, int ny, int k, int j, int i) {
    const int t = (k * ny + j) * nx + i;
    const int cu = t + k * ny + j, cv = t + k * nx;
    return make_float3(0.5f * (__ldg(u + cu) + __ldg(u + cu + 1)),
                       0.5f * (__ldg(v + cv) + __ldg(v + cv + nx)),
                       0.5f * (__ldg(w + t) + __ldg(w + t + ny * nx)));
}

// the centred wind's derivatives along the axis (dk, dj, di) at cell (k, j, i)
__device__ __forceinline__ float3 axis_gradient(const float* __restrict__ u,
                                                const float* __restrict__ v,
                                                const float* __restrict__ w,
                                                const unsigned char* __restrict__ solid,
                                                int nx, int ny, int nz, int k, int j, int i,
                                                int dk, int dj, int di, float3 c,
                                                float inv_h, float half_inv_h) {
    const int km = k - dk, jm = j - dj, im = i - di, kp = k + dk, jp = j + dj, ip = i + di;
    const bool ok_m = km >= 0 && jm >= 0 && im >= 0 && solid[(km * ny + jm) * nx + im] == 0;
    const bool ok_p = kp < nz && jp < ny && ip < nx && solid[(kp * ny + jp) * nx + ip] == 0;
    const float3 zero = make_float3(0.0f, 0.0f, 0.0f);
    const float3 m = ok_m ? centre_wind(u, v, w, nx, ny, km, jm, im) : zero;
    const float3 p = ok_p ? centre_wind(u, v, w, nx, ny, kp, jp, ip) : zero;
    return make_float3(cross_derivative(m.x, c.x, p.x, ok_m, ok_p, inv_h, half_inv_h),
                       cross_derivative(m.y, c.y, p.y, ok_m, ok_p, inv_h, half_inv_h),
                       cross_derivative(m.z, c.z, p.z, ok_m, ok_p, inv_h, half_inv_h));
}

extern "C" __global__ void eddy_viscosity(const float* __restrict__ u, const float* __restrict__ v,
                                          const float* __restrict__ w,
                                          const unsigned char* __restrict__ solid,
                                          const float* __restrict__ column_top, float z0, float h,
                                          float mixing, float mixing_height, float limit,
                                          float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    if (solid[t] != 0) { out[t] = 0.0f; return; }
    const float inv_h = 1.0f / h;
    const float half_inv_h = 0.5f * inv_h;
    const float3 c = centre_wind(u, v, w, nx, ny, k, j, i);
    const float3 dz = axis_gradient(u, v, w, solid, nx, ny, nz, k, j, i, 1, 0, 0, c, inv_h, half_inv_h);
    const float3 dy = axis_gradient(u, v, w, solid, nx, ny, nz, k, j, i, 0, 1, 0, c, inv_h, half_inv_h);
    const float3 dx = axis_gradient(u, v, w, solid, nx, ny, nz, k, j, i, 0, 0, 1, c, inv_h, half_inv_h);
    const int cu = t + k * ny + j, cv = t + k * nx;
    const float dudx = (__ldg(u + cu + 1) - __ldg(u + cu)) * inv_h;
    const float dvdy = (__ldg(v + cv + nx) - __ldg(v + cv)) * inv_h;
    const float dwdz = (__ldg(w + t + ny * nx) - __ldg(w + t)) * inv_h;
    const float sxy = dy.x + dx.y, sxz = dz.x + dx.z, syz = dz.y + dy.z;
    float normal = dudx * dudx + dvdy * dvdy;
    normal = normal + dwdz * dwdz;
    float s2 = 2.0f * normal + sxy * sxy;
    s2 = s2 + sxz * sxz;
    s2 = s2 + syz * syz;
    const float rate = sqrtf(s2);
    const float cz = z0 + ((float)k + 0.5f) * h;
    const float height = fminf(fmaxf(cz - column_top[j * nx + i], 0.0f), mixing_height);
    const float length = mixing * height;
    out[t] = fminf(length * length * rate, limit);
}

// the sum over the six neighbour faces (x-, x+, y-, y+, z-, z+) of face (k, j, i) of an
// ni x nj x nk face array that exist and are open, of their difference to it
__device__ __forceinline__ float face_laplacian(const float* __restrict__ c,
                                                const float* __restrict__ f,
                                                int ni, int nj, int nk, int k, int j, int i) {
    const long long t = ((long long)k * nj + j) * ni + i;
    const float centre = __ldg(c + t);
    float total = 0.0f;
    if (i > 0 && __ldg(f + t - 1) > 0.0f) total = total + (__ldg(c + t - 1) - centre);
    if (i < ni - 1 && __ldg(f + t + 1) > 0.0f) total = total + (__ldg(c + t + 1) - centre);
    if (j > 0 && __ldg(f + t - ni) > 0.0f) total = total + (__ldg(c + t - ni) - centre);
    if (j < nj - 1 && __ldg(f + t + ni) > 0.0f) total = total + (__ldg(c + t + ni) - centre);
    const long long layer = (long long)ni * nj;
    if (k > 0 && __ldg(f + t - layer) > 0.0f) total = total + (__ldg(c + t - layer) - centre);
    if (k < nk - 1 && __ldg(f + t + layer) > 0.0f) total = total + (__ldg(c + t + layer) - centre);
    return total;
}

__device__ __forceinline__ float diffused(const float* __restrict__ c, const float* __restrict__ f,
                                          float nu_a, float nu_b, float scale,
                                          int ni, int nj, int nk, int k, int j, int i) {
    const float nu_face = 0.5f * (nu_a + nu_b);
    const float step = (scale * nu_face) * face_laplacian(c, f, ni, nj, nk, k, j, i);
    return __ldg(c + ((long long)k * nj + j) * ni + i) + step;
}

extern "C" __global__ void diffuse_velocity(const float* __restrict__ u, const float* __restrict__ v,
                                            const float* __restrict__ w,
                                            const float* __restrict__ fu, const float* __restrict__ fv,
                                            const float* __restrict__ fw,
                                            const float* __restrict__ nu, float scale,
                                            float* __restrict__ uo, float* __restrict__ vo,
                                            float* __restrict__ wo, int nx, int ny, int nz) {
    FACE3
    const int t = (k * ny + j) * nx + i;  // cell (k, j, i); may lie outside the grid
    if (j < ny && k < nz) {
        const int f = t + k * ny + j;
        uo[f] = (i > 0 && i < nx && __ldg(fu + f) > 0.0f)
            ? diffused(u, fu, __ldg(nu + t - 1), __ldg(nu + t), scale, nx + 1, ny, nz, k, j, i)
            : __ldg(u + f);
    }
    if (i < nx && k < nz) {
        const int f = t + k * nx;
        vo[f] = (j > 0 && j < ny && __ldg(fv + f) > 0.0f)
            ? diffused(v, fv, __ldg(nu + t - nx), __ldg(nu + t), scale, nx, ny + 1, nz, k, j, i)
            : __ldg(v + f);
    }
    if (i < nx && j < ny) {
        wo[t] = (k > 0 && k < nz && __ldg(fw + t) > 0.0f)
            ? diffused(w, fw, __ldg(nu + t - ny * nx), __ldg(nu + t), scale, nx, ny, nz + 1, k, j, i)
            : __ldg(w + t);
    }
}

// the porous-fence drag coefficient (1/m) of cell (k, j, i) (kernels.reference.wind.fence_drag_cells)
__device__ __forceinline__ float cell_drag(const unsigned char* __restrict__ solid,
                                           const float* __restrict__ fence_bottom,
                                           const float* __restrict__ fence_top,
                                           const float* __restrict__ fence_resistance,
                                           float z0, float h, int nx, int ny, int k, int j, int i) {
    if (__ldg(solid + (k * ny + j) * nx + i) != 0) return 0.0f;
    const float bottom = z0 + (float)k * h;
    const float top = z0 + (float)(k + 1) * h;
    const float low = fmaxf(__ldg(fence_bottom + j * nx + i), bottom);
    const float high = fminf(__ldg(fence_top + j * nx + i), top);
    const float cover = fminf(fmaxf((high - low) / h, 0.0f), 1.0f);
    return __ldg(fence_resistance + j * nx + i) * cover;
}

__device__ __forceinline__ float damped(float value, float drag_a, float drag_b, float dt) {
    const float rate = dt * (0.5f * (drag_a + drag_b));
    return value * fmaxf(1.0f - rate * fabsf(value), 0.0f);
}

extern "C" __global__ void porous_drag(float* __restrict__ u, float* __restrict__ v,
                                       float* __restrict__ w,
                                       const unsigned char* __restrict__ solid,
                                       const float* __restrict__ fence_bottom,
                                       const float* __restrict__ fence_top,
                                       const float* __restrict__ fence_resistance,
                                       float z0, float h, float dt, int nx, int ny, int nz) {
    FACE3
    const int t = (k * ny + j) * nx + i;  // cell (k, j, i); may lie outside the grid
    // fence_resistance is (3, ny, nx): the columns' coefficients along x, y and z
    const float* __restrict__ along_x = fence_resistance;
    const float* __restrict__ along_y = fence_resistance + ny * nx;
    const float* __restrict__ along_z = fence_resistance + 2 * ny * nx;
    if (j < ny && k < nz && i > 0 && i < nx) {
        const int f = t + k * ny + j;
        u[f] = damped(u[f], cell_drag(solid, fence_bottom, fence_top, along_x, z0, h, nx, ny, k, j, i - 1),
                      cell_drag(solid, fence_bottom, fence_top, along_x, z0, h, nx, ny, k, j, i), dt);
    }
    if (i < nx && k < nz && j > 0 && j < ny) {
        const int f = t + k * nx;
        v[f] = damped(v[f], cell_drag(solid, fence_bottom, fence_top, along_y, z0, h, nx, ny, k, j - 1, i),
                      cell_drag(solid, fence_bottom, fence_top, along_y, z0, h, nx, ny, k, j, i), dt);
    }
    if (i < nx && j < ny && k > 0 && k < nz) {
        w[t] = damped(w[t], cell_drag(solid, fence_bottom, fence_top, along_z, z0, h, nx, ny, k - 1, j, i),
                      cell_drag(solid, fence_bottom, fence_top, along_z, z0, h, nx, ny, k, j, i), dt);
    }
}
"""

_BLOCK = LAUNCH_BLOCK


_NAMES = template_names("project") + ("advect<false>", "advect<true>")


def _kernel(name, coef=None):
    return get_kernel(SOURCE, _NAMES, name, coef)


_blocks = blocks


def _tiles(nx, ny, nz):
    """(grid, block) of a 3D launch over nx x ny x nz threads: x fastest, one z slice per
    block, blocks of 128 threads (x tiles of 32, 64 or 128)."""
    if (nz + 1) * (ny + 1) * (nx + 2) >= 2 ** 31 or ny > 65535 or nz > 65535:
        raise ValueError(f"grid {nx}x{ny}x{nz} is too large for the 32-bit wind kernels")
    bx = 32 if nx <= 32 else (64 if nx <= 64 else 128)
    by = 128 // bx
    return ((nx + bx - 1) // bx, (ny + by - 1) // by, nz), (bx, by, 1)


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                         column_top=None):
    """solid[k, j, i] = 1 where the cell centre lies below bilinear height + snow depth, or
    below a thin obstacle's ``column_top`` (see the reference)."""
    nz, ny, nx = solid.shape
    hny, hnx = height.shape
    f = np.float32
    use_top = column_top is not None
    _kernel("solid_from_heightmap")(_blocks(ny * nx), (_BLOCK,), (
        height, snow_depth, np.int32(hnx), np.int32(hny), f(hx0), f(hy0), f(spacing),
        f(x0), f(y0), f(z0), f(cell_size), solid, np.int32(nx), np.int32(ny), np.int32(nz),
        np.int32(use_top), column_top if use_top else height))


def _per_column(name, height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top,
                constant, out):
    """Launch a kernel of one thread per wind column that reads the heightmap and
    ``column_top`` and writes ``out`` (ny, nx); ``constant`` is its float32 marker."""
    ny, nx = out.shape
    hny, hnx = height.shape
    f = np.float32
    _kernel(name)(_blocks(ny * nx), (_BLOCK,), (
        height, snow_depth, np.int32(hnx), np.int32(hny), f(hx0), f(hy0), f(spacing), f(x0),
        f(y0), f(cell_size), column_top, f(constant), out, np.int32(nx), np.int32(ny)))


def block_tops(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top, out):
    """out (ny, nx) float32 m: ``column_top`` in the columns of a thin obstacle, NO_BLOCK
    elsewhere (see the reference)."""
    _per_column("block_tops", height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size,
                column_top, NO_BLOCK, out)


def obstacle_surface(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top,
                     out):
    """out (ny, nx) float32 m: the surface the wind's solid mask stands on in each column
    (see the reference)."""
    _per_column("obstacle_surface", height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size,
                column_top, OPEN_LIMIT, out)


def face_fractions(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                   frac_u, frac_v, frac_w):
    """Open area fraction of every face against the terrain surface, thin obstacles' columns
    filled to ``blocks`` (see the reference); one thread per face column."""
    nzp, ny, nx = frac_w.shape
    hny, hnx = height.shape
    f = np.float32
    grid, block = _tiles(nx + 1, ny + 1, 1)
    _kernel("face_fractions")(grid, block, (
        height, snow_depth, np.int32(hnx), np.int32(hny), f(hx0), f(hy0), f(spacing), f(x0),
        f(y0), f(z0), f(cell_size), blocks, NO_BLOCK, FRACTION_LOW, FRACTION_HIGH, FRACTION_MIN,
        frac_u, frac_v, frac_w, np.int32(nx), np.int32(ny), np.int32(nzp - 1)))


def voxel_fractions(solid, frac_u, frac_v, frac_w):
    """Open fractions of a solid mask: 1 where no solid cell touches a face, else 0."""
    nz, ny, nx = solid.shape
    grid, block = _tiles(nx + 1, ny + 1, nz + 1)
    _kernel("voxel_fractions")(grid, block, (
        solid, frac_u, frac_v, frac_w, np.int32(nx), np.int32(ny), np.int32(nz)))


def open_blocks(fractions, out):
    """out[k, j, i] (uint8, the cell shape): bit C (1 u, 2 v, 4 w) set when every face of
    component C in the 2 x 2 x 2 block from face index (k, j, i) is open, A_f > 0 (see the
    reference). Computed when the obstacles change; the advection kernels take the plain
    trilinear path where a sample's block is open."""
    nz, ny, nx = out.shape
    grid, block = _tiles(nx, ny, nz)
    _kernel("open_blocks")(grid, block, (*fractions, out, np.int32(nx), np.int32(ny),
                                         np.int32(nz)))


def _advect(name, u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt, adv, out,
            blocks):
    nz, ny, nx = w.shape[0] - 1, w.shape[1], w.shape[2]
    if blocks is None:
        import cupy
        blocks = cupy.empty((nz, ny, nx), np.uint8)
        open_blocks(fractions, blocks)
    f = np.float32
    grid, block = _tiles(nx + 1, ny + 1, nz + 1)
    _kernel(name)(grid, block, (
        u, v, w, *fractions, blocks, f(inflow_x), f(inflow_y), np.int32(inflow_sides),
        f(cell_size), f(dt), *adv, *out, np.int32(nx), np.int32(ny), np.int32(nz)))


def advect_velocity(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out, blocks=None):
    """Semi-Lagrangian self-advection over dt (s), sampling open faces only (open fraction
    > 0), plus the boundary conditions (inflow through the sides of the bit mask
    ``inflow_sides``; one launch). ``blocks``: open_blocks(fractions) when the caller keeps
    it (computed here otherwise); the result does not depend on it."""
    _advect("advect<false>", u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size,
            dt, (u, v, w), (u_out, v_out, w_out), blocks)


def correct_advection(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                      u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
    """MacCormack correction of advect_velocity's result (one launch; see the reference)."""
    _advect("advect<true>", u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size,
            dt, (u_adv, v_adv, w_adv), (u_out, v_out, w_out), blocks)


def divergence(u, v, w, fractions, scale, out):
    """out = scale * net outflow A_f u_f of each cell's faces (see the reference)."""
    nz, ny, nx = out.shape
    grid, block = _tiles(nx, ny, nz)
    _kernel("divergence")(grid, block, (
        u, v, w, *fractions, np.float32(scale), out, np.int32(nx), np.int32(ny), np.int32(nz)))


def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract scale * pressure difference across each face whose coefficient is not 0
    (the full gradient, also on a partly open face), in place."""
    nz, ny, nx = pressure.shape
    grid, block = _tiles(nx + 1, ny + 1, nz + 1)
    _kernel("project", coef_x)(grid, block, (
        u, v, w, pressure, coef_x, coef_y, coef_z, np.float32(scale),
        np.int32(nx), np.int32(ny), np.int32(nz)))


def eddy_viscosity(u, v, w, solid, column_top, z0, cell_size, mixing, mixing_height, limit,
                   out):
    """out = the cells' eddy viscosity nu (m^2/s), l^2 |S| (see the reference)."""
    nz, ny, nx = out.shape
    grid, block = _tiles(nx, ny, nz)
    f = np.float32
    _kernel("eddy_viscosity")(grid, block, (
        u, v, w, solid, column_top, f(z0), f(cell_size), f(mixing), f(mixing_height), f(limit),
        out, np.int32(nx), np.int32(ny), np.int32(nz)))


def diffuse_velocity(u, v, w, fractions, nu, scale, u_out, v_out, w_out):
    """One explicit step of the eddy viscosity's diffusion (see the reference)."""
    nz, ny, nx = nu.shape
    grid, block = _tiles(nx + 1, ny + 1, nz + 1)
    _kernel("diffuse_velocity")(grid, block, (
        u, v, w, *fractions, nu, np.float32(scale), u_out, v_out, w_out,
        np.int32(nx), np.int32(ny), np.int32(nz)))


def porous_drag(u, v, w, solid, fence_bottom, fence_top, fence_resistance, z0, cell_size, dt):
    """The porous fences' drag over ``dt`` s, in place (see the reference)."""
    nz, ny, nx = solid.shape
    grid, block = _tiles(nx + 1, ny + 1, nz + 1)
    f = np.float32
    _kernel("porous_drag")(grid, block, (
        u, v, w, solid, fence_bottom, fence_top, fence_resistance, f(z0), f(cell_size), f(dt),
        np.int32(nx), np.int32(ny), np.int32(nz)))
