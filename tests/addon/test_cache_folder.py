"""The default cache folder belongs to one .blend: two .blend files saved in one folder
(the sample-scene demo writes every scene to out/) bake into two folders and each reopens
with its own snow and flakes; a bake made when every .blend's default was the shared
``//snowfall_cache`` still opens, renders from and resumes in that folder."""
import os

import bpy
import numpy as np
import pytest

import snowfall
from snowfall.operators import particle_output, snow_surface
from snowfall.properties import LEGACY_CACHE_FOLDER, resume_available, scene_bake_folder

FRAMES = 3


def _bake_new_file(tools, blend, bump, rate):
    """A fresh file with the default cache folder, saved as ``blend``, baked and saved again;
    returns the last frame's snow depth."""
    bpy.ops.wm.read_homefile(use_empty=True)
    scene = bpy.context.scene
    props = tools.small_settings(scene, "", frames=FRAMES)
    props.property_unset("cache_folder")       # the default, as a new scene has it
    props.snowfall_rate = rate
    tools.grid_object(bump=bump)
    bpy.ops.snowfall.set_terrain()
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    bpy.ops.wm.save_mainfile()
    return snow_surface.read_depth_frame(FRAMES)


def _opened(blend):
    """(snow depth of the last frame, bake folder, flake folder) of a saved .blend."""
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    scene = bpy.context.scene
    return (snow_surface.read_depth_frame(FRAMES), scene_bake_folder(scene),
            particle_output.cache_directory(scene.snowfall.flake_emitter))


def test_two_blends_in_one_folder_keep_their_own_bakes(addon, tools, tmp_path):
    depth_a = _bake_new_file(tools, tmp_path / "a.blend", bump=1.0, rate=400.0)
    depth_b = _bake_new_file(tools, tmp_path / "b.blend", bump=2.5, rate=250.0)
    assert depth_a.max() > 0.0 and depth_b.max() > 0.0
    assert not np.array_equal(depth_a, depth_b)

    opened_a, opened_b = _opened(tmp_path / "a.blend"), _opened(tmp_path / "b.blend")
    np.testing.assert_array_equal(opened_a[0], depth_a)     # a.blend reads its own snow
    np.testing.assert_array_equal(opened_b[0], depth_b)
    assert opened_a[1] == str(tmp_path / "blendcache_a" / "snowfall" / "Scene")
    assert opened_b[1] == str(tmp_path / "blendcache_b" / "snowfall" / "Scene")
    assert opened_a[2] == os.path.join(opened_a[1], "flakes")
    assert opened_b[2] == os.path.join(opened_b[1], "flakes")
    assert not os.path.exists(tmp_path / "snowfall_cache")


def test_a_bake_in_the_old_shared_default_folder_keeps_it(addon, tools, tmp_path):
    """A file saved by the add-on before each .blend had its own folder: the setting was
    left at the default ``//snowfall_cache`` (so the file stores no value) and the bake's
    paths stored in the .blend point there. Opened, and with the add-on registered only
    after the file is open (as the headless bake does), it keeps that folder: the snow
    reads, Resume is offered and continues the bake there."""
    scene = addon
    props = tools.small_settings(scene, LEGACY_CACHE_FOLDER, frames=FRAMES)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    blend = tmp_path / "old.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    props.property_unset("cache_folder")       # the old default is not stored in a file
    depth = snow_surface.read_depth_frame(FRAMES)
    bpy.ops.wm.save_mainfile()
    legacy = str(tmp_path / "snowfall_cache" / "Scene")

    for register_after_open in (False, True):
        if register_after_open:
            snowfall.unregister()
        bpy.ops.wm.open_mainfile(filepath=str(blend))
        if register_after_open:
            snowfall.register()
        scene = bpy.context.scene
        assert scene.snowfall.cache_folder == LEGACY_CACHE_FOLDER
        assert scene_bake_folder(scene) == legacy
        np.testing.assert_array_equal(snow_surface.read_depth_frame(FRAMES), depth)
    scene.frame_end = FRAMES + 2
    assert resume_available(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert snow_surface.baked_frames() == list(range(1, FRAMES + 3))
    assert os.path.exists(os.path.join(legacy, "snow", snow_surface.depth_file_name(FRAMES + 2)))
    assert not os.path.exists(tmp_path / "blendcache_old")


def test_an_unsaved_file_is_told_to_save_first(addon, tools):
    scene = addon
    tools.small_settings(scene, "", frames=2)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert scene_bake_folder(scene) is None
    with pytest.raises(RuntimeError, match="'//blendcache_untitled/snowfall' is relative to "
                                           "the .blend file, which is not saved yet"):
        bpy.ops.snowfall.bake()
