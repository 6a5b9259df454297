"""The headless bake (python -m snowfall.operators.headless) answers every bad argument with
one line that names it, says what is wrong and what to try, exit status 2, and nothing
written; and it saves the baked .blend whole or not at all: a save that fails or comes
out cut short ends with exit status 1 and the file as it was (issue 35)."""
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest

FRAMES = 3

MAKE_SCENE = """
import bpy
from snowfall.sample_scenes.build import build
build("box_test", frames={frames}, flakes=300, resolution=33)
scene = bpy.context.scene
props = scene.snowfall
props.heightmap_resolution = 32
props.wind_resolution = 8
props.backend = "numpy"
bpy.ops.wm.save_mainfile(filepath={path!r})
"""


@pytest.fixture(scope="module")
def source_blend(tmp_path_factory):
    """A tiny box_test scene saved as a .blend (built in a fresh process)."""
    from snowfall.blender_compat import EXIT_CRASHES  # noqa: F401  (bpy is importable)

    path = str(tmp_path_factory.mktemp("headless_source") / "scene.blend")
    _run_python(MAKE_SCENE.format(frames=FRAMES, path=path))
    return path


def _run_python(code):
    child = ("from snowfall.blender_compat import exit_process\n"
             f"exec(compile({code!r}, '<scene>', 'exec'))\nexit_process(0)\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture
def shot(source_blend, tmp_path):
    """A copy of the scene in its own folder (so each test sees only its own files)."""
    folder = tmp_path / "shot"
    folder.mkdir()
    path = folder / "shot.blend"
    shutil.copy(source_blend, path)
    return path


def headless(*args, preexec=None, code=None, timeout=300):
    """Run the headless bake in a fresh process; ``code`` runs first (fault injection)."""
    if code is None:
        command = [sys.executable, "-m", "snowfall.operators.headless", *map(str, args)]
    else:
        command = [sys.executable, "-c",
                   code + "\nimport sys\nfrom snowfall.blender_compat import exit_process\n"
                   "from snowfall.operators import headless\n"
                   f"exit_process(headless.main({[str(a) for a in args]!r}))\n"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec)


def snapshot(folder):
    """Every file under ``folder`` with its bytes."""
    files = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, folder)] = handle.read()
    return files


def assert_one_line_error(done, argument, *words):
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("snowfall: error:")]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert line.startswith(f"snowfall: error: {argument}:"), line
    assert "; try " in line, line                  # what to try
    for word in words:
        assert word in line, line
    return line


def test_missing_blend_file(tmp_path):
    before = snapshot(tmp_path)
    done = headless(tmp_path / "nowhere.blend")
    assert_one_line_error(done, "blend", "nowhere.blend", "does not exist")
    assert snapshot(tmp_path) == before


def test_a_file_that_is_not_a_blend(tmp_path):
    text = tmp_path / "notes.blend"
    text.write_text("shot notes, not a scene\n")
    before = snapshot(tmp_path)
    done = headless(text)
    assert_one_line_error(done, "blend", "is not a .blend file")
    assert snapshot(tmp_path) == before


def test_a_blend_cut_short(shot):
    data = shot.read_bytes()
    shot.write_bytes(data[: len(data) // 2])
    before = snapshot(shot.parent)
    done = headless(shot)
    assert_one_line_error(done, "blend", "cut short")
    assert snapshot(shot.parent) == before


def test_unknown_scene(shot):
    before = snapshot(shot.parent)
    done = headless(shot, "--scene", "Shot 9")
    assert_one_line_error(done, "--scene", "'Shot 9'", "'Scene'")   # names the scenes there
    assert snapshot(shot.parent) == before


def test_frame_range_that_ends_before_it_starts(shot):
    before = snapshot(shot.parent)
    done = headless(shot, "--frame-start", 5, "--frame-end", 3)
    assert_one_line_error(done, "--frame-end", "3 is before --frame-start 5")
    assert snapshot(shot.parent) == before    # the file is not rewritten, no cache folder


@pytest.mark.parametrize("args, argument, words", [
    (("--frame-start", 0), "--frame-start", ("before frame 1",)),
    (("--frame-end", 0), "--frame-end", ("ends before it starts",)),
    (("--frame-start", "one"), "--frame-start", ("invalid int value", "whole number")),
    (("--backend", "quantum"), "--backend", ("invalid choice",)),
    (("--camera-margin", "-1"), "--camera-margin", ("outside 0 to 10",)),
    (("--resume", "--resume-if-any"), "--resume-if-any", ("both",)),
    (("--frames", "1-3"), "arguments", ("unrecognized",)),
])
def test_other_bad_arguments(shot, args, argument, words):
    before = snapshot(shot.parent)
    done = headless(shot, *args)
    assert_one_line_error(done, argument, *words)
    assert snapshot(shot.parent) == before


def test_output_into_a_missing_folder_fails_before_the_bake(shot, tmp_path):
    before = snapshot(tmp_path)
    done = headless(shot, "--output", tmp_path / "no" / "such" / "baked.blend")
    assert_one_line_error(done, "--output", "does not exist", "create it first")
    assert snapshot(tmp_path) == before       # nothing baked: no cache folder, no files


def test_output_that_is_not_a_blend(shot, tmp_path):
    before = snapshot(tmp_path)
    done = headless(shot, "--output", tmp_path / "baked.png")
    assert_one_line_error(done, "--output", "does not end in .blend")
    assert snapshot(tmp_path) == before


def test_bake_prints_every_frame_and_saves_a_whole_file_keeping_the_old_one(shot):
    original = shot.read_bytes()
    done = headless(shot)
    assert done.returncode == 0, done.stderr[-3000:]
    for frame in range(2, FRAMES + 1):
        assert f"snowfall: frame {frame}/{FRAMES} baked" in done.stdout
    from snowfall.operators.headless import blend_file_problem

    assert blend_file_problem(str(shot)) is None
    assert (shot.parent / "shot.blend1").read_bytes() == original   # as Blender keeps it
    leftovers = [n for n in os.listdir(shot.parent) if n.startswith(".") or n.endswith("@")]
    assert leftovers == []


def _limit_file_size(limit):
    def apply():
        # Past the limit a write fails with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_save_that_runs_out_of_space_leaves_the_file_as_it_was(shot):
    original = shot.read_bytes()
    # Every file may grow to 90% of the .blend's size: the bake folder's files fit (they
    # are far smaller here), the saved .blend does not.
    done = headless(shot, preexec=_limit_file_size(int(len(original) * 0.9)))
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("snowfall: error:")]
    assert len(errors) == 1 and "cannot save" in errors[0] and "unchanged" in errors[0], \
        done.stderr
    assert f"frame {FRAMES}/{FRAMES} baked" in done.stdout     # the bake itself finished
    assert shot.read_bytes() == original
    assert sorted(os.listdir(shot.parent)) == ["blendcache_shot", "shot.blend"]

    # Run again with room: --resume-if-any finds the complete bake the file does not show
    # and bakes it again, then saves.
    again = headless(shot, "--resume-if-any")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "snowfall: saved" in again.stdout
    assert shot.read_bytes() != original


TRUNCATING_SAVE = """
from snowfall.operators import headless
write = headless._write_copy
def cut_short(path):
    write(path)                        # Blender reports success...
    with open(path, "r+b") as handle:  # ...but the disk took only part of the file
        handle.truncate(handle.seek(0, 2) // 2)
headless._write_copy = cut_short
"""


def test_a_save_that_comes_out_cut_short_is_not_kept(shot):
    original = shot.read_bytes()
    done = headless(shot, code=TRUNCATING_SAVE)
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("snowfall: error:")]
    assert len(errors) == 1 and "cut short" in errors[0], done.stderr
    assert shot.read_bytes() == original
    assert sorted(os.listdir(shot.parent)) == ["blendcache_shot", "shot.blend"]


def test_blend_checks_on_files_blender_wrote(tmp_path):
    """The check accepts what Blender writes (compressed or not) and refuses every cut."""
    import bpy

    from snowfall.operators.headless import blend_file_problem

    bpy.ops.wm.read_factory_settings(use_empty=False)
    for compress in (False, True):
        path = str(tmp_path / f"file_{compress}.blend")
        bpy.ops.wm.save_as_mainfile(filepath=path, compress=compress, copy=True)
        assert blend_file_problem(path) is None
        data = open(path, "rb").read()
        for cut in (len(data) - 1, len(data) - 8, len(data) // 2, 100, 12):
            with open(str(tmp_path / "cut.blend"), "wb") as handle:
                handle.write(data[:cut])
            assert blend_file_problem(str(tmp_path / "cut.blend")) is not None, (compress, cut)
    bpy.ops.wm.read_factory_settings(use_empty=True)


LEAVES_THE_MODELS_RANGE = """
from snowfall.snow_addon import simulation
from snowfall.snow_addon.errors import SnowSimulationError
calls = []
def check_health(self):
    calls.append(self.step_index)
    if len(calls) == 2:                # the end of frame 3
        raise SnowSimulationError("upwind_fetch", "simulated: the snow piled up to the wind "
                                  "grid's top", "Upwind Fetch 'Wrap Around'")
simulation.Simulation.check_health = check_health
"""


def test_a_run_that_leaves_the_models_range_exits_1_and_saves_the_frames_before(shot):
    """check_health fails at the end of frame 3: one error line naming the setting, exit
    status 1, and the file saved with frames 1-2 baked (the cache folder keeps them)."""
    done = headless(shot, code=LEAVES_THE_MODELS_RANGE)
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("snowfall: error:")]
    assert len(errors) == 1 and errors[0].startswith("snowfall: error: upwind_fetch:"), \
        done.stderr
    assert "frames 1-2 are kept" in done.stdout and "snowfall: saved" in done.stdout
    check = ("import bpy\nbpy.ops.wm.open_mainfile(filepath=" + repr(str(shot)) + ")\n"
             "props = bpy.context.scene.snowfall\n"
             "assert props.has_bake and props.baked_frame_end == 2, props.baked_frame_end\n")
    _run_python("from snowfall import register\nregister()\n" + check)
