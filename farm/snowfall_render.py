"""Render baked Snowfall frames on a farm worker, without the add-on (docs/farm.md):

    blender -b scene.blend --python-exit-code 1 --python snowfall_render.py -- \\
        --frames 1-8 --output /shared/render/shot010/frame_#### [--scene NAME] \\
        [--format PNG]
    blender -b scene.blend --python snowfall_render.py -- --check

Before rendering it finds the Snowfall bakes the scene uses (from the flakes' cache and
the snow surface's depth images the .blend names), and refuses, with one line and exit
status 3, what would render without snow or flakes: a cache folder that is not there
(the .blend was copied without its ``blendcache_<name>`` folder), a bake that does not
reach the frames, or a bake this Blender release cannot read (bake.json ``readable_by``:
Blender 4.2 to 4.5 cannot read the point caches 5.x writes). Each frame then renders with
the file's own settings (``--format`` overrides the image format), one flushed line per
frame with the flakes Blender found, and a frame where it found none fails (exit 3).

``--check`` renders nothing: it prints the bakes, the Blender releases that can read them,
and every absolute path the .blend uses (a path another machine may not have), exit
status 0 when the bakes are usable here. Run it before a job is sent.

Only the standard library and bpy are used: the add-on need not be installed. The rules
for which Blender reads which bake live here (``readable_by``); the add-on's headless bake
records them in bake.json.

Exit status: 0 rendered (or checked), 1 a render failed, 2 a bad argument,
3 the bake cannot be rendered here.
"""
import json
import os
import sys
import time

PREFIX = "snowfall-render"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CANNOT_RENDER = 0, 1, 2, 3

#: The oldest Blender that reads each flake cache form (bake.json ``flakes.format``).
FORMAT_READERS = {
    "ptcache": ((5, 0, 0), "its flakes are a Zstd-compressed point cache; Blender 4.2 to "
                "4.5 read only LZO and LZMA point caches and would render no flakes"),
    "gn_bake": ((4, 2, 0), "its flakes are a Geometry Nodes bake (format 3), which Blender "
                "4.2 to 5.2 read"),
}
#: A .blend saved by Blender 5.0 or later has a file header that Blender 4.2 (tested) to
#: 4.4 cannot read ("not a blend file"); Blender 4.5 was made to read it.
NEW_HEADER = (5, 0, 0)
NEW_HEADER_READER = (4, 5, 0)


class RenderProblem(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


def readable_by(meta: dict) -> dict:
    """Which Blender releases can render the bake described by bake.json ``meta``:
    ``{"blender_min": [x, y, z], "why": text}`` (no upper bound is known: newer releases
    read older files)."""
    form = (meta.get("flakes") or {}).get("format", "ptcache")
    oldest, why = FORMAT_READERS.get(form, ((5, 0, 0), f"unknown flake format {form!r}"))
    baked_by = tuple(meta.get("blender") or (0, 0, 0))[:3]
    if baked_by >= NEW_HEADER and oldest < NEW_HEADER_READER:
        oldest = NEW_HEADER_READER
        why += (f"; the .blend is saved by Blender {_release(baked_by)}, whose files Blender "
                "4.2 to 4.4 cannot open")
    return {"blender_min": list(oldest), "why": why}


def _release(version) -> str:
    return ".".join(str(part) for part in tuple(version)[:2])


def script_arguments(argv: list) -> list:
    return argv[argv.index("--") + 1:] if "--" in argv else []


def parse_frames(text: str) -> list:
    """'1-8', '1..8', '3', '1-3,7,9-10' -> sorted frame numbers. ValueError when bad."""
    frames = set()
    for part in str(text).replace("..", "-").split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        if first.strip() == "" and dash:         # a negative frame
            raise ValueError(f"'{part}' is a negative frame")
        start = int(first)
        end = int(last) if dash else start
        if end < start:
            raise ValueError(f"'{part}' ends before it starts")
        frames.update(range(start, end + 1))
    if not frames:
        raise ValueError("no frames given")
    return sorted(frames)


def parse_arguments(args: list):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise RenderProblem(EXIT_BAD_INPUT, f"arguments: {message}; try --help")

    parser = Parser(prog="blender -b scene.blend --python snowfall_render.py --",
                    description="Render baked Snowfall frames without the add-on.")
    parser.add_argument("--frames", help="frames to render: '1-8', '1..8', '3,5-7'")
    parser.add_argument("--frame-start", type=int)
    parser.add_argument("--frame-end", type=int)
    parser.add_argument("--output", help="image path; '#' marks the frame number "
                        "('/shared/render/frame_####'; '//' is the .blend's folder)")
    parser.add_argument("--format", help="image format (PNG, OPEN_EXR, ...; default: the "
                        "file's)")
    parser.add_argument("--scene", help="scene name (default: the file's active scene)")
    parser.add_argument("--blend", help="open this .blend first (where Blender did not)")
    parser.add_argument("--check", action="store_true",
                        help="check the bakes and list absolute paths; render nothing")
    options = parser.parse_args(args)
    if options.scene is not None and not options.scene.strip():
        options.scene = None
    if options.frames is not None and (options.frame_start is not None
                                       or options.frame_end is not None):
        raise RenderProblem(EXIT_BAD_INPUT, "--frames: given with --frame-start/--frame-end; "
                            "try one of the two forms")
    if options.frames is not None:
        try:
            options.frame_list = parse_frames(options.frames)
        except ValueError as error:
            raise RenderProblem(EXIT_BAD_INPUT, f"--frames: {error} in '{options.frames}'; "
                                "try a range such as 1-8") from None
    elif options.frame_start is not None or options.frame_end is not None:
        start = options.frame_start if options.frame_start is not None else options.frame_end
        end = options.frame_end if options.frame_end is not None else start
        if end < start:
            raise RenderProblem(EXIT_BAD_INPUT, f"--frame-end: {end} is before --frame-start "
                                f"{start}; try --frame-end {start} or later")
        options.frame_list = list(range(start, end + 1))
    else:
        options.frame_list = None
    if not options.check and not options.output:
        raise RenderProblem(EXIT_BAD_INPUT, "--output: missing; try --output "
                            "/shared/render/frame_####")
    return options


# --- the bakes a .blend uses ---------------------------------------------------------------

def snowfall_references(scene) -> list:
    """(what, path as stored, absolute folder of the bake) for every Snowfall cache the
    scene's objects and images name."""
    import bpy

    found = []
    for obj in scene.objects:
        for system in getattr(obj, "particle_systems", ()):
            cache = system.point_cache
            if cache.use_external and cache.name.startswith("snowfall"):
                folder = os.path.normpath(bpy.path.abspath(cache.filepath))
                found.append((f"flakes of '{obj.name}'", cache.filepath, os.path.dirname(folder)))
        for modifier in obj.modifiers:
            if modifier.type == "NODES" and modifier.name.startswith("Snowfall"):
                for bake in getattr(modifier, "bakes", ()):
                    if bake.use_custom_path and bake.directory:
                        folder = os.path.normpath(bpy.path.abspath(bake.directory))
                        found.append((f"flakes of '{obj.name}'", bake.directory,
                                      os.path.dirname(folder)))
    for image in bpy.data.images:
        if image.name.startswith("Snowfall Snow Depth") and image.filepath:
            folder = os.path.dirname(os.path.normpath(bpy.path.abspath(image.filepath)))
            found.append((f"snow depth image '{image.name}'", image.filepath,
                          os.path.dirname(folder)))
    return found


def read_bake(folder: str) -> dict:
    """bake.json of ``folder`` with ``complete``: the last frame whose files are all on
    disk (progress.json). RenderProblem when the folder or its files are missing."""
    meta_path = os.path.join(folder, "bake.json")
    if not os.path.isdir(folder):
        raise RenderProblem(EXIT_CANNOT_RENDER, f"the bake folder '{folder}' does not exist "
                            "here; copy the .blend together with its cache folder (by default "
                            "blendcache_<blend name>/ beside it), or put the cache folder on "
                            "storage every worker sees at the same path")
    try:
        with open(meta_path, encoding="utf-8") as handle:
            meta = json.load(handle)
        with open(os.path.join(folder, "progress.json"), encoding="utf-8") as handle:
            progress = json.load(handle)
    except (OSError, ValueError) as error:
        raise RenderProblem(EXIT_CANNOT_RENDER, f"the bake in '{folder}' cannot be read "
                            f"({error}); bake it again") from None
    meta["complete"] = progress.get("complete")
    return meta


def check_bakes(scene, frames) -> list:
    """The scene's bakes as (folder, meta); RenderProblem when one cannot be rendered here
    (missing, unreadable by this Blender, not reaching ``frames``)."""
    import bpy

    folders = []
    for _what, _stored, folder in snowfall_references(scene):
        if folder not in folders:
            folders.append(folder)
    here = tuple(bpy.app.version)[:3]
    bakes = []
    for folder in folders:
        meta = read_bake(folder)
        readers = meta.get("readable_by") or readable_by(meta)
        oldest = tuple(readers["blender_min"])
        if here < oldest:
            raise RenderProblem(EXIT_CANNOT_RENDER, f"this Blender {_release(here)} cannot "
                                f"read the bake in '{folder}' (baked with Blender "
                                f"{_release(meta.get('blender', (0, 0)))}: {readers['why']}); "
                                f"render it with Blender {_release(oldest)} or later, or bake "
                                f"again with this release")
        first, last = meta.get("frame_start"), meta.get("complete")
        if frames and (last is None or frames[0] < first or frames[-1] > last):
            reach = f"frames {first}-{last}" if last is not None else "no frame yet"
            raise RenderProblem(EXIT_CANNOT_RENDER, f"the bake in '{folder}' holds {reach}, "
                                f"not frames {frames[0]}-{frames[-1]}; let the bake task "
                                "finish (or resume it), or render the baked frames")
        bakes.append((folder, meta))
    return bakes


def absolute_paths() -> list:
    """Every path the open .blend stores as absolute (not '//'-relative), with whether it
    exists here."""
    import bpy

    paths = set()
    for path in bpy.utils.blend_paths(absolute=False, packed=False, local=True):
        if path and not path.startswith("//"):
            paths.add(path)
    for scene in bpy.data.scenes:
        for _what, stored, _folder in snowfall_references(scene):
            if stored and not stored.startswith("//"):
                paths.add(stored)
    return sorted((path, os.path.exists(bpy.path.abspath(path))) for path in paths)


def count_flakes(scene) -> int:
    """The flakes Blender evaluates at the current frame (particles of Snowfall's point
    cache, or points of its Geometry Nodes bake)."""
    import bpy

    depsgraph = bpy.context.evaluated_depsgraph_get()
    count = 0
    for obj in scene.objects:
        if not obj.name.startswith("Snowfall Flakes"):
            continue
        evaluated = obj.evaluated_get(depsgraph)
        for system in getattr(evaluated, "particle_systems", ()):
            count += len(system.particles)
    for instance in depsgraph.object_instances:
        source = instance.object       # the Geometry Nodes bake's point cloud (4.2-4.5)
        if source.type == "POINTCLOUD" and source.name.startswith("Snowfall Flakes"):
            count += len(source.data.points)
    return count


# --- main ----------------------------------------------------------------------------------

def run(argv: list) -> int:
    import bpy

    options = parse_arguments(script_arguments(argv))
    if options.blend:
        try:
            bpy.ops.wm.open_mainfile(filepath=os.path.abspath(options.blend))
        except RuntimeError as error:
            raise RenderProblem(EXIT_CANNOT_RENDER, f"--blend: Blender {_release(bpy.app.version)}"
                                f" cannot open '{options.blend}' ({str(error).strip()}); a .blend "
                                "saved by a newer Blender needs that release") from None
    if not bpy.data.filepath:
        raise RenderProblem(EXIT_CANNOT_RENDER, f"blend: no .blend file is open: Blender "
                            f"{_release(bpy.app.version)} could not read the one given (a "
                            "file saved by a newer release?) or none was given before "
                            "--python; see Blender's lines above")
    scene = bpy.context.scene
    if options.scene:
        scene = bpy.data.scenes.get(options.scene)
        if scene is None:
            names = ", ".join(f"'{s.name}'" for s in bpy.data.scenes)
            raise RenderProblem(EXIT_BAD_INPUT, f"--scene: no scene '{options.scene}' in "
                                f"this file (its scenes: {names}); try one of those")
        if bpy.context.window is not None:
            bpy.context.window.scene = scene
    frames = options.frame_list
    if options.check:
        frames = frames or list(range(scene.frame_start, scene.frame_end + 1))
    bakes = check_bakes(scene, frames)
    if not bakes:
        print(f"{PREFIX}: warning: the scene '{scene.name}' uses no Snowfall bake",
              flush=True)
    for folder, meta in bakes:
        readers = meta.get("readable_by") or readable_by(meta)
        print(f"{PREFIX}: bake '{folder}': frames {meta.get('frame_start')}-"
              f"{meta.get('complete')}, {meta.get('flakes', {}).get('count', 0):,} flakes, "
              f"baked with Blender {_release(meta.get('blender', (0, 0)))}, readable by "
              f"Blender {_release(readers['blender_min'])} and later", flush=True)
    absolute = absolute_paths()
    for path, exists in absolute:
        print(f"{PREFIX}: absolute path: {path}"
              + ("" if exists else "  (MISSING on this machine)"), flush=True)
    if options.check:
        print(f"{PREFIX}: check passed: {len(bakes)} bake(s), {len(absolute)} absolute "
              f"path(s); Blender {_release(bpy.app.version)} can render frames "
              f"{frames[0]}-{frames[-1]}", flush=True)
        return EXIT_OK
    if frames is None:
        frames = list(range(scene.frame_start, scene.frame_end + 1))
        check_bakes(scene, frames)
    if options.format:
        try:
            scene.render.image_settings.file_format = options.format
        except TypeError:
            raise RenderProblem(EXIT_BAD_INPUT, f"--format: '{options.format}' is not an "
                                "image format of this Blender; try PNG or OPEN_EXR") from None
    scene.render.filepath = options.output
    expect_flakes = any((meta.get("flakes") or {}).get("count", 0) > 0
                        and not (meta.get("flakes") or {}).get("camera_view")
                        for _folder, meta in bakes)
    for frame in frames:
        started = time.perf_counter()
        scene.frame_set(frame)
        flakes = count_flakes(scene)
        if expect_flakes and flakes == 0:
            raise RenderProblem(EXIT_CANNOT_RENDER, f"frame {frame}: Blender "
                                f"{_release(bpy.app.version)} finds no flakes in the bake; "
                                "its flake cache is unreadable here or missing")
        scene.render.filepath = options.output
        path = scene.render.frame_path(frame=frame)
        scene.render.filepath = path       # a still is written to the path as it is
        try:
            bpy.ops.render.render(write_still=True, scene=scene.name)
        except RuntimeError as error:
            raise RenderProblem(EXIT_FAILED, f"frame {frame}: the render failed "
                                f"({str(error).strip()})") from None
        finally:
            scene.render.filepath = options.output
        if not os.path.isfile(path):
            raise RenderProblem(EXIT_FAILED, f"frame {frame}: no image was written to "
                                f"'{path}'")
        print(f"{PREFIX}: frame {frame} -> {path} ({time.perf_counter() - started:.1f} s, "
              f"{flakes:,} flakes)", flush=True)
    return EXIT_OK


def finish(status: int) -> None:
    """A failure ends the process at once after flushing, so that its status reaches the
    farm whatever the Blender release does with a script's exit; success returns to
    Blender (a Blender binary then ends with 0)."""
    import bpy

    sys.stdout.flush()
    sys.stderr.flush()
    if status or not bpy.app.binary_path:
        os._exit(status)


def main(argv: list) -> int:
    try:
        return run(argv)
    except RenderProblem as problem:
        print(f"{PREFIX}: error: {problem}", file=sys.stderr, flush=True)
        return problem.status


if __name__ == "__main__":
    finish(main(sys.argv))
