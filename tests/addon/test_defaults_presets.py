"""The add-on's artist defaults (snow depth by the end of the bake, a wind that drifts snow,
automatic values as toggles), its presets, and older files keeping their settings."""
import math
import os

import bpy
import numpy as np
import pytest

from snowfall.blender_compat import action_fcurves
from snowfall.properties import (ANIMATED, SETTINGS_VERSION, bake_seconds, flake_count,
                                 flake_radius, snowfall_rate, to_snow_settings)
from snowfall.snow_addon.errors import SnowInputError

OLD_FILE = os.path.join(os.path.dirname(__file__), "data", "settings_before_v2.blend")


def test_new_scene_defaults_ask_for_visible_snow_and_drifting_wind(addon):
    """A new scene: 10 cm of snow by its end frame, an 11 m/s wind (above dry snow's drift
    threshold, about 7.7 m/s) from the west, every automatic value on."""
    scene = addon
    props = scene.snowfall
    assert props.snowfall_mode == "DEPTH" and props.snow_depth == pytest.approx(0.10)
    assert props.wind_speed == pytest.approx(11.0) and props.wind_speed > 7.7
    assert math.degrees(props.wind_from) == pytest.approx(270.0)
    for name in ("wind_cell_size", "sky_height", "drift_threshold", "flake_count",
                 "flake_size"):
        assert getattr(props, f"use_auto_{name}") is True, name
    settings = to_snow_settings(props, scene)
    assert settings.wind_cell_size is None and settings.sky_height is None
    assert settings.drift_threshold is None
    assert settings.wind_speed == pytest.approx(11.0)
    assert settings.wind_direction == pytest.approx(0.0, abs=1e-4)     # toward +X


def test_depth_sets_the_engine_rate_over_the_bake_duration(addon):
    """rate (m/h) = depth / ((frame_end - frame_start) / fps / 3600): the default range
    1-250 at 24 fps is 10.375 s; the rate follows the range, the frame rate and the unit
    scale; By Rate keeps the rate; a depth without simulated time is refused."""
    scene = addon
    props = scene.snowfall
    assert (scene.frame_start, scene.frame_end, scene.render.fps) == (1, 250, 24)
    assert bake_seconds(scene) == pytest.approx(249 / 24)
    expected = 0.10 / (249 / 24 / 3600.0)
    assert snowfall_rate(props, scene) == pytest.approx(expected)
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(expected)
    props.snow_depth = 0.3
    scene.frame_end = 49
    scene.render.fps, scene.render.fps_base = 30, 1.001
    seconds = 48 / (30 / 1.001)
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(0.3 / seconds * 3600)
    assert to_snow_settings(props, scene, 1, 25).snowfall_rate == \
        pytest.approx(0.3 / (24 / (30 / 1.001)) * 3600)
    scene.unit_settings.scale_length = 0.01              # depth in centimetres
    props.snow_depth = 30.0
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(0.3 / seconds * 3600)
    props.snowfall_mode = "RATE"
    props.snowfall_rate = 42.0
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(42.0)
    props.snowfall_mode = "DEPTH"
    scene.frame_end = scene.frame_start
    with pytest.raises(SnowInputError, match="snow_depth"):
        to_snow_settings(props, scene)


def test_setting_a_rate_or_a_depth_picks_the_amount(addon):
    """A script (or an older add-on's habit) that sets snowfall_rate bakes at that rate;
    setting a depth goes back to By Snow Depth."""
    scene = addon
    props = scene.snowfall
    props.snowfall_rate = 400.0
    assert props.snowfall_mode == "RATE"
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(400.0)
    props.snow_depth = 0.2
    assert props.snowfall_mode == "DEPTH"
    assert to_snow_settings(props, scene).snowfall_rate == pytest.approx(0.2 / (249 / 24) * 3600)


def _wall_terrain():
    """A plain 100 m square with a wall 4 m high and 60 m long across the wind at x = -20."""
    from snowfall.sample_scenes.build import mesh_object
    from snowfall.snow_addon import scenes

    vertices, triangles = scenes.snow_fence(size_x=100.0, size_y=100.0, fence_height=4.0,
                                            fence_length=60.0, thickness=1.0, fence_x=-20.0,
                                            resolution=101)
    return mesh_object("Terrain", vertices, triangles)


def test_default_bake_leaves_visible_snow_and_drifts(addon, tmp_path):
    """The defaults for the amount and the wind, on a new scene's frames (1-250, 24 fps): a
    plain 100 m terrain with a wall gets several centimetres of snow, and drifts: the
    ground in the wall's near lee holds far more than the open ground upwind, and the snow
    varies across the terrain (scoured and loaded ground). Coarse grids and few flakes keep
    it fast; the snowfall lands at its rate whatever the flake count."""
    from snowfall.operators.bake import BakeJob
    from snowfall.operators.set_terrain import set_terrain

    scene = addon
    set_terrain(bpy.context, [_wall_terrain()])
    props = scene.snowfall
    props.heightmap_resolution = 64
    props.wind_resolution = 32                 # 3.1 m cells: the wall is 1.3 cells high
    props.flake_count = 4000
    props.backend = "cpu"
    props.cache_folder = str(tmp_path)
    job = BakeJob(bpy.context)
    assert job.settings.snowfall_rate == pytest.approx(0.10 / (249 / 24 / 3600.0))
    assert job.settings.wind_speed == pytest.approx(11.0)
    try:
        while job.advance_frame():
            pass
    finally:
        job.finish()
    assert props.baked_frame_end == 250
    depth = np.asarray(job.sim.snow_depth(), np.float64)
    grid = job.sim.heightmap.grid
    x = grid.x0 + np.arange(grid.nx) * grid.spacing
    y = grid.y0 + np.arange(grid.ny) * grid.spacing
    x, y = np.meshgrid(x, y)
    ground = np.asarray(job.sim.heightmap.height) < 0.1
    mean = depth[ground].mean()
    assert 0.05 < mean < 0.2, mean                          # several centimetres
    across = ground & (np.abs(y) < 25.0)
    near_lee = depth[across & (x > -19.4) & (x < -15.0)].mean()
    upwind = depth[across & (x < -30.0)].mean()
    assert upwind > 0.03, upwind                            # open ground: visible snow
    assert near_lee > 2.0 * upwind, (near_lee, upwind)     # a drift behind the wall
    low, high = np.percentile(depth[ground], [10, 90])
    assert high > 5.0 * max(low, 1e-3), (low, high)        # scoured and loaded ground


def test_automatic_values_are_toggles_and_zero_still_means_automatic(addon, tools):
    """Cell Size, Sky Height and Threshold: the Automatic toggle stores 0 (older files'
    and scripts' automatic), keeps the typed value aside and brings it back; a script that
    sets a value switches Automatic off; switching it off without a value starts from the
    value Automatic resolves to."""
    scene = addon
    props = scene.snowfall
    tools.grid_object(size=(40.0, 20.0))
    bpy.ops.snowfall.set_terrain()
    props.wind_cell_size = 0.5
    assert props.use_auto_wind_cell_size is False
    assert to_snow_settings(props, scene).wind_cell_size == pytest.approx(0.5)
    props.use_auto_wind_cell_size = True
    assert props.wind_cell_size == 0.0
    assert to_snow_settings(props, scene).wind_cell_size is None
    props.use_auto_wind_cell_size = False
    assert props.wind_cell_size == pytest.approx(0.5)
    props.sky_height = 0.0                        # a script's "automatic"
    assert props.use_auto_sky_height is True
    props.use_auto_sky_height = False             # never typed: the resolved value
    assert props.sky_height == pytest.approx(max(0.25 * 40.0, 8 * 0.5), rel=0.05)
    props.use_auto_drift_threshold = False
    assert props.drift_threshold == pytest.approx(0.32)          # dry snow's
    assert to_snow_settings(props, scene).drift_threshold == pytest.approx(0.32)


def test_flake_count_and_radius_follow_the_terrain_and_camera_unless_set(addon, tools):
    scene = addon
    props = scene.snowfall
    terrain = tools.grid_object(size=(100.0, 80.0))
    bpy.ops.snowfall.set_terrain()
    assert flake_count(props, scene) == 120_000                  # 15 per m^2 of 8000 m^2
    terrain.scale = (3.0, 3.0, 1.0)
    bpy.context.view_layer.update()
    assert flake_count(props, scene) == 1_000_000                # capped
    terrain.scale = (1.0, 1.0, 1.0)
    bpy.context.view_layer.update()
    assert flake_radius(props, scene) == pytest.approx(100.0 / 2000.0)   # no camera
    camera = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(camera)
    scene.camera = camera
    centre = 0.5 * (np.array(terrain.bound_box[0]) + np.array(terrain.bound_box[6]))
    camera.location = tuple(centre + np.array([0.0, -18.0, 24.0]))   # 30 m from the centre
    bpy.context.view_layer.update()
    assert flake_radius(props, scene) == pytest.approx(30.0 / 400.0, rel=0.02)
    props.flake_count = 2500
    props.flake_size = 0.004
    assert props.use_auto_flake_count is False and props.use_auto_flake_size is False
    assert flake_count(props, scene) == 2500 == to_snow_settings(props, scene).flake_count
    assert flake_radius(props, scene) == pytest.approx(0.004)


def test_wind_from_is_where_the_wind_comes_from_and_follows_keyframes(addon):
    """Wind From, clockwise from north = +Y, becomes the engine's heading 270 - from
    (counter-clockwise from +X, where it blows); keyframed, every frame is sampled."""
    scene = addon
    props = scene.snowfall
    for source, heading in ((270.0, 0.0), (0.0, 270.0), (90.0, 180.0), (180.0, 90.0)):
        props.wind_from = math.radians(source)
        assert to_snow_settings(props, scene).wind_direction == pytest.approx(heading, abs=1e-4)
        assert math.degrees(props.wind_direction) == pytest.approx(heading, abs=1e-4)   # old name
    scene.frame_start, scene.frame_end = 1, 11
    props.wind_from = math.radians(180.0)
    props.keyframe_insert("wind_from", frame=1)
    props.wind_from = math.radians(270.0)
    props.keyframe_insert("wind_from", frame=11)
    for point in action_fcurves(scene.animation_data)[0].keyframe_points:
        point.interpolation = "LINEAR"
    keys = to_snow_settings(props, scene).wind_keys
    assert [round(key[2], 4) for key in keys[::5]] == [90.0, 45.0, 0.0]


def test_only_the_wind_shows_a_keyframe_dot(addon):
    """Wind Speed and Wind From follow their keyframes through a bake; no other setting
    can be keyframed (Blender shows no dot, keyframe_insert refuses)."""
    props = addon.snowfall
    animatable = {prop.identifier for prop in props.bl_rna.properties
                  if prop.is_animatable and prop.identifier != "rna_type"}
    assert animatable == set(ANIMATED) == {"wind_speed", "wind_from"}
    with pytest.raises(TypeError):
        props.keyframe_insert("snow_depth", frame=1)


def test_an_older_file_keeps_its_settings(addon):
    """A file saved by the add-on before this layout (Blender 4.2): its rate (By Rate), its
    heading and its keyframes (as Wind From), its wind speed, its cell size and flake count,
    and in a scene that kept them, the defaults of then (1 m/h, 5 m/s, toward +X, 100,000
    flakes of 1 cm). Saved again, it is not converted twice."""
    bpy.ops.wm.open_mainfile(filepath=OLD_FILE)
    keyed, plain = bpy.data.scenes["Keyed"], bpy.data.scenes["Plain"]
    for scene in (keyed, plain):
        scene.frame_start, scene.frame_end = 1, 11
    props = keyed.snowfall
    assert props.settings_version == SETTINGS_VERSION
    settings = to_snow_settings(props, keyed)
    assert props.snowfall_mode == "RATE" and settings.snowfall_rate == pytest.approx(60.0)
    assert settings.wind_speed == pytest.approx(10.0)
    assert settings.wind_cell_size == pytest.approx(0.5) and not props.use_auto_wind_cell_size
    assert settings.flake_count == 2000 and not props.use_auto_flake_count
    # baked before open inflow: it keeps the wrap-around fetch its bakes were made with
    assert settings.upwind_fetch == "wrap" and plain.snowfall.upwind_fetch == "wrap"
    headings = [key[2] for key in settings.wind_keys]
    assert headings[0] == pytest.approx(30.0, abs=1e-4)
    assert headings[-1] == pytest.approx(80.0, abs=1e-4)
    keyed.frame_set(1)
    assert math.degrees(props.wind_from) == pytest.approx(240.0, abs=1e-4)   # at frame 1
    old = to_snow_settings(plain.snowfall, plain)
    assert plain.snowfall.seed == 3
    assert (old.snowfall_rate, old.wind_speed, old.flake_count) == (1.0, 5.0, 100_000)
    assert old.wind_direction == pytest.approx(0.0, abs=1e-4)
    assert old.wind_cell_size is None and old.sky_height is None
    assert flake_radius(plain.snowfall, plain) == pytest.approx(0.01)


def test_older_file_saved_again_is_not_converted_twice(addon, tmp_path):
    bpy.ops.wm.open_mainfile(filepath=OLD_FILE)
    path = str(tmp_path / "again.blend")
    bpy.ops.wm.save_mainfile(filepath=path)
    bpy.ops.wm.open_mainfile(filepath=path)
    keyed = bpy.data.scenes["Keyed"]
    keyed.frame_start, keyed.frame_end = 1, 11
    keys = to_snow_settings(keyed.snowfall, keyed).wind_keys
    assert keys[0][2] == pytest.approx(30.0, abs=1e-4)


def test_new_settings_survive_saving_and_reregistering(addon, tmp_path):
    """A scene made with this layout is never taken for an older file's: neither on load
    nor when the add-on is registered again."""
    import snowfall

    props = addon.snowfall
    props.snow_depth = 0.2
    props.flake_count = 1234
    snowfall.unregister()
    snowfall.register()
    props = bpy.context.scene.snowfall
    assert props.snowfall_mode == "DEPTH" and props.wind_speed == pytest.approx(11.0)
    path = str(tmp_path / "new.blend")
    bpy.ops.wm.save_mainfile(filepath=path)
    bpy.ops.wm.open_mainfile(filepath=path)
    props = bpy.context.scene.snowfall
    assert props.snowfall_mode == "DEPTH" and props.snow_depth == pytest.approx(0.2)
    assert math.degrees(props.wind_from) == pytest.approx(270.0)
    assert props.flake_count == 1234 and props.use_auto_flake_size


#: What each shipped preset sets (the storms of the sample scenes and the drift validation).
PRESETS = {
    "Light Snowfall": {"snowfall_mode": "DEPTH", "snow_depth": 0.05, "wind_speed": 3.0,
                       "drift_enabled": True, "substeps": 1, "upwind_fetch": "open_snowfield"},
    "Storm with Drifts": {"snowfall_mode": "DEPTH", "snow_depth": 0.10, "wind_speed": 11.0,
                          "gust_strength": 0.2, "substeps": 2,
                          "upwind_fetch": "open_snowfield"},
    # the open snowfield's suspension runs away at this wind (docs/drift.md, "A blizzard
    # from an open snowfield"): the terrain wraps around
    "Blizzard": {"snowfall_mode": "DEPTH", "snow_depth": 0.25, "wind_speed": 18.0,
                 "gust_strength": 0.4, "substeps": 2, "upwind_fetch": "wrap"},
    "Heavy Wet Snow": {"snow_type": "wet", "snow_depth": 0.15, "wind_speed": 4.0,
                       "upwind_fetch": "open_snowfield"},
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_apply_through_blenders_preset_menu(addon, tools, name):
    """Each shipped preset, run as Blender's preset menu runs it (script.execute_preset),
    sets its storm and leaves the terrain, the wind's direction and the flakes alone."""
    from snowfall.panels.presets import preset_folders, shipped_presets

    scene = addon
    props = scene.snowfall
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    props.wind_from = math.radians(123.0)
    props.flake_count = 777
    presets = shipped_presets()
    assert set(PRESETS) <= set(presets)
    assert os.path.dirname(presets[name]) in preset_folders()
    result = bpy.ops.script.execute_preset(filepath=presets[name],
                                           menu_idname="SNOWFALL_MT_presets")
    assert result == {"FINISHED"}
    for setting, value in PRESETS[name].items():
        got = getattr(props, setting)
        assert (got == pytest.approx(value)) if isinstance(value, float) else got == value, \
            (setting, got, value)
    assert [item.object for item in props.terrain_objects] == [terrain]
    assert math.degrees(props.wind_from) == pytest.approx(123.0)
    assert props.flake_count == 777
    assert bpy.types.SNOWFALL_MT_presets.bl_label == name     # the menu shows the preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_bakes_the_snow_fence_sample_inside_the_models_range(addon, tmp_path,
                                                                        name):
    """Each shipped preset over a short bake of the snow fence sample (fewer flakes and
    nodes than the sample's; the depth in two seconds, the fastest time-lapse a preset
    gets): every frame passes Simulation.check_health. (The Blizzard's storm from an open
    snowfield piles its suspended snow up to the wind grid's top at the upwind edge in
    0.08 s here.)"""
    from snowfall.operators.bake import BakeJob
    from snowfall.panels.presets import shipped_presets
    from snowfall.sample_scenes.build import build

    build("snow_fence", frames=24, flakes=30_000, resolution=121)
    scene = bpy.context.scene
    scene.snowfall.cache_folder = str(tmp_path)
    scene.snowfall.backend = "cpu"
    assert bpy.ops.script.execute_preset(filepath=shipped_presets()[name],
                                         menu_idname="SNOWFALL_MT_presets") == {"FINISHED"}
    job = BakeJob(bpy.context)
    try:
        while job.advance_frame():
            pass
    finally:
        job.finish()
    assert scene.snowfall.baked_frame_end == 24


def test_presets_ship_in_the_extension():
    """The presets folder is a package of the add-on tree, so the zip carries it."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
    try:
        import build_extension
    finally:
        sys.path.pop(0)
    files = set(build_extension._tree_files())
    for name in ("Light_Snowfall.py", "Storm_with_Drifts.py", "Blizzard.py"):
        assert f"presets/settings/{name}" in files
