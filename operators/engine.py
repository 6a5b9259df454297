"""The add-on's simulation thread and its first-use kernel compile.

Every piece of engine work an operator starts from Blender's UI (a bake's simulation, Set
Terrain's heightmap, Measure, Preview Wind) runs on one ``EngineWorker`` thread
(snow_addon/worker.py), one task at a time, while Blender's thread only polls it from a
modal timer: the window keeps redrawing and Esc works at once. The CPU kernels release the
GIL while they run.

When the add-on is enabled in an interactive Blender, the CPU kernels are compiled (or, when
a previous session compiled them, loaded) straight away, into a folder of the user's own that
survives restarts and add-on updates (``kernel_cache_folder``): the compile runs in child
processes, one per part of the kernels, in parallel (snow_addon/kernel_cache.prepare), so
Blender's own process only loads the result, on that thread. A Bake
pressed before that is done waits for it with its own progress ("preparing the simulation
for first use"). In background Blender (scripts, farms, tests) nothing starts by itself;
``SNOWFALL_PREPARE_KERNELS=1`` starts it there too.

Environment: ``SNOWFALL_KERNEL_CACHE=<folder>`` picks the compile cache folder (a farm's
shared storage, say); ``NUMBA_CACHE_DIR``, when set, is left in charge.
"""
from __future__ import annotations

import os

import bpy

from ..snow_addon import kernel_cache
from ..snow_addon.worker import EngineWorker

#: The first-use compile task's name (operators/bake.py shows its progress).
WARM_UP_TASK = "prepare the simulation for first use"


class KernelPreparation:
    """The compile cache folder and the background compile running into it (or done)."""

    def __init__(self, folder: str | None, task=None, ready: bool = False):
        self.folder = folder
        self.task = task
        #: True when the folder already held this exact kernel version's compile.
        self.ready = ready

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done


class _Engine:
    """The add-on's one worker and preparation (created by register, ended by unregister)."""

    worker: EngineWorker | None = None
    preparation: KernelPreparation | None = None


def worker() -> EngineWorker:
    """The simulation thread (created on first use)."""
    if _Engine.worker is None:
        _Engine.worker = EngineWorker("snowfall-simulation")
    return _Engine.worker


def preparation() -> KernelPreparation | None:
    return _Engine.preparation


def kernel_cache_folder() -> str | None:
    """Where this add-on's CPU kernels are compiled to: ``SNOWFALL_KERNEL_CACHE``, else
    Blender's extension user folder of this extension (kept across restarts and updates),
    else (the add-on loaded as a plain package, as by the bpy module) a folder in Blender's
    user data folder. None when ``NUMBA_CACHE_DIR`` is set (Numba's own setting wins)."""
    explicit = os.environ.get("SNOWFALL_KERNEL_CACHE", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if os.environ.get("NUMBA_CACHE_DIR", "").strip():
        return None
    package = __package__.rsplit(".", 1)[0]
    if package.startswith("bl_ext.") and hasattr(bpy.utils, "extension_path_user"):
        try:
            return bpy.utils.extension_path_user(package, path="kernel_cache", create=True)
        except (ValueError, OSError):
            pass
    folder = bpy.utils.user_resource("DATAFILES", path=os.path.join("snowfall",
                                                                    "kernel_cache"))
    return folder or None


def start(compile_now: bool | None = None) -> KernelPreparation:
    """Point the CPU kernels at the compile cache folder and (interactive Blender, or
    ``compile_now``) compile or load them on the simulation thread."""
    if compile_now is None:
        compile_now = (not bpy.app.background
                       or os.environ.get("SNOWFALL_PREPARE_KERNELS", "") == "1")
    folder = kernel_cache_folder()
    if folder is not None:
        try:
            kernel_cache.use_folder(folder)
        except OSError as error:     # an unwritable user folder: Numba's default place
            print(f"Snowfall: cannot use '{folder}' for compiled kernels ({error}); "
                  "using the add-on's folder")
            folder = None
    ready = folder is not None and kernel_cache.prepared(folder) is not None
    task = None
    if compile_now:
        def compile_kernels(task):
            task.report(0.0, "preparing the simulation for first use")
            return kernel_cache.prepare(
                folder, report=lambda share, _expected: task.report(share),
                check_stop=task.check_stop)

        task = worker().submit(compile_kernels, WARM_UP_TASK)
    _Engine.preparation = KernelPreparation(folder, task, ready)
    return _Engine.preparation


def prepare_now() -> float:
    """Compile (in parallel child processes) or load the CPU kernels on this thread, into
    the add-on's compile cache folder: what a script does before its first bake, as the
    demo does. Returns the seconds it took."""
    folder = _Engine.preparation.folder if _Engine.preparation is not None else \
        start(compile_now=False).folder
    return kernel_cache.prepare(folder)


def stop() -> None:
    """Ask every task to stop and let the thread end (it is a daemon: a compile under way
    finishes on its own, its kernels cached for next time)."""
    if _Engine.worker is not None:
        _Engine.worker.shutdown()
    _Engine.worker = None
    _Engine.preparation = None


def register():
    start()


def unregister():
    stop()
