"""The CPU kernels' compile cache: where Numba keeps them, and compiling them ahead of use.

Numba compiles each CPU kernel the first time it runs (about 95 s for a bake's kernels on one
core of this project's 2-core machine, 65 s split over two processes) and, with
``cache=True``, stores the machine code on disk so later processes load it in seconds. By
default that store is ``kernels/cpu/__pycache__`` inside the package. The Blender add-on points
it at a folder of the user's own instead (``use_folder``: Blender's extension user folder,
which survives restarts and add-on updates and is writable where the add-on's folder may not
be), and compiles every
kernel a bake uses in the background as soon as the add-on is enabled (``warm_up``), so the
first Bake does not wait for it, or waits with a progress bar where it comes too early.

``prepared(folder)`` says whether a warm-up finished there for this exact kernel source, Numba
and Python (a marker file written at its end; the kernels' own cache files are Numba's).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .backend import BUILDS

#: Every module of compiled CPU kernels (kernels/cpu/<name>.py).
CPU_KERNEL_MODULES = ("rng", "sampling", "heightmap", "wind", "pressure", "flakes", "cover",
                      "drift")
#: Seconds a first-use preparation of a bake's kernels takes when nothing is cached: 66 s
#: measured on this project's 2-core machine (two child processes compiling, then the load;
#: docs/responsive_bake.md); the wind part took 7.6 s more (63.0 -> 70.6 s) once the wind's
#: samplers were inlined (kernels/cpu/sampling.py), rounded up. Shown to the user as the expected wait until a
#: preparation on this machine has measured its own.
FIRST_USE_SECONDS = 75.0
MARKER_NAME = "snowfall-kernels.json"
_KERNEL_PACKAGE = __package__.rsplit(".", 1)[0] + ".kernels." + BUILDS["cpu"]


def source_key(folder: str | os.PathLike | None = None) -> str:
    """What the compiled kernels depend on: their source files and the constants they share
    (kernels/contract.py: Numba freezes them into the compiled code), Numba, NumPy and
    Python; and the folder Numba's cache files a kernel under: its source file's folder (as
    imported, links not followed; Numba 0.68 then checks the file's content, not its
    time). The same kernels loaded from another path find none of theirs in the folder,
    so they must not take it as prepared: their first Bake would compile them on the
    bake's thread, holding Blender's. ``folder``: the CPU kernels' source folder (default:
    this package's)."""
    import numba

    digest = hashlib.sha256()
    if folder is None:
        folder = Path(importlib.import_module(_KERNEL_PACKAGE).__file__).parent
    folder = Path(os.path.abspath(os.fspath(folder)))
    digest.update(str(folder).encode())
    for path in sorted(folder.glob("*.py")) + [folder.parent / "contract.py"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(json.dumps([numba.__version__, np.__version__, sys.version,
                              platform.machine()]).encode())
    return digest.hexdigest()


def use_folder(folder: str | os.PathLike) -> list[str]:
    """Compile the CPU kernels into ``folder`` (created if missing) from now on in this process.

    Must run before the kernel modules are first imported: Numba fixes a function's cache
    location when the function is decorated. Modules imported earlier keep theirs (they are
    listed in the return value). Only this package's kernels are affected: Numba's global
    cache setting is restored before returning."""
    from numba.core import config

    folder = os.path.abspath(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    already = [name for name in CPU_KERNEL_MODULES
               if f"{_KERNEL_PACKAGE}.{name}" in sys.modules]
    previous = config.CACHE_DIR
    config.CACHE_DIR = folder
    try:
        for name in CPU_KERNEL_MODULES:
            importlib.import_module(f"{_KERNEL_PACKAGE}.{name}")
    finally:
        config.CACHE_DIR = previous
    return already


def prepared(folder: str | os.PathLike) -> dict | None:
    """The marker of a finished warm-up in ``folder`` for the current kernels, else None."""
    try:
        with open(os.path.join(folder, MARKER_NAME), encoding="utf-8") as stream:
            marker = json.load(stream)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("key") != source_key():
        return None
    return marker


def expected_seconds(folder: str | os.PathLike | None) -> float:
    """How long a first-use compile is expected to take: the last one measured in ``folder``
    (for any kernel version), else ``FIRST_USE_SECONDS``."""
    if folder is not None:
        try:
            with open(os.path.join(folder, MARKER_NAME), encoding="utf-8") as stream:
                seconds = float(json.load(stream).get("compile_seconds", 0.0))
            if seconds > 1.0:
                return seconds
        except (OSError, ValueError, AttributeError, TypeError):
            pass
    return FIRST_USE_SECONDS


def _warm_up_scene():
    """A tiny terrain (a bump and a wall) and one porous fence: enough to run every kernel a
    default bake runs (cut-cell wind, MacCormack advection, multigrid pressure solve, flakes,
    deposit, redistribution, drift and blowing snow, porous fences)."""
    from .fences import PorousFence

    n = 9
    x, y = np.meshgrid(np.linspace(0.0, 16.0, n), np.linspace(0.0, 12.0, n))
    z = 1.5 * np.exp(-((x - 8.0) ** 2 + (y - 6.0) ** 2) / 8.0)
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    index = np.arange(n * n).reshape(n, n)
    a, b = index[:-1, :-1].ravel(), index[:-1, 1:].ravel()
    c, d = index[1:, 1:].ravel(), index[1:, :-1].ravel()
    triangles = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    fence = PorousFence(np.array([[4.0, 2.0, 0.0], [4.0, 10.0, 0.0], [4.0, 10.0, 1.0],
                                  [4.0, 2.0, 1.0]]), np.array([[0, 1, 2], [0, 2, 3]]), 0.5)
    return vertices, triangles, [fence]


def warm_up(folder: str | os.PathLike | None = None, report=None, check_stop=None,
            measured: float | None = None) -> float:
    """Compile (or load) every CPU kernel a default bake uses by running a tiny simulation,
    then write the marker in ``folder`` (the folder ``use_folder`` set; None: no marker).

    ``report(progress 0..1, seconds_expected)`` is called as kernels finish compiling;
    ``check_stop()`` between stages may raise to end early; ``measured``: the seconds a
    compile elsewhere took (child processes), recorded as the first-use time. Returns the
    seconds taken here."""
    from numba.core import event

    from .settings import SnowSettings
    from .simulation import Simulation

    started = time.perf_counter()
    expected = expected_seconds(folder)
    compiled = [0]

    def listener_progress():
        if report is not None:
            report(min(0.99, (time.perf_counter() - started) / expected), expected)

    class _Listener(event.Listener):
        def on_start(self, _event):
            pass

        def on_end(self, _event):
            compiled[0] += 1
            listener_progress()

    listener = _Listener()
    vertices, triangles, fences = _warm_up_scene()
    settings = SnowSettings(flake_count=256, heightmap_resolution=24, wind_resolution=8,
                            drift_enabled=True, obstacle_refresh_steps=2, snowfall_rate=50.0,
                            wind_speed=14.0)
    with event.install_listener("numba:compile", listener):
        listener_progress()
        simulation = Simulation(settings, vertices, triangles, backend="cpu", fences=fences)
        for _ in range(4):
            if check_stop is not None:
                check_stop()
            simulation.step(1)
            listener_progress()
        simulation.snow_depth()
        simulation.flake_positions()
    seconds = time.perf_counter() - started
    if folder is not None:
        # Only a real compile measures the first-use time (a warm-up that loaded the
        # kernels from the cache takes seconds).
        if measured is None:
            measured = seconds if seconds > 0.2 * FIRST_USE_SECONDS else \
                expected_seconds(folder)
        marker = {"key": source_key(), "compile_seconds": measured,
                  "kernels_compiled": compiled[0], "finished": time.time()}
        path = os.path.join(folder, MARKER_NAME)
        temporary = path + f".{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as stream:
                json.dump(marker, stream)
            os.replace(temporary, path)
        except OSError:
            pass    # a read-only folder: the kernels still work, they compile again next time
    if report is not None:
        report(1.0, expected)
    return seconds


# --- compiling in several processes ---------------------------------------------------------
#: The parts a compile is split into, one process each: every kernel of a bake is compiled
#: by at least one of them (the heightmap and the obstacle kernels by both), about 65 s each
#: on one core of this project's machine (tests/engine/test_worker.py checks that the bake's
#: process then compiles nothing).
PARTS = ("wind", "flakes")


def compile_part(part: str) -> None:
    """Compile (into the folder ``use_folder`` set) the kernels of one part of a bake:
    "wind" (heightmap, obstacles, wind and pressure solve) or "flakes" (heightmap,
    obstacles, flakes, snow cover, drift, and the wind's mixing and fence drag: the wind is
    never stepped). The two take about the same time (65 s each on one core of this
    project's machine)."""
    from .settings import SnowSettings
    from .simulation import Simulation

    if part not in PARTS:
        raise ValueError(f"unknown part {part!r} (one of {', '.join(PARTS)})")
    vertices, triangles, fences = _warm_up_scene()
    # Each kernel compiled by one part only where it can: the flakes part never steps the
    # wind (a solver other than "mgpcg" keeps it from compiling the pressure solve for the
    # obstacles' projection) and the wind part leaves the mixing and the fences' drag to it
    wind_part = part == "wind"
    settings = SnowSettings(flake_count=256, heightmap_resolution=24, wind_resolution=8,
                            drift_enabled=True, obstacle_refresh_steps=2, snowfall_rate=50.0,
                            wind_speed=14.0, pressure_solver="mgpcg" if wind_part else "sor5",
                            wind_mixing=0.0 if wind_part else SnowSettings.wind_mixing)
    simulation = Simulation(settings, vertices, triangles, backend="cpu",
                            fences=None if wind_part else fences, flakes=not wind_part)
    if not wind_part:
        # the wind is the other part's, but for its mixing and the fences' drag
        simulation._next_wind_step = 1 << 40
        wind = simulation.wind
        wind.mix_and_drag((wind.u, wind.v, wind.w), wind._next, 0.1)
    simulation.step(3)


_CHILD = """
import importlib, importlib.util, sys, types
name, root, folder, part = sys.argv[1:5]
parts = name.split(".")
for depth in range(1, len(parts)):            # parent packages (Blender's bl_ext.<repo>)
    parent = ".".join(parts[:depth])
    if parent not in sys.modules:
        module = types.ModuleType(parent)
        module.__path__ = []
        sys.modules[parent] = module
spec = importlib.util.spec_from_file_location(
    name, root + "/__init__.py", submodule_search_locations=[root])
package = importlib.util.module_from_spec(spec)
sys.modules[name] = package
spec.loader.exec_module(package)
kernel_cache = importlib.import_module(name + ".snow_addon.kernel_cache")
kernel_cache.use_folder(folder)
kernel_cache.compile_part(part)
"""


def compile_in_processes(folder: str | os.PathLike, check_stop=None, report=None,
                         poll_seconds: float = 0.1) -> float:
    """Compile a bake's kernels into ``folder`` in one child process per part (in parallel,
    and the GIL of the parent's process never held by the compiler), under this
    package's own name, so that this process then loads them from ``folder``. The children
    touch nothing but ``folder``. Raises RuntimeError with a child's error output when one
    fails; ``check_stop()`` may raise to end the children. Returns the seconds taken."""
    import subprocess

    folder = os.path.abspath(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    package = __package__.rsplit(".", 1)[0]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.pop("NUMBA_CACHE_DIR", None)
    started = time.perf_counter()
    expected = expected_seconds(folder)
    children = [subprocess.Popen([_python(), "-c", _CHILD, package, root, folder, part],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for part in PARTS]
    try:
        while any(child.poll() is None for child in children):
            if check_stop is not None:
                check_stop()
            if report is not None:
                report(min(0.95, (time.perf_counter() - started) / expected), expected)
            time.sleep(poll_seconds)
    except BaseException:
        for child in children:
            child.kill()
        raise
    for part, child in zip(PARTS, children):
        errors = child.stderr.read().decode(errors="replace")
        child.stderr.close()
        if child.returncode != 0:
            raise RuntimeError(f"compiling the {part} kernels failed (exit {child.returncode}): "
                               + errors.strip()[-2000:])
    return time.perf_counter() - started


def _python() -> str:
    """The Python interpreter to run children with: this one (inside Blender,
    ``sys.executable`` is Blender's own Python since 2.91)."""
    executable = sys.executable
    if not executable or os.path.basename(executable).lower().startswith("blender"):
        raise RuntimeError("no Python interpreter to compile the kernels in (sys.executable "
                           f"is {executable!r})")
    return executable


def prepare(folder: str | os.PathLike | None, report=None, check_stop=None) -> float:
    """Make every CPU kernel of a default bake ready in this process: when ``folder`` does
    not hold them yet, compile them there in parallel child processes first (falling back
    to compiling here when that fails), then load them (``warm_up``). Returns seconds."""
    started = time.perf_counter()
    compiled_elsewhere = False
    if folder is not None and prepared(folder) is None and (os.cpu_count() or 1) > 1:
        try:
            compile_in_processes(folder, check_stop=check_stop,
                                 report=None if report is None else
                                 (lambda share, seconds: report(0.9 * share, seconds)))
            compiled_elsewhere = True
        except (RuntimeError, OSError) as error:
            print(f"snowfall: compiling the kernels in child processes failed ({error}); "
                  "compiling them here")
    seconds = warm_up(folder, report=report, check_stop=check_stop,
                      measured=time.perf_counter() - started if compiled_elsewhere else None)
    return time.perf_counter() - started if compiled_elsewhere else seconds
