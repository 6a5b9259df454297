// Pressure Poisson kernels, CUDA build (kernels/gpu/pressure.py loads this file through
// CuPy: the constants it uses -- SLOT_*, COEFFICIENT_STEP(S), REDUCE_*, MAX_BLOCK_THREADS,
// LV_* -- are #defines that pressure.py generates from the Python constants and puts in
// front of this source, after kernels/gpu/common.py's COMMON_SOURCE).
//
// The same arithmetic, in the same order, as kernels.reference.pressure. The pieces every
// kernel shares have one home each:
//   faces_of / diagonal / neighbour_sum   the 7-point operator of one cell
//   smoothed                              the red-black (SOR) update of one cell
//   restricted                            P^T: the gather of one coarse cell
//   prolonged                             P: the trilinear sum of one fine cell
//   team_redblack_pairs(_from_zero)       the colour sweeps of a level by one block
// A load policy (Cached: __ldg, the read-only cache; Plain: an ordinary load) says how a
// kernel reads its arrays: the per-level kernels read what they do not write through
// __ldg; the one-block kernels read arrays they also write (or shared memory): Plain.

// ---- loads and face coefficients ---------------------------------------------------------
struct Cached {
    template <typename T> static __device__ __forceinline__ T at(const T* p) { return __ldg(p); }
};
struct Plain {
    template <typename T> static __device__ __forceinline__ T at(const T* p) { return *p; }
};

// face coefficients: float, or unsigned char q = COEFFICIENT_STEPS A_f on the finest level
// (exact: q * COEFFICIENT_STEP, a power of two)
__device__ __forceinline__ float coef_value(float c) { return c; }
__device__ __forceinline__ float coef_value(unsigned char c) { return (float)c * COEFFICIENT_STEP; }
template <typename C> __device__ __forceinline__ C coef_encoded(float c);
template <> __device__ __forceinline__ float coef_encoded<float>(float c) { return c; }
template <> __device__ __forceinline__ unsigned char coef_encoded<unsigned char>(float c) {
    return (unsigned char)(c * COEFFICIENT_STEPS);
}
#define CX(k, j, i) coef_value(cx[((long long)(k) * ny + (j)) * (nx + 1) + (i)])
#define CY(k, j, i) coef_value(cy[((long long)(k) * (ny + 1) + (j)) * nx + (i)])
#define CZ(k, j, i) coef_value(cz[((long long)(k) * ny + (j)) * nx + (i)])

// ---- the operator of one cell --------------------------------------------------------------
// (A p)_c = diag p_c - neighbour sum, over the 6 faces: west, east, south, north, down, up
struct Faces { float w, e, s, n, d, u; };

// the face coefficients of cell (k, j, i) = t = (k * ny + j) * nx + i
template <class L, typename C>
__device__ __forceinline__ Faces faces_of(const C* cx, const C* cy, const C* cz,
                                          int k, int j, int t, int nx, int ny) {
    const int fx = t + k * ny + j;  // CX(k, j, i)
    const int fy = t + k * nx;      // CY(k, j, i)
    Faces f;
    f.w = coef_value(L::at(cx + fx)); f.e = coef_value(L::at(cx + fx + 1));
    f.s = coef_value(L::at(cy + fy)); f.n = coef_value(L::at(cy + fy + nx));
    f.d = coef_value(L::at(cz + t)); f.u = coef_value(L::at(cz + t + nx * ny));
    return f;
}

__device__ __forceinline__ float diagonal(const Faces& f) {
    return ((f.w + f.e) + (f.s + f.n)) + (f.d + f.u);
}

// a neighbour outside the level reads 0 (Dirichlet p = 0 beyond an open side; a closed
// side's coefficient is 0)
template <class L>
__device__ __forceinline__ float neighbour_sum(const Faces& f, const float* p, int k, int j, int i,
                                               int t, int nx, int ny, int nz) {
    const int nxy = nx * ny;
    const float pw = i > 0 ? L::at(p + t - 1) : 0.0f, pe = i < nx - 1 ? L::at(p + t + 1) : 0.0f;
    const float ps = j > 0 ? L::at(p + t - nx) : 0.0f, pn = j < ny - 1 ? L::at(p + t + nx) : 0.0f;
    const float pd = k > 0 ? L::at(p + t - nxy) : 0.0f, pu = k < nz - 1 ? L::at(p + t + nxy) : 0.0f;
    return ((f.w * pw + f.e * pe) + (f.s * ps + f.n * pn)) + (f.d * pd + f.u * pu);
}

// ---- the smoother: the red-black SOR update of one cell ------------------------------------
// p_c + om ((b_c + neighbour sum) / diag - p_c) in a fluid cell, 0 in a solid one. p is read
// and written by the sweep: its loads are plain; L is the policy for b and the coefficients.
// FROM_ZERO: p is 0 everywhere (the first half-sweep from a zero guess), so p_c and the
// neighbour sum are +0 (coefficients are finite and >= 0), kept literally: 0 + x is not x
// for x = -0.
template <bool FROM_ZERO, class L, typename C>
__device__ __forceinline__ float smoothed(const float* p, const float* b, const C* cx, const C* cy,
                                          const C* cz, float om, int k, int j, int i, int t,
                                          int nx, int ny, int nz) {
    const Faces f = faces_of<L>(cx, cy, cz, k, j, t, nx, ny);
    const float d = diagonal(f);
    if (!(d > 0.0f)) return 0.0f;
    if (FROM_ZERO) {
        const float zero = 0.0f;
        return zero + om * ((L::at(b + t) + zero) / d - zero);
    }
    const float nb = neighbour_sum<Plain>(f, p, k, j, i, t, nx, ny, nz);
    const float pc = p[t];
    return pc + om * ((L::at(b + t) + nb) / d - pc);
}

// ---- the transfers (cell-centred, per-axis factor f = 1 or 2) ------------------------------
// prolongation: trilinear, weight 3/4 to the parent, 1/4 to the parent's neighbour on the
// child's side (clamped at the ends); restriction: its exact transpose.
__device__ __forceinline__ float axis_weight(int fine, int coarse, int f, int n_coarse) {
    if (f == 1) return fine == coarse ? 1.0f : 0.0f;
    int parent = fine / 2;
    int partner = (fine % 2 == 0) ? parent - 1 : parent + 1;
    partner = min(max(partner, 0), n_coarse - 1);
    float a = parent == coarse ? 0.75f : 0.0f;
    float b = partner == coarse ? 0.25f : 0.0f;
    return a + b;
}

__device__ __forceinline__ int parent_of(int i, int f, int n_coarse, int which, float &weight) {
    if (f == 1) { weight = which == 0 ? 1.0f : 0.0f; return i; }
    int parent = i / 2;
    if (which == 0) { weight = 0.75f; return parent; }
    weight = 0.25f;
    int partner = (i % 2 == 0) ? parent - 1 : parent + 1;
    return min(max(partner, 0), n_coarse - 1);
}

// (P^T v) at coarse cell (K, J, I): value(t) is v at the fine cell t. Factors given as
// compile-time constants fold the loops and weights (the same operations, the same order).
template <class Value>
__device__ __forceinline__ float restricted(int K, int J, int I, int fx, int fy, int fz,
                                            int nx, int ny, int nz, int ncx, int ncy, int ncz,
                                            const Value& value) {
    const int loz = fz == 2 ? -1 : 0, hiz = fz == 2 ? 3 : 1;
    const int loy = fy == 2 ? -1 : 0, hiy = fy == 2 ? 3 : 1;
    const int lox = fx == 2 ? -1 : 0, hix = fx == 2 ? 3 : 1;
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
                acc = acc + ((wz * wy) * wx) * value(row + ic);
            }
        }
    }
    return acc;
}

// (P v) at fine cell (k, j, i): value(K, J, I) is v at the coarse cell
template <class Value>
__device__ __forceinline__ float prolonged(int k, int j, int i, int fx, int fy, int fz,
                                           int ncx, int ncy, int ncz, const Value& value) {
    float acc = 0.0f;
    for (int a = 0; a < 2; ++a) {
        float wz; int K = parent_of(k, fz, ncz, a, wz);
        for (int b = 0; b < 2; ++b) {
            float wy; int J = parent_of(j, fy, ncy, b, wy);
            for (int c = 0; c < 2; ++c) {
                float wx; int I = parent_of(i, fx, ncx, c, wx);
                acc = acc + ((wz * wy) * wx) * value(K, J, I);
            }
        }
    }
    return acc;
}

// ---- fine and coarse face coefficients -----------------------------------------------------
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
        int i = (int)(t % (nx + 1));
        float c = fu[t];
        if ((i == 0 && !oxm) || (i == nx && !oxp)) c = 0.0f;
        cx[t] = coef_encoded<C>(c);
        return;
    }
    t -= nu;
    if (t < nv) {
        long long r = t / nx;
        int j = (int)(r % (ny + 1));
        float c = fv[t];
        if ((j == 0 && !oym) || (j == ny && !oyp)) c = 0.0f;
        cy[t] = coef_encoded<C>(c);
        return;
    }
    t -= nv;
    if (t < nw) {
        long long r = t / nx;
        int k = (int)(r / ny);
        float c = (k > 0 && k < nz) ? fw[t] : 0.0f;
        cz[t] = coef_encoded<C>(c);
    }
}

// coarse grid (ncx, ncy, ncz) from fine (nx, ny, nz) with factors (fx, fy, fz): the sum of
// the covered fine faces over the factor along the normal (rows first, as the reference)
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
        for (int k = K * fz; k < min(K * fz + fz, nz); ++k) {
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

// ---- per-level kernels -----------------------------------------------------------------------
// 3D launches: grid (ceil(nx / bx), ceil(ny / by), nz), block (bx, by): no index division.
// 32-bit indices (the launchers refuse arrays of 2^31 elements or more).
#define CELL3                                                             \
    const int i = blockIdx.x * blockDim.x + threadIdx.x;                  \
    const int j = blockIdx.y * blockDim.y + threadIdx.y;                  \
    const int k = blockIdx.z;                                             \
    if (i >= nx || j >= ny) return;                                       \
    const int t = (k * ny + j) * nx + i;

template <typename C>
__global__ void apply_operator(const float* __restrict__ p, const C* __restrict__ cx,
                               const C* __restrict__ cy, const C* __restrict__ cz,
                               float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    const Faces f = faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny);
    const float d = diagonal(f), nb = neighbour_sum<Cached>(f, p, k, j, i, t, nx, ny, nz);
    out[t] = d > 0.0f ? d * p[t] - nb : 0.0f;
}

template <typename C>
__global__ void residual(const float* __restrict__ p, const float* __restrict__ b,
                         const C* __restrict__ cx, const C* __restrict__ cy,
                         const C* __restrict__ cz, float* __restrict__ out,
                         int nx, int ny, int nz) {
    CELL3
    const Faces f = faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny);
    const float d = diagonal(f), nb = neighbour_sum<Cached>(f, p, k, j, i, t, nx, ny, nz);
    out[t] = d > 0.0f ? b[t] - (d * p[t] - nb) : 0.0f;
}

template <typename C>
__global__ void jacobi_sweep(const float* __restrict__ p, const float* __restrict__ b,
                             const C* __restrict__ cx, const C* __restrict__ cy,
                             const C* __restrict__ cz, float om,
                             float* __restrict__ out, int nx, int ny, int nz) {
    CELL3
    const Faces f = faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny);
    const float d = diagonal(f), nb = neighbour_sum<Cached>(f, p, k, j, i, t, nx, ny, nz);
    out[t] = d > 0.0f ? p[t] + om * ((b[t] + nb) / d - p[t]) : 0.0f;
}

// half a sweep: one thread per cell of the colour, i = 2 * ih + ((k + j + color) & 1); the
// grid's x covers ih < (nx + 1) / 2
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
    p[t] = smoothed<false, Cached>(p, b, cx, cy, cz, om, k, j, i, t, nx, ny, nz);
}

// p = 0 everywhere, then the half-sweep of colour `color` from that zero guess, in one pass
// (the V-cycle's first half-sweep of a level). One thread per cell.
template <typename C>
__global__ void redblack_first_from_zero(float* __restrict__ p, const float* __restrict__ b,
                                         const C* __restrict__ cx, const C* __restrict__ cy,
                                         const C* __restrict__ cz, float om, int color,
                                         int nx, int ny, int nz) {
    CELL3
    p[t] = ((i + j + k) & 1) == color
               ? smoothed<true, Cached>(p, b, cx, cy, cz, om, k, j, i, t, nx, ny, nz) : 0.0f;
}

// out (coarse) = P^T r, or P^T (scale r) when SCALED; the factors are template arguments
template <int fx, int fy, int fz, bool SCALED>
__device__ __forceinline__ void restrict_level(const float* __restrict__ r,
                                               const float* __restrict__ scale,
                                               float* __restrict__ out, int nx, int ny, int nz,
                                               int ncx, int ncy, int ncz) {
    const int I = blockIdx.x * blockDim.x + threadIdx.x;
    const int J = blockIdx.y * blockDim.y + threadIdx.y;
    const int K = blockIdx.z;
    if (I >= ncx || J >= ncy) return;
    out[(K * ncy + J) * ncx + I] = restricted(
        K, J, I, fx, fy, fz, nx, ny, nz, ncx, ncy, ncz, [&](int t) {
            return SCALED ? __ldg(r + t) * __ldg(scale + t) : __ldg(r + t);
        });
}

template <int fx, int fy, int fz>
__global__ void restrict_residual(const float* __restrict__ r, float* __restrict__ out,
                                  int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    restrict_level<fx, fy, fz, false>(r, r, out, nx, ny, nz, ncx, ncy, ncz);
}

template <int fx, int fy, int fz>
__global__ void restrict_scaled_residual(const float* __restrict__ r,
                                         const float* __restrict__ scale,
                                         float* __restrict__ out, int nx, int ny, int nz,
                                         int ncx, int ncy, int ncz) {
    restrict_level<fx, fy, fz, true>(r, scale, out, nx, ny, nz, ncx, ncy, ncz);
}

// p (fine) += P coarse in fluid cells
template <typename C>
__global__ void prolong_add(const float* __restrict__ coarse, const C* __restrict__ cx,
                            const C* __restrict__ cy, const C* __restrict__ cz,
                            int fx, int fy, int fz, float* __restrict__ p,
                            int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    if (!(diagonal(faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny)) > 0.0f)) return;
    p[t] = p[t] + prolonged(k, j, i, fx, fy, fz, ncx, ncy, ncz, [&](int K, int J, int I) {
        return __ldg(coarse + (K * ncy + J) * ncx + I);
    });
}

// p (fine) += scale * (P coarse)
template <int fx, int fy, int fz>
__global__ void prolong_scaled_add(const float* __restrict__ coarse,
                                   const float* __restrict__ scale, float* __restrict__ p,
                                   int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    const float s = __ldg(scale + t);
    p[t] = p[t] + s * prolonged(k, j, i, fx, fy, fz, ncx, ncy, ncz, [&](int K, int J, int I) {
        return __ldg(coarse + (K * ncy + J) * ncx + I);
    });
}

// fine scale = 1 / (P's weights of the active coarse parents) in active fine cells, else 0
template <typename C>
__global__ void transfer_scale(const float* __restrict__ ccx, const float* __restrict__ ccy,
                               const float* __restrict__ ccz, const C* __restrict__ cx,
                               const C* __restrict__ cy, const C* __restrict__ cz,
                               int fx, int fy, int fz, float* __restrict__ out,
                               int nx, int ny, int nz, int ncx, int ncy, int ncz) {
    CELL3
    float acc = 0.0f;
    if (diagonal(faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny)) > 0.0f) {
        acc = prolonged(k, j, i, fx, fy, fz, ncx, ncy, ncz, [&](int K, int J, int I) {
            const int c = (K * ncy + J) * ncx + I;
            return diagonal(faces_of<Cached>(ccx, ccy, ccz, K, J, c, ncx, ncy)) > 0.0f ? 1.0f : 0.0f;
        });
    }
    out[t] = acc > 0.0f ? 1.0f / acc : 0.0f;
}

// ---- one block works on whole levels (small levels; the coarse end of a V-cycle) ---------
// A level's arrays and sizes. C: the coefficient type (float on coarse levels).
template <typename C>
struct LevelView {
    float* sol; float* rhs; float* res;
    const C* cx; const C* cy; const C* cz;
    int nx, ny, nz, fx, fy, fz;
    // reciprocals for the index arithmetic (exact_divide): of nx, ny and (nx + 1) / 2
    unsigned mx, my, mhalf;
};
typedef LevelView<float> BlockLevel;

// The phases are short loops over a level's cells on one SM, where a general integer
// division (dozens of instructions) per index would be much of the work: w / d as a
// multiply-high by m = ceil(2^32 / d), exact while w * (m * d - 2^32) < 2^32, which
// holds for w, d < 2^16 (the launchers refuse bigger levels).
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

template <typename C>
__device__ __forceinline__ void set_reciprocals(LevelView<C>& v) {
    v.mx = reciprocal_of(v.nx); v.my = reciprocal_of(v.ny); v.mhalf = reciprocal_of((v.nx + 1) / 2);
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
template <typename C>
__device__ void team_redblack_pairs(const Team& tm, const LevelView<C>& L, float om, int first,
                                    int pairs, int from = 0) {
    const int nx = L.nx, ny = L.ny, nz = L.nz;
    const int half = (nx + 1) / 2;
    const int count = nz * ny * half;
    for (int s = from; s < 2 * pairs; ++s) {
        const int color = (first + s) & 1;
        for (int w = tm.first; w < count; w += tm.stride) {
            int k, j, ih;
            cell_of(w, half, L.mhalf, ny, L.my, k, j, ih);
            const int i = 2 * ih + ((k + j + color) & 1);
            if (i >= nx) continue;
            const int t = (k * ny + j) * nx + i;
            L.sol[t] = smoothed<false, Plain>(L.sol, L.rhs, L.cx, L.cy, L.cz, om, k, j, i, t, nx, ny, nz);
        }
        tm.sync();
    }
}

// sol = 0, then team_redblack_pairs from that zero guess: the zeroing and the first
// half-sweep in one phase, as redblack_first_from_zero (same values)
template <typename C>
__device__ void team_redblack_pairs_from_zero(const Team& tm, const LevelView<C>& L, float om,
                                              int first, int pairs) {
    const int nx = L.nx, ny = L.ny, nz = L.nz, n = nx * ny * nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, L.mx, ny, L.my, k, j, i);
        L.sol[t] = pairs > 0 && ((i + j + k) & 1) == first
                       ? smoothed<true, Plain>(L.sol, L.rhs, L.cx, L.cy, L.cz, om, k, j, i, t, nx, ny, nz)
                       : 0.0f;
    }
    tm.sync();
    if (pairs > 0) team_redblack_pairs(tm, L, om, first, pairs, 1);
}

// all sweeps of redblack_pairs on a small level (at most SINGLE_BLOCK_CELLS cells) in ONE
// block: __syncthreads between colours
template <typename C>
__global__ void redblack_pairs_block(float* __restrict__ p, const float* __restrict__ b,
                                     const C* __restrict__ cx, const C* __restrict__ cy,
                                     const C* __restrict__ cz, float om, int first,
                                     int pairs, int nx, int ny, int nz) {
    LevelView<C> L;
    L.sol = p; L.rhs = const_cast<float*>(b); L.res = nullptr;
    L.cx = cx; L.cy = cy; L.cz = cz;
    L.nx = nx; L.ny = ny; L.nz = nz; L.fx = L.fy = L.fz = 1;
    set_reciprocals(L);
    team_redblack_pairs(make_team(false), L, om, first, pairs);
}

__device__ void team_residual(const Team& tm, const BlockLevel& L) {
    const int nx = L.nx, ny = L.ny, nz = L.nz, n = nx * ny * nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, L.mx, ny, L.my, k, j, i);
        const Faces f = faces_of<Plain>(L.cx, L.cy, L.cz, k, j, t, nx, ny);
        const float d = diagonal(f), nb = neighbour_sum<Plain>(f, L.sol, k, j, i, t, nx, ny, nz);
        L.res[t] = d > 0.0f ? L.rhs[t] - (d * L.sol[t] - nb) : 0.0f;
    }
    tm.sync();
}

// coarse.rhs = P^T fine.res, as restrict_residual
__device__ void team_restrict(const Team& tm, const BlockLevel& F, const BlockLevel& C) {
    const int n = C.nx * C.ny * C.nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int K, J, I;
        cell_of(t, C.nx, C.mx, C.ny, C.my, K, J, I);
        C.rhs[t] = restricted(K, J, I, F.fx, F.fy, F.fz, F.nx, F.ny, F.nz, C.nx, C.ny, C.nz,
                              [&](int f) { return F.res[f]; });
    }
    tm.sync();
}

// fine.sol += P coarse.sol in fluid cells, as prolong_add
__device__ void team_prolong_add(const Team& tm, const BlockLevel& F, const BlockLevel& C) {
    const int nx = F.nx, ny = F.ny, nz = F.nz, n = nx * ny * nz;
    const int ncx = C.nx, ncy = C.ny, ncz = C.nz;
    for (int t = tm.first; t < n; t += tm.stride) {
        int k, j, i;
        cell_of(t, nx, F.mx, ny, F.my, k, j, i);
        if (!(diagonal(faces_of<Plain>(F.cx, F.cy, F.cz, k, j, t, nx, ny)) > 0.0f)) continue;
        F.sol[t] = F.sol[t] + prolonged(k, j, i, F.fx, F.fy, F.fz, ncx, ncy, ncz,
                                        [&](int K, int J, int I) {
                                            return C.sol[(K * ncy + J) * ncx + I];
                                        });
    }
    tm.sync();
}

__device__ __forceinline__ void block_copy(float* dst, const float* src, int n) {
    for (int t = threadIdx.x; t < n; t += blockDim.x) dst[t] = src[t];
}

// The whole coarse end of a V-cycle in ONE block. Every level's arrays are read and written
// inside the kernel, so no pointer carries __restrict__ or __ldg (no non-coherent loads).
// When they fit ("staged"), all levels are copied into shared memory first (latency ~30
// cycles instead of an L2 round trip per load in the ~150 dependent phases) and the results
// copied back at the end. __syncthreads separates the phases the per-level sequence
// separates by launches, so the results are the same bits. The level table holds LV_FIELDS
// int64 per level (pressure.py writes it in the order of the LV_ defines).
extern "C" __global__ void __launch_bounds__(MAX_BLOCK_THREADS)
coarse_vcycle_block(const long long* __restrict__ table, int levels, float om,
                    int smoothing_pairs, int coarsest_pairs, int staged, int warp_cells) {
    extern __shared__ float shared_levels[];
    __shared__ BlockLevel G[MAX_LEVELS];  // the arrays in global memory
    __shared__ BlockLevel L[MAX_LEVELS];  // where the kernel works on them
    if (threadIdx.x < levels) {
        const long long* e = table + threadIdx.x * LV_FIELDS;
        BlockLevel v;
        v.sol = (float*)e[LV_SOL]; v.rhs = (float*)e[LV_RHS]; v.res = (float*)e[LV_RES];
        v.cx = (const float*)e[LV_CX]; v.cy = (const float*)e[LV_CY]; v.cz = (const float*)e[LV_CZ];
        v.nx = (int)e[LV_NX]; v.ny = (int)e[LV_NY]; v.nz = (int)e[LV_NZ];
        v.fx = (int)e[LV_FX]; v.fy = (int)e[LV_FY]; v.fz = (int)e[LV_FZ];
        set_reciprocals(v);
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
        team_redblack_pairs_from_zero(tm, L[l], om, 0, smoothing_pairs);
        team_residual(tm, L[l]);
        team_restrict(team(tiny(l) && tiny(l + 1)), L[l], L[l + 1]);
    }
    {
        const Team tm = team(tiny(last));
        team_redblack_pairs_from_zero(tm, L[last], om, 0, coarsest_pairs);
        team_redblack_pairs(tm, L[last], om, 1, coarsest_pairs);
    }
    for (int l = last - 1; l >= 0; --l) {
        team_prolong_add(team(tiny(l) && tiny(l + 1)), L[l], L[l + 1]);
        team_redblack_pairs(team(tiny(l)), L[l], om, 1, smoothing_pairs);
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
        const Faces f = faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny);
        const float d = diagonal(f), nb = neighbour_sum<Cached>(f, p, k, j, i, t, nx, ny, nz);
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
        const Faces f = faces_of<Cached>(cx, cy, cz, k, j, t, nx, ny);
        const float d = diagonal(f), nb = neighbour_sum<Cached>(f, p, k, j, i, t, nx, ny, nz);
        const float bt = __ldg(b + t);
        out[t] = d > 0.0f ? bt - (d * __ldg(p + t) - nb) : 0.0f;
        v = (double)bt * (double)bt;
    }
    block_sum_to(v, partial, BLOCK_SLOT);
}

// alpha = rz / dq as float32 (0 unless dq > 0)
__device__ __forceinline__ float cg_alpha(const double* __restrict__ scalars) {
    const double dq = scalars[SLOT_DQ];
    return dq > 0.0 ? (float)(scalars[SLOT_RZ] / dq) : 0.0f;
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
        const float alpha = cg_alpha(scalars);
        x[t] = x[t] + alpha * d[t];
        const float rn = r[t] - alpha * q[t];
        r[t] = rn;
        v = (double)rn * (double)rn;
    }
    block_sum_to(v, partial, blockIdx.x);
}

// the sum of count partials in thread 0 (MAX_BLOCK_THREADS threads: strided sums, then a tree)
__device__ __forceinline__ double partial_total(const double* __restrict__ partial, long long count) {
    __shared__ double cache[MAX_BLOCK_THREADS];
    double acc = 0.0;
    for (long long t = threadIdx.x; t < count; t += MAX_BLOCK_THREADS) acc += partial[t];
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (int s = MAX_BLOCK_THREADS / 2; s > 0; s >>= 1) {
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

// ---- reductions over a fixed grid of REDUCE_BLOCKS x REDUCE_THREADS, then one block --------
// deterministic float64 dot product
extern "C" __global__ void dot_partial(const float* __restrict__ a, const float* __restrict__ b,
                                       double* __restrict__ partial, long long n) {
    __shared__ double cache[REDUCE_THREADS];
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
    __shared__ double cache[REDUCE_BLOCKS];
    cache[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (int s = REDUCE_BLOCKS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) scalars[slot] = cache[0];
}

// max |v| with NaN sticking (a later a > NaN is false), as numpy's max
__device__ __forceinline__ float nan_max(float top, float a) {
    return (a > top || a != a) ? a : top;
}

// grid-stride partial maxima of |values|, one per block
extern "C" __global__ void max_abs_partial(const float* __restrict__ values,
                                           float* __restrict__ partial, long long n) {
    __shared__ float top[REDUCE_THREADS];
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
    __shared__ float top[REDUCE_BLOCKS];
    top[threadIdx.x] = partial[threadIdx.x];
    __syncthreads();
    for (int w = REDUCE_BLOCKS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) top[threadIdx.x] = nan_max(top[threadIdx.x], top[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) scalars[slot] = (double)top[0];
}

// ---- CG vector updates ---------------------------------------------------------------------
extern "C" __global__ void cg_update(float* __restrict__ x, float* __restrict__ r,
                                     const float* __restrict__ d, const float* __restrict__ q,
                                     const double* __restrict__ scalars, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float alpha = cg_alpha(scalars);
    x[t] = x[t] + alpha * d[t];
    r[t] = r[t] - alpha * q[t];
}
extern "C" __global__ void cg_direction(float* __restrict__ d, const float* __restrict__ z,
                                        const double* __restrict__ scalars, long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const double rz = scalars[SLOT_RZ];
    const float beta = rz > 0.0 ? (float)(scalars[SLOT_RZ_NEXT] / rz) : 0.0f;
    d[t] = z[t] + beta * d[t];
}
extern "C" __global__ void cg_shift(double* __restrict__ scalars) {
    scalars[SLOT_RZ] = scalars[SLOT_RZ_NEXT];
}

extern "C" __global__ void extrapolate(float* __restrict__ pressure, float* __restrict__ previous,
                                       long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const float old = pressure[t];
    pressure[t] = 2.0f * old - previous[t];
    previous[t] = old;
}
