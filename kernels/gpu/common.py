"""CUDA source shared by the GPU kernels: the counter-based hash and grid interpolation.

Each GPU module compiles ``COMMON_SOURCE + its own source`` with ``compile_module``.
``--fmad=false`` keeps multiply-adds unfused so results track the CPU builds closely.
"""
import functools

COMMON_SOURCE = r"""
__device__ __forceinline__ unsigned int hash_u32(unsigned int x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}
__device__ __forceinline__ float random_uniform(unsigned int seed, unsigned int index,
                                                unsigned int counter, unsigned int stream) {
    unsigned int h = hash_u32(seed + 0x9E3779B9u * stream);
    h = hash_u32(h ^ index);
    h = hash_u32(h ^ counter);
    return (float)(h >> 8) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ void axis_weights(float g, int n, int &i0, int &i1, float &t) {
    g = fminf(fmaxf(g, 0.0f), (float)(n - 1));
    i0 = min((int)floorf(g), max(n - 2, 0));
    i1 = min(i0 + 1, n - 1);
    t = g - (float)i0;
}
// field[ny][nx] at world (x, y)
__device__ __forceinline__ float sample_bilinear(const float* __restrict__ field, int nx, int ny,
                                                 float x0, float y0, float spacing, float x, float y) {
    float inv = 1.0f / spacing;
    int i0, i1, j0, j1; float tx, ty;
    axis_weights((x - x0) * inv, nx, i0, i1, tx);
    axis_weights((y - y0) * inv, ny, j0, j1, ty);
    const float* r0 = field + (long long)j0 * nx;
    const float* r1 = field + (long long)j1 * nx;
    return (r0[i0] * (1.0f - tx) + r0[i1] * tx) * (1.0f - ty) + (r1[i0] * (1.0f - tx) + r1[i1] * tx) * ty;
}
// field[nk][nj][ni] at fractional indices
__device__ __forceinline__ float sample_trilinear(const float* __restrict__ field, int ni, int nj, int nk,
                                                  float gx, float gy, float gz) {
    int i0, i1, j0, j1, k0, k1; float tx, ty, tz;
    axis_weights(gx, ni, i0, i1, tx);
    axis_weights(gy, nj, j0, j1, ty);
    axis_weights(gz, nk, k0, k1, tz);
    long long p0 = ((long long)k0 * nj + j0) * ni, p1 = ((long long)k0 * nj + j1) * ni;
    long long p2 = ((long long)k1 * nj + j0) * ni, p3 = ((long long)k1 * nj + j1) * ni;
    float a = __ldg(field + p0 + i0) * (1.0f - tx) + __ldg(field + p0 + i1) * tx;
    float b = __ldg(field + p1 + i0) * (1.0f - tx) + __ldg(field + p1 + i1) * tx;
    float c = __ldg(field + p2 + i0) * (1.0f - tx) + __ldg(field + p2 + i1) * tx;
    float d = __ldg(field + p3 + i0) * (1.0f - tx) + __ldg(field + p3 + i1) * tx;
    return (a * (1.0f - ty) + b * ty) * (1.0f - tz) + (c * (1.0f - ty) + d * ty) * tz;
}
// MAC wind (u: nz,ny,nx+1; v: nz,ny+1,nx; w: nz+1,ny,nx) at a world point
__device__ __forceinline__ float3 sample_wind(const float* __restrict__ u, const float* __restrict__ v,
                                              const float* __restrict__ w, int nx, int ny, int nz,
                                              float x0, float y0, float z0, float cell_size,
                                              float x, float y, float z) {
    float inv = 1.0f / cell_size;
    float gx = (x - x0) * inv, gy = (y - y0) * inv, gz = (z - z0) * inv;
    return make_float3(sample_trilinear(u, nx + 1, ny, nz, gx, gy - 0.5f, gz - 0.5f),
                       sample_trilinear(v, nx, ny + 1, nz, gx - 0.5f, gy, gz - 0.5f),
                       sample_trilinear(w, nx, ny, nz + 1, gx - 0.5f, gy - 0.5f, gz));
}
"""

COMPILE_OPTIONS = ("--std=c++17", "--fmad=false")


@functools.lru_cache(maxsize=None)
def compile_module(source: str, name_expressions: tuple = ()):
    """Compile ``COMMON_SOURCE + source`` once per process (CuPy caches the binary on disk)."""
    import cupy

    return cupy.RawModule(code=COMMON_SOURCE + source, options=COMPILE_OPTIONS,
                          name_expressions=name_expressions or None)


#: C types of the face-coefficient arrays that templated kernels are instantiated for.
COEFFICIENT_CTYPES = {"float32": "float", "uint8": "unsigned char"}
LAUNCH_BLOCK = 256


def template_names(*names: str) -> tuple:
    """Instantiations ``name<ctype>`` of templated kernels for every coefficient type."""
    return tuple(f"{name}<{c}>" for name in names for c in COEFFICIENT_CTYPES.values())


def get_kernel(source: str, names: tuple, name: str, coef=None):
    """Kernel ``name`` of ``source``; a templated one is picked by the dtype of ``coef``."""
    if coef is not None:
        name = f"{name}<{COEFFICIENT_CTYPES[str(coef.dtype)]}>"
    return _function(source, names, name)


@functools.lru_cache(maxsize=None)
def _function(source: str, names: tuple, name: str):
    """The compiled function (looked up once: the host asks for a few per step)."""
    return compile_module(source, names).get_function(name)


def blocks(count: int) -> tuple:
    """1D grid of ``LAUNCH_BLOCK``-thread blocks covering ``count`` threads."""
    return ((int(count) + LAUNCH_BLOCK - 1) // LAUNCH_BLOCK,)
