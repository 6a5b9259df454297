"""Choosing where the simulation runs: the GPU (CuPy) when it can, else the CPU (Numba).

A ``Backend`` bundles the array module (numpy or cupy), the matching kernel build
(``kernels.reference``, ``kernels.cpu`` or ``kernels.gpu``), and why it was chosen; it
hands out the build's module of each stage (``kernel_module``, the stages and what each
provides: ``kernels.contract``). The engine gets every kernel module here, never by
importing a build: ``build_module`` for a build by backend name (the heightmap, made before
a backend is chosen), ``host_kernels`` for the NumPy helpers that work on host arrays.
When the GPU is not used, ``diagnose_gpu`` says why: no NVIDIA driver, a driver too old
for the CUDA runtime of the installed CuPy, no GPU build installed (no CuPy), no GPU, or
CUDA failing otherwise. The GPU build of the extension bundles CuPy and the CUDA runtime
wheels; ``preload_bundled_cuda`` loads those libraries before CuPy is imported.
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from .errors import SnowInputError

BACKEND_CHOICES = ("auto", "gpu", "cpu", "numpy")


class HostRead:
    """A copy from the device to the host under way (Backend.read_async)."""

    __slots__ = ("_event", "_host")

    def __init__(self, event, host):
        self._event, self._host = event, host

    def wait(self):
        if self._event is not None:
            self._event.synchronize()
        return self._host


@dataclass
class Backend:
    name: str
    """"gpu" (CuPy + CUDA), "cpu" (Numba) or "numpy" (reference, slow)."""
    xp: ModuleType
    kernels: ModuleType
    reason: str
    device_name: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def to_host(self, array):
        """A NumPy copy-or-view of a backend array (copies device memory to the host)."""
        if self.is_gpu:
            return self.xp.asnumpy(array)
        return array

    def host_buffer(self, size: int, dtype):
        """A host array to read ``size`` values into (page-locked on the GPU, so a read
        from the device can run while the host goes on)."""
        if self.is_gpu:
            import cupyx

            return cupyx.empty_pinned((size,), dtype)
        return np.zeros(size, dtype)

    def read_async(self, array, host) -> "HostRead":
        """Start copying the backend array ``array`` into ``host`` (host_buffer) after the
        work queued so far; the HostRead's ``wait()`` waits for it and returns it. On the
        CPU backends the array is already on the host: returned as it is."""
        if not self.is_gpu:
            return HostRead(None, array)
        cupy = self.xp
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(host.ctypes.data, array.data.ptr, array.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return HostRead(event, host)

    def asarray(self, array, dtype=None):
        return self.xp.ascontiguousarray(self.xp.asarray(array, dtype=dtype))

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def memory_available(self) -> int:
        """Bytes the backend can still allocate (device memory on the GPU, RAM on the CPU)."""
        if self.is_gpu:
            free, _total = self.xp.cuda.runtime.memGetInfo()
            pool = self.xp.get_default_memory_pool()
            return int(free + pool.free_bytes())
        return host_memory_available()

    def kernel_module(self, stage: str) -> ModuleType:
        """This backend's module of one stage ("wind", "flakes", ...; kernels.contract.STAGES
        says what it provides)."""
        return build_module(self.name, stage)

    def describe(self) -> str:
        where = f" on {self.device_name}" if self.device_name else ""
        return f"{self.name}{where} ({self.reason})"


def host_memory_available() -> int:
    """Bytes of RAM available to this process (MemAvailable, else physical pages)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


# --- why the GPU is or is not used ----------------------------------------------------------

#: Oldest driver (Linux / Windows) for each CUDA major version (CUDA minor version
#: compatibility: a 12.x runtime runs on any driver that supports 12.0).
_DRIVER_FOR_CUDA = {11: ("450.80.02", "452.39"), 12: ("525.60.13", "527.41"),
                    13: ("580.65.06", "580.88")}

#: Where the CUDA runtime wheels (nvidia-cuda-runtime-cu12, nvidia-cuda-nvrtc-cu12) put
#: their libraries inside a site-packages folder, per platform: (sub-folder, file pattern),
#: in load order.
_BUNDLED_CUDA_LIBRARIES = {
    "linux": [("nvidia/cuda_runtime/lib", "libcudart.so.*"),
              ("nvidia/cuda_nvrtc/lib", "libnvrtc-builtins.so.*"),
              ("nvidia/cuda_nvrtc/lib", "libnvrtc.so.*")],
    "win32": [("nvidia/cuda_runtime/bin", "cudart64_*.dll"),
              ("nvidia/cuda_nvrtc/bin", "nvrtc-builtins64_*.dll"),
              ("nvidia/cuda_nvrtc/bin", "nvrtc64_*.dll")],
}
_preloaded: list = []   # handles of the libraries loaded by preload_bundled_cuda (kept alive)


@dataclass(frozen=True)
class GpuDiagnosis:
    """Whether the GPU backend can run here and, when not, why (for the panel)."""
    usable: bool
    cause: str
    """"ok", "no-driver", "no-gpu-build", "old-driver", "no-device" or "cuda-failed"."""
    reason: str = ""
    """One line for the user; empty when usable."""
    driver_cuda: tuple | None = None
    """(major, minor) CUDA version the NVIDIA driver supports; None: no driver found."""
    required_cuda: tuple | None = None
    """(major, minor) the installed CuPy build needs from the driver; None: unknown."""
    device_name: str = ""
    runtime: tuple = ()
    """CUDA libraries loaded from the wheels bundled with the extension (paths)."""


def _cuda_version(value: int | None) -> tuple | None:
    return None if value is None or value <= 0 else (value // 1000, (value % 1000) // 10)


def _version_text(version: tuple) -> str:
    return f"{version[0]}.{version[1]}"


def bundled_cuda_libraries(paths=None, platform: str | None = None) -> list:
    """The CUDA runtime and NVRTC libraries of the bundled wheels, found in the first folder
    on ``paths`` (default ``sys.path``) that has them, in load order; [] when none has."""
    import fnmatch
    import sys

    platform = platform or ("win32" if sys.platform == "win32" else
                            "linux" if sys.platform.startswith("linux") else sys.platform)
    layout = _BUNDLED_CUDA_LIBRARIES.get(platform)
    if layout is None:
        return []
    for folder in (sys.path if paths is None else paths):
        if not folder or not os.path.isdir(os.path.join(folder, layout[0][0])):
            continue
        found = []
        for sub, pattern in layout:
            directory = os.path.join(folder, *sub.split("/"))
            names = sorted(n for n in (os.listdir(directory) if os.path.isdir(directory) else ())
                           if fnmatch.fnmatch(n, pattern) and ".alt." not in n)
            found += [os.path.join(directory, n) for n in names[:1]]
        return found
    return []


def preload_bundled_cuda() -> tuple:
    """Load the CUDA runtime and NVRTC of the wheels bundled with the GPU build, before
    CuPy is imported, so that CuPy finds them without a CUDA toolkit: CuPy 13 opens
    ``libcudart.so.12``/``libnvrtc.so.12`` by name and CuPy 14's cuda-pathfinder searches
    only the interpreter's site-packages, while Blender installs extension wheels in a
    folder of its own. A library already loaded under its name is reused by both. Returns
    the paths loaded (empty when there is no bundle: a CPU build, or CUDA installed another
    way, which then works as before)."""
    import ctypes
    import sys

    if _preloaded:
        return tuple(path for path, _handle in _preloaded)
    for path in bundled_cuda_libraries():
        try:
            if sys.platform == "win32":
                os.add_dll_directory(os.path.dirname(path))
                handle = ctypes.WinDLL(path)
            else:
                handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _preloaded.append((path, handle))
    return tuple(path for path, _handle in _preloaded)


class SystemProbe:
    """What ``diagnose_gpu`` asks of the machine (tests hand it a fake)."""

    def driver_cuda_version(self) -> int | None:
        """The CUDA version the NVIDIA driver supports (e.g. 12040), from the driver library
        itself (no CUDA runtime needed); None when there is no driver library."""
        import ctypes
        import sys

        if sys.platform == "win32":
            names, loader = ["nvcuda.dll"], getattr(ctypes, "WinDLL", ctypes.CDLL)
        elif sys.platform == "darwin":
            return None
        else:
            names, loader = ["libcuda.so.1", "libcuda.so"], ctypes.CDLL
        for name in names:
            try:
                library = loader(name)
            except OSError:
                continue
            version = ctypes.c_int(0)
            try:
                status = library.cuDriverGetVersion(ctypes.byref(version))
            except AttributeError:
                return 0
            return version.value if status == 0 else 0
        return None

    def gpu_build_installed(self) -> bool:
        """Whether CuPy is importable (the GPU build bundles it; the CPU build does not)."""
        import importlib.util
        try:
            return importlib.util.find_spec("cupy") is not None
        except (ImportError, ValueError):
            return False

    def required_cuda_version(self) -> int | None:
        """The CUDA version the CuPy build that would be imported needs from the driver (its
        CUDA major version: 12000 for cupy-cuda12x), None when not known (CuPy from source
        or conda: no cupy-cudaNNx build's files hold the cupy that imports)."""
        import importlib.metadata
        import importlib.util
        try:
            spec = importlib.util.find_spec("cupy")
        except (ImportError, ValueError):
            spec = None
        origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else None
        found = []
        for major in (13, 12, 11):
            try:
                dist = importlib.metadata.distribution(f"cupy-cuda{major}x")
            except importlib.metadata.PackageNotFoundError:
                continue
            # several builds can be installed (the GPU zip's beside one in a site-packages
            # further down sys.path): the one whose files hold the cupy that imports counts
            if origin is not None and os.path.realpath(
                    str(dist.locate_file("cupy/__init__.py"))) == origin:
                return major * 1000
            found.append(major)
        return found[0] * 1000 if origin is None and len(found) == 1 else None

    def load_cupy(self):
        preload_bundled_cuda()
        import cupy
        return cupy

    def device_count(self, cupy) -> int:
        return int(cupy.cuda.runtime.getDeviceCount())

    def device_name(self, cupy) -> str:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)


def _driver_hint(major: int) -> str:
    import sys
    linux, windows = _DRIVER_FOR_CUDA.get(major, ("", ""))
    driver = windows if sys.platform == "win32" else linux
    return f" (driver {driver} or newer)" if driver else ""


def diagnose_gpu(probe: SystemProbe | None = None) -> GpuDiagnosis:
    """Whether CuPy can run the simulation on an NVIDIA GPU here and, when not, why: no
    NVIDIA driver, a driver too old for the bundled CUDA runtime, no GPU build installed
    (no CuPy), no GPU, or CUDA failing otherwise (with CuPy's message)."""
    import sys

    probe = probe or SystemProbe()
    raw_driver = probe.driver_cuda_version()
    driver_cuda, driver_found = _cuda_version(raw_driver), raw_driver is not None
    if not probe.gpu_build_installed():
        if not driver_found:
            where = "macOS has no CUDA" if sys.platform == "darwin" else \
                "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
            return GpuDiagnosis(False, "no-driver", f"no NVIDIA driver found ({where})",
                                driver_cuda)
        supports = f" supports CUDA {_version_text(driver_cuda)}" if driver_cuda else " is there"
        return GpuDiagnosis(False, "no-gpu-build",
                            f"no GPU build installed: the NVIDIA driver{supports}, but this "
                            "Snowfall has no CuPy; install the Snowfall GPU zip "
                            "(snowfall-<version>-<platform>-gpu.zip)", driver_cuda)
    required = _cuda_version(probe.required_cuda_version())
    old = driver_cuda is not None and required is not None and driver_cuda < required

    def old_driver():
        return GpuDiagnosis(False, "old-driver",
                            f"NVIDIA driver too old: it supports CUDA "
                            f"{_version_text(driver_cuda)}, the GPU build needs CUDA "
                            f"{_version_text(required)} or newer{_driver_hint(required[0])}; "
                            "update the NVIDIA driver", driver_cuda, required)

    try:
        cupy = probe.load_cupy()
        count = probe.device_count(cupy)
    except Exception as exc:  # ImportError, CUDARuntimeError, OSError from a broken install
        text = f"{type(exc).__name__}: {exc}"
        if not driver_found:
            # the CUDA runtime reports a missing driver as cudaErrorInsufficientDriver too
            return GpuDiagnosis(False, "no-driver",
                                f"no NVIDIA driver found (CuPy: {text[:160]})", None, required)
        if old:
            return old_driver()
        if "InsufficientDriver" in text:
            return GpuDiagnosis(False, "old-driver",
                                f"NVIDIA driver too old for the GPU build's CUDA runtime "
                                f"({text[:160]}); update the NVIDIA driver", driver_cuda,
                                required)
        if "NoDevice" in text:
            return GpuDiagnosis(False, "no-device", "the NVIDIA driver sees no GPU",
                                driver_cuda, required)
        return GpuDiagnosis(False, "cuda-failed", f"CuPy could not start CUDA ({text[:200]})",
                            driver_cuda, required)
    if count < 1:
        return GpuDiagnosis(False, "no-device", "the NVIDIA driver sees no GPU", driver_cuda,
                            required)
    if old:     # CuPy got this far, yet kernels will not load on this driver
        return old_driver()
    return GpuDiagnosis(True, "ok", "", driver_cuda, required, probe.device_name(cupy),
                        tuple(path for path, _handle in _preloaded))


def gpu_unavailable_reason() -> str | None:
    """None when CuPy sees a CUDA device, else a short reason why the GPU cannot be used."""
    diagnosis = diagnose_gpu()
    return None if diagnosis.usable else diagnosis.reason


#: The kernel build (a package of kernels/) each backend runs.
BUILDS = {"numpy": "reference", "cpu": "cpu", "gpu": "gpu"}
#: The NumPy helpers the engine runs on host arrays (the gusts' random keys, the preview's
#: wind samples, the open snowfield's grain flights with the flakes' own eddies): modules
#: of the reference build.
HOST_HELPERS = ("rng", "sampling", "flakes")


def _kernels(name: str) -> ModuleType:
    package = __package__.rsplit(".", 1)[0]  # the top-level package, whatever Blender calls it
    return importlib.import_module(f"{package}.kernels.{name}")


def build_module(backend_name: str, stage: str) -> ModuleType:
    """The module of ``stage`` (a key of kernels.contract.STAGES) in the build that backend
    ``backend_name`` ("numpy", "cpu" or "gpu") runs. The GPU build's heightmap is the CPU
    build's (the terrain is rasterised on the host, once)."""
    from ..kernels.contract import STAGES

    if stage not in STAGES:
        raise ValueError(f"no kernel stage {stage!r}: one of {', '.join(STAGES)}")
    if backend_name not in BUILDS:
        raise ValueError(f"no kernel build for backend {backend_name!r}")
    return _kernels(f"{BUILDS[backend_name]}.{stage}")


def host_kernels(name: str) -> ModuleType:
    """A NumPy helper module for host arrays (HOST_HELPERS: "rng", "sampling", "flakes")."""
    if name not in HOST_HELPERS:
        raise ValueError(f"no host helper module {name!r}: one of {', '.join(HOST_HELPERS)}")
    return _kernels(f"reference.{name}")


def select_backend(requested: str = "auto") -> Backend:
    """The backend for ``requested`` ("auto", "gpu", "cpu" or "numpy")."""
    if requested not in BACKEND_CHOICES:
        raise SnowInputError("backend", f"unknown backend {requested!r}",
                             " or ".join(repr(c) for c in BACKEND_CHOICES))
    if requested == "numpy":
        import numpy
        return Backend("numpy", numpy, _kernels("reference"), "requested: NumPy reference kernels")
    if requested in ("auto", "gpu"):
        diagnosis = diagnose_gpu()
        if diagnosis.usable:
            import cupy
            reason = "requested" if requested == "gpu" else "CuPy sees a CUDA device"
            if diagnosis.runtime:
                reason += ", CUDA runtime bundled with the extension"
            return Backend("gpu", cupy, _kernels("gpu"), reason, diagnosis.device_name)
        if requested == "gpu":
            raise SnowInputError("backend", f"the GPU backend is unavailable: "
                                 f"{diagnosis.reason}",
                                 "'cpu' (or 'auto'), or the fix this message names")
        reason = f"no GPU: {diagnosis.reason}"
    else:
        reason = "requested"
    import numpy
    import numba
    return Backend("cpu", numpy, _kernels("cpu"), reason,
                   f"{numba.config.NUMBA_NUM_THREADS} CPU threads")


class StageTimer:
    """Accumulates wall time per named stage; synchronizes the device around each stage so
    the times are real (only while ``enabled``: off in production stepping)."""

    def __init__(self, backend: Backend, enabled: bool = False):
        self.backend = backend
        self.enabled = enabled
        self.seconds: dict[str, float] = {}

    def stage(self, name: str):
        return _Stage(self, name)


class _Stage:
    def __init__(self, timer: StageTimer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self):
        if self.timer.enabled:
            self.timer.backend.synchronize()
            self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.timer.enabled:
            self.timer.backend.synchronize()
            elapsed = time.perf_counter() - self.start
            self.timer.seconds[self.name] = self.timer.seconds.get(self.name, 0.0) + elapsed
        return False
