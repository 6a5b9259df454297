"""Choosing where the simulation runs: the GPU (CuPy) when it can, else the CPU (Numba).

A ``Backend`` bundles the array module (numpy or cupy), the matching kernel package
(``kernels.reference``, ``kernels.cpu`` or ``kernels.gpu``), and why it was chosen.
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from types import ModuleType

from .errors import SnowInputError

BACKEND_CHOICES = ("auto", "gpu", "cpu", "numpy")


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

    def kernel_module(self, domain: str) -> ModuleType:
        """The kernels of one domain ("wind", "flakes", ...) for this backend."""
        return importlib.import_module(f"{self.kernels.__name__}.{domain}")

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


def gpu_unavailable_reason() -> str | None:
    """None when CuPy sees a CUDA device, else a short reason why the GPU cannot be used."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return f"CuPy is not installed ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy found no usable CUDA driver ({exc})"
    if count < 1:
        return "CuPy sees no CUDA device"
    return None


def _kernels(name: str) -> ModuleType:
    package = __package__.rsplit(".", 1)[0]  # the top-level package, whatever Blender calls it
    return importlib.import_module(f"{package}.kernels.{name}")


def select_backend(requested: str = "auto") -> Backend:
    """The backend for ``requested`` ("auto", "gpu", "cpu" or "numpy")."""
    if requested not in BACKEND_CHOICES:
        raise SnowInputError("backend", f"unknown backend {requested!r}",
                             " or ".join(repr(c) for c in BACKEND_CHOICES))
    if requested == "numpy":
        import numpy
        return Backend("numpy", numpy, _kernels("reference"), "requested: NumPy reference kernels")
    if requested in ("auto", "gpu"):
        why_not = gpu_unavailable_reason()
        if why_not is None:
            import cupy
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            reason = "requested" if requested == "gpu" else "CuPy sees a CUDA device"
            return Backend("gpu", cupy, _kernels("gpu"), reason, name)
        if requested == "gpu":
            raise SnowInputError("backend", f"the GPU backend is unavailable: {why_not}",
                                 "'cpu', or install CuPy for your CUDA version")
        reason = f"no GPU: {why_not}"
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
