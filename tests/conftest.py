"""Shared pytest fixtures: backends to run each engine test on, and skips that say why."""
import numpy as np
import pytest

from snowfall.snow_addon.backend import gpu_unavailable_reason, select_backend

_GPU_REASON = gpu_unavailable_reason()


def pytest_report_header(config):
    return f"snowfall GPU backend: {'available' if _GPU_REASON is None else _GPU_REASON}"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason=f"GPU test skipped: {_GPU_REASON}")
    for item in items:
        if "gpu" in item.keywords and _GPU_REASON is not None:
            item.add_marker(skip_gpu)


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    """The Numba CPU backend, and the GPU backend where CuPy has a device."""
    return select_backend(request.param)


@pytest.fixture
def cpu_backend():
    return select_backend("cpu")


@pytest.fixture
def reference_backend():
    return select_backend("numpy")


@pytest.fixture
def gpu_backend():
    if _GPU_REASON is not None:
        pytest.skip(f"GPU test skipped: {_GPU_REASON}")
    return select_backend("gpu")


def _fractions_of(solid, rng=None, partial=0.3):
    """Open fractions (u, v, w float32 face arrays) of a solid mask: 0/1, the voxel
    boundary; with ``rng``, a share ``partial`` of the faces (open and closed alike) turned
    into cut faces with a fraction in (0, 1)."""
    from snowfall.kernels.reference.wind import voxel_fractions
    nz, ny, nx = solid.shape
    fractions = tuple(np.zeros(s, np.float32)
                      for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])
    voxel_fractions(solid, *fractions)
    if rng is not None:
        for f in fractions:
            cut = rng.random(f.shape) < partial
            f[cut] = rng.uniform(0.01, 0.99, int(cut.sum())).astype(np.float32)
    return fractions


@pytest.fixture
def fractions_of():
    """_fractions_of: open face fractions of a solid mask, optionally with cut faces."""
    return _fractions_of
