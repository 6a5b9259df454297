"""Headless bake of a .blend for render farms and scripts.

With the bpy module (``pip install bpy`` plus this package)::

    python -m snowfall.operators.headless scene.blend [--output baked.blend]
        [--scene NAME] [--frame-start N] [--frame-end M] [--cache-folder DIR]
        [--backend auto|gpu|cpu|numpy] [--resume | --resume-if-any]
        [--camera-only [--camera-margin 0.1]]

With a Blender binary that has the extension installed (docs/farm.md)::

    blender -b scene.blend --python-exit-code 1 --python farm/snowfall_bake.py -- \
        --frame-start 1 --frame-end 48 --resume-if-any

Either bakes the scene's frame range with the file's Snowfall settings (frame by frame, the
same code as the Bake button), printing one flushed line per frame, and saves the file (in
place unless ``--output``). Every argument is checked before any work, and a bad one is
answered with one line that names it, says what is wrong and what to try.

The file is saved to a hidden temporary name beside the target, checked (a .blend header
and, where Blender writes one, its end block or compressed stream's end) and only then
renamed over the target, the previous version kept as ``<name>.blend1`` as Blender keeps
it: a disk that fills up while saving leaves the original file as it was.

Exit status: 0 baked and saved (or nothing left to bake with ``--resume-if-any``), 1 the
bake or the save failed (full disk, unreadable cache folder, a save that is not whole),
2 bad input (an argument or a setting of the file; the message names it).
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time
import traceback

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

#: The first bytes of a .blend: plain, Zstandard-compressed (Blender 3.0 and later), gzip
#: (older releases).
BLEND_MAGIC = b"BLENDER"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
#: The last 4 bytes of a compressed .blend: Blender writes the Zstandard seekable format,
#: whose seek table ends in this magic number, after every frame of data.
ZSTD_SEEKABLE_FOOTER = b"\xb1\xea\x92\x8f"
#: A plain .blend ends with its "ENDB" block: a block header, all zeros after the code, of
#: 24 bytes (the 12-byte header "BLENDER-v402": 64-bit pointers), 20 ("BLENDER_...": 32-bit)
#: or 32 (the header of 5.0 and later, "BLENDER17-01v0502": large block headers).
END_BLOCK = b"ENDB"
END_BLOCK_SIZES = {b"-": 24, b"_": 20}


class BadArgument(Exception):
    """A command-line argument that cannot work: one line naming it, what is wrong and
    what to try. Raised before anything is baked or written."""

    def __init__(self, argument: str, problem: str, suggestion: str = ""):
        self.argument, self.problem, self.suggestion = argument, problem, suggestion
        text = f"{argument}: {problem}"
        if suggestion:
            text += f"; try {suggestion}"
        super().__init__(text)


class SaveError(Exception):
    """The baked file could not be saved whole; the file at the target is unchanged."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises BadArgument (one line) instead of printing usage and exiting
    (a plain exit would also crash the 4.2/4.5 bpy module)."""

    def error(self, message):
        argument = "arguments"
        if message.startswith("argument "):
            argument, _, message = message[len("argument "):].partition(": ")
            argument = argument.split("/")[-1]
        hint = "python -m snowfall.operators.headless --help"
        if "invalid int value" in message:
            hint = "a whole number, e.g. 1"
        elif "invalid float value" in message:
            hint = "a number, e.g. 0.1"
        elif "invalid choice" in message:
            hint = "one of the choices listed"
        raise BadArgument(argument, message, hint)


def blend_file_problem(path: str) -> str | None:
    """Why ``path`` is not a whole .blend file (missing, a folder, not a .blend, cut short),
    or None. Reads the first and last bytes only (gzip files, which Blender no longer
    writes, are read through)."""
    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path):
        return "is a folder, not a .blend file"
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(12)
            handle.seek(max(0, size - 64))
            tail = handle.read()
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if head.startswith(BLEND_MAGIC):
        end = tail.rfind(END_BLOCK)
        size = END_BLOCK_SIZES.get(head[7:8], 32)
        if end < 0 or len(tail) - end != size or tail[end + 4:].strip(b"\0"):
            return (f"is cut short ({size:,} bytes and no end block): it was not written "
                    "whole")
        return None
    if head.startswith(ZSTD_MAGIC):
        if not tail.endswith(ZSTD_SEEKABLE_FOOTER):
            return (f"is cut short ({size:,} bytes and its compressed data has no end): it "
                    "was not written whole")
        return None
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as handle:
                inner = handle.read(len(BLEND_MAGIC))
                while handle.read(1 << 20):
                    pass
        except (OSError, EOFError) as error:
            return f"is cut short or damaged (gzip: {error})"
        return None if inner == BLEND_MAGIC else "is not a .blend file"
    if size == 0:
        return "is empty (0 bytes)"
    return "is not a .blend file (it does not start as Blender's files do)"


def _writable_folder_problem(folder: str) -> str | None:
    if not os.path.isdir(folder):
        return "does not exist" if not os.path.exists(folder) else "is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "is not writable (permission denied)"
    return None


def check_arguments(args) -> None:
    """Everything about the arguments that can be checked without opening the file.
    BadArgument for the first bad one."""
    problem = blend_file_problem(args.blend)
    if problem is not None:
        raise BadArgument("blend", f"'{args.blend}' {problem}",
                          "the path of a .blend file saved by Blender")
    if args.output is not None:
        output = os.path.abspath(args.output)
        if os.path.isdir(output):
            raise BadArgument("--output", f"'{args.output}' is a folder",
                              "a file name ending in .blend inside it")
        if not output.lower().endswith(".blend"):
            raise BadArgument("--output", f"'{args.output}' does not end in .blend",
                              f"'{os.path.splitext(args.output)[0]}.blend'")
        folder_problem = _writable_folder_problem(os.path.dirname(output))
        if folder_problem is not None:
            raise BadArgument("--output", f"the folder '{os.path.dirname(output)}' "
                              f"{folder_problem}", "an existing folder you can write to "
                              "(create it first)")
    if args.frame_start is not None and args.frame_start < 1:
        raise BadArgument("--frame-start", f"{args.frame_start} is before frame 1 (particle "
                          "caches start at frame 1)", "--frame-start 1")
    if args.frame_start is not None and args.frame_end is not None \
            and args.frame_end < args.frame_start:
        raise BadArgument("--frame-end", f"{args.frame_end} is before --frame-start "
                          f"{args.frame_start}", f"--frame-end {args.frame_start} or later")
    if not (math.isfinite(args.camera_margin) and 0.0 <= args.camera_margin <= 10.0):
        raise BadArgument("--camera-margin", f"{args.camera_margin} is outside 0 to 10 (a "
                          "share of the view's size)", "--camera-margin 0.1")
    if args.resume and args.resume_if_any:
        raise BadArgument("--resume-if-any", "--resume and --resume-if-any were both given",
                          "one of them")
    if args.cache_folder is not None:
        folder = args.cache_folder.strip()
        if not folder.startswith("//"):
            folder = os.path.abspath(folder)
            probe = folder
            while not os.path.exists(probe) and os.path.dirname(probe) != probe:
                probe = os.path.dirname(probe)
            if not os.path.isdir(probe):
                raise BadArgument("--cache-folder", f"'{probe}' is a file, not a folder",
                                  "a folder path")
            if not os.access(probe, os.W_OK | os.X_OK):
                raise BadArgument("--cache-folder", f"'{probe}' is not writable (permission "
                                  "denied)", "a folder you can write to")


def _log(text: str) -> None:
    print(text, flush=True)


def _check_scene(args, scene) -> None:
    """The checks that need the open file: the scene and the frame range it gives."""
    start = args.frame_start if args.frame_start is not None else scene.frame_start
    end = args.frame_end if args.frame_end is not None else scene.frame_end
    if start < 1:
        raise BadArgument("--frame-start", f"the scene '{scene.name}' starts at frame "
                          f"{start} (particle caches start at frame 1)", "--frame-start 1")
    if end < start:
        argument = "--frame-end" if args.frame_end is not None else "--frame-start"
        raise BadArgument(argument, f"the frame range {start}-{end} ends before it starts "
                          f"(the scene '{scene.name}' ends at frame {scene.frame_end})",
                          f"--frame-end {start} or later" if argument == "--frame-end"
                          else f"--frame-start {end} or earlier")


def open_scene(path: str, scene_name: str | None):
    """Open ``path`` and return its scene ``scene_name`` (the active one when None).
    BadArgument when there is no such scene; the file on disk is not touched."""
    import bpy

    try:
        bpy.ops.wm.open_mainfile(filepath=os.path.abspath(path))
    except RuntimeError as error:
        raise BadArgument("blend", f"Blender cannot open '{path}' "
                          f"({str(error).strip().splitlines()[-1]})",
                          "a .blend saved by this Blender release or an older one") from None
    return find_scene(path, scene_name)


def find_scene(path: str, scene_name: str | None):
    """The open file's scene ``scene_name`` (the active one when None); BadArgument when
    there is none of that name."""
    import bpy

    if scene_name is None:
        return bpy.context.scene
    scene = bpy.data.scenes.get(scene_name)
    if scene is None:
        names = ", ".join(f"'{s.name}'" for s in bpy.data.scenes)
        raise BadArgument("--scene", f"'{path}' has no scene '{scene_name}' (its scenes: "
                          f"{names})", "one of those names")
    return scene


def bake_file(path: str, output: str | None = None, frame_start: int | None = None,
              frame_end: int | None = None, backend: str | None = None,
              resume=False, scene_name: str | None = None, log=_log,
              camera_only: bool = False, camera_margin: float = 0.1,
              cache_folder: str | None = None, absolute_paths: bool = False,
              open_file: bool = True, vertex_frames: bool = False) -> int:
    """Open ``path`` (unless ``open_file`` is False: it is open already, as under
    ``blender -b scene.blend --python``), bake (or resume) its Snowfall scene, save it
    safely. Returns the last baked frame.

    ``resume``: False bakes from the start; True continues the bake in the cache folder
    (SnowInputError when there is none); "auto" continues it when the folder holds one
    that fits the scene, bakes from the start otherwise, and does nothing when the bake
    already reaches the end frame and the file shows it.

    Raises BadArgument or SnowInputError for bad input (before the file or the cache folder
    changes), BakeCacheError (a SnowInputError) when the cache folder cannot be written,
    SaveError when the baked file cannot be saved whole, SnowSimulationError when the run
    leaves the model's range (Simulation.check_health; the frames before it are kept and the
    file is saved with them)."""
    import bpy

    from .. import register, unregister
    from ..snow_addon.errors import SnowInputError, SnowSimulationError
    from .bake import BakeJob, _RUNNING

    args = argparse.Namespace(blend=path, output=output, frame_start=frame_start,
                              frame_end=frame_end, camera_margin=camera_margin,
                              resume=resume is True, resume_if_any=resume == "auto",
                              cache_folder=cache_folder)
    check_arguments(args)
    scene = open_scene(path, scene_name) if open_file else find_scene(path, scene_name)
    _check_scene(args, scene)
    registered = hasattr(bpy.types.Scene, "snowfall")
    if not registered:
        register()
    from .ownership import baking_for

    # The bake is the saved file's: run again after a kill, the same command resumes it.
    identity = baking_for(os.path.abspath(output) if output else bpy.data.filepath)
    identity.__enter__()
    try:
        if bpy.context.scene != scene:
            if bpy.context.window is not None:
                bpy.context.window.scene = scene
            else:
                raise BadArgument("--scene", f"'{scene.name}' is not the file's active scene "
                                  "and there is no window to switch scenes",
                                  "making it the active scene in Blender and saving the file")
        if frame_start is not None:
            scene.frame_start = frame_start
        if frame_end is not None:
            scene.frame_end = frame_end
        props = scene.snowfall
        if cache_folder is not None:
            props.cache_folder = _cache_folder_setting(cache_folder, absolute_paths)
        context = bpy.context
        # --camera-only forces it; without it the file's Flakes settings decide
        options = dict(backend=backend, camera_only=True if camera_only else None,
                       camera_margin=camera_margin, vertex_frames=vertex_frames)
        if resume == "auto":
            try:
                job = BakeJob(context, resume=True, **options)
                log(f"snowfall: resuming the bake in '{job.cache}' from frame {job.frame}")
            except SnowInputError as error:
                if error.setting == "frame_end":       # the folder's bake reaches the end
                    if props.has_bake and props.baked_frame_end >= scene.frame_end:
                        # Saved even so: the file on disk may lack the record that opening
                        # it with the add-on restored (a save that never finished), and
                        # render workers open it without the add-on.
                        log(f"snowfall: '{scene.name}' is already baked up to frame "
                            f"{props.baked_frame_end}; nothing to bake")
                        save_blend(os.path.abspath(output) if output else bpy.data.filepath,
                                   log)
                        return props.baked_frame_end
                    log("snowfall: the cache folder holds a complete bake that this file "
                        "does not show (its save did not finish); baking again")
                elif error.setting == "bake":
                    log(f"snowfall: no bake to resume ({error.problem}); baking from the "
                        "start")
                else:
                    raise
                job = BakeJob(context, resume=False, **options)
        else:
            job = BakeJob(context, resume=bool(resume), **options)
        _record_readers(job, log)
        _RUNNING[scene.as_pointer()] = job
        log(f"snowfall: baking '{scene.name}' frames {job.frame}-{job.frame_end} on "
            f"{job.sim.backend.describe()} into '{job.cache}'")
        started = time.perf_counter()
        target = os.path.abspath(output) if output else bpy.data.filepath
        try:
            more = not job.done
            while more:
                more = job.advance_frame()
                log(_progress_line(job))
        except SnowSimulationError:
            # the run left the model's range: the frames baked before it are kept, and the
            # file saved with them (its record shows them)
            job.finish()
            log(f"snowfall: stopped after frame {job.frame}; frames {job.frame_start}-"
                f"{job.frame} are kept")
            save_blend(target, log)
            raise
        finally:
            job.finish()
        log(f"snowfall: baked up to frame {job.frame} in {time.perf_counter() - started:.1f} s")
        save_blend(target, log)
        return job.frame
    finally:
        identity.__exit__(None, None, None)
        if not registered:
            unregister()


def _progress_line(job) -> str:
    text = (f"snowfall: frame {job.frame}/{job.frame_end} baked "
            f"({100.0 * job.progress:.0f}%)")
    per_frame, eta = job.seconds_per_frame, job.eta_seconds
    if per_frame is not None:
        text += f", {per_frame:.2f} s/frame, {eta:.0f} s left"
    return text


def _cache_folder_setting(folder: str, absolute: bool) -> str:
    """The Cache Folder setting for ``folder``: kept as given when blend-relative ("//"),
    else made relative to the .blend (so the bake travels with it) unless ``absolute`` or
    it lies on another drive."""
    import bpy

    folder = folder.strip()
    if folder.startswith("//") or absolute or not bpy.data.filepath:
        return folder if folder.startswith("//") else os.path.abspath(folder)
    try:
        return bpy.path.relpath(os.path.abspath(folder))
    except ValueError:       # another drive (Windows)
        return os.path.abspath(folder)


def _record_readers(job, log) -> None:
    """Add to bake.json which Blender releases can read the bake (farm/snowfall_render.py
    checks it before rendering)."""
    from ..farm import snowfall_render
    from ..snow_addon import bake_cache

    try:
        meta = job.folder.read_meta()
        readers = snowfall_render.readable_by(meta)
        if meta.get("readable_by") != readers:
            meta["readable_by"] = readers
            bake_cache.write_json_atomic(job.folder.meta_path, meta)
    except (OSError, bake_cache.BakeCacheError) as error:
        log(f"snowfall: warning: could not record the readable Blender releases in "
            f"bake.json ({error})")


def save_blend(target: str, log=_log) -> None:
    """Save the open file to ``target`` whole or not at all: a copy to a hidden temporary
    name beside it, checked, then renamed over it (the old file kept as ``.blend1``).
    SaveError (target untouched, temporary removed) when it cannot be written whole."""
    import bpy

    folder, name = os.path.split(target)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp.blend")
    try:
        _write_copy(temporary)
        problem = blend_file_problem(temporary)
        if problem is not None:
            raise SaveError(f"the saved copy '{temporary}' {problem}")
    except (RuntimeError, OSError, SaveError) as error:
        _remove(temporary)
        _remove(temporary + "@")
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        free = _free_space(folder)
        raise SaveError(f"cannot save '{target}': {reason}{free}; the file there is "
                        "unchanged; free some space and run it again") from None
    try:
        if os.path.exists(target) and bpy.context.preferences.filepaths.save_version > 0:
            backup = target + "1"
            _remove(backup)
            try:
                os.link(target, backup)
            except OSError:
                import shutil
                shutil.copy2(target, backup)
        os.replace(temporary, target)
    except OSError as error:
        _remove(temporary)
        raise SaveError(f"cannot replace '{target}' ({error.strerror or error})") from None
    from .ownership import saved_as   # the file written records the bake: it owns it
    saved_as(target)
    log(f"snowfall: saved {target}")


def _write_copy(path: str) -> None:
    """Blender writes the open file to ``path`` (relative paths stay relative)."""
    import bpy

    bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, check_existing=False)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _free_space(folder: str) -> str:
    import shutil

    try:
        return f" ({shutil.disk_usage(folder).free / 1e6:.1f} MB free)"
    except OSError:
        return ""


def build_parser(prog="python -m snowfall.operators.headless") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Bake a .blend's snowfall without a UI.")
    parser.add_argument("blend", help="the .blend file to bake")
    parser.add_argument("--output", help="save the baked file here (default: in place)")
    parser.add_argument("--scene", help="scene name (default: the file's active scene)")
    parser.add_argument("--frame-start", type=int, help="first frame (default: the scene's)")
    parser.add_argument("--frame-end", type=int, help="last frame (default: the scene's)")
    parser.add_argument("--cache-folder", help="bake into this folder (stored relative to "
                        "the .blend unless --absolute-paths; default: the file's setting)")
    parser.add_argument("--absolute-paths", action="store_true",
                        help="store --cache-folder as an absolute path")
    parser.add_argument("--backend", choices=("auto", "gpu", "cpu", "numpy"),
                        help="override the file's backend setting")
    parser.add_argument("--resume", action="store_true",
                        help="continue a stopped bake (an error when there is none)")
    parser.add_argument("--resume-if-any", action="store_true",
                        help="continue the bake in the cache folder when there is one (a "
                        "killed farm task), else bake from the start")
    parser.add_argument("--camera-only", action="store_true",
                        help="write only the flakes the scene camera sees (all are simulated)")
    parser.add_argument("--camera-margin", type=float, default=0.1,
                        help="extra view kept on each side, as a share of its size (0.1)")
    parser.add_argument("--vertex-frames", action="store_true",
                        help="a new bake's snow in the older form: one depth attribute per "
                        "frame on the terrain mesh (a resumed bake keeps its own form)")
    return parser


def run(argv, open_file: bool = True, prog=None) -> int:
    """Parse ``argv``, check it, bake, save. Prints one line per problem on stderr and
    returns the exit status (module docstring)."""
    from ..snow_addon.errors import SnowInputError, SnowSimulationError

    try:
        parser = build_parser(prog) if prog else build_parser()
        args = parser.parse_args(argv)
        # Farm templates pass "" for "the file's own": the scene, the cache folder.
        args.scene = args.scene.strip() if args.scene and args.scene.strip() else None
        if args.cache_folder is not None and not args.cache_folder.strip():
            args.cache_folder = None
        check_arguments(args)
        resume = "auto" if args.resume_if_any else args.resume
        bake_file(args.blend, args.output, args.frame_start, args.frame_end, args.backend,
                  resume, args.scene, camera_only=args.camera_only,
                  camera_margin=args.camera_margin, cache_folder=args.cache_folder,
                  absolute_paths=args.absolute_paths, open_file=open_file,
                  vertex_frames=args.vertex_frames)
    except BadArgument as error:
        _error(str(error))
        return EXIT_BAD_INPUT
    except SaveError as error:
        _error(str(error))
        return EXIT_FAILED
    except SnowSimulationError as error:
        _error(str(error))
        return EXIT_FAILED
    except SnowInputError as error:
        from ..snow_addon.bake_cache import BakeCacheError

        _error(str(error))
        return EXIT_FAILED if isinstance(error, BakeCacheError) else EXIT_BAD_INPUT
    except SystemExit as error:          # --help
        return error.code if isinstance(error.code, int) else EXIT_OK
    except Exception as error:            # a bug: the traceback, then one clear line
        traceback.print_exc()
        _error(f"the bake failed ({type(error).__name__}: {error})")
        return EXIT_FAILED
    return EXIT_OK


def _error(text: str) -> None:
    sys.stdout.flush()
    print(f"snowfall: error: {text}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main())
