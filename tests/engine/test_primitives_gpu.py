"""The CUDA builds of the shared primitives agree with the NumPy reference (GPU only)."""
import numpy as np
import pytest

from snowfall.kernels.reference import rng as ref_rng
from snowfall.kernels.reference import sampling as ref_sampling

pytestmark = pytest.mark.gpu

_PROBE = r"""
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


def test_cuda_primitives_match_reference(gpu_backend):
    import cupy as cp

    from snowfall.kernels.gpu.common import compile_module

    kernel = compile_module(_PROBE).get_function("probe")
    rng = np.random.default_rng(3)
    nz, ny, nx = 6, 9, 11
    u = rng.standard_normal((nz, ny, nx + 1)).astype(np.float32)
    v = rng.standard_normal((nz, ny + 1, nx)).astype(np.float32)
    w = rng.standard_normal((nz + 1, ny, nx)).astype(np.float32)
    field = rng.standard_normal((ny, nx)).astype(np.float32)
    n = 4096
    pts = rng.uniform(-1.0, 9.0, (3, n)).astype(np.float32)
    out = cp.full(5 * n, np.nan, dtype=cp.float32)
    args = [cp.asarray(a) for a in (u, v, w, field)] + [np.int32(nx), np.int32(ny), np.int32(nz)]
    args += [cp.asarray(p) for p in pts] + [np.int32(n), np.uint32(99), np.uint32(7), np.uint32(3), out]
    kernel(((n + 127) // 128,), (128,), tuple(args))
    got = cp.asnumpy(out).reshape(n, 5)
    ref = ref_sampling.sample_wind(u, v, w, 0.1, -0.2, 0.3, 0.7, *pts)
    np.testing.assert_allclose(got[:, :3].T, np.stack(ref), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 3], ref_sampling.sample_bilinear(field, 0.1, -0.2, 0.7, pts[0], pts[1]),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, 4], ref_rng.random_uniform(99, np.arange(n), 7, 3))
