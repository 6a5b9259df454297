"""The sample scenes build, set their terrain and bake a few frames."""
import bpy
import pytest

from snowfall.operators import snow_output, snow_surface
from snowfall.sample_scenes.build import build


@pytest.mark.parametrize("name, terrain_name", [("box_test", "Box Test Terrain"),
                                                ("mountain_valley", "Valley Terrain")])
def test_sample_scene_builds_and_bakes(addon, tmp_path, name, terrain_name):
    # enough flakes that some land in 3 frames (the valley's fall from a 40 m sky takes
    # seconds; with 2000 flakes none may land that early)
    terrain = build(name, frames=3, flakes=20_000, resolution=33)
    scene = bpy.context.scene
    props = scene.snowfall
    assert [i.object for i in props.terrain_objects] == [terrain]
    assert terrain.name == terrain_name and scene.camera is not None
    assert props.heightmap_object is not None
    props.heightmap_resolution = 32
    props.wind_resolution = 8
    props.backend = "cpu"
    props.cache_folder = str(tmp_path)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2, 3]
    assert snow_surface.read_depth_frame(3).max() > 0.0
    assert snow_output.baked_frames(terrain) == []     # nothing per frame in the .blend
    if name == "mountain_valley":   # keyframed wind direction reaches the engine
        from snowfall.properties import to_snow_settings
        keys = to_snow_settings(props, scene).wind_keys
        assert keys[0][2] == pytest.approx(0.0) and keys[-1][2] == pytest.approx(20.0)
