"""The Blender properties map onto SnowSettings in SI units; keyframed wind is sampled per
frame into wind_keys."""
import dataclasses
import math

import bpy
import pytest

from snowfall.blender_compat import action_fcurves
from snowfall.properties import to_snow_settings
from snowfall.snow_addon.settings import SnowSettings

_DRIFT = ("drift_enabled", "drift_threshold", "drift_strength", "roughness_length", "turbulence")


def test_properties_map_to_si_settings(addon):
    scene = addon
    scene.unit_settings.scale_length = 0.01      # scene in centimetres
    scene.render.fps, scene.render.fps_base = 30, 1.0
    props = scene.snowfall
    props.wind_cell_size = 50.0                  # 50 cm
    props.sky_height = 0.0                       # automatic
    props.wind_speed = 300.0                     # 300 cm/s
    props.wind_direction = math.radians(90.0)
    props.gust_direction_jitter = math.radians(15.0)
    props.angle_of_repose = math.radians(30.0)
    props.redistribution_min_depth = 2.0         # 2 cm
    props.substeps = 3
    props.snow_type = "wet"
    props.seed = 7
    settings = to_snow_settings(props, scene)
    assert settings.wind_cell_size == pytest.approx(0.5)
    assert settings.sky_height is None
    assert settings.wind_speed == pytest.approx(3.0)
    assert settings.wind_direction == pytest.approx(90.0)
    assert settings.gust_direction_jitter == pytest.approx(15.0)
    assert settings.angle_of_repose == pytest.approx(30.0)
    assert settings.redistribution_min_depth == pytest.approx(0.02)
    assert settings.time_step == pytest.approx(1.0 / 90.0)
    assert settings.snow_type == "wet" and settings.seed == 7
    assert settings.wind_keys == ()
    props.use_redistribution = False
    assert to_snow_settings(props, scene).redistribution_fraction == 0.0


def test_wind_boundary_maps_and_defaults_to_the_engines(addon):
    """The terrain boundary of the wind: the engine's default (cut cells), and voxels when
    the user picks them."""
    scene = addon
    props = scene.snowfall
    assert props.wind_boundary == SnowSettings().wind_boundary == "cut_cells"
    assert to_snow_settings(props, scene).wind_boundary == "cut_cells"
    props.wind_boundary = "voxels"
    assert to_snow_settings(props, scene).wind_boundary == "voxels"


def test_side_walls_map_and_default_to_the_engines(addon):
    """Side Walls: on by default as in the engine (a uniform wind stays uniform up to the
    sides); the user's choice reaches SnowSettings."""
    scene = addon
    props = scene.snowfall
    assert props.side_walls is SnowSettings().side_walls is True
    assert to_snow_settings(props, scene).side_walls is True
    props.side_walls = False
    assert to_snow_settings(props, scene).side_walls is False


def test_upwind_fetch_maps_and_defaults_to_the_engines(addon):
    """Upwind Fetch: the engine's default (the open snowfield); each choice reaches
    SnowSettings."""
    scene = addon
    props = scene.snowfall
    assert props.upwind_fetch == SnowSettings().upwind_fetch == "open_snowfield"
    for choice in ("bare_ground", "wrap", "open_snowfield"):
        props.upwind_fetch = choice
        assert to_snow_settings(props, scene).upwind_fetch == choice


def test_files_saved_while_the_wrap_was_the_default_keep_it(addon):
    """A scene saved at settings version 3 (the wrap-around the default, so not stored)
    keeps the wrap on load, and Resume of its bake the setting it baked with; one that
    chose a fetch keeps that; a new scene gets the open snowfield."""
    from snowfall.properties import SETTINGS_VERSION, migrate_scene

    scene = addon
    props = scene.snowfall
    assert SETTINGS_VERSION == 4 and not migrate_scene(scene)     # nothing stored: new
    assert props.upwind_fetch == "open_snowfield"
    props.seed = 3                                                  # a stored setting
    props.settings_version = 3
    assert "upwind_fetch" not in props.keys() and migrate_scene(scene)
    assert props.upwind_fetch == "wrap" and props.settings_version == 4
    props.upwind_fetch = "bare_ground"
    props.settings_version = 3
    migrate_scene(scene)
    assert props.upwind_fetch == "bare_ground"


def test_drift_properties_map_where_the_engine_has_them(addon):
    """Drift defaults come from SnowSettings; lengths and velocities scale to SI; a zero
    threshold means "by snow type" (None). Fields the engine lacks are not passed."""
    scene = addon
    scene.unit_settings.scale_length = 0.01      # centimetres
    props = scene.snowfall
    defaults = SnowSettings()
    assert props.drift_enabled is True and props.drift_threshold == 0.0
    if hasattr(defaults, "drift_strength"):
        assert props.drift_strength == pytest.approx(defaults.drift_strength)
    if hasattr(defaults, "roughness_length"):
        assert props.roughness_length == pytest.approx(defaults.roughness_length)
    assert props.turbulence == pytest.approx(defaults.turbulence)
    engine = {field.name for field in dataclasses.fields(SnowSettings)}
    settings = to_snow_settings(props, scene)
    if "drift_threshold" in engine:
        assert settings.drift_threshold is None
    props.drift_enabled = False
    props.drift_threshold = 25.0                 # 25 cm/s
    props.drift_strength = 2.5
    props.roughness_length = 0.1                 # 0.1 cm
    props.turbulence = 0.5                       # a multiplier: no unit scale
    settings = to_snow_settings(props, scene)
    expected = {"drift_enabled": False, "drift_threshold": 0.25, "drift_strength": 2.5,
                "roughness_length": 0.001, "turbulence": 0.5}
    for name in _DRIFT:
        if name in engine:
            assert getattr(settings, name) == pytest.approx(expected[name]), name


def test_wind_mixing_maps_as_a_plain_multiplier(addon):
    scene = addon
    scene.unit_settings.scale_length = 0.01      # a multiplier: no unit scale
    props = scene.snowfall
    assert props.wind_mixing == pytest.approx(SnowSettings().wind_mixing)
    props.wind_mixing = 0.0                      # the inviscid wind
    assert to_snow_settings(props, scene).wind_mixing == 0.0
    props.wind_mixing = 2.5
    assert to_snow_settings(props, scene).wind_mixing == pytest.approx(2.5)


def test_keyframed_wind_is_sampled_per_frame(addon):
    scene = addon
    scene.render.fps = 24
    scene.frame_start, scene.frame_end = 1, 25
    props = scene.snowfall
    props.wind_speed = 2.0
    props.keyframe_insert("wind_speed", frame=1)
    props.wind_speed = 14.0
    props.keyframe_insert("wind_speed", frame=25)
    for point in action_fcurves(scene.animation_data)[0].keyframe_points:
        point.interpolation = "LINEAR"
    props.wind_direction = math.radians(45.0)
    settings = to_snow_settings(props, scene)
    assert len(settings.wind_keys) == 25
    t0, s0, d0 = settings.wind_keys[0]
    t12, s12, _ = settings.wind_keys[12]
    t24, s24, d24 = settings.wind_keys[24]
    assert (t0, s0) == pytest.approx((0.0, 2.0))
    assert (t12, s12) == pytest.approx((0.5, 8.0))
    assert (t24, s24) == pytest.approx((1.0, 14.0))
    assert d0 == pytest.approx(45.0) and d24 == pytest.approx(45.0)

