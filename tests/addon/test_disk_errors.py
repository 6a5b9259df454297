"""Free and Bake on a read-only or vanished cache folder, and a full disk at the writes a
bake starts with (bake.json, the flake info file) or at a checkpoint, end with a clear
message and nothing half done: the old bake still shown and on disk, or no bake at all,
never a traceback or a bake.json without its bake."""
import contextlib
import errno
import os
import subprocess

import bpy
import pytest

from snowfall.operators import bake as bake_module
from snowfall.operators import particle_output, snow_surface
from snowfall.properties import scene_bake_folder
from snowfall.snow_addon import bake_cache

FRAMES = 3


def _files(folder):
    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = handle.read()
    return found


@contextlib.contextmanager
def read_only(folder):
    """``folder`` made read-only: a read-only bind mount as root (permissions do not stop
    root), file modes otherwise."""
    folder = str(folder)
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "--bind", folder, folder], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip("cannot bind-mount a folder read-only here")
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", folder, folder], check=True)
            yield
        finally:
            subprocess.run(["umount", folder], check=True)
        return
    modes = {}
    for root, dirs, _names in os.walk(folder):
        for path in [root] + [os.path.join(root, d) for d in dirs]:
            modes[path] = os.stat(path).st_mode
            os.chmod(path, 0o555)
    try:
        yield
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)


def _baked(tools, tmp_path):
    scene = bpy.context.scene
    tools.small_settings(scene, tmp_path / "cache", frames=FRAMES)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    return scene, scene_bake_folder(scene)


def _still_shown(scene, folder, files):
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == FRAMES
    assert scene.snowfall.flake_emitter is not None
    assert snow_surface.read_depth_frame(FRAMES).max() > 0.0
    assert _files(folder) == files


def test_free_and_bake_on_a_read_only_folder_change_nothing(addon, tools, tmp_path):
    scene, folder = _baked(tools, tmp_path)
    files = _files(folder)
    with read_only(folder):
        for operator in (bpy.ops.snowfall.free, bpy.ops.snowfall.bake):
            with pytest.raises(RuntimeError) as error:
                operator()
            text = str(error.value)
            assert "cannot change the bake folder" in text and folder in text, text
            assert "Traceback" not in text
            _still_shown(scene, folder, files)
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not os.path.exists(folder)


def test_free_of_a_vanished_folder(addon, tools, tmp_path):
    scene, folder = _baked(tools, tmp_path)
    import shutil

    shutil.rmtree(tmp_path / "cache")
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert not scene.snowfall.has_bake and scene.snowfall.flake_emitter is None
    assert not os.path.exists(tmp_path / "cache")
    assert bpy.ops.snowfall.bake() == {"FINISHED"}        # and bakes again
    assert scene.snowfall.baked_frame_end == FRAMES


def _no_bake_left(scene, folder):
    assert not scene.snowfall.has_bake and scene.snowfall.flake_emitter is None
    assert bpy.data.objects.get(bake_module.FLAKE_EMITTER_NAME) is None
    assert not os.path.exists(os.path.join(folder, "bake.json"))
    assert not os.path.exists(os.path.join(folder, "progress.json"))


def _full(path):
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


@pytest.mark.parametrize("where", ["bake.json", "info file"])
def test_a_full_disk_as_the_bake_starts(addon, tools, tmp_path, monkeypatch, where):
    scene, folder = _baked(tools, tmp_path)
    if where == "bake.json":
        def failing(path, data):
            raise _full(path)
        monkeypatch.setattr(bake_cache, "write_json_atomic", failing)
    else:
        if particle_output.gn_flakes.is_gn_flakes(scene.snowfall.flake_emitter):
            pytest.skip("the Geometry Nodes flake bake (Blender 4.2-4.5) has no info file")

        def failing(emitter, count):
            raise _full(particle_output.frame_path(emitter, 0))
        monkeypatch.setattr(particle_output, "ensure_info_file", failing)
    with pytest.raises(RuntimeError) as error:
        bpy.ops.snowfall.bake()
    text = str(error.value)
    assert "No space left on device" in text and "did not start" in text, text
    assert "Traceback" not in text
    _no_bake_left(scene, folder)
    monkeypatch.undo()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == FRAMES


def test_a_full_disk_at_a_checkpoint_keeps_the_frames_before(addon, tools, tmp_path,
                                                             monkeypatch):
    scene, folder = _baked(tools, tmp_path)
    reference = _files(folder)
    bpy.ops.snowfall.free()
    monkeypatch.setenv("SNOWFALL_CHECKPOINT_SECONDS", "0")     # a checkpoint every frame
    real_write = bake_cache.write_atomic
    seen = {"checkpoints": 0}

    def failing(path, chunks, durable=False):
        if os.path.basename(path).startswith("checkpoint_"):
            seen["checkpoints"] += 1
            if seen["checkpoints"] == 2:
                raise _full(path)
        return real_write(path, chunks, durable)

    monkeypatch.setattr(bake_cache, "write_atomic", failing)
    with pytest.raises(RuntimeError) as error:
        bpy.ops.snowfall.bake()
    text = str(error.value)
    assert "No space left on device" in text and "checkpoint_" in text and "Resume" in text
    assert "Traceback" not in text
    kept = scene.snowfall.baked_frame_end
    assert kept >= 1 and snow_surface.baked_frames() == list(range(1, kept + 1))
    monkeypatch.setattr(bake_cache, "write_atomic", real_write)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == FRAMES
    resumed = _files(folder)
    assert sorted(resumed) == sorted(reference)


def test_a_disk_too_small_is_refused_before_anything(addon, tools, tmp_path):
    """A 256 KB file system (a tmpfs, as root): the bake's files would not fit; refused
    with the space needed, nothing written."""
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        scene = bpy.context.scene
        tools.small_settings(scene, small / "cache", frames=40)
        scene.snowfall.flake_count = 20000
        tools.grid_object()
        bpy.ops.snowfall.set_terrain()
        with pytest.raises(RuntimeError) as error:
            bpy.ops.snowfall.bake()
        text = str(error.value)
        assert "cache_folder: the bake needs about" in text and "free" in text, text
        assert os.listdir(small) == [] and not scene.snowfall.has_bake
    finally:
        subprocess.run(["umount", str(small)], check=True)
