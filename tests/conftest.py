"""Shared pytest fixtures: backends to run each engine test on, and skips that say why."""
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
