"""A bake belongs to the .blend that made it (bake.json records it): Free and Bake in a copy
made by Save As or on disk, or in another file sharing an explicit cache folder, never
delete or overwrite the original's files; a folder of another file's is refused naming
that file, and Take Over makes it this file's deliberately. A moved file, and a bake made
before owners were recorded, keep their bakes. A .blend that lost its bake record (killed
while saving, an older copy) picks the bake up again when opened or on Resume."""
import json
import os
import shutil
import subprocess
import sys

import bpy
import numpy as np
import pytest

from snowfall.operators import bake as bake_module
from snowfall.operators import ownership, particle_output, snow_surface
from snowfall.properties import resume_available, scene_bake_folder
from snowfall.snow_addon import bake_cache

FRAMES = 3


def _files(folder):
    """{relative path: bytes} of every file under ``folder``."""
    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = handle.read()
    return found


def _new_file(tools, blend, cache="", frames=FRAMES, bake=True):
    """A fresh file (default cache folder unless ``cache``), saved as ``blend``, baked and
    saved again; returns its bake folder."""
    bpy.ops.wm.read_homefile(use_empty=True)
    scene = bpy.context.scene
    props = tools.small_settings(scene, cache, frames=frames)
    if not cache:
        props.property_unset("cache_folder")
    if hasattr(props, "snowfall_mode"):
        props.snowfall_mode = "RATE"      # the rate stays when the end frame moves (Resume)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    if bake:
        assert bpy.ops.snowfall.bake() == {"FINISHED"}
        bpy.ops.wm.save_mainfile()
    return scene_bake_folder(scene)


def _flake_folder(scene):
    return os.path.dirname(particle_output.cache_directory(scene.snowfall.flake_emitter))


def _shows(blend, frames=FRAMES):
    """Open ``blend``: its bake shows every frame with snow."""
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    scene = bpy.context.scene
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == frames
    assert snow_surface.read_depth_frame(frames).max() > 0.0
    return scene


def test_save_as_copy_bakes_and_frees_only_its_own_folder(addon, tools, tmp_path):
    original = _new_file(tools, tmp_path / "shot_v001.blend")
    files = _files(original)
    assert len(files) > 5

    # Free in a Save As copy: the copy's folder follows its name, its flakes still read
    # the original's folder; nothing of the original's is deleted.
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "shot_v002.blend"))
    scene = bpy.context.scene
    assert scene_bake_folder(scene) == str(tmp_path / "blendcache_shot_v002" / "snowfall" /
                                           "Scene")
    assert _flake_folder(scene) == original
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not scene.snowfall.has_bake and scene.snowfall.flake_emitter is None
    assert _files(original) == files
    # Bake in the copy: into its own folder, its emitter pointed there.
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    copy = scene_bake_folder(scene)
    assert _flake_folder(scene) == copy and os.path.isfile(os.path.join(copy, "bake.json"))
    assert _files(original) == files
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(copy)
    assert _files(original) == files

    # Bake straight away in another copy (its Bake frees what the copy shows first).
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "shot_v001.blend"))
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "shot_v003.blend"))
    scene = bpy.context.scene
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert _flake_folder(scene) == scene_bake_folder(scene) != original
    assert _files(original) == files
    _shows(tmp_path / "shot_v001.blend")


def test_copy_on_disk_frees_nothing_of_the_original(addon, tools, tmp_path):
    original = _new_file(tools, tmp_path / "a.blend")
    files = _files(original)
    shutil.copy(tmp_path / "a.blend", tmp_path / "c.blend")
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "c.blend"))
    scene = bpy.context.scene
    assert scene.snowfall.has_bake and _flake_folder(scene) == original
    assert not resume_available(scene)
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(original) == files
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert _flake_folder(scene) == str(tmp_path / "blendcache_c" / "snowfall" / "Scene")
    assert _files(original) == files
    _shows(tmp_path / "a.blend")


def test_two_files_sharing_an_explicit_folder(addon, tools, tmp_path):
    shared = tmp_path / "shared"
    folder = _new_file(tools, tmp_path / "a.blend", cache=shared)
    files = _files(folder)

    _new_file(tools, tmp_path / "b.blend", cache=shared, bake=False)
    scene = bpy.context.scene
    assert not resume_available(scene)
    with pytest.raises(RuntimeError) as error:
        bpy.ops.snowfall.bake()
    text = str(error.value)
    assert str(tmp_path / "a.blend") in text and "Take Over" in text and "kept" in text
    assert _files(folder) == files
    scene.frame_end = FRAMES + 2
    with pytest.raises(RuntimeError, match="a.blend"):
        bpy.ops.snowfall.resume()
    scene.frame_end = FRAMES
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(folder) == files and not scene.snowfall.has_bake

    # Taken over deliberately: b.blend's Bake replaces it, and a.blend may no longer free it.
    assert bpy.ops.snowfall.take_over_bake() == {"FINISHED"}
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    bpy.ops.wm.save_mainfile()
    with open(os.path.join(folder, "bake.json")) as handle:
        assert json.load(handle)["owner"]["blend"] == str(tmp_path / "b.blend")
    files_b = _files(folder)
    assert files_b != files
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "a.blend"))
    scene = bpy.context.scene
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(folder) == files_b
    with pytest.raises(RuntimeError, match="b.blend"):
        bpy.ops.snowfall.bake()
    assert _files(folder) == files_b

    # A Save As copy sharing the folder (the same id as its original) is refused too.
    _shows(tmp_path / "b.blend", FRAMES)
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "b2.blend"))
    with pytest.raises(RuntimeError, match="b.blend"):
        bpy.ops.snowfall.bake()
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(folder) == files_b


def test_a_moved_file_and_an_old_bake_keep_their_bakes(addon, tools, tmp_path):
    folder = _new_file(tools, tmp_path / "a.blend", cache=tmp_path / "cache")
    os.rename(tmp_path / "a.blend", tmp_path / "moved.blend")
    scene = _shows(tmp_path / "moved.blend")
    scene.frame_end = FRAMES + 1
    assert resume_available(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    with open(os.path.join(folder, "bake.json")) as handle:      # adopted under the new name
        assert json.load(handle)["owner"]["blend"] == str(tmp_path / "moved.blend")
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(os.path.join(folder, "bake.json"))

    # A bake made before bake.json recorded its owner: resumed and freed as this file's.
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    meta_path = os.path.join(folder, "bake.json")
    with open(meta_path) as handle:
        meta = json.load(handle)
    del meta["owner"]
    with open(meta_path, "w") as handle:
        json.dump(meta, handle)
    scene.frame_end = FRAMES + 2
    assert resume_available(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == FRAMES + 2
    with open(meta_path) as handle:
        assert json.load(handle)["owner"]["id"] == scene.snowfall.bake_owner
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(meta_path)


def test_a_bake_never_saved_in_its_file_goes_with_save_as(addon, tools, tmp_path):
    """Baked, then saved under a new name before the file it was made in was saved: only
    the new file records the bake, so the bake is the new file's; the first file (saved
    before the bake) does not pick it up and its Free keeps it."""
    folder = _new_file(tools, tmp_path / "first.blend", cache=tmp_path / "cache", bake=False)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp_path / "second.blend"))
    with open(os.path.join(folder, "bake.json")) as handle:
        assert json.load(handle)["owner"]["blend"] == str(tmp_path / "second.blend")
    files = _files(folder)
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "first.blend"))
    scene = bpy.context.scene
    assert not scene.snowfall.has_bake and not resume_available(scene)
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(folder) == files
    scene = _shows(tmp_path / "second.blend")
    scene.frame_end = FRAMES + 1
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(folder)


def _lose_the_record(tools, tmp_path, frames):
    """A saved file, then a bake of ``frames`` frames never saved into it (the .blend on
    disk is the one from before the bake: killed while saving, or an older copy)."""
    folder = _new_file(tools, tmp_path / "lost.blend", cache=tmp_path / "cache", frames=frames,
                       bake=False)
    return folder


def test_a_blend_that_lost_its_bake_record_picks_it_up(addon, tools, tmp_path):
    folder = _lose_the_record(tools, tmp_path, frames=5)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    full = {f: snow_surface.read_depth_frame(f) for f in range(1, 6)}
    flakes = particle_output.read_flake_frame(bpy.context.scene.snowfall.flake_emitter, 5)

    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "lost.blend"))   # opening adopts it
    scene = bpy.context.scene
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == 5
    assert _flake_folder(scene) == folder
    for frame in range(1, 6):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), full[frame])
    np.testing.assert_array_equal(
        particle_output.read_flake_frame(scene.snowfall.flake_emitter, 5), flakes)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}      # a complete bake: nothing to run
    assert scene.snowfall.baked_frame_end == 5

    # A partial bake: opened, it shows its finished frames; Resume bakes the rest, equal
    # to the uninterrupted bake.
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "lost.blend"))
    bpy.ops.snowfall.free()
    bpy.ops.wm.save_mainfile()
    job = bake_module.BakeJob(bpy.context)
    job.advance_frame()
    job.advance_frame()
    job.cancel()
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "lost.blend"))
    scene = bpy.context.scene
    assert scene.snowfall.has_bake and 1 <= scene.snowfall.baked_frame_end < 5
    assert resume_available(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    for frame in range(1, 6):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), full[frame])

    # Without the add-on's open handler (a file opened before the add-on registered its
    # handlers), Resume adopts the complete bake instead of "the bake already reaches".
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "lost.blend"))
    bpy.ops.snowfall.free()
    bpy.ops.wm.save_mainfile()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    bpy.app.handlers.load_post.remove(ownership.adopt_lost_bakes)
    try:
        bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "lost.blend"))
    finally:
        bpy.app.handlers.load_post.append(ownership.adopt_lost_bakes)
    scene = bpy.context.scene
    assert not scene.snowfall.has_bake
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == 5
    np.testing.assert_array_equal(snow_surface.read_depth_frame(5), full[5])


def test_headless_resume_of_a_blend_that_lost_its_record(addon, tools, tmp_path):
    """The headless bake killed while it saved the .blend: the folder is complete, the
    file is the one from before. ``--resume`` takes the bake back and saves the file."""
    _lose_the_record(tools, tmp_path, frames=4)
    shutil.copy(tmp_path / "lost.blend", tmp_path / "before.blend")
    done = subprocess.run([sys.executable, "-m", "snowfall.operators.headless",
                           str(tmp_path / "lost.blend")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    shutil.copy(tmp_path / "before.blend", tmp_path / "lost.blend")    # the save was lost
    done = subprocess.run([sys.executable, "-m", "snowfall.operators.headless",
                           str(tmp_path / "lost.blend"), "--resume"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    _shows(tmp_path / "lost.blend", 4)


def test_headless_output_owns_the_bake_it_records(addon, tools, tmp_path):
    """``--output``: the output file records the bake, so it owns it (its Free deletes
    it); the input file on disk never saw the bake and keeps its hands off it."""
    folder = _new_file(tools, tmp_path / "input.blend", cache=tmp_path / "cache", bake=False)
    done = subprocess.run([sys.executable, "-m", "snowfall.operators.headless",
                           str(tmp_path / "input.blend"), "--output",
                           str(tmp_path / "output.blend")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(folder, "bake.json")) as handle:
        assert json.load(handle)["owner"]["blend"] == str(tmp_path / "output.blend")
    files = _files(folder)
    bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "input.blend"))
    scene = bpy.context.scene
    assert not scene.snowfall.has_bake
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert _files(folder) == files
    _shows(tmp_path / "output.blend")
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(folder)
