"""Why the GPU is not used, as the panel shows it: each cause faked through the probe that
``diagnose_gpu`` asks (no GPU, driver or CuPy needed), and the search for the CUDA runtime
libraries the GPU build bundles."""
import sys
from types import SimpleNamespace

import pytest

from snowfall.snow_addon import backend as backend_module
from snowfall.snow_addon.backend import (GpuDiagnosis, SystemProbe, bundled_cuda_libraries,
                                         diagnose_gpu)
from snowfall.snow_addon.errors import SnowInputError


class FakeProbe(SystemProbe):
    """A machine described by its answers: driver CUDA version (None: no driver), whether
    CuPy is installed, the CUDA version its build needs, and what loading it does."""

    def __init__(self, driver=12040, build=True, required=12000, load_error=None,
                 count_error=None, count=1, name="NVIDIA Fake 9000"):
        self.driver, self.build, self.required = driver, build, required
        self.load_error, self.count_error, self.count, self.name = (load_error, count_error,
                                                                    count, name)
        self.loaded = False

    def driver_cuda_version(self):
        return self.driver

    def gpu_build_installed(self):
        return self.build

    def required_cuda_version(self):
        return self.required

    def load_cupy(self):
        self.loaded = True
        if self.load_error is not None:
            raise self.load_error
        return SimpleNamespace()

    def device_count(self, cupy):
        if self.count_error is not None:
            raise self.count_error
        return self.count

    def device_name(self, cupy):
        return self.name


class CUDARuntimeError(RuntimeError):
    """Stands in for cupy_backends.cuda.api.runtime.CUDARuntimeError."""


def test_usable_gpu():
    probe = FakeProbe()
    diagnosis = diagnose_gpu(probe)
    assert diagnosis.usable and diagnosis.cause == "ok" and diagnosis.reason == ""
    assert diagnosis.device_name == "NVIDIA Fake 9000"
    assert diagnosis.driver_cuda == (12, 4) and diagnosis.required_cuda == (12, 0)


def test_no_driver_and_no_gpu_build():
    diagnosis = diagnose_gpu(FakeProbe(driver=None, build=False))
    assert not diagnosis.usable and diagnosis.cause == "no-driver"
    assert diagnosis.reason.startswith("no NVIDIA driver found")


def test_no_driver_with_the_gpu_build():
    """The GPU build installed where there is no driver: the CUDA runtime then says
    cudaErrorInsufficientDriver (seen with the GPU zip in Blender 4.2 here), yet the cause
    is the missing driver."""
    error = CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                             "insufficient for CUDA runtime version")
    probe = FakeProbe(driver=None, count_error=error)
    diagnosis = diagnose_gpu(probe)
    assert diagnosis.cause == "no-driver" and probe.loaded
    assert diagnosis.reason.startswith("no NVIDIA driver found")
    load_error = ImportError("CuPy failed to load libcuda.so.1: cannot open shared object")
    diagnosis = diagnose_gpu(FakeProbe(driver=None, load_error=load_error))
    assert diagnosis.cause == "no-driver" and "libcuda.so.1" in diagnosis.reason


def test_driver_without_the_gpu_build():
    probe = FakeProbe(driver=12020, build=False)
    diagnosis = diagnose_gpu(probe)
    assert diagnosis.cause == "no-gpu-build" and not probe.loaded
    assert diagnosis.reason.startswith("no GPU build installed")
    assert "CUDA 12.2" in diagnosis.reason and "-gpu.zip" in diagnosis.reason


@pytest.mark.parametrize("driver, text", [(11040, "CUDA 11.4"), (10020, "CUDA 10.2")])
def test_driver_too_old_for_the_bundled_runtime(driver, text):
    """The driver supports an older CUDA than the build's runtime (CuPy then fails with
    cudaErrorInsufficientDriver): the message names both versions and the fix."""
    error = CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                             "insufficient for CUDA runtime version")
    diagnosis = diagnose_gpu(FakeProbe(driver=driver, count_error=error))
    assert diagnosis.cause == "old-driver" and not diagnosis.usable
    assert diagnosis.reason.startswith("NVIDIA driver too old")
    assert text in diagnosis.reason and "CUDA 12.0 or newer" in diagnosis.reason
    assert "update the NVIDIA driver" in diagnosis.reason
    assert ("527.41" if sys.platform == "win32" else "525.60.13") in diagnosis.reason


def test_driver_too_old_even_when_cupy_does_not_say_so():
    diagnosis = diagnose_gpu(FakeProbe(driver=11080, required=12000))
    assert diagnosis.cause == "old-driver" and diagnosis.driver_cuda == (11, 8)


def test_insufficient_driver_with_an_unknown_cupy_build():
    error = CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
    diagnosis = diagnose_gpu(FakeProbe(driver=12000, required=None, count_error=error))
    assert diagnosis.cause == "old-driver"
    assert "cudaErrorInsufficientDriver" in diagnosis.reason


def test_a_newer_driver_than_the_runtime_is_fine():
    assert diagnose_gpu(FakeProbe(driver=13010, required=12000)).usable


def test_driver_but_no_gpu():
    no_device = CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    assert diagnose_gpu(FakeProbe(count_error=no_device)).cause == "no-device"
    diagnosis = diagnose_gpu(FakeProbe(count=0))
    assert diagnosis.cause == "no-device" and diagnosis.reason == "the NVIDIA driver sees no GPU"


def test_other_cuda_failure_keeps_cupys_message():
    error = ImportError("CuPy failed to load libnvrtc.so.12: OSError")
    diagnosis = diagnose_gpu(FakeProbe(load_error=error))
    assert diagnosis.cause == "cuda-failed"
    assert "libnvrtc.so.12" in diagnosis.reason and diagnosis.reason.startswith("CuPy could not")


def test_select_backend_falls_back_and_says_why(monkeypatch):
    monkeypatch.setattr(backend_module, "diagnose_gpu",
                        lambda probe=None: diagnose_gpu(FakeProbe(driver=11040)))
    chosen = backend_module.select_backend("auto")
    assert chosen.name == "cpu"
    assert chosen.reason.startswith("no GPU: NVIDIA driver too old")
    assert "NVIDIA driver too old" in chosen.describe()
    with pytest.raises(SnowInputError, match="NVIDIA driver too old") as raised:
        backend_module.select_backend("gpu")
    assert raised.value.setting == "backend"
    monkeypatch.setattr(backend_module, "diagnose_gpu",
                        lambda probe=None: diagnose_gpu(FakeProbe(driver=None, build=False)))
    assert backend_module.gpu_unavailable_reason().startswith("no NVIDIA driver found")


def test_the_real_probe_answers_without_raising():
    """On this machine, whatever it has: a diagnosis, never an exception."""
    diagnosis = diagnose_gpu()
    assert isinstance(diagnosis, GpuDiagnosis)
    assert diagnosis.usable or diagnosis.reason
    driver = SystemProbe().driver_cuda_version()
    assert driver is None or driver >= 0


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_bundled_cuda_libraries_found_on_the_path(tmp_path):
    """Blender installs extension wheels in a site-packages of its own (on sys.path, not
    one of the interpreter's site folders): the runtime and NVRTC are found there, in load
    order, the ``.alt`` variants left out."""
    empty, site = tmp_path / "empty", tmp_path / "site"
    empty.mkdir()
    for name in ("cuda_runtime/lib/libcudart.so.12", "cuda_nvrtc/lib/libnvrtc.so.12",
                 "cuda_nvrtc/lib/libnvrtc.alt.so.12", "cuda_nvrtc/lib/libnvrtc-builtins.so.12.9",
                 "cuda_nvrtc/lib/libnvrtc-builtins.alt.so.12.9",
                 "cuda_runtime/bin/cudart64_12.dll", "cuda_nvrtc/bin/nvrtc64_120_0.dll",
                 "cuda_nvrtc/bin/nvrtc64_120_0.alt.dll",
                 "cuda_nvrtc/bin/nvrtc-builtins64_129.dll"):
        _touch(site / "nvidia" / name)
    linux = bundled_cuda_libraries([str(empty), "", str(site)], platform="linux")
    assert [p.split("nvidia")[1].replace("\\", "/") for p in linux] == [
        "/cuda_runtime/lib/libcudart.so.12", "/cuda_nvrtc/lib/libnvrtc-builtins.so.12.9",
        "/cuda_nvrtc/lib/libnvrtc.so.12"]
    windows = bundled_cuda_libraries([str(site)], platform="win32")
    assert [p.split("nvidia")[1].replace("\\", "/") for p in windows] == [
        "/cuda_runtime/bin/cudart64_12.dll", "/cuda_nvrtc/bin/nvrtc-builtins64_129.dll",
        "/cuda_nvrtc/bin/nvrtc64_120_0.dll"]
    assert bundled_cuda_libraries([str(empty)], platform="linux") == []
    assert bundled_cuda_libraries([str(site)], platform="darwin") == []


def _fake_cupy_build(site, major, version):
    """A site folder holding a cupy package and the dist-info of cupy-cuda<major>x."""
    _touch(site / "cupy" / "__init__.py")
    info = site / f"cupy_cuda{major}x-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cupy-cuda{major}x\n"
                                   f"Version: {version}\n")


def _on_path(monkeypatch, *sites):
    import importlib
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "path", [str(site) for site in sites] + sys.path)
    importlib.invalidate_caches()


def test_the_required_cuda_is_that_of_the_cupy_that_imports(tmp_path, monkeypatch):
    """The GPU zip's cupy-cuda12x sits in Blender's extension site-packages; a cupy-cuda13x
    further down sys.path (a user's own install) must not make a driver for CUDA 12 look
    too old (the GPU zip's check on an H100 reported CUDA 13 needed this way)."""
    bundled, user = tmp_path / "bundled", tmp_path / "user"
    _fake_cupy_build(bundled, 12, "13.6.0")
    _fake_cupy_build(user, 13, "14.0.0")
    _on_path(monkeypatch, bundled, user)
    assert SystemProbe().required_cuda_version() == 12000
    _on_path(monkeypatch, user, bundled)
    assert SystemProbe().required_cuda_version() == 13000


def test_the_required_cuda_is_unknown_when_no_build_holds_the_cupy_that_imports(tmp_path,
                                                                            monkeypatch):
    """CuPy from source (no cupy-cudaNNx metadata beside it) with a stray build's metadata
    elsewhere: not known, so the driver is not judged by the stray build."""
    source, stray = tmp_path / "source", tmp_path / "stray"
    _touch(source / "cupy" / "__init__.py")
    _fake_cupy_build(stray, 13, "14.0.0")
    _on_path(monkeypatch, source, stray)
    assert SystemProbe().required_cuda_version() is None
