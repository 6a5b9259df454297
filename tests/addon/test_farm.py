"""Bake once, render on a farm (docs/farm.md), run the way a farm runs it: each step a fresh
Blender process started with Blender's command line (farm/bpy_blender.py gives the bpy
module that command line):

- farm/snowfall_bake.py bakes through the add-on with a line per frame, resumes what a
  killed task left, and answers a bad argument or a missing add-on with one line and a
  non-zero status;
- farm/snowfall_render.py renders without the add-on: the same pixels after the .blend and
  its cache folder moved elsewhere, and a clear refusal (status 3) where the bake cannot be
  rendered: its folder left behind, frames it does not reach, a Blender that cannot read it;
- the Open Job Description template passes `openjd check` and runs end to end under
  `openjd run`: the bake once, then each chunk of frames in its own process."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import bpy
import numpy as np
import pytest

from snowfall.farm import FOLDER

FRAMES = 4
SIZE = (32, 24)
BAKE = os.path.join(FOLDER, "snowfall_bake.py")
RENDER = os.path.join(FOLDER, "snowfall_render.py")
SHIM = os.path.join(FOLDER, "bpy_blender.py")
ROOT = os.path.dirname(FOLDER)

MAKE_SCENE = """
import bpy
from snowfall.sample_scenes.build import build
build("box_test", frames={frames}, flakes={flakes}, resolution=33)
scene = bpy.context.scene
props = scene.snowfall
props.heightmap_resolution = 32
props.wind_resolution = 8
props.backend = "numpy"
scene.render.resolution_x, scene.render.resolution_y = {size}
scene.cycles.samples = 2
scene.cycles.seed = 0
bpy.ops.wm.save_mainfile(filepath={path!r})
"""


def make_scene(path, frames=FRAMES, flakes=400, size=SIZE):
    child = ("from snowfall.blender_compat import exit_process\n"
             f"exec(compile({MAKE_SCENE.format(frames=frames, flakes=flakes, size=size, path=str(path))!r}, "
             "'<scene>', 'exec'))\nexit_process(0)\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return path


def blender(blend, script, *args, python=sys.executable, env=None, popen=False):
    """``blender -b BLEND --python-exit-code 1 --python SCRIPT -- ARGS`` on the bpy module."""
    command = [python, SHIM, "-b", str(blend), "--python-exit-code", "1", "--python", script,
               "--", *map(str, args)]
    if popen:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def no_addon_env(tmp_path):
    """An environment where `import snowfall` fails: the render must not need the add-on."""
    shadow = tmp_path / "shadow"
    (shadow / "snowfall").mkdir(parents=True, exist_ok=True)
    (shadow / "snowfall" / "__init__.py").write_text(
        "raise ImportError('the Snowfall add-on is not installed on this worker')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(shadow) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def pixels(path):
    image = bpy.data.images.load(str(path))
    try:
        return np.array(image.pixels[:], dtype=np.float32).reshape(SIZE[1], SIZE[0], 4)
    finally:
        bpy.data.images.remove(image)


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """A tiny box_test baked by the farm bake script: (folder, .blend, its output)."""
    folder = tmp_path_factory.mktemp("farm") / "shots"
    folder.mkdir()
    blend = make_scene(folder / "shot.blend")
    done = blender(blend, BAKE, "--frame-start", 1, "--frame-end", FRAMES)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder, blend, done.stdout


def test_bake_script_bakes_with_a_line_per_frame(baked):
    folder, blend, out = baked
    for frame in range(2, FRAMES + 1):
        assert f"snowfall: frame {frame}/{FRAMES} baked" in out
    assert "snowfall: saved" in out
    meta = json.loads((folder / "blendcache_shot" / "snowfall" / "Scene" / "bake.json")
                      .read_text())
    # Which Blender can read the bake: 5.x writes a Zstd point cache (5.0+), 4.x a
    # Geometry Nodes bake (4.2+).
    expected = [5, 0, 0] if bpy.app.version >= (5, 0, 0) else [4, 2, 0]
    assert meta["readable_by"]["blender_min"] == expected


def test_moved_bake_renders_the_same_frame_without_the_addon(baked, tmp_path):
    folder, blend, _ = baked
    env = no_addon_env(tmp_path)
    here = blender(blend, RENDER, "--frames", FRAMES, "--output", tmp_path / "here_####",
                   env=env)
    assert here.returncode == 0, here.stdout[-3000:] + here.stderr[-3000:]
    assert "snowfall-render: frame 4 ->" in here.stdout and "400 flakes" in here.stdout

    # Another machine's layout: the .blend and its cache folder copied to another folder,
    # the originals gone.
    other = tmp_path / "elsewhere" / "deeper"
    other.mkdir(parents=True)
    shutil.copy(blend, other / "shot.blend")
    shutil.copytree(folder / "blendcache_shot", other / "blendcache_shot")
    hidden = folder.parent / "hidden"
    folder.rename(hidden)
    try:
        there = blender(other / "shot.blend", RENDER, "--frames", FRAMES, "--output",
                        tmp_path / "there_####", env=env)
    finally:
        hidden.rename(folder)
    assert there.returncode == 0, there.stdout[-3000:] + there.stderr[-3000:]
    assert "400 flakes" in there.stdout
    assert str(other) in there.stdout          # it read the copy's cache folder
    first = pixels(tmp_path / "here_0004.png")
    second = pixels(tmp_path / "there_0004.png")
    np.testing.assert_array_equal(first, second)
    assert first[..., :3].max() > 0.05        # a real render, not an empty image


def test_check_lists_absolute_paths_before_a_job_is_sent(baked, tmp_path):
    folder, blend, _ = baked
    done = blender(blend, RENDER, "--check")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "check passed" in done.stdout and "0 absolute path(s)" in done.stdout
    assert "readable by Blender" in done.stdout

    # A bake into an absolute cache folder: stored absolute on request, and listed.
    shot = tmp_path / "abs" / "shot.blend"
    shot.parent.mkdir()
    shutil.copy(blend, shot)
    cache = tmp_path / "caches" / "shot"
    done = blender(shot, BAKE, "--cache-folder", cache, "--absolute-paths")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = blender(shot, RENDER, "--check")
    assert done.returncode == 0, done.stderr[-2000:]
    listed = [line for line in done.stdout.splitlines()
              if line.startswith("snowfall-render: absolute path:")]
    assert listed and all(str(cache) in line for line in listed), done.stdout
    # Without --absolute-paths the same folder is stored relative to the .blend.
    relative = tmp_path / "rel" / "shot.blend"
    relative.parent.mkdir()
    shutil.copy(blend, relative)
    done = blender(relative, BAKE, "--cache-folder", tmp_path / "caches" / "rel")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = blender(relative, RENDER, "--check")
    assert "0 absolute path(s)" in done.stdout, done.stdout


def refused(done, *words):
    assert done.returncode == 3, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines()
              if line.startswith("snowfall-render: error:")]
    assert len(errors) == 1, done.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert "Traceback" not in done.stderr


def test_render_refuses_what_it_cannot_render(baked, tmp_path):
    folder, blend, _ = baked
    # The .blend copied without its cache folder.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(blend, alone / "shot.blend")
    refused(blender(alone / "shot.blend", RENDER, "--frames", 1, "--output", alone / "f_#"),
            "does not exist here", "blendcache_")
    assert not [n for n in os.listdir(alone) if n.startswith("f_")]
    # Frames the bake does not reach.
    refused(blender(blend, RENDER, "--frames", "3-6", "--output", tmp_path / "f_#"),
            f"holds frames 1-{FRAMES}", "not frames 3-6")
    # A bake this Blender cannot read (bake.json says which releases can).
    copy = tmp_path / "future"
    shutil.copytree(folder, copy)
    meta_path = copy / "blendcache_shot" / "snowfall" / "Scene" / "bake.json"
    meta = json.loads(meta_path.read_text())
    meta["readable_by"] = {"blender_min": [99, 0, 0], "why": "a test"}
    meta_path.write_text(json.dumps(meta))
    refused(blender(copy / "shot.blend", RENDER, "--frames", 1, "--output", tmp_path / "f_#"),
            "cannot read the bake", "Blender 99.0 or later")


OLD_BLENDER = os.path.join(ROOT, ".venv-blender-4.2", "bin", "python")


@pytest.mark.skipif(bpy.app.version < (5, 0, 0), reason="needs a bake made by Blender 5.x")
@pytest.mark.skipif(not os.path.exists(OLD_BLENDER), reason="no Blender 4.2 bpy module "
                    "(bash tools/setup.sh 4.2 makes .venv-blender-4.2)")
def test_blender_4_2_says_it_cannot_render_a_5x_bake(baked, tmp_path):
    _folder, blend, _ = baked
    done = blender(blend, RENDER, "--frames", 1, "--output", tmp_path / "f_#",
                   python=OLD_BLENDER)
    refused(done, "Blender 4.2", "no .blend file is open")
    assert not list(tmp_path.glob("f_*"))


def test_bake_script_resumes_what_a_killed_task_left(tmp_path):
    blend = make_scene(tmp_path / "long.blend", frames=40, flakes=300)
    env = dict(os.environ, SNOWFALL_CHECKPOINT_SECONDS="0")
    task = blender(blend, BAKE, "--resume-if-any", env=env, popen=True)
    seen = []
    for line in task.stdout:
        seen.append(line)
        if "snowfall: frame 6/40 baked" in line:
            task.send_signal(signal.SIGKILL)       # the worker dies mid-bake
            break
    task.wait(timeout=60)
    assert task.returncode == -signal.SIGKILL, "".join(seen)[-2000:]
    retry = blender(blend, BAKE, "--resume-if-any", env=env)
    assert retry.returncode == 0, retry.stdout[-3000:] + retry.stderr[-3000:]
    assert "resuming the bake" in retry.stdout
    assert "snowfall: frame 2/40 baked" not in retry.stdout     # not from the start
    assert "snowfall: frame 40/40 baked" in retry.stdout
    again = blender(blend, BAKE, "--resume-if-any", env=env)      # a task run once more
    assert again.returncode == 0 and "nothing to bake" in again.stdout, again.stdout[-2000:]


def test_bake_script_bad_argument_and_missing_addon(baked, tmp_path):
    _folder, blend, _ = baked
    copy = tmp_path / "shot.blend"
    shutil.copy(blend, copy)
    before = copy.read_bytes()
    done = blender(copy, BAKE, "--frame-start", 5, "--frame-end", 3)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        "snowfall: error: --frame-end: 3 is before --frame-start 5; try")
    done = blender(copy, BAKE, env=no_addon_env(tmp_path))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "snowfall-bake: error: the Snowfall add-on is not installed" in done.stderr
    assert "extension install-file" in done.stderr
    assert copy.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["shadow", "shot.blend"]
    # No .blend given: Blender opened none.
    done = subprocess.run([sys.executable, SHIM, "-b", "--python-exit-code", "1", "--python",
                           BAKE, "--"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no .blend file is open" in done.stderr


def test_the_extension_zip_ships_the_farm_folder():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import build_extension
    finally:
        sys.path.pop(0)
    files = set(build_extension._tree_files())
    for name in ("farm/snowfall_bake.py", "farm/snowfall_render.py", "farm/bpy_blender.py",
                 "farm/snowfall-bake-render.js", "farm/snowfall-openjd.yaml"):
        assert name in files


OPENJD = shutil.which("openjd") or (os.path.join(os.path.dirname(sys.executable), "openjd")
                                    if os.path.exists(os.path.join(os.path.dirname(
                                        sys.executable), "openjd")) else None)
TEMPLATE = os.path.join(FOLDER, "snowfall-openjd.yaml")


@pytest.mark.skipif(OPENJD is None, reason="openjd-cli is not installed (pip install "
                    "openjd-cli; tools/setup.sh installs it with the test extras)")
def test_openjd_template_checks_and_runs_end_to_end(tmp_path):
    done = subprocess.run([OPENJD, "check", TEMPLATE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    blend = make_scene(tmp_path / "shot.blend", frames=FRAMES, flakes=200, size=(8, 8))
    wrapper = tmp_path / "blender"            # the Blender parameter: bpy_blender.py
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {SHIM} \"$@\"\n")
    wrapper.chmod(0o755)
    started = time.perf_counter()
    done = subprocess.run(
        [OPENJD, "run", TEMPLATE, "--step", "Render", "--run-dependencies",
         "-p", f"BlendFile={blend}", "-p", f"FarmScripts={FOLDER}",
         "-p", f"OutputDir={tmp_path / 'render'}", "-p", "FrameStart=1",
         "-p", f"FrameEnd={FRAMES}", "-p", "ChunkSize=2", "-p", "Backend=numpy",
         "-p", f"Blender={wrapper}"],
        capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    print(f"openjd run: {time.perf_counter() - started:.1f} s")
    assert log.count("snowfall: baking 'Scene' frames 1-4") == 1      # the bake once
    assert sorted(os.listdir(tmp_path / "render")) == [f"frame_{f:04d}.png"
                                                       for f in range(1, FRAMES + 1)]
    # Each chunk of frames is a task of its own: a process of its own after the bake's.
    pids = [line.split("pid ")[1].split()[0] for line in log.splitlines()
            if "exited with code: 0" in line]
    assert len(set(pids)) == 1 + FRAMES // 2, log[-4000:]
    for chunk in ("1-2", "3-4"):
        assert f"Frames(CHUNK[INT]) = {chunk}" in log
