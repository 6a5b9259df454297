"""Pressure Poisson kernels, CUDA build through CuPy (same names, signatures and
arithmetic as kernels.reference.pressure; see there for the system and the transfers).
Each function is one kernel launch on the current stream."""
import numpy as np

from ..reference.pressure import (BB, COARSE_VCYCLE_CELLS, DIVERGENCE_AFTER, DIVERGENCE_BEFORE,  # noqa: F401
                                  DONE, DQ, ITERATIONS, RELATIVE, RR, RZ, RZ_NEXT, SCALAR_SLOTS,
                                  COEFFICIENT_STEPS)
from .common import LAUNCH_BLOCK, blocks, get_kernel, template_names

assert COEFFICIENT_STEPS == 128, "coef_value and coef_encoded below use 1/128"

SOURCE = r"""
#define IDX(k, j, i) (((long long)(k) * ny + (j)) * nx + (i))
// face coefficients: float, or unsigned char q = 128 A_f on the finest level (exact)
__device__ __forceinline__ float coef_value(float c) { return c; }
__device__ __forceinline__ float coef_value(unsigned char c) { return (float)c * 0.0078125f; }
template <typename C> __device__ __forceinline__ C coef_encoded(float c);
template <> __device__ __forceinline__ float coef_encoded<float>(float c) { return c; }
template <> __device__ __forceinline__ unsigned char coef_encoded<unsigned char>(float c) {
    return (unsigned char)(c * 128.0f);
}
#define CX(k, j, i) coef_value(cx[((long long)(k) * ny + (j)) * (nx + 1) + (i)])
#define CY(k, j, i) coef_value(cy[((long long)(k) * (ny + 1) + (j)) * nx + (i)])
#define CZ(k, j, i) coef_value(cz[((long long)(k) * ny + (j)) * nx + (i)])
// slots of the CG scalar array (kernels.reference.pressure)
#define SLOT_RR 2
#define SLOT_BB 4
#define SLOT_DONE 7
#define SLOT_ITERATIONS 8
#define SLOT_RELATIVE 9

__device__ __forceinline__ float qget(const float* __restrict__ p, int k, int j, int i,
                                      int nx, int ny, int nz) {
    if (k < 0 || k >= nz || j < 0 || j >= ny || i < 0 || i >= nx) return 0.0f;
    return p[IDX(k, j, i)];
}

// face coefficients C: float, or unsigned char on the finest level (q = 128 A_f: 4x less traffic)
template <typename C>
__device__ __forceinline__ float diag_at(const C* __restrict__ cx, const C* __restrict__ cy,
                                         const C* __restrict__ cz, int k, int j, int i,
                                         int nx, int ny) {
    return (((float)CX(k, j, i) + (float)CX(k, j, i + 1)) + ((float)CY(k, j, i) + (float)CY(k, j + 1, i)))
           + ((float)CZ(k, j, i) + (float)CZ(k + 1, j, i));
}

template <typename C>
__device__ __forceinline__ float nbsum_at(const float* __restrict__ p, const C* __restrict__ cx,
                                          const C* __restrict__ cy, const C* __restrict__ cz,
                                          int k, int j, int i, int nx, int ny, int nz) {
    float a = (float)CX(k, j, i) * qget(p, k, j, i - 1, nx, ny, nz) + (float)CX(k, j, i + 1) * qget(p, k, j, i + 1, nx, ny, nz);
    float b = (float)CY(k, j, i) * qget(p, k, j - 1, i, nx, ny, nz) + (float)CY(k, j + 1, i) * qget(p, k, j + 1, i, nx, ny, nz);
    float c = (float)CZ(k, j, i) * qget(p, k - 1, j, i, nx, ny, nz) + (float)CZ(k + 1, j, i) * qget(p, k + 1, j, i, nx, ny, nz);
    return (a + b) + c;
}

#define CELL_INDEX                                                        \
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;       \
    if (t >= (long long)nz * ny * nx) return;                             \
    int i = (int)(t % nx); long long r_ = t / nx;                         \
    int j = (int)(r_ % ny); int k = (int)(r_ / ny);

template <typename C>
__global__ void face_coefficients(const float* __restrict__ fu, const float* __restrict__ fv,
                                  const float* __restrict__ fw,
                                  int oxm, int oxp, int oym, int oyp,
                                  C* __restrict__ cx, C* __restrict__ cy,
                                  C* __restrict__ cz, int nx, int ny, int nz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nu = (long long)nz * ny * (nx + 1);
    const long long nv = (long long)nz * (ny + 1) * nx;
    const long long nw = (long long)(nz + 1) * ny * nx;
    if (t < nu) {
        int i = (int)(t % (nx + 1)); long long r = t / (nx + 1);
        int j = (int)(r % ny); int k = (int)(r / ny);
        float c = fu[t];
        if ((i == 0 && !oxm) || (i == nx && !oxp)) c = 0.0f;
        cx[t] = coef_encoded<C>(c);
        return;
    }
    t -= nu;
    if (t < nv) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % (ny + 1)); int k = (int)(r / (ny + 1));
        float c = fv[t];
        if ((j == 0 && !oym) || (j == ny && !oyp)) c = 0.0f;
        cy[t] = coef_encoded<C>(c);
        return;
    }
    t -= nv;
    if (t < nw) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % ny); int k = (int)(r / ny);
        float c = (k > 0 && k < nz) ? fw[t] : 0.0f;
        cz[t] = coef_encoded<C>(c);
    }
}

// coarse grid (ncx, ncy, ncz) from fine (nx, ny, nz) with factors (fx, fy, fz)
template <typename C>
__global__ void restrict_coefficients(const C* __restrict__ cx, const C* __restrict__ cy,
                                      const C* __restrict__ cz, int fx, int fy, int fz,
                                                 float bx, float by,
                                                 float* __restrict__ ocx, float* __restrict__ ocy,
                                                 float* __restrict__ ocz, int nx, int ny, int nz,
                                                 int ncx, int ncy, int ncz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nu = (long long)ncz * ncy * (ncx + 1);
    const long long nv = (long long)ncz * (ncy + 1) * ncx;
    const long long nw = (long long)(ncz + 1) * ncy * ncx;
    if (t < nu) {
        int I = (int)(t % (ncx + 1)); long long r = t / (ncx + 1);
        int J = (int)(r % ncy); int K = (int)(r / ncy);
        int i = min(I * fx, nx);
        float acc = 0.0f;
        for (int k = K * fz; k < min(K * fz + fz, nz); ++k) {  // rows first, as the reference
            float row = 0.0f;
            for (int j = J * fy; j < min(J * fy + fy, ny); ++j) row += (float)CX(k, j, i);
            acc += row;
        }
        float c = acc / (float)fx;
        if (I == 0 || I == ncx) c = c * bx;
        ocx[t] = c;
        return;
    }
    t -= nu;
    if (t < nv) {
        int I = (int)(t % ncx); long long r = t / ncx;
        int J = (int)(r % (ncy + 1)); int K = (int)(r / (ncy + 1));
        int j = min(J * fy, ny);
        float acc = 0.0f;
        for (int k = K * fz; k < min(K * fz + fz, nz); ++k) {
            float row = 0.0f;
            for (int i = I * fx; i < min(I * fx + fx, nx); ++i) row += (float)CY(k, j, i);
            acc += row;
        }
        float c = acc / (float)fy;
        if (J == 0 || J == ncy) c = c * by;
        ocy[t] = c;
        return;
    }
    t -= nv;
    if (t < nw) {
        int I = (int)(t % ncx); long long r = t / ncx;
        int J = (int)(r % ncy); int K = (int)(r / ncy);
        int k = min(K * fz, nz);
        float acc = 0.0f;
        for (int j = J * fy; j < min(J * fy + fy, ny); ++j) {
            float row = 0.0f;
            for (int i = I * fx; i < min(I * fx + fx, nx); ++i) row += (float)CZ(k, j, i);
            acc += row;
        }
        ocz[t] = acc / (float)fz;
    }
}

// 3D launches: grid (ceil(nx / bx), ceil(ny / by), nz), block (bx, by): no index division.
// 32-bit indices (the launchers refuse arrays of 2^31 elements or more).
#define CELL3                                                             \
    const int i = blockIdx.x * blockDim.x + threadIdx.x;                  \
    const int j = blockIdx.y * blockDim.y + threadIdx.y;                  \
    const int k = blockIdx.z;                                             \
    if (i >= nx || j >= ny) return;                                       \
    const int t = (k * ny + j) * nx + i;

// diagonal and neighbour sum of cell (k, j, i) = t: one range check per neighbour; the
// same arithmetic, in the same order, as diag_at / nbsum_at
template <typename C>
__device__ __forceinline__ void stencil(const float* __restrict__ p, const C* __restrict__ cx,
                                        const C* __restrict__ cy, const C* __restrict__ cz,
                                        int k, int j, int i, int t, int nx, int ny, int nz,
                                        float &diag, float &nb) {
    const int nxy = nx * ny;
    const int fx = t + k * ny + j;          // CX(k, j, i)
    const int fy = t + k * nx;              // CY(k, j, i)
    const float cw = coef_value(__ldg(cx + fx)), ce = coef_value(__ldg(cx + fx + 1));
    const float cs = coef_value(__ldg(cy + fy)), cn = coef_value(__ldg(cy + fy + nx));
    const float cd = coef_value(__ldg(cz + t)), cu = coef_value(__ldg(cz + t + nxy));
    const float pw = i > 0 ? __ldg(p + t - 1) : 0.0f, pe = i < nx - 1 ? __ldg(p + t + 1) : 0.0f;
    const float ps = j > 0 ? __ldg(p + t - nx) : 0.0f, pn = j < ny - 1 ? __ldg(p + t + nx) : 0.0f;
    const float pd = k > 0 ? __ldg(p + t - nxy) : 0.0f, pu = k < nz - 1 ? __ldg(p + t + nxy) : 0.0f;
    diag = ((cw + ce) + (cs + cn)) + (cd + cu);
    nb = ((cw * pw + ce * pe) + (cs * ps + cn * pn)) + (cd * pd + cu * pu);
}

template <typename C>
__global__ void apply_operator(const float* __restrict__ p, const C* __restrict__ cx,
                               const C* __restrict__ cy, const C* __restrict__ cz,
                               float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    float d, nb;
    stencil(p, cx, cy, cz, k, j, i, t, nx, ny, nz, d, nb);
    out[t] = d > 0.0f ? d * p[t] - nb : 0.0f;
}

template <typename C>
__global__ void residual(const float* __restrict__ p, const float* __restrict__ b,
                         const C* __restrict__ cx, const C* __restrict__ cy,
                         const C* __restrict__ cz, float* __restrict__ out,
                         int nx, int ny, int nz) {
    CELL3
    float d, nb;
    stencil(p, cx, cy, cz, k, j, i, t, nx, ny, nz, d, nb);
    out[t] = d > 0.0f ? b[t] - (d * p[t] - nb) : 0.0f;
}

template <typename C>
__global__ void jacobi_sweep(const float* __restrict__ p, const float* __restrict__ b,
                             const C* __restrict__ cx, const C* __restrict__ cy,
                             const C* __restrict__ cz, float om,
                             float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    float d, nb;
    stencil(p, cx, cy, cz, k, j, i, t, nx, ny, nz, d, nb);
    out[t] = d > 0.0f ? p[t] + om * ((b[t] + nb) / d - p[t]) : 0.0f;
}

// one thread per cell of the colour: i = 2 * ih + ((k + j + color) & 1); the grid's x
// covers ih < (nx + 1) / 2. p is read and written: no __ldg on it.
template <typename C>
__global__ void redblack_sweep(float* __restrict__ p, const float* __restrict__ b,
                               const C* __restrict__ cx, const C* __restrict__ cy,
                               const C* __restrict__ cz, float om, int color,
                               int nx, int ny, int nz) {
    const int ih = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z;
    const int i = 2 * ih + ((k + j + color) & 1);
    if (i >= nx || j >= ny) return;
    const int t = (k * ny + j) * nx + i;
    const int nxy = nx * ny;
    const int fx = t + k * ny + j, fy = t + k * nx;
    const float cw = coef_value(__ldg(cx + fx)), ce = coef_value(__ldg(cx + fx + 1));
    const float cs = coef_value(__ldg(cy + fy)), cn = coef_value(__ldg(cy + fy + nx));
    const float cd = coef_value(__ldg(cz + t)), cu = coef_value(__ldg(cz + t + nxy));
    const float d = ((cw + ce) + (cs + cn)) + (cd + cu);
    if (d > 0.0f) {
        const float pw = i > 0 ? p[t - 1] : 0.0f, pe = i < nx - 1 ? p[t + 1] : 0.0f;
        const float ps = j > 0 ? p[t - nx] : 0.0f, pn = j < ny - 1 ? p[t + nx] : 0.0f;
        const float pd = k > 0 ? p[t - nxy] : 0.0f, pu = k < nz - 1 ? p[t + nxy] : 0.0f;
        const float nb = ((cw * pw + ce * pe) + (cs * ps + cn * pn)) + (cd * pd + cu * pu);
        const float pc = p[t];
        p[t] = pc + om * ((__ldg(b + t) + nb) / d - pc);
    } else {
        p[t] = 0.0f;
    }
}

// p = 0 everywhere, then the half-sweep of colour `color` from that zero guess, in one
// pass (the V-cycle's first half-sweep of a level): every neighbour is 0, so each cell of
// the colour gets redblack_sweep's expression with pc = nb = 0 (kept literally: 0 + x is
// not x for x = -0), the other colour 0. One thread per cell.
template <typename C>
__global__ void redblack_first_from_zero(float* __restrict__ p, const float* __restrict__ b,
                                         const C* __restrict__ cx, const C* __restrict__ cy,
                                         const C* __restrict__ cz, float om, int color,
                                         int nx, int ny, int nz) {
    CELL3
    float out = 0.0f;
    if (((i + j + k) & 1) == color) {
        const int nxy = nx * ny;
        const int fx = t + k * ny + j, fy = t + k * nx;
        const float cw = coef_value(__ldg(cx + fx)), ce = coef_value(__ldg(cx + fx + 1));
        const float cs = coef_value(__ldg(cy + fy)), cn = coef_value(__ldg(cy + fy + nx));
        const float cd = coef_value(__ldg(cz + t)), cu = coef_value(__ldg(cz + t + nxy));
        const float d = ((cw + ce) + (cs + cn)) + (cd + cu);
        if (d > 0.0f) {
            // neighbours all 0: nb = ((cw*0 + ce*0) + (cs*0 + cn*0)) + (cd*0 + cu*0) = +0
            // (coefficients are finite and >= 0)
            const float zero = 0.0f;
            out = zero + om * ((__ldg(b + t) + zero) / d - zero);
        }
    }
    p[t] = out;
}

__device__ __forceinline__ float axis_weight(int fine, int coarse, int f, int n_coarse) {
    if (f == 1) return fine == coarse ? 1.0f : 0.0f;
    int parent = fine / 2;
    int partner = (fine % 2 == 0) ? parent - 1 : parent + 1;
    partner = min(max(partner, 0), n_coarse - 1);
    float a = parent == coarse ? 0.75f : 0.0f;
    float b = partner == coarse ? 0.25f : 0.0f;
    return a + b;
}

extern "C" __global__ void restrict_residual(const float* __restrict__ r, int fx, int fy, int fz,
                                             float* __restrict__ out, int nx, int ny, int nz,
                                             int ncx, int ncy, int ncz) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    const int J = blockIdx.y * blockDim.y + threadIdx.y;
    const int K = blockIdx.z;
    if (I >= ncx || J >= ncy) return;
    int loz = fz == 2 ? -1 : 0, hiz = fz == 2 ? 3 : 1;
    int loy = fy == 2 ? -1 : 0, hiy = fy == 2 ? 3 : 1;
    int lox = fx == 2 ? -1 : 0, hix = fx == 2 ? 3 : 1;
    float acc = 0.0f;
    for (int dk = loz; dk < hiz; ++dk) {
        int k = fz * K + dk;
        float wz = (k >= 0 && k < nz) ? axis_weight(k, K, fz, ncz) : 0.0f;
        int kc = min(max(k, 0), nz - 1);
        for (int dj = loy; dj < hiy; ++dj) {
            int j = fy * J + dj;
            float wy = (j >= 0 && j < ny) ? axis_weight(j, J, fy, ncy) : 0.0f;
            int jc = min(max(j, 0), ny - 1);
            const float* row = r + (kc * ny + jc) * nx;
            for (int di = lox; di < hix; ++di) {
                int i = fx * I + di;
                float wx = (i >= 0 && i < nx) ? axis_weight(i, I, fx, ncx) : 0.0f;
                int ic = min(max(i, 0), nx - 1);
                acc = acc + ((wz * wy) * wx) * __ldg(row + ic);
            }
        }
    }
    out[(K * ncy + J) * ncx + I] = acc;
}

__device__ __forceinline__ int parent_of(int i, int f, int n_coarse, int which, float &weight) {
    if (f == 1) { weight = which == 0 ? 1.0f : 0.0f; return i; }
    int parent = i / 2;
    if (which == 0) { weight = 0.75f; return parent; }
    weight = 0.25f;
    int partner = (i % 2 == 0) ? parent - 1 : parent + 1;
    return min(max(partner, 0), n_coarse - 1);
}

template <typename C>
__global__ void prolong_add(const float* __restrict__ coarse, const C* __restrict__ cx,
                            const C* __restrict__ cy, const C* __restrict__ cz,
                            int fx, int fy, int fz, float* __restrict__ p,
                            int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    if (!(diag_at(cx, cy, cz, k, j, i, nx, ny) > 0.0f)) return;
    float acc = 0.0f;
    for (int a = 0; a < 2; ++a) {
        float wz; int K = parent_of(k, fz, ncz, a, wz);
        for (int b = 0; b < 2; ++b) {
            float wy; int J = parent_of(j, fy, ncy, b, wy);
            for (int c = 0; c < 2; ++c) {
                float wx; int I = parent_of(i, fx, ncx, c, wx);
                acc = acc + ((wz * wy) * wx) * __ldg(coarse + (K * ncy + J) * ncx + I);
            }
        }
    }
    p[t] = p[t] + acc;
}

// fine scale = 1 / (weights of the active coarse parents) in active fine cells, else 0
template <typename C>
__global__ void transfer_scale(const float* __restrict__ ccx, const float* __restrict__ ccy,
                               const float* __restrict__ ccz, const C* __restrict__ cx,
                               const C* __restrict__ cy, const C* __restrict__ cz,
                               int fx, int fy, int fz, float* __restrict__ out,
                               int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    float acc = 0.0f;
    if (diag_at(cx, cy, cz, k, j, i, nx, ny) > 0.0f) {
        for (int a = 0; a < 2; ++a) {
            float wz; int K = parent_of(k, fz, ncz, a, wz);
            for (int b = 0; b < 2; ++b) {
                float wy; int J = parent_of(j, fy, ncy, b, wy);
                for (int c = 0; c < 2; ++c) {
                    float wx; int I = parent_of(i, fx, ncx, c, wx);
                    float active = diag_at(ccx, ccy, ccz, K, J, I, ncx, ncy) > 0.0f ? 1.0f : 0.0f;
                    acc = acc + ((wz * wy) * wx) * active;
                }
            }
        }
    }
    out[t] = acc > 0.0f ? 1.0f / acc : 0.0f;
}

// The factors are template arguments: the gather loops unroll and the weights fold into
// constants (the same operations in the same order as with run-time factors).
template <int fx, int fy, int fz>
__global__ void restrict_scaled_residual(const float* __restrict__ r,
                                         const float* __restrict__ scale,
                                         float* __restrict__ out, int nx, int ny, int nz,
                                         int ncx, int ncy, int ncz) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    const int J = blockIdx.y * blockDim.y + threadIdx.y;
    const int K = blockIdx.z;
    if (I >= ncx || J >= ncy) return;
    int loz = fz == 2 ? -1 : 0, hiz = fz == 2 ? 3 : 1;
    int loy = fy == 2 ? -1 : 0, hiy = fy == 2 ? 3 : 1;
    int lox = fx == 2 ? -1 : 0, hix = fx == 2 ? 3 : 1;
    float acc = 0.0f;
    for (int dk = loz; dk < hiz; ++dk) {
        int k = fz * K + dk;
        float wz = (k >= 0 && k < nz) ? axis_weight(k, K, fz, ncz) : 0.0f;
        int kc = min(max(k, 0), nz - 1);
        for (int dj = loy; dj < hiy; ++dj) {
            int j = fy * J + dj;
            float wy = (j >= 0 && j < ny) ? axis_weight(j, J, fy, ncy) : 0.0f;
            int jc = min(max(j, 0), ny - 1);
            const int row = (kc * ny + jc) * nx;
            for (int di = lox; di < hix; ++di) {
                int i = fx * I + di;
                float wx = (i >= 0 && i < nx) ? axis_weight(i, I, fx, ncx) : 0.0f;
                int ic = min(max(i, 0), nx - 1);
                float value = __ldg(r + row + ic) * __ldg(scale + row + ic);
                acc = acc + ((wz * wy) * wx) * value;
            }
        }
    }
    out[(K * ncy + J) * ncx + I] = acc;
}

template <int fx, int fy, int fz>
__global__ void prolong_scaled_add(const float* __restrict__ coarse,
                                   const float* __restrict__ scale, float* __restrict__ p,
                                   int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    const float s = __ldg(scale + t);
    float acc = 0.0f;
    for (int a = 0; a < 2; ++a) {
        float wz; int K = parent_of(k, fz, ncz, a, wz);
        for (int b = 0; b < 2; ++b) {
            float wy; int J = parent_of(j, fy, ncy, b, wy);
            for (int c = 0; c < 2; ++c) {
                float wx; int I = parent_of(i, fx, ncx, c, wx);
                acc = acc + ((wz * wy) * wx) * __ldg(coarse + (K * ncy + J) * ncx + I);
            }
        }
    }
    p[t] = p[t] + s * acc;
}

// all sweeps of redblack_pairs in ONE block (small levels): __syncthreads between colours
template <typename C>
__global__ void redblack_pairs_block(float* __restrict__ p, const float* __restrict__ b,
                                     const C* __restrict__ cx, const C* __restrict__ cy,
                                     const C* __restrict__ cz, float om, int first,
                                     int pairs, int nx, int ny, int nz) {
    const int n = nz * ny * nx;
    for (int s = 0; s < 2 * pairs; ++s) {
        int color = (first + s) & 1;
        for (int t = threadIdx.x; t < n; t += blockDim.x) {
            int i = t % nx; int r = t / nx;
            int j = r % ny; int k = r / ny;
            if (((i + j + k) & 1) != color) continue;
            float d = diag_at(cx, cy, cz, k, j, i, nx, ny);
            if (d > 0.0f) {
                float nb = nbsum_at(p, cx, cy, cz, k, j, i, nx, ny, nz);
                p[t] = p[t] + om * ((b[t] + nb) / d - p[t]);
            } else {
                p[t] = 0.0f;
            }
        }
        __syncthreads();
    }
}

// ---- the whole coarse end of a V-cycle in ONE block (coarse_vcycle) ----------------------
// Every level's arrays are read and written inside the kernel, so no pointer carries
// __restrict__ or __ldg (no non-coherent loads). When they fit ("staged"), all levels
// are copied into shared memory first (latency ~30 cycles instead of an L2 round trip per
// load in the ~150 dependent phases) and the results copied back at the end. Each per-cell operation repeats the arithmetic of the
// per-level kernels above in the same order, and __syncthreads separates the phases the
// per-level sequence separates by launches, so the results are the same bits.
#define LV_SOL 0
#define LV_RHS 1
#define LV_RES 2
#define LV_CX 3
#define LV_CY 4
#define LV_CZ 5
#define LV_NX 6
#define LV_NY 7
#define LV_NZ 8
#define LV_FX 9
#define LV_FY 10
#define LV_FZ 11
// offsets (floats) of the level's arrays in the dynamic shared memory when staged
#define LV_SSOL 12
#define LV_SRHS 13
#define LV_SRES 14
#define LV_SCX 15
#define LV_SCY 16
#define LV_SCZ 17
#define LV_FIELDS 18
#define LV_MAX 24

struct BlockLevel {
    float* sol; float* rhs; float* res;
    const float* cx; const float* cy; const float* cz;
    int nx, ny, nz, fx, fy, fz;
    // reciprocals for the index arithmetic (exact_divide): of nx, ny and (nx + 1) / 2
    unsigned mx, my, mhalf;
};

// The phases are short loops over a level's cells on one SM, where a general integer
// division (dozens of instructions) per index would be much of the work: w / d as a
// multiply-high by m = ceil(2^32 / d), exact while w * (m * d - 2^32) < 2^32, which
// holds for w, d < 2^16 (coarse_vcycle refuses bigger levels).
__device__ __forceinline__ unsigned reciprocal_of(int d) {
    return d == 1 ? 0u : 0xFFFFFFFFu / (unsigned)d + 1u;
}
__device__ __forceinline__ int exact_divide(int w, int d, unsigned m) {
    return d == 1 ? w : (int)__umulhi((unsigned)w, m);
}
// (k, j, i) of linear index t = (k * ny + j) * nx + i, with mx, my the reciprocals of nx, ny
__device__ __forceinline__ void cell_of(int t, int nx, unsigned mx, int ny, unsigned my,
                                        int& k, int& j, int& i) {
    const int r = exact_divide(t, nx, mx);
    i = t - r * nx;
    k = exact_divide(r, ny, my);
    j = r - k * ny;
}

// diagonal and neighbour sum as diag_at / nbsum_at / stencil (same order of operations;
// a neighbour outside the level reads 0)
__device__ __forceinline__ void block_stencil(const float* p, const BlockLevel& L, int k, int j, int i,
                                              float& d, float& nb) {
    const int nx = L.nx, ny = L.ny, nz = L.nz, plane = nx * ny;
    const int t = (k * ny + j) * nx + i;
    const float cw = L.cx[t + k * ny + j], ce = L.cx[t + k * ny + j + 1];
    const float cs = L.cy[t + k * nx], cn = L.cy[t + k * nx + nx];
    const float cd = L.cz[t], cu = L.cz[t + plane];
    d = ((cw + ce) + (cs + cn)) + (cd + cu);
    const float pw = i > 0 ? p[t - 1] : 0.0f, pe = i + 1 < nx ? p[t + 1] : 0.0f;
    const float ps = j > 0 ? p[t - nx] : 0.0f, pn = j + 1 < ny ? p[t + nx] : 0.0f;
    const float pd = k > 0 ? p[t - plane] : 0.0f, pu = k + 1 < nz ? p[t + plane] : 0.0f;
    nb = ((cw * pw + ce * pe) + (cs * ps + cn * pn)) + (cd * pd + cu * pu);
}

// who works on a phase: the whole block (__syncthreads after it) or, on tiny levels, only
// warp 0 (__syncwarp: the other warps skip ahead to the next whole-block phase)
struct Team {
    int first, stride;
    bool warp;
    __device__ __forceinline__ void sync() const { if (warp) __syncwarp(); else __syncthreads(); }
};

__device__ __forceinline__ Team make_team(bool warp) {
    Team tm;
    tm.warp = warp;
    tm.first = warp ? (threadIdx.x < 32 ? (int)threadIdx.x : 0x7fffffff) : (int)threadIdx.x;
    tm.stride = warp ? 32 : (int)blockDim.x;
    return tm;
}

// colours first, 1 - first, first, ... (2 * pairs half-sweeps, from half-sweep `from` on);
// one thread per cell of the colour, as redblack_sweep
__device__ void block_redblack_pairs(const Team& tm, const BlockLevel& L, float om, int first, int pairs,
                                     int from = 0) {
    const int nx = L.nx, ny = L.ny, nz = L.nz;
    const int half = (nx + 1) / 2;
    const int count = nz * ny * half;
    float* p = L.sol;
    const float* b = L.rhs;
    for (int s = from; s < 2 * pairs; ++s) {
        const int color = (first + s) & 1;
        for (int w = tm.first; w < count; w += tm.stride) {
            int k, j, ih;
            cell_of(w, half, L.mhalf, ny, L.my, k, j, ih);
            const int i = 2 * ih + ((k + j + color) & 1);
            if (i >= nx) continue;
            const int t = (k * ny + j) * nx + i;
            float d, nb;
            block_stencil(p, L, k, j, i, d, nb);
            if (d > 0.0f) {
                const float pc = p[t];
                p[t] = pc + om * ((b[t] + nb) / d - pc);
            } else {
                p[t] = 0.0f;
            }
        }
        tm.sync();
    }
}

// sol = 0, then block_redblack_pairs from that zero guess: the zeroing and the first
// half-sweep in one phase, as redblack_first_from_zero (same values)
__device__ void block_redblack_pairs_from_zero(const Team& tm, const BlockLevel& L, float om, int first,
                                               int pairs) {
    const int nx = L.nx, ny = L.ny, nz = L.nz, n = nx * ny * nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, L.mx, ny, L.my, k, j, i);
        float out = 0.0f;
        if (pairs > 0 && ((i + j + k) & 1) == first) {
            const float cw = L.cx[t + k * ny + j], ce = L.cx[t + k * ny + j + 1];
            const float cs = L.cy[t + k * nx], cn = L.cy[t + k * nx + nx];
            const float cd = L.cz[t], cu = L.cz[t + nx * ny];
            const float d = ((cw + ce) + (cs + cn)) + (cd + cu);
            if (d > 0.0f) {
                const float zero = 0.0f;
                out = zero + om * ((L.rhs[t] + zero) / d - zero);
            }
        }
        L.sol[t] = out;
    }
    tm.sync();
    if (pairs > 0) block_redblack_pairs(tm, L, om, first, pairs, 1);
}

__device__ void block_residual(const Team& tm, const BlockLevel& L) {
    const int nx = L.nx, ny = L.ny, nz = L.nz, n = nx * ny * nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, L.mx, ny, L.my, k, j, i);
        float d, nb;
        block_stencil(L.sol, L, k, j, i, d, nb);
        L.res[t] = d > 0.0f ? L.rhs[t] - (d * L.sol[t] - nb) : 0.0f;
    }
    tm.sync();
}

// coarse.rhs = P^T fine.res, as restrict_residual
__device__ void block_restrict(const Team& tm, const BlockLevel& F, const BlockLevel& C) {
    const int nx = F.nx, ny = F.ny, nz = F.nz, fx = F.fx, fy = F.fy, fz = F.fz;
    const int ncx = C.nx, ncy = C.ny, ncz = C.nz, n = ncx * ncy * ncz;
    const int loz = fz == 2 ? -1 : 0, hiz = fz == 2 ? 3 : 1;
    const int loy = fy == 2 ? -1 : 0, hiy = fy == 2 ? 3 : 1;
    const int lox = fx == 2 ? -1 : 0, hix = fx == 2 ? 3 : 1;
    for (int t = tm.first; t < n; t += tm.stride) {
        int K, J, I;
        cell_of(t, ncx, C.mx, ncy, C.my, K, J, I);
        float acc = 0.0f;
        for (int dk = loz; dk < hiz; ++dk) {
            int k = fz * K + dk;
            float wz = (k >= 0 && k < nz) ? axis_weight(k, K, fz, ncz) : 0.0f;
            int kc = min(max(k, 0), nz - 1);
            for (int dj = loy; dj < hiy; ++dj) {
                int j = fy * J + dj;
                float wy = (j >= 0 && j < ny) ? axis_weight(j, J, fy, ncy) : 0.0f;
                int jc = min(max(j, 0), ny - 1);
                const float* row = F.res + (kc * ny + jc) * nx;
                for (int di = lox; di < hix; ++di) {
                    int i = fx * I + di;
                    float wx = (i >= 0 && i < nx) ? axis_weight(i, I, fx, ncx) : 0.0f;
                    int ic = min(max(i, 0), nx - 1);
                    acc = acc + ((wz * wy) * wx) * row[ic];
                }
            }
        }
        C.rhs[t] = acc;
    }
    tm.sync();
}

// fine.sol += P coarse.sol in fluid cells, as prolong_add
__device__ void block_prolong_add(const Team& tm, const BlockLevel& F, const BlockLevel& C) {
    const int nx = F.nx, ny = F.ny, nz = F.nz, n = nx * ny * nz;
    const int ncx = C.nx, ncy = C.ny, ncz = C.nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, F.mx, ny, F.my, k, j, i);
        const float cw = F.cx[t + k * ny + j], ce = F.cx[t + k * ny + j + 1];
        const float cs = F.cy[t + k * nx], cn = F.cy[t + k * nx + nx];
        const float cd = F.cz[t], cu = F.cz[t + nx * ny];
        if (!((((cw + ce) + (cs + cn)) + (cd + cu)) > 0.0f)) continue;
        float acc = 0.0f;
        for (int a = 0; a < 2; ++a) {
            float wz; int K = parent_of(k, F.fz, ncz, a, wz);
            for (int b = 0; b < 2; ++b) {
                float wy; int J = parent_of(j, F.fy, ncy, b, wy);
                for (int c = 0; c < 2; ++c) {
                    float wx; int I = parent_of(i, F.fx, ncx, c, wx);
                    acc = acc + ((wz * wy) * wx) * C.sol[(K * ncy + J) * ncx + I];
                }
            }
        }
        F.sol[t] = F.sol[t] + acc;
    }
    tm.sync();
}

__device__ __forceinline__ void block_copy(float* dst, const float* src, int n) {
    for (int t = threadIdx.x; t < n; t += blockDim.x) dst[t] = src[t];
}

extern "C" __global__ void __launch_bounds__(1024)
coarse_vcycle_block(const long long* __restrict__ table, int levels, float om,
                    int smoothing_pairs, int coarsest_pairs, int staged, int warp_cells) {
    extern __shared__ float shared_levels[];
    __shared__ BlockLevel G[LV_MAX];  // the arrays in global memory
    __shared__ BlockLevel L[LV_MAX];  // where the kernel works on them
    if (threadIdx.x < levels) {
        const long long* e = table + threadIdx.x * LV_FIELDS;
        BlockLevel v;
        v.sol = (float*)e[LV_SOL]; v.rhs = (float*)e[LV_RHS]; v.res = (float*)e[LV_RES];
        v.cx = (const float*)e[LV_CX]; v.cy = (const float*)e[LV_CY]; v.cz = (const float*)e[LV_CZ];
        v.nx = (int)e[LV_NX]; v.ny = (int)e[LV_NY]; v.nz = (int)e[LV_NZ];
        v.fx = (int)e[LV_FX]; v.fy = (int)e[LV_FY]; v.fz = (int)e[LV_FZ];
        v.mx = reciprocal_of(v.nx); v.my = reciprocal_of(v.ny); v.mhalf = reciprocal_of((v.nx + 1) / 2);
        G[threadIdx.x] = v;
        if (staged) {
            v.sol = shared_levels + e[LV_SSOL]; v.rhs = shared_levels + e[LV_SRHS];
            v.res = shared_levels + e[LV_SRES]; v.cx = shared_levels + e[LV_SCX];
            v.cy = shared_levels + e[LV_SCY]; v.cz = shared_levels + e[LV_SCZ];
        }
        L[threadIdx.x] = v;
    }
    __syncthreads();
    const int last = levels - 1;
    if (staged) {
        for (int l = 0; l < levels; ++l) {
            const int nx = G[l].nx, ny = G[l].ny, nz = G[l].nz;
            block_copy((float*)L[l].cx, G[l].cx, nz * ny * (nx + 1));
            block_copy((float*)L[l].cy, G[l].cy, nz * (ny + 1) * nx);
            block_copy((float*)L[l].cz, G[l].cz, (nz + 1) * ny * nx);
        }
        block_copy(L[0].rhs, G[0].rhs, G[0].nx * G[0].ny * G[0].nz);
        __syncthreads();
    }
    bool previous_warp = false;  // uniform over the block
    // the team of the next phase; a whole-block phase after warp-0 phases first waits
    // for warp 0 (so its writes are visible to every warp)
    auto team = [&](bool warp) {
        if (previous_warp && !warp) __syncthreads();
        previous_warp = warp;
        return make_team(warp);
    };
    auto tiny = [&](int l) { return L[l].nx * L[l].ny * L[l].nz <= warp_cells; };
    for (int l = 0; l < last; ++l) {
        const Team tm = team(tiny(l));
        block_redblack_pairs_from_zero(tm, L[l], om, 0, smoothing_pairs);
        block_residual(tm, L[l]);
        block_restrict(team(tiny(l) && tiny(l + 1)), L[l], L[l + 1]);
    }
    {
        const Team tm = team(tiny(last));
        block_redblack_pairs_from_zero(tm, L[last], om, 0, coarsest_pairs);
        block_redblack_pairs(tm, L[last], om, 1, coarsest_pairs);
    }
    for (int l = last - 1; l >= 0; --l) {
        block_prolong_add(team(tiny(l) && tiny(l + 1)), L[l], L[l + 1]);
        block_redblack_pairs(team(tiny(l)), L[l], om, 1, smoothing_pairs);
    }
    if (staged) {  // everything the per-level sequence leaves in global memory
        if (previous_warp) __syncthreads();
        for (int l = 0; l < levels; ++l) {
            const int n = G[l].nx * G[l].ny * G[l].nz;
            block_copy(G[l].sol, L[l].sol, n);
            if (l > 0) block_copy(G[l].rhs, L[l].rhs, n);
            if (l < last) block_copy(G[l].res, L[l].res, n);
        }
    }
}

// ---- CG kernels with their dot product fused in ------------------------------------------
// Each block writes the float64 sum of its threads' products to partial[block] (warp
// shuffles in a fixed order, then the warps in order), and partial_final adds the
// partials in a fixed order: deterministic, not the same order as dot (within float64
// rounding of it).
__device__ __forceinline__ void block_sum_to(double v, double* __restrict__ partial, long long slot) {
    __shared__ double warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int w = 0; w < (nthreads + 31) / 32; ++w) acc += warp_sums[w];
        partial[slot] = acc;
    }
}

// 3D launches as CELL3 (blocks of 128 threads, no early return: every thread reaches the
// block sum); the block's partial goes to its linear index in the grid
#define BLOCK_SLOT ((long long)(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x)

// out = A p and partial sums of p . out
template <typename C>
__global__ void apply_operator_dot(const float* __restrict__ p, const C* __restrict__ cx,
                                   const C* __restrict__ cy, const C* __restrict__ cz,
                                   float* __restrict__ out, double* __restrict__ partial,
                                   int nx, int ny, int nz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z;
    double v = 0.0;
    if (i < nx && j < ny) {
        const int t = (k * ny + j) * nx + i;
        float d, nb;
        stencil(p, cx, cy, cz, k, j, i, t, nx, ny, nz, d, nb);
        const float pc = __ldg(p + t);
        const float o = d > 0.0f ? d * pc - nb : 0.0f;
        out[t] = o;
        v = (double)pc * (double)o;
    }
    block_sum_to(v, partial, BLOCK_SLOT);
}

// out = b - A p and partial sums of b . b
template <typename C>
__global__ void residual_norm(const float* __restrict__ p, const float* __restrict__ b,
                              const C* __restrict__ cx, const C* __restrict__ cy,
                              const C* __restrict__ cz, float* __restrict__ out,
                              double* __restrict__ partial, int nx, int ny, int nz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z;
    double v = 0.0;
    if (i < nx && j < ny) {
        const int t = (k * ny + j) * nx + i;
        float d, nb;
        stencil(p, cx, cy, cz, k, j, i, t, nx, ny, nz, d, nb);
        const float bt = __ldg(b + t);
        out[t] = d > 0.0f ? bt - (d * __ldg(p + t) - nb) : 0.0f;
        v = (double)bt * (double)bt;
    }
    block_sum_to(v, partial, BLOCK_SLOT);
}

// cg_update, and partial sums of the new r . r
extern "C" __global__ void cg_update_norm(float* __restrict__ x, float* __restrict__ r,
                                          const float* __restrict__ d, const float* __restrict__ q,
                                          const double* __restrict__ scalars,
                                          double* __restrict__ partial, long long n) {
    if (scalars[SLOT_DONE] != 0.0) return;  // the solve stopped: x and r stay (whole grid)
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double v = 0.0;
    if (t < n) {
        double dq = scalars[1];
        float alpha = dq > 0.0 ? (float)(scalars[0] / dq) : 0.0f;
        x[t] = x[t] + alpha * d[t];
        const float rn = r[t] - alpha * q[t];
        r[t] = rn;
        v = (double)rn * (double)rn;
    }
    block_sum_to(v, partial, blockIdx.x);
}

// the sum of count partials in thread 0 (1024 threads: strided sums, then a tree)
__device__ __forceinline__ double partial_total(const double* __restrict__ partial, long long count) {
    __shared__ double cache[1024];
    double acc = 0.0;
    for (long long t = threadIdx.x; t < count; t += 1024) acc += partial[t];
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 512; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    return cache[0];
}

// scalars[slot] = the sum of count partials
extern "C" __global__ void partial_final(const double* __restrict__ partial, long long count,
                                         double* __restrict__ scalars, int slot) {
    const double total = partial_total(partial, count);
    if (threadIdx.x == 0) scalars[slot] = total;
}

// ---- the solve's convergence check on the device (kernels.reference.pressure.cg_check) ----

// count the iteration; relative = sqrt(max(rr, 0) / bb) (IEEE double division and square
// root: the bits of the reference's math.sqrt), 0 when bb == 0; DONE when converged, at the
// limit or bb == 0. The caller checks that DONE is not set yet.
__device__ __forceinline__ void cg_check_at(double* __restrict__ s, double tolerance, double limit) {
    const double count = s[SLOT_ITERATIONS] + 1.0;
    s[SLOT_ITERATIONS] = count;
    const double bb = s[SLOT_BB], rr = s[SLOT_RR];
    const double relative = bb == 0.0 ? 0.0 : sqrt((0.0 > rr ? 0.0 : rr) / bb);
    s[SLOT_RELATIVE] = relative;
    if (bb == 0.0 || relative <= tolerance || count >= limit) s[SLOT_DONE] = 1.0;
}

extern "C" __global__ void cg_begin(double* __restrict__ scalars) {
    scalars[SLOT_DONE] = 0.0;
    scalars[SLOT_ITERATIONS] = 0.0;
}

extern "C" __global__ void cg_check(double* __restrict__ scalars, double tolerance, double limit) {
    if (scalars[SLOT_DONE] == 0.0) cg_check_at(scalars, tolerance, limit);
}

// after cg_update_norm's pass: rr = the sum of its partials, then (check != 0) cg_check;
// nothing once the solve is DONE (the pass skipped and left stale partials)
extern "C" __global__ void cg_norm_final(const double* __restrict__ partial, long long count,
                                         double* __restrict__ scalars, int check,
                                         double tolerance, double limit) {
    if (scalars[SLOT_DONE] != 0.0) return;  // the same value for every thread
    const double rr = partial_total(partial, count);
    if (threadIdx.x == 0) {
        scalars[SLOT_RR] = rr;
        if (check) cg_check_at(scalars, tolerance, limit);
    }
}

// deterministic float64 dot product: fixed grid of DOT_BLOCKS x 256, then one block
#define DOT_BLOCKS 256
extern "C" __global__ void dot_partial(const float* __restrict__ a, const float* __restrict__ b,
                                       double* __restrict__ partial, long long n) {
    __shared__ double cache[256];
    double acc = 0.0;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x)
        acc += (double)a[t] * (double)b[t];
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = cache[0];
}
extern "C" __global__ void dot_final(const double* __restrict__ partial, double* __restrict__ scalars,
                                     int slot) {
    __shared__ double cache[DOT_BLOCKS];
    cache[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (int s = DOT_BLOCKS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) scalars[slot] = cache[0];
}

// scalar slots: 0 rz, 1 dq, 2 rr, 3 rz_next, 4 bb
extern "C" __global__ void cg_update(float* __restrict__ x, float* __restrict__ r,
                                     const float* __restrict__ d, const float* __restrict__ q,
                                     const double* __restrict__ scalars, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    double dq = scalars[1];
    float alpha = dq > 0.0 ? (float)(scalars[0] / dq) : 0.0f;
    x[t] = x[t] + alpha * d[t];
    r[t] = r[t] - alpha * q[t];
}
extern "C" __global__ void cg_direction(float* __restrict__ d, const float* __restrict__ z,
                                        const double* __restrict__ scalars, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    double rz = scalars[0];
    float beta = rz > 0.0 ? (float)(scalars[3] / rz) : 0.0f;
    d[t] = z[t] + beta * d[t];
}
extern "C" __global__ void cg_shift(double* __restrict__ scalars) {
    scalars[0] = scalars[3];
}

// max |v| with NaN sticking (a later a > NaN is false), as numpy's max
__device__ __forceinline__ float nan_max(float top, float a) {
    return (a > top || a != a) ? a : top;
}

// grid-stride partial maxima of |values|, one per block (blockDim.x == 256)
extern "C" __global__ void max_abs_partial(const float* __restrict__ values,
                                           float* __restrict__ partial, long long n) {
    __shared__ float top[256];
    float m = 0.0f;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)gridDim.x * blockDim.x)
        m = nan_max(m, fabsf(__ldg(values + t)));
    top[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) top[threadIdx.x] = nan_max(top[threadIdx.x], top[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = top[0];
}

extern "C" __global__ void max_abs_final(const float* __restrict__ partial,
                                         double* __restrict__ scalars, int slot) {
    __shared__ float top[DOT_BLOCKS];
    top[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (int w = DOT_BLOCKS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) top[threadIdx.x] = nan_max(top[threadIdx.x], top[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) scalars[slot] = (double)top[0];
}

extern "C" __global__ void extrapolate(float* __restrict__ pressure, float* __restrict__ previous,
                                       long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float old = pressure[t];
    pressure[t] = 2.0f * old - previous[t];
    previous[t] = old;
}
"""

_BLOCK = LAUNCH_BLOCK
_i = np.int32
_f = np.float32


_TEMPLATED = ("face_coefficients", "restrict_coefficients", "apply_operator", "residual",
              "jacobi_sweep", "redblack_sweep", "redblack_first_from_zero",
              "apply_operator_dot", "residual_norm", "prolong_add", "redblack_pairs_block",
              "transfer_scale")
#: Kernels templated on the coarsening factors (fx, fy, fz), each 1 or 2.
_BY_FACTORS = ("restrict_scaled_residual", "prolong_scaled_add")
_NAMES = template_names(*_TEMPLATED) + tuple(
    f"{name}<{fx},{fy},{fz}>" for name in _BY_FACTORS
    for fx in (1, 2) for fy in (1, 2) for fz in (1, 2))


def _kernel(name, coef=None):
    return get_kernel(SOURCE, _NAMES, name, coef)


def _kernel_by_factors(name, fx, fy, fz):
    return get_kernel(SOURCE, _NAMES, f"{name}<{int(fx)},{int(fy)},{int(fz)}>")


_blocks = blocks


def _face_count(nx, ny, nz):
    return nz * ny * (nx + 1) + nz * (ny + 1) * nx + (nz + 1) * ny * nx


def face_coefficients(fractions, outflow_x_minus, outflow_x_plus, outflow_y_minus,
                      outflow_y_plus, coef_x, coef_y, coef_z):
    """Fine-level face coefficients from the faces' open fractions (see the reference)."""
    nz, ny, nx = fractions[2].shape[0] - 1, fractions[2].shape[1], fractions[2].shape[2]
    _kernel("face_coefficients", coef_x)(_blocks(_face_count(nx, ny, nz)), (_BLOCK,), (
        *fractions, _i(outflow_x_minus), _i(outflow_x_plus), _i(outflow_y_minus), _i(outflow_y_plus),
        coef_x, coef_y, coef_z, _i(nx), _i(ny), _i(nz)))


def restrict_coefficients(coef_x, coef_y, coef_z, fx, fy, fz, boundary_x, boundary_y,
                          coarse_coef_x, coarse_coef_y, coarse_coef_z):
    """Coarse face coefficients (see the reference)."""
    nz, ny, nxp = coef_x.shape
    ncz, ncy, ncxp = coarse_coef_x.shape
    _kernel("restrict_coefficients", coef_x)(_blocks(_face_count(ncxp - 1, ncy, ncz)), (_BLOCK,), (
        coef_x, coef_y, coef_z, _i(fx), _i(fy), _i(fz), _f(boundary_x), _f(boundary_y),
        coarse_coef_x, coarse_coef_y, coarse_coef_z, _i(nxp - 1), _i(ny), _i(nz),
        _i(ncxp - 1), _i(ncy), _i(ncz)))


def _tiles(nx, ny, nz):
    """(grid, block) of a 3D launch over nx x ny x nz threads: x fastest, one z slice per
    block, blocks of 128 threads (x tiles of 32, 64 or 128)."""
    if (nz + 1) * (ny + 1) * (nx + 2) >= 2 ** 31 or ny > 65535 or nz > 65535:
        raise ValueError(f"grid {nx}x{ny}x{nz} is too large for the 32-bit pressure kernels")
    bx = 32 if nx <= 32 else (64 if nx <= 64 else 128)
    by = 128 // bx
    return ((nx + bx - 1) // bx, (ny + by - 1) // by, nz), (bx, by, 1)


def _cells(p):
    nz, ny, nx = p.shape
    return _tiles(nx, ny, nz), (_i(nx), _i(ny), _i(nz))


def apply_operator(p, coef_x, coef_y, coef_z, out):
    """out = A p (0 in solid cells)."""
    (grid, block), dims = _cells(p)
    _kernel("apply_operator", coef_x)(grid, block, (p, coef_x, coef_y, coef_z, out, *dims))


def residual(p, b, coef_x, coef_y, coef_z, out):
    """out = b - A p (0 in solid cells)."""
    (grid, block), dims = _cells(p)
    _kernel("residual", coef_x)(grid, block, (p, b, coef_x, coef_y, coef_z, out, *dims))


def jacobi_sweep(p, b, coef_x, coef_y, coef_z, omega, out):
    """One damped Jacobi sweep: out = p + omega * ((b + neighbour sum) / diag - p)."""
    (grid, block), dims = _cells(p)
    _kernel("jacobi_sweep", coef_x)(grid, block, (p, b, coef_x, coef_y, coef_z, _f(omega), out, *dims))


def redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, color):
    """Half a red-black SOR sweep in place on cells with (i + j + k) % 2 == color."""
    nz, ny, nx = p.shape
    grid, block = _tiles((nx + 1) // 2, ny, nz)
    _kernel("redblack_sweep", coef_x)(grid, block, (
        p, b, coef_x, coef_y, coef_z, _f(omega), _i(color), _i(nx), _i(ny), _i(nz)))


def restrict_residual(r, fx, fy, fz, out):
    """out (coarse) = P^T r."""
    nz, ny, nx = r.shape
    ncz, ncy, ncx = out.shape
    grid, block = _tiles(ncx, ncy, ncz)
    _kernel("restrict_residual")(grid, block, (
        r, _i(fx), _i(fy), _i(fz), out, _i(nx), _i(ny), _i(nz), _i(ncx), _i(ncy), _i(ncz)))


def prolong_add(coarse, coef_x, coef_y, coef_z, fx, fy, fz, p):
    """p (fine) += P coarse (trilinear, cell-centred), in fluid cells only."""
    nz, ny, nx = p.shape
    ncz, ncy, ncx = coarse.shape
    grid, block = _tiles(nx, ny, nz)
    _kernel("prolong_add", coef_x)(grid, block, (
        coarse, coef_x, coef_y, coef_z, _i(fx), _i(fy), _i(fz), p,
        _i(nx), _i(ny), _i(nz), _i(ncx), _i(ncy), _i(ncz)))


def transfer_scale(coarse_coef_x, coarse_coef_y, coarse_coef_z, coef_x, coef_y, coef_z,
                   fx, fy, fz, out):
    """out (fine) = 1 / (weights of the active coarse parents) in active fine cells, else 0."""
    nz, ny, nx = out.shape
    ncz, ncy, ncx = coarse_coef_z.shape[0] - 1, coarse_coef_z.shape[1], coarse_coef_z.shape[2]
    grid, block = _tiles(nx, ny, nz)
    _kernel("transfer_scale", coef_x)(grid, block, (
        coarse_coef_x, coarse_coef_y, coarse_coef_z, coef_x, coef_y, coef_z,
        _i(fx), _i(fy), _i(fz), out, _i(nx), _i(ny), _i(nz), _i(ncx), _i(ncy), _i(ncz)))


def restrict_scaled_residual(r, scale, fx, fy, fz, out):
    """out (coarse) = P^T (scale * r)."""
    nz, ny, nx = r.shape
    ncz, ncy, ncx = out.shape
    grid, block = _tiles(ncx, ncy, ncz)
    _kernel_by_factors("restrict_scaled_residual", fx, fy, fz)(grid, block, (
        r, scale, out, _i(nx), _i(ny), _i(nz), _i(ncx), _i(ncy), _i(ncz)))


def prolong_scaled_add(coarse, scale, fx, fy, fz, p):
    """p (fine) += scale * (P coarse) (renormalized trilinear)."""
    nz, ny, nx = p.shape
    ncz, ncy, ncx = coarse.shape
    grid, block = _tiles(nx, ny, nz)
    _kernel_by_factors("prolong_scaled_add", fx, fy, fz)(grid, block, (
        coarse, scale, p, _i(nx), _i(ny), _i(nz), _i(ncx), _i(ncy), _i(ncz)))


#: Levels with at most this many cells are smoothed by one block in one launch.
SINGLE_BLOCK_CELLS = 4096


def redblack_pairs(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs):
    """``pairs`` red-black SOR sweep pairs in place, colours first, 1 - first, first, ...
    (small grids: all of them in one launch of one block)."""
    nz, ny, nx = p.shape
    if nz * ny * nx <= SINGLE_BLOCK_CELLS:
        _kernel("redblack_pairs_block", coef_x)((1,), (1024,), (
            p, b, coef_x, coef_y, coef_z, _f(omega), _i(first_color), _i(pairs),
            _i(nx), _i(ny), _i(nz)))
        return
    for _ in range(int(pairs)):
        redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, first_color)
        redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, 1 - first_color)


def redblack_pairs_from_zero(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs):
    """p = 0, then ``pairs`` red-black SOR sweep pairs in place; on grids above
    SINGLE_BLOCK_CELLS the zeroing and the first half-sweep are one launch
    (redblack_first_from_zero: the same bits as fill(0) and redblack_sweep)."""
    nz, ny, nx = p.shape
    if nz * ny * nx <= SINGLE_BLOCK_CELLS or int(pairs) < 1:
        p.fill(0)
        redblack_pairs(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs)
        return
    (grid, block), dims = _cells(p)
    _kernel("redblack_first_from_zero", coef_x)(grid, block, (
        p, b, coef_x, coef_y, coef_z, _f(omega), _i(first_color), *dims))
    redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, 1 - first_color)
    for _ in range(int(pairs) - 1):
        redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, first_color)
        redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, 1 - first_color)


# wind.WindSolver runs the levels with at most COARSE_VCYCLE_CELLS cells (below the finest)
# through coarse_vcycle: here the whole coarse end of the V-cycle in one launch of one block.
#: Inside coarse_vcycle, levels with at most this many cells are worked on by one warp
#: (__syncwarp between phases instead of __syncthreads over 32 warps).
WARP_LEVEL_CELLS = 64
#: Threads of coarse_vcycle's block (at most 1024).
COARSE_VCYCLE_THREADS = 1024
_MAX_LEVELS = 24
_tables = {}
_shared_set = set()


def _shared_limit():
    """Dynamic shared memory bytes one block may opt in to, less room for the static part."""
    import cupy

    return int(cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]) - 8192


def coarse_vcycle(solutions, rhs, residuals, coefs, factors, smoothing_pairs, coarsest_pairs):
    """The coarse end of a V-cycle (see the reference: the same sequence of operations) in
    ONE launch of one block of COARSE_VCYCLE_THREADS threads, on copies in shared memory when all
    fit. Coarse levels only: float32 coefficients. The level table (device pointers, sizes,
    shared-memory offsets) is built once per set of arrays, so the launch can be recorded
    in a CUDA graph after a first plain call."""
    import cupy

    levels = len(solutions)
    if not 1 <= levels <= _MAX_LEVELS:
        raise ValueError(f"coarse_vcycle takes 1 to {_MAX_LEVELS} levels, got {levels}")
    key = tuple((s.data.ptr, b.data.ptr, r.data.ptr, *(c.data.ptr for c in cs), s.shape, f)
                for s, b, r, cs, f in zip(solutions, rhs, residuals, coefs, factors))
    entry = _tables.get(key)
    if entry is None:
        rows, offset = [], 0
        for s, b, r, cs, f in zip(solutions, rhs, residuals, coefs, factors):
            if any(c.dtype != np.float32 for c in cs):
                raise ValueError("coarse_vcycle needs float32 coefficients (coarse levels)")
            if s.size >= 1 << 16:
                raise ValueError(f"coarse_vcycle takes levels of fewer than 65536 cells "
                                 f"(coarse levels), got {s.shape}")
            nz, ny, nx = s.shape
            fz, fy, fx = f
            sizes = [s.size, s.size, s.size, *(c.size for c in cs)]
            offsets = []
            for size in sizes:  # 16-byte aligned starts
                offsets.append(offset)
                offset += (size + 3) // 4 * 4
            rows.append([s.data.ptr, b.data.ptr, r.data.ptr, *(c.data.ptr for c in cs),
                         nx, ny, nz, fx, fy, fz, *offsets])
        shared_bytes = 4 * offset
        staged = shared_bytes <= _shared_limit()
        entry = _tables[key] = (cupy.asarray(np.array(rows, dtype=np.int64).ravel()),
                                shared_bytes if staged else 0)
    table, shared_bytes = entry
    kernel = _kernel("coarse_vcycle_block")
    device = cupy.cuda.Device().id
    if shared_bytes and (device, id(kernel)) not in _shared_set:
        # opt in to the whole per-block shared memory once (an attribute of the function):
        # the kernel's static shared memory counts against the 48 KB default too
        limit = _shared_limit()
        if hasattr(kernel, "max_dynamic_shared_size_bytes"):
            kernel.max_dynamic_shared_size_bytes = limit
        else:
            from cupy.cuda import driver
            driver.funcSetAttribute(kernel.ptr, 8, limit)  # MAX_DYNAMIC_SHARED_SIZE_BYTES
        _shared_set.add((device, id(kernel)))
    kernel((1,), (COARSE_VCYCLE_THREADS,),
           (table, _i(levels), _f(1.0), _i(smoothing_pairs), _i(coarsest_pairs),
            _i(1 if shared_bytes else 0), _i(WARP_LEVEL_CELLS)),
           shared_mem=shared_bytes)


_DOT_BLOCKS = 256
_partials = {}


def dot(a, b, scalars, slot):
    """scalars[slot] = sum(a * b) accumulated in float64 (fixed reduction tree,
    deterministic). Two launches, no host read."""
    import cupy

    device = cupy.cuda.Device().id
    partial = _partials.get(device)
    if partial is None:
        partial = _partials[device] = cupy.zeros(_DOT_BLOCKS, cupy.float64)
    _kernel("dot_partial")((_DOT_BLOCKS,), (256,), (a, b, partial, np.int64(a.size)))
    _kernel("dot_final")((1,), (_DOT_BLOCKS,), (partial, scalars, _i(slot)))


def max_abs(values, scalars, slot):
    """scalars[slot] = max |values| (0 for no values; NaN if any value is NaN). Two
    launches, no host read."""
    import cupy

    device = cupy.cuda.Device().id
    partial = _max_partials.get(device)
    if partial is None:
        partial = _max_partials[device] = cupy.zeros(_DOT_BLOCKS, cupy.float32)
    _kernel("max_abs_partial")((_DOT_BLOCKS,), (256,), (values, partial, np.int64(values.size)))
    _kernel("max_abs_final")((1,), (_DOT_BLOCKS,), (partial, scalars, _i(slot)))


_max_partials = {}


def extrapolate(pressure, previous):
    """pressure = 2 pressure - previous, previous = the old pressure (one pass)."""
    _kernel("extrapolate")(_blocks(pressure.size), (_BLOCK,), (pressure, previous,
                                                                np.int64(pressure.size)))


_fused_partials = {}


def _partial_buffer(count):
    """Per-block float64 partials of the fused kernels (one buffer per device and size,
    allocated on first use: a recorded graph keeps using it)."""
    import cupy

    key = (cupy.cuda.Device().id, int(count))
    buffer = _fused_partials.get(key)
    if buffer is None:
        buffer = _fused_partials[key] = cupy.zeros(int(count), cupy.float64)
    return buffer


def _grid_count(grid):
    return int(grid[0]) * int(grid[1]) * int(grid[2])


def apply_operator_dot(p, coef_x, coef_y, coef_z, out, scalars, slot):
    """out = A p; scalars[slot] = p . out (float64, deterministic). Two launches."""
    (grid, block), dims = _cells(p)
    count = _grid_count(grid)
    partial = _partial_buffer(count)
    _kernel("apply_operator_dot", coef_x)(grid, block, (p, coef_x, coef_y, coef_z, out, partial, *dims))
    _kernel("partial_final")((1,), (1024,), (partial, np.int64(count), scalars, _i(slot)))


def residual_norm(p, b, coef_x, coef_y, coef_z, out, scalars, slot):
    """out = b - A p; scalars[slot] = b . b (float64, deterministic). Two launches."""
    (grid, block), dims = _cells(p)
    count = _grid_count(grid)
    partial = _partial_buffer(count)
    _kernel("residual_norm", coef_x)(grid, block, (p, b, coef_x, coef_y, coef_z, out, partial, *dims))
    _kernel("partial_final")((1,), (1024,), (partial, np.int64(count), scalars, _i(slot)))


def _update_norm(x, r, d, q, scalars, check, tolerance, limit):
    grid = _blocks(x.size)
    count = int(grid[0])
    partial = _partial_buffer(count)
    _kernel("cg_update_norm")(grid, (_BLOCK,), (x, r, d, q, scalars, partial, np.int64(x.size)))
    _kernel("cg_norm_final")((1,), (1024,), (partial, np.int64(count), scalars, _i(check),
                                             np.float64(tolerance), np.float64(limit)))


def cg_update_norm(x, r, d, q, scalars):
    """cg_update, then scalars[RR] = r . r of the updated r (float64, deterministic);
    nothing once scalars[DONE] is set. Two launches."""
    _update_norm(x, r, d, q, scalars, 0, 0.0, 0.0)


def cg_update_check(x, r, d, q, scalars, tolerance, limit):
    """cg_update_norm, then cg_check (two launches: the check runs in the sum's block)."""
    _update_norm(x, r, d, q, scalars, 1, tolerance, limit)


def cg_begin(scalars):
    """A new solve: DONE = 0, ITERATIONS = 0 (one thread)."""
    _kernel("cg_begin")((1,), (1,), (scalars,))


def cg_check(scalars, tolerance, limit):
    """After a CG iteration, unless DONE: count it, RELATIVE = its relative residual, DONE
    when converged, at ``limit`` or b = 0 (one thread; see the reference)."""
    _kernel("cg_check")((1,), (1,), (scalars, np.float64(tolerance), np.float64(limit)))


#: The solver queues several CG iterations before reading the scalars (each read syncs).
READ_AHEAD = True
assert (RR, BB, DONE, ITERATIONS, RELATIVE) == (2, 4, 7, 8, 9)  # the SLOT_ defines above


def cg_update(x, r, d, q, scalars):
    """alpha = rz / dq (0 unless dq > 0); x += alpha d; r -= alpha q (alpha as float32)."""
    _kernel("cg_update")(_blocks(x.size), (_BLOCK,), (x, r, d, q, scalars, np.int64(x.size)))


def cg_direction(d, z, scalars):
    """beta = rz_next / rz (0 unless rz > 0); d = z + beta d; then rz = rz_next."""
    _kernel("cg_direction")(_blocks(d.size), (_BLOCK,), (d, z, scalars, np.int64(d.size)))
    _kernel("cg_shift")((1,), (1,), (scalars,))


def capture(function):
    """Record ``function``'s kernel launches once as a CUDA graph and return a callable that
    replays them on the current stream (one launch instead of one per kernel). The
    function must only launch kernels on fixed buffers (no allocation, no host reads), and
    must have run once before so every kernel is compiled and loaded."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            function()
        finally:
            graph = stream.end_capture()

    def replay():
        graph.launch(cupy.cuda.get_current_stream())

    replay.graph = graph
    return replay
