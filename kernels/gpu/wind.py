"""Wind kernels, CUDA build through CuPy (same names, signatures and rules as
kernels.reference.wind). Each function is one kernel launch on the current stream; all
arrays are C-contiguous CuPy arrays (float32 faces, uint8 solid)."""
import numpy as np

from .common import compile_module

SOURCE = r"""
__device__ __forceinline__ float advected(const float* __restrict__ field, int fni, int fnj, int fnk,
                                          float x, float y, float z, float vx, float vy, float vz,
                                          float h, float dt, float sx, float sy, float sz) {
    float inv = 1.0f / h;
    float gx = (x - dt * vx) * inv;
    float gy = (y - dt * vy) * inv;
    float gz = (z - dt * vz) * inv;
    return sample_trilinear(field, fni, fnj, fnk, gx - sx, gy - sy, gz - sz);
}
__device__ __forceinline__ float quarter(float a, float b, float c, float d) {
    return 0.25f * ((a + b) + (c + d));
}

#define SOLID(k, j, i) (solid[((long long)(k) * ny + (j)) * nx + (i)] != 0)

extern "C" __global__ void advect_velocity(const float* __restrict__ u, const float* __restrict__ v,
                                           const float* __restrict__ w,
                                           const unsigned char* __restrict__ solid,
                                           float vx, float vy, float h, float dt,
                                           float* __restrict__ uo, float* __restrict__ vo,
                                           float* __restrict__ wo, int nx, int ny, int nz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nu = (long long)nz * ny * (nx + 1);
    const long long nv = (long long)nz * (ny + 1) * nx;
    const long long nw = (long long)(nz + 1) * ny * nx;
    if (t < nu) {
        int i = (int)(t % (nx + 1)); long long r = t / (nx + 1);
        int j = (int)(r % ny); int k = (int)(r / ny);
        float val;
        if (i == 0 && vx > 0.0f) val = vx;
        else if (i == nx && vx < 0.0f) val = vx;
        else {
            int src = i == 0 ? 1 : (i == nx ? nx - 1 : i);
            int il = max(src - 1, 0), ir = min(src, nx - 1);
            long long v0 = ((long long)k * (ny + 1) + j) * nx, v1 = v0 + nx;
            long long w0 = ((long long)k * ny + j) * nx, w1 = w0 + (long long)ny * nx;
            float fy = quarter(__ldg(v + v0 + il), __ldg(v + v0 + ir), __ldg(v + v1 + il), __ldg(v + v1 + ir));
            float fz = quarter(__ldg(w + w0 + il), __ldg(w + w0 + ir), __ldg(w + w1 + il), __ldg(w + w1 + ir));
            float fx = __ldg(u + t - i + src);
            float y = ((float)j + 0.5f) * h, z = ((float)k + 0.5f) * h;
            val = advected(u, nx + 1, ny, nz, (float)src * h, y, z, fx, fy, fz, h, dt, 0.0f, 0.5f, 0.5f);
            if ((j == 0 && vy > 0.0f) || (j == ny - 1 && vy < 0.0f)) val = vx;
        }
        if ((i > 0 && SOLID(k, j, i - 1)) || (i < nx && SOLID(k, j, i))) val = 0.0f;
        uo[t] = val;
        return;
    }
    t -= nu;
    if (t < nv) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % (ny + 1)); int k = (int)(r / (ny + 1));
        float val;
        if (j == 0 && vy > 0.0f) val = vy;
        else if (j == ny && vy < 0.0f) val = vy;
        else {
            int src = j == 0 ? 1 : (j == ny ? ny - 1 : j);
            int jl = max(src - 1, 0), jr = min(src, ny - 1);
            long long ul = ((long long)k * ny + jl) * (nx + 1) + i, ur = ((long long)k * ny + jr) * (nx + 1) + i;
            long long wl = ((long long)k * ny + jl) * nx + i, wr = ((long long)k * ny + jr) * nx + i;
            const long long wk = (long long)ny * nx;
            float fx = quarter(__ldg(u + ul), __ldg(u + ul + 1), __ldg(u + ur), __ldg(u + ur + 1));
            float fz = quarter(__ldg(w + wl), __ldg(w + wr), __ldg(w + wl + wk), __ldg(w + wr + wk));
            float fy = __ldg(v + ((long long)k * (ny + 1) + src) * nx + i);
            float x = ((float)i + 0.5f) * h, z = ((float)k + 0.5f) * h;
            val = advected(v, nx, ny + 1, nz, x, (float)src * h, z, fx, fy, fz, h, dt, 0.5f, 0.0f, 0.5f);
            if ((i == 0 && vx > 0.0f) || (i == nx - 1 && vx < 0.0f)) val = vy;
        }
        if ((j > 0 && SOLID(k, j - 1, i)) || (j < ny && SOLID(k, j, i))) val = 0.0f;
        vo[t] = val;
        return;
    }
    t -= nv;
    if (t < nw) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % ny); int k = (int)(r / ny);
        float val;
        if (k == 0 || k == nz) val = 0.0f;
        else if ((i == 0 && vx > 0.0f) || (i == nx - 1 && vx < 0.0f) ||
                 (j == 0 && vy > 0.0f) || (j == ny - 1 && vy < 0.0f)) val = 0.0f;
        else if (SOLID(k - 1, j, i) || SOLID(k, j, i)) val = 0.0f;
        else {
            // 0 < k < nz here: the cells below and above exist
            long long ul = ((long long)(k - 1) * ny + j) * (nx + 1) + i, ur = ul + (long long)ny * (nx + 1);
            long long vl = ((long long)(k - 1) * (ny + 1) + j) * nx + i, vr = vl + (long long)(ny + 1) * nx;
            float fx = quarter(__ldg(u + ul), __ldg(u + ul + 1), __ldg(u + ur), __ldg(u + ur + 1));
            float fy = quarter(__ldg(v + vl), __ldg(v + vl + nx), __ldg(v + vr), __ldg(v + vr + nx));
            float fz = __ldg(w + t);
            float x = ((float)i + 0.5f) * h, y = ((float)j + 0.5f) * h, z = (float)k * h;
            val = advected(w, nx, ny, nz + 1, x, y, z, fx, fy, fz, h, dt, 0.5f, 0.5f, 0.0f);
        }
        wo[t] = val;
    }
}

extern "C" __global__ void divergence(const float* __restrict__ u, const float* __restrict__ v,
                                      const float* __restrict__ w,
                                      const unsigned char* __restrict__ solid, float s,
                                      float* __restrict__ out, int nx, int ny, int nz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)nz * ny * nx) return;
    int i = (int)(t % nx); long long r = t / nx;
    int j = (int)(r % ny); int k = (int)(r / ny);
    if (solid[t] != 0) { out[t] = 0.0f; return; }
    long long fu = ((long long)k * ny + j) * (nx + 1) + i;
    long long fv = ((long long)k * (ny + 1) + j) * nx + i;
    float flux = ((u[fu + 1] - u[fu]) + (v[fv + nx] - v[fv])) + (w[t + (long long)ny * nx] - w[t]);
    out[t] = s * flux;
}

__device__ __forceinline__ float pget(const float* __restrict__ p, int k, int j, int i,
                                      int nx, int ny, int nz) {
    if (k < 0 || k >= nz || j < 0 || j >= ny || i < 0 || i >= nx) return 0.0f;
    return p[((long long)k * ny + j) * nx + i];
}

template <typename C>
__global__ void project(float* __restrict__ u, float* __restrict__ v, float* __restrict__ w,
                        const float* __restrict__ p, const C* __restrict__ cx,
                        const C* __restrict__ cy, const C* __restrict__ cz,
                                   float s, int nx, int ny, int nz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nu = (long long)nz * ny * (nx + 1);
    const long long nv = (long long)nz * (ny + 1) * nx;
    const long long nw = (long long)(nz + 1) * ny * nx;
    if (t < nu) {
        int i = (int)(t % (nx + 1)); long long r = t / (nx + 1);
        int j = (int)(r % ny); int k = (int)(r / ny);
        float c = (float)cx[t];
        if (c != 0.0f)
            u[t] = u[t] - (s * c) * (pget(p, k, j, i, nx, ny, nz) - pget(p, k, j, i - 1, nx, ny, nz));
        return;
    }
    t -= nu;
    if (t < nv) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % (ny + 1)); int k = (int)(r / (ny + 1));
        float c = (float)cy[t];
        if (c != 0.0f)
            v[t] = v[t] - (s * c) * (pget(p, k, j, i, nx, ny, nz) - pget(p, k, j - 1, i, nx, ny, nz));
        return;
    }
    t -= nv;
    if (t < nw) {
        int i = (int)(t % nx); long long r = t / nx;
        int j = (int)(r % ny); int k = (int)(r / ny);
        float c = (float)cz[t];
        if (c != 0.0f)
            w[t] = w[t] - (s * c) * (pget(p, k, j, i, nx, ny, nz) - pget(p, k - 1, j, i, nx, ny, nz));
    }
}

extern "C" __global__ void solid_from_heightmap(const float* __restrict__ height,
                                                const float* __restrict__ snow, int hnx, int hny,
                                                float hx0, float hy0, float spacing,
                                                float x0, float y0, float z0, float h,
                                                unsigned char* __restrict__ solid,
                                                int nx, int ny, int nz) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)ny * nx) return;
    int i = (int)(t % nx); int j = (int)(t / nx);
    float cx = x0 + ((float)i + 0.5f) * h;
    float cy = y0 + ((float)j + 0.5f) * h;
    float ground = sample_bilinear(height, hnx, hny, hx0, hy0, spacing, cx, cy)
                 + sample_bilinear(snow, hnx, hny, hx0, hy0, spacing, cx, cy);
    for (int k = 0; k < nz; ++k) {
        float cz = z0 + ((float)k + 0.5f) * h;
        solid[((long long)k * ny + j) * nx + i] = cz < ground ? 1 : 0;
    }
}
"""

_BLOCK = 256


_CTYPES = {"float32": "float", "uint8": "unsigned char"}
_NAMES = tuple(f"project<{c}>" for c in _CTYPES.values())


def _kernel(name, coef=None):
    """The kernel ``name``; ``project`` is picked by the dtype of the face coefficients."""
    if coef is not None:
        name = f"{name}<{_CTYPES[str(coef.dtype)]}>"
    return compile_module(SOURCE, _NAMES).get_function(name)


def _blocks(count):
    return ((int(count) + _BLOCK - 1) // _BLOCK,)


def _face_count(nx, ny, nz):
    return nz * ny * (nx + 1) + nz * (ny + 1) * nx + (nz + 1) * ny * nx


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid):
    """solid[k, j, i] = 1 where the cell centre lies below bilinear height + snow depth."""
    nz, ny, nx = solid.shape
    hny, hnx = height.shape
    f = np.float32
    _kernel("solid_from_heightmap")(_blocks(ny * nx), (_BLOCK,), (
        height, snow_depth, np.int32(hnx), np.int32(hny), f(hx0), f(hy0), f(spacing),
        f(x0), f(y0), f(z0), f(cell_size), solid, np.int32(nx), np.int32(ny), np.int32(nz)))


def advect_velocity(u, v, w, solid, inflow_x, inflow_y, cell_size, dt, u_out, v_out, w_out):
    """Semi-Lagrangian self-advection over dt (s) plus the boundary conditions (one launch)."""
    nz, ny, nx = solid.shape
    f = np.float32
    _kernel("advect_velocity")(_blocks(_face_count(nx, ny, nz)), (_BLOCK,), (
        u, v, w, solid, f(inflow_x), f(inflow_y), f(cell_size), f(dt), u_out, v_out, w_out,
        np.int32(nx), np.int32(ny), np.int32(nz)))


def divergence(u, v, w, solid, scale, out):
    """out = scale * net outflow of face velocities per fluid cell, 0 in solid cells."""
    nz, ny, nx = solid.shape
    _kernel("divergence")(_blocks(nz * ny * nx), (_BLOCK,), (
        u, v, w, solid, np.float32(scale), out, np.int32(nx), np.int32(ny), np.int32(nz)))


def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract scale * coefficient * pressure difference across each face, in place."""
    nz, ny, nx = pressure.shape
    _kernel("project", coef_x)(_blocks(_face_count(nx, ny, nz)), (_BLOCK,), (
        u, v, w, pressure, coef_x, coef_y, coef_z, np.float32(scale),
        np.int32(nx), np.int32(ny), np.int32(nz)))
