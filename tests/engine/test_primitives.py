"""The shared primitives: counter-based random numbers and grid interpolation agree across
backends and behave as documented."""
import numpy as np
import pytest

from snowfall.kernels.reference import rng as ref_rng
from snowfall.kernels.reference import sampling as ref_sampling


def test_random_uniform_range_and_uniformity():
    index = np.arange(200_000)
    u = ref_rng.random_uniform(7, index, 3, 1)
    assert u.dtype == np.float32 and u.min() >= 0.0 and u.max() < 1.0
    counts, _ = np.histogram(u, bins=20, range=(0, 1))
    expected = len(u) / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 43.8  # 99.9th percentile of chi-square with 19 degrees of freedom
    # different streams / counters / seeds are uncorrelated
    v = ref_rng.random_uniform(7, index, 3, 2)
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01
    assert not np.array_equal(u, ref_rng.random_uniform(8, index, 3, 1))
    assert not np.array_equal(u, ref_rng.random_uniform(7, index, 4, 1))


def test_numba_rng_matches_reference_bitwise():
    import numba

    from snowfall.kernels.cpu import rng as cpu_rng

    @numba.njit
    def draw(seed, n, counter, stream):
        out = np.empty(n, np.float32)
        for i in range(n):
            out[i] = cpu_rng.random_uniform(seed, i, counter, stream)
        return out

    for seed, counter, stream in [(0, 0, 0), (123456789, 17, 5), (2**32 - 1, 2**32 - 1, 9)]:
        expected = ref_rng.random_uniform(seed, np.arange(5000), counter, stream)
        np.testing.assert_array_equal(draw(seed, 5000, counter, stream), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_inline_floor_equals_math_floor_for_every_input(dtype):
    """kernels.cpu.rounding.floor_int is math.floor as Numba compiles it (int64), for
    every float: ordinary values, halves, huge ones, NaN and the infinities."""
    import math

    import numba

    from snowfall.kernels.cpu.rounding import floor_int

    @numba.njit
    def both(values, ours, numbas):
        for n in range(values.size):
            ours[n] = floor_int(values[n])
            numbas[n] = math.floor(values[n])

    rng = np.random.default_rng(3)
    scaled = rng.standard_normal(50_000) * 10.0 ** rng.integers(-3, 25, 50_000)
    bits = rng.integers(0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 2.5, -2.5, -1e-30, 1e30, -1e30, 9.3e18,
               -9.3e18, 16777217.0, -0.5]
    with np.errstate(invalid="ignore", over="ignore"):
        values = np.concatenate([scaled, bits.astype(np.float64), special]).astype(dtype)
    ours = np.empty(values.size, np.int64)
    numbas = np.empty(values.size, np.int64)
    both(values, ours, numbas)
    np.testing.assert_array_equal(ours, numbas)
    finite = np.isfinite(values) & (np.abs(values) < 2.0**62)
    np.testing.assert_array_equal(ours[finite], np.floor(values[finite]).astype(np.int64))


def test_sampling_reproduces_linear_fields_and_clamps():
    rng = np.random.default_rng(1)
    nz, ny, nx = 5, 6, 7
    h = 0.5
    x0, y0, z0 = -1.0, 2.0, 3.0
    a, b, c, d = 0.3, -0.7, 1.1, 0.25

    def linear(x, y, z):
        return a * x + b * y + c * z + d

    ku, ju, iu = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx + 1), indexing="ij")
    u = linear(x0 + iu * h, y0 + (ju + .5) * h, z0 + (ku + .5) * h).astype(np.float32)
    kv, jv, iv = np.meshgrid(np.arange(nz), np.arange(ny + 1), np.arange(nx), indexing="ij")
    v = linear(x0 + (iv + .5) * h, y0 + jv * h, z0 + (kv + .5) * h).astype(np.float32)
    kw, jw, iw = np.meshgrid(np.arange(nz + 1), np.arange(ny), np.arange(nx), indexing="ij")
    w = linear(x0 + (iw + .5) * h, y0 + (jw + .5) * h, z0 + kw * h).astype(np.float32)
    # points well inside every component's sample range
    x = rng.uniform(x0 + h, x0 + (nx - 1) * h, 500)
    y = rng.uniform(y0 + h, y0 + (ny - 1) * h, 500)
    z = rng.uniform(z0 + h, z0 + (nz - 1) * h, 500)
    vx, vy, vz = ref_sampling.sample_wind(u, v, w, x0, y0, z0, h, x, y, z)
    for got in (vx, vy, vz):
        np.testing.assert_allclose(got, linear(x, y, z), rtol=0, atol=2e-5)
    # outside the grid the edge value is held
    far = ref_sampling.sample_wind(u, v, w, x0, y0, z0, h, [x0 - 100.0], [y0 + 1.0], [z0 + 1.0])
    edge = ref_sampling.sample_wind(u, v, w, x0, y0, z0, h, [x0], [y0 + 1.0], [z0 + 1.0])
    np.testing.assert_array_equal(far[0], edge[0])


# The CUDA build's probe: the same samples and draws as _cpu_probe, one thread per point.
_CUDA_PROBE = r"""
extern "C" __global__ void probe(const float* u, const float* v, const float* w, const float* field,
                                 int nx, int ny, int nz, const float* px, const float* py,
                                 const float* pz, int n, unsigned int seed, unsigned int counter,
                                 unsigned int stream, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float3 s = sample_wind(u, v, w, nx, ny, nz, 0.1f, -0.2f, 0.3f, 0.7f, px[i], py[i], pz[i]);
    out[5 * i + 0] = s.x; out[5 * i + 1] = s.y; out[5 * i + 2] = s.z;
    out[5 * i + 3] = sample_bilinear(field, nx, ny, 0.1f, -0.2f, 0.7f, px[i], py[i]);
    out[5 * i + 4] = random_uniform(seed, (unsigned int)i, counter, stream);
}
"""


def _cpu_probe(u, v, w, field, pts, seed, counter, stream):
    import numba

    from snowfall.kernels.cpu import rng as cpu_rng
    from snowfall.kernels.cpu import sampling as cpu_sampling

    @numba.njit
    def run(u, v, w, field, x, y, z):
        out = np.empty((x.size, 5), np.float32)
        for n in range(x.size):
            a, b, c = cpu_sampling.sample_wind(u, v, w, 0.1, -0.2, 0.3, 0.7, x[n], y[n], z[n])
            out[n, 0], out[n, 1], out[n, 2] = a, b, c
            out[n, 3] = cpu_sampling.sample_bilinear(field, 0.1, -0.2, 0.7, x[n], y[n])
            out[n, 4] = cpu_rng.random_uniform(seed, n, counter, stream)
        return out

    return run(u, v, w, field, *pts)


def _gpu_probe(u, v, w, field, pts, seed, counter, stream):
    import cupy as cp

    from snowfall.kernels.gpu.common import compile_module

    kernel = compile_module(_CUDA_PROBE).get_function("probe")
    nz, ny, nx = u.shape[0], u.shape[1], u.shape[2] - 1
    n = pts.shape[1]
    out = cp.full(5 * n, np.nan, dtype=cp.float32)
    args = [cp.asarray(a) for a in (u, v, w, field)] + [np.int32(nx), np.int32(ny), np.int32(nz)]
    args += [cp.asarray(p) for p in pts] + [np.int32(n), np.uint32(seed), np.uint32(counter),
                                            np.uint32(stream), out]
    kernel(((n + 127) // 128,), (128,), tuple(args))
    return cp.asnumpy(out).reshape(n, 5)


@pytest.mark.parametrize("shape", [(4, 5, 6), (9, 3, 17), (6, 9, 11)])
def test_compiled_sampling_and_rng_match_reference(backend, shape):
    """The Numba and the CUDA build of the shared primitives (wind and heightmap sampling,
    the counter-based random numbers) against the NumPy reference, at points inside and
    outside the grid."""
    rng = np.random.default_rng(2)
    nz, ny, nx = shape
    u = rng.standard_normal((nz, ny, nx + 1)).astype(np.float32)
    v = rng.standard_normal((nz, ny + 1, nx)).astype(np.float32)
    w = rng.standard_normal((nz + 1, ny, nx)).astype(np.float32)
    field = rng.standard_normal((ny, nx)).astype(np.float32)
    h = 0.7
    pts = rng.uniform(-1.0, 1.0 + max(shape) * h, (3, 4096)).astype(np.float32)
    probe = _gpu_probe if backend.is_gpu else _cpu_probe
    got = probe(u, v, w, field, pts, 99, 7, 3)
    ref = ref_sampling.sample_wind(u, v, w, 0.1, -0.2, 0.3, 0.7, *pts)
    np.testing.assert_allclose(got[:, :3].T, np.stack(ref), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 3], ref_sampling.sample_bilinear(field, 0.1, -0.2, 0.7, pts[0], pts[1]),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, 4], ref_rng.random_uniform(99, np.arange(pts.shape[1]), 7, 3))


def test_sampling_at_a_nan_point_clamps_to_the_low_edge(backend):
    """A NaN coordinate (a wind gone non-finite moves points there) samples the grid's low
    edge on every build, as CUDA's fmaxf clamps it: the Numba build used to index outside
    its arrays with it and crash the process (Blender with it)."""
    rng = np.random.default_rng(5)
    nz, ny, nx = 4, 5, 6
    u = rng.standard_normal((nz, ny, nx + 1)).astype(np.float32)
    v = rng.standard_normal((nz, ny + 1, nx)).astype(np.float32)
    w = rng.standard_normal((nz + 1, ny, nx)).astype(np.float32)
    field = rng.standard_normal((ny, nx)).astype(np.float32)
    nan = np.float32(np.nan)
    pts = np.array([[nan, 1.0, 1.0], [1.0, nan, 1.0], [1.0, 1.0, nan], [nan, nan, nan]],
                   np.float32).T.copy()
    probe = _gpu_probe if backend.is_gpu else _cpu_probe
    got = probe(u, v, w, field, pts, 99, 7, 3)
    assert np.isfinite(got).all()
    ref = ref_sampling.sample_wind(u, v, w, 0.1, -0.2, 0.3, 0.7, *pts)
    np.testing.assert_allclose(got[:, :3].T, np.stack(ref), rtol=1e-5, atol=1e-5)
    low = ref_sampling.sample_wind(u, v, w, 0.1, -0.2, 0.3, 0.7, [-1e6], [1.0], [1.0])
    np.testing.assert_array_equal(np.stack(ref)[:, 0], np.stack(low)[:, 0])
    np.testing.assert_allclose(got[:, 3], ref_sampling.sample_bilinear(field, 0.1, -0.2, 0.7,
                                                                        pts[0], pts[1]),
                               rtol=1e-5, atol=1e-5)
