"""Headless bake of a .blend for render farms and scripts.

With the bpy module (``pip install bpy`` plus this package)::

    python -m snowfall.operators.headless scene.blend [--output baked.blend]
        [--frame-start N] [--frame-end M] [--backend auto|gpu|cpu|numpy] [--resume]
        [--camera-only [--camera-margin 0.1]]

With a Blender binary that has the extension installed and enabled::

    blender -b scene.blend --python-expr "import bpy; bpy.ops.snowfall.bake(); \
bpy.ops.wm.save_mainfile()"

Either bakes the scene's frame range with the file's Snowfall settings (frame by frame,
the same code as the Bake button) and saves the file (in place unless ``--output``).
Exit status 0 on success, 2 on bad input (the message names the setting to change).
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def bake_file(path: str, output: str | None = None, frame_start: int | None = None,
              frame_end: int | None = None, backend: str | None = None,
              resume: bool = False, scene_name: str | None = None, log=print,
              camera_only: bool = False, camera_margin: float = 0.1) -> int:
    """Open ``path``, bake (or resume) its Snowfall scene, save. Returns the last baked
    frame. Raises SnowInputError for bad input (before the file is changed)."""
    import bpy

    from .. import register, unregister
    from ..snow_addon.errors import SnowInputError
    from .bake import BakeJob, _RUNNING

    bpy.ops.wm.open_mainfile(filepath=os.path.abspath(path))
    registered = hasattr(bpy.types.Scene, "snowfall")
    if not registered:
        register()
    try:
        scene = bpy.data.scenes[scene_name] if scene_name else bpy.context.scene
        if scene_name and bpy.context.window is not None:
            bpy.context.window.scene = scene
        if frame_start is not None:
            scene.frame_start = frame_start
        if frame_end is not None:
            scene.frame_end = frame_end
        context = bpy.context
        if context.scene != scene:
            raise SnowInputError("scene", f"'{scene.name}' is not the active scene",
                                 "make it the active scene before saving the file")
        job = BakeJob(context, resume=resume, backend=backend, camera_only=camera_only,
                      camera_margin=camera_margin)
        _RUNNING[scene.as_pointer()] = job
        log(f"snowfall: baking '{scene.name}' frames {job.frame}-{job.frame_end} on "
            f"{job.sim.backend.describe()}")
        started = time.perf_counter()
        try:
            while job.advance_frame():
                log("  " + job.status_text().replace("  (Esc to stop)", ""))
        finally:
            job.finish()
        log(f"snowfall: baked up to frame {job.frame} in {time.perf_counter() - started:.1f} s")
        target = os.path.abspath(output) if output else bpy.data.filepath
        bpy.ops.wm.save_mainfile(filepath=target)
        log(f"snowfall: saved {target}")
        return job.frame
    finally:
        if not registered:
            unregister()


def main(argv=None) -> int:
    from ..snow_addon.errors import SnowInputError

    parser = argparse.ArgumentParser(prog="python -m snowfall.operators.headless",
                                     description="Bake a .blend's snowfall without a UI.")
    parser.add_argument("blend", help="the .blend file to bake")
    parser.add_argument("--output", help="save the baked file here (default: in place)")
    parser.add_argument("--frame-start", type=int)
    parser.add_argument("--frame-end", type=int)
    parser.add_argument("--backend", choices=("auto", "gpu", "cpu", "numpy"),
                        help="override the file's backend setting")
    parser.add_argument("--resume", action="store_true",
                        help="continue a stopped bake instead of baking from the start")
    parser.add_argument("--scene", help="scene name (default: the file's active scene)")
    parser.add_argument("--camera-only", action="store_true",
                        help="write only the flakes the scene camera sees (all are simulated)")
    parser.add_argument("--camera-margin", type=float, default=0.1,
                        help="extra view kept on each side, as a share of its size (0.1)")
    args = parser.parse_args(argv)
    try:
        bake_file(args.blend, args.output, args.frame_start, args.frame_end, args.backend,
                  args.resume, args.scene, camera_only=args.camera_only,
                  camera_margin=args.camera_margin)
    except SnowInputError as error:
        print(f"snowfall: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main())
