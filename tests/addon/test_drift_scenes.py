"""The drift validation sample scenes (snow fence, ridge) build, set their terrain and bake
a few frames with snow on disk. Coarse grids keep it fast; the measuring itself is
benchmarks/drift_validation.py on the engine."""
import glob
import os

import bpy
import pytest
from mathutils import Vector

from snowfall.sample_scenes.build import SCENES, build
from snowfall.snow_addon import bake_cache


@pytest.mark.parametrize("name, terrain_name, obstacle_height", [
    ("snow_fence", "Snow Fence Terrain", 2.0),
    ("ridge", "Ridge Terrain", 20.0)])
def test_drift_scene_builds_and_bakes(addon, tmp_path, name, terrain_name, obstacle_height):
    assert name in SCENES
    terrain = build(name, frames=3, flakes=20_000, resolution=33)
    scene = bpy.context.scene
    props = scene.snowfall
    assert [i.object for i in props.terrain_objects] == [terrain]
    assert terrain.name == terrain_name and scene.camera is not None
    assert props.heightmap_object is not None
    # the storm of the validation: 10 m/s along +X with drift on
    # the heading toward +X (Wind From is stored as float32)
    assert props.wind_speed == pytest.approx(10.0)
    assert props.wind_direction == pytest.approx(0.0, abs=1e-4)
    assert props.drift_enabled
    z = [v.co.z for v in terrain.data.vertices]
    assert max(z) == pytest.approx(obstacle_height) and 0.0 <= min(z) < 0.1 * obstacle_height
    # the camera looks down at the obstacle (within 20 degrees of its view axis)
    camera = scene.camera
    forward = camera.matrix_world.to_quaternion() @ Vector((0.0, 0.0, -1.0))
    top = max(terrain.data.vertices, key=lambda v: v.co.z).co
    to_obstacle = (Vector((top.x, 0.0, 0.5 * obstacle_height)) - camera.location).normalized()
    assert forward.z < 0.0 and forward.dot(to_obstacle) > 0.94
    props.heightmap_resolution = 32
    props.wind_cell_size = 0.0
    props.wind_resolution = 16
    props.sky_height = 0.25 * obstacle_height   # flakes reach the ground within 3 frames
    props.backend = "cpu"
    props.cache_folder = str(tmp_path)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    files = sorted(glob.glob(os.path.join(str(tmp_path), "**", "depth_*.exr"), recursive=True))
    assert [os.path.basename(f) for f in files] == [bake_cache.depth_name(f) for f in (1, 2, 3)]
    depth = bake_cache.read_depth(files[-1])
    assert depth.shape[1] == 32 and depth.max() > 0.0
