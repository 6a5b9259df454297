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
import sys
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
    if flakes is not None:
        options["flakes"] = flakes
    if not hasattr(bpy.types.Scene, "snowfall"):
        from .. import register

        register()
    preparing = None
    if backend in ("auto", "cpu"):
        # The CPU kernels, on the simulation thread while the scene is built: compiled in
        # two child processes into the add-on's compile cache the first time on a machine
        # (about 65 s on 2 cores), loaded after that.
        from ..operators import engine

        kernels_started = time.perf_counter()
        preparing = engine.start(compile_now=True).task
    build(scene_name, **options)
    scene = bpy.context.scene
    scene.snowfall.backend = backend
    # the cache folder is the .blend's own "//blendcache_<blend name>/snowfall"
    bpy.ops.wm.save_mainfile(filepath=blend)
    if preparing is not None:
        preparing.wait()
        preparing.raise_error()
        print(f"demo: CPU kernels ready in {preparing.finished_at - kernels_started:.1f} s "
              "(the scene was built meanwhile)", flush=True)

    started = time.perf_counter()
    # the scene's camera-only flakes, as the Bake button reads them
    job = BakeJob(bpy.context, camera_only=scene.snowfall.camera_only,
                  camera_margin=scene.snowfall.camera_margin)
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


#: The sample scenes (sample_scenes/build.py SCENES; a test keeps the two in step).
SCENE_NAMES = ("box_test", "mountain_valley", "snow_fence", "porous_fence", "ridge")
BACKENDS = ("auto", "gpu", "cpu", "numpy")
#: Blender's own limits: the last frame a scene can have, the render size, Cycles' samples,
#: and what a flake count (an int property) holds.
MAX_FRAME = 1_048_574
RESOLUTION_RANGE = (4, 65536)
MAX_SAMPLES = 1 << 24
MAX_FLAKES = 2**31 - 1
EXIT_BAD_ARGUMENT = 2


class DemoArgumentError(Exception):
    """One bad argument: ``str()`` is the one line the demo prints."""

    def __init__(self, argument: str, problem: str, suggestion: str):
        super().__init__(f"{argument}: {problem} (try {suggestion})" if argument else
                         f"{problem} (try {suggestion})")


class _Parser(argparse.ArgumentParser):
    """argparse, answering a bad command line with one line (no usage block)."""

    def error(self, message):
        # e.g. "argument --scene: invalid choice: 'x' (choose from ...)"
        raise DemoArgumentError("", message, "--help for the arguments")


def _writable_folder(path: str) -> str | None:
    """Why files cannot be created in ``path`` or, where it does not exist yet, in its
    nearest existing parent (None: they can). Nothing is left behind."""
    import tempfile

    probe = path or "."
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"'{probe}' is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as error:
        return f"cannot write in '{probe}' ({error.strerror or error})"
    return None


def check_arguments(args) -> None:
    """DemoArgumentError for the first argument that cannot work; nothing is read, built
    or written before this passes (and bpy is not imported)."""
    if not 1 <= args.frames <= MAX_FRAME:
        raise DemoArgumentError("--frames", f"{args.frames} frames to bake: it must be 1 to "
                                f"{MAX_FRAME:,}", "--frames 48")
    if args.flakes is not None and not 1 <= args.flakes <= MAX_FLAKES:
        raise DemoArgumentError("--flakes", f"{args.flakes} flakes: a flake count must be 1 "
                                f"to {MAX_FLAKES:,}", "--flakes 100000, or leave it out for "
                                "the scene's own count")
    if args.frame is not None and not 1 <= args.frame <= args.frames:
        raise DemoArgumentError("--frame", f"frame {args.frame} is not baked: the demo bakes "
                                f"frames 1 to {args.frames}", f"--frame {args.frames}, or "
                                "--frames as high as the frame to render")
    low, high = RESOLUTION_RANGE
    if not all(low <= size <= high for size in args.resolution):
        width, height = args.resolution
        raise DemoArgumentError("--resolution", f"{width} x {height} pixels: Blender renders "
                                f"{low} to {high} pixels a side", "--resolution 640 360")
    if not 1 <= args.samples <= MAX_SAMPLES:
        raise DemoArgumentError("--samples", f"{args.samples} render samples: Cycles takes 1 "
                                f"to {MAX_SAMPLES:,}", "--samples 16")
    out = os.path.abspath(args.out)
    if not out.lower().endswith(".png") or os.path.isdir(out):
        raise DemoArgumentError("--out", f"'{args.out}' is not a PNG file to write",
                                "--out out/box_test.png")
    blend = os.path.splitext(out)[0] + ".blend"
    if os.path.isdir(blend):
        raise DemoArgumentError("--out", f"the demo saves its scene as '{blend}', which is "
                                "a folder", "another --out name")
    problem = _writable_folder(os.path.dirname(out))
    if problem is not None:
        raise DemoArgumentError("--out", f"{problem}, where the PNG, the .blend and its "
                                "cache go", "a folder you can write, e.g. --out "
                                "out/box_test.png")
    if args.backend == "gpu":
        from ..snow_addon.backend import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is not None:
            raise DemoArgumentError("--backend", f"gpu is not available here ({reason})",
                                    "--backend auto, which falls back to the CPU")


def parse_arguments(argv=None):
    """The demo's arguments, checked (DemoArgumentError naming the first bad one)."""
    parser = _Parser(prog="python -m snowfall.sample_scenes.demo",
                     description="Bake a sample scene and render a frame.")
    parser.add_argument("--scene", default="box_test", choices=SCENE_NAMES)
    parser.add_argument("--out", default="out/box_test.png", help="PNG to write (the .blend "
                        "and its cache folder go beside it)")
    parser.add_argument("--frames", type=int, default=48, help="frames to bake (1 to N)")
    parser.add_argument("--flakes", type=int, help="flake count (scene default otherwise)")
    parser.add_argument("--frame", type=int, help="frame to render, 1 to --frames (default: "
                        "the last)")
    parser.add_argument("--resolution", type=int, nargs=2, default=(640, 360),
                        metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    args = parser.parse_args(argv)
    check_arguments(args)
    return args


def main(argv=None) -> int:
    """Run the demo; a bad argument prints one line on stderr and returns 2 before anything
    is built or written (bpy is not even imported)."""
    try:
        args = parse_arguments(argv)
    except DemoArgumentError as error:
        print(f"demo: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENT
    from ..snow_addon.errors import SnowSimulationError

    try:
        run(args.scene, args.out, args.frames, args.flakes, args.frame, tuple(args.resolution),
            args.samples, args.backend)
    except SnowSimulationError as error:    # the bake stopped: the frames before it are kept
        print(f"demo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    status = main()
    if "bpy" not in sys.modules:
        sys.exit(status)
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(status)
