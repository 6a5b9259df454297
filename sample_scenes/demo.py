"""The main job, headless: build a sample scene, bake it, save the .blend and render one
frame with Cycles to a PNG.

    python -m snowfall.sample_scenes.demo --scene box_test --frames 48 --out out/box_test.png

Needs the bpy module (``bash tools/setup.sh`` installs bpy 5.2 LTS; 4.2-5.1 work too, see
docs/addon.md) and this package. The baked .blend is saved beside the PNG, its cache
folder beside it; it renders without the add-on in the Blender release that saved it.
"""
from __future__ import annotations

import argparse
import os
import time


def run(scene_name: str, out_png: str, frames: int, flakes: int | None, frame: int | None,
        resolution: tuple, samples: int, backend: str) -> dict:
    import bpy

    from ..operators.bake import BakeJob
    from .build import build

    out_png = os.path.abspath(out_png)
    os.makedirs(os.path.dirname(out_png), exist_ok=True)
    blend = os.path.splitext(out_png)[0] + ".blend"
    options = {"frames": frames}
    if flakes:
        options["flakes"] = flakes
    build(scene_name, **options)
    scene = bpy.context.scene
    scene.snowfall.backend = backend
    # the cache folder is the .blend's own "//blendcache_<blend name>/snowfall"
    bpy.ops.wm.save_mainfile(filepath=blend)

    started = time.perf_counter()
    job = BakeJob(bpy.context)
    print(f"demo: baking {scene_name} frames {job.frame_start}-{job.frame_end} on "
          f"{job.sim.backend.describe()}; wind grid {job.sim.grid.nx}x{job.sim.grid.ny}x"
          f"{job.sim.grid.nz}, {scene.snowfall.flake_count:,} flakes", flush=True)
    try:
        while job.advance_frame():
            if job.frames_done % 8 == 0:
                print("  " + job.status_text().replace("  (Esc to stop)", ""), flush=True)
    finally:
        job.finish()
    bake_seconds = time.perf_counter() - started
    bpy.ops.wm.save_mainfile(filepath=blend)

    render_frame = frame if frame is not None else scene.frame_end
    scene.frame_set(render_frame)
    scene.render.resolution_x, scene.render.resolution_y = resolution
    scene.cycles.samples = samples
    scene.render.filepath = out_png
    started = time.perf_counter()
    bpy.ops.render.render(write_still=True)
    render_seconds = time.perf_counter() - started
    print(f"demo: baked {job.frames_done} frames in {bake_seconds:.1f} s, rendered frame "
          f"{render_frame} in {render_seconds:.1f} s -> {out_png} (scene {blend})")
    return {"blend": blend, "png": out_png, "bake_seconds": bake_seconds,
            "render_seconds": render_seconds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snowfall.sample_scenes.demo",
                                     description="Bake a sample scene and render a frame.")
    parser.add_argument("--scene", default="box_test",
                        choices=("box_test", "mountain_valley", "snow_fence", "porous_fence",
                                 "ridge"))
    parser.add_argument("--out", default="out/box_test.png", help="PNG to write")
    parser.add_argument("--frames", type=int, default=48, help="frames to bake")
    parser.add_argument("--flakes", type=int, help="flake count (scene default otherwise)")
    parser.add_argument("--frame", type=int, help="frame to render (default: the last)")
    parser.add_argument("--resolution", type=int, nargs=2, default=(640, 360))
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu", "numpy"))
    args = parser.parse_args(argv)
    run(args.scene, args.out, args.frames, args.flakes, args.frame, tuple(args.resolution),
        args.samples, args.backend)
    return 0


if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main())
