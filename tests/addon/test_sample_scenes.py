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
        # headings: from 270 (west) to 250 degrees (Wind From, stored as float32 radians)
        assert keys[0][2] == pytest.approx(0.0, abs=1e-4) and keys[-1][2] == pytest.approx(20.0)


def test_porous_fence_scene_builds_and_bakes_with_its_fence(addon, tmp_path):
    """The porous_fence scene: the snow_fence scene's ground and layout with the fence a
    vertical plane of its own (no thickness, with a material) in the "Porous Fences"
    collection, set as the scene's fences at porosity 0.5; the bake takes it."""
    from snowfall.operators.bake import read_meta, scene_cache_folder
    from snowfall.sample_scenes.build import SCENES

    assert "porous_fence" in SCENES
    terrain = build("porous_fence", frames=3, flakes=20_000, resolution=33)
    scene = bpy.context.scene
    props = scene.snowfall
    assert [i.object for i in props.terrain_objects] == [terrain]
    assert terrain.name == "Porous Fence Ground" and scene.camera is not None
    assert {v.co.z for v in terrain.data.vertices} == {0.0}            # flat ground
    collection = props.fence_collection
    assert collection is not None and collection.name == "Porous Fences"
    assert scene.collection.children.get(collection.name) == collection
    assert props.fence_porosity == pytest.approx(0.5)
    (fence,) = collection.all_objects
    assert fence.type == "MESH" and fence not in [i.object for i in props.terrain_objects]
    assert fence.data.materials and fence.data.materials[0] is not None
    assert not fence.hide_render
    x = {round(v.co.x, 6) for v in fence.data.vertices}
    z = [v.co.z for v in fence.data.vertices]
    assert x == {-9.75} and (min(z), max(z)) == pytest.approx((0.0, 2.0))   # a vertical plane
    props.heightmap_resolution = 32
    props.wind_cell_size = 0.0
    props.wind_resolution = 16
    props.sky_height = 1.0                # flakes reach the ground within 3 frames
    props.backend = "cpu"
    props.cache_folder = str(tmp_path)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2, 3]
    assert snow_surface.read_depth_frame(3).max() > 0.0
    meta = read_meta(scene_cache_folder(str(tmp_path), scene))
    assert meta["fences"] == [{"porosity": pytest.approx(0.5), "triangles": 2}]


@pytest.mark.parametrize("name", ["box_test", "mountain_valley", "snow_fence"])
def test_sample_terrains_are_dressed_so_bare_ground_shows(addon, name):
    """Every face of a sample terrain has a ground material far darker than the snow
    (bare, scoured ground reads in a render); the box test's block and the solid fence
    have their own (concrete) material on exactly the faces that rise off the ground."""
    import numpy as np

    terrain = build(name, frames=3, flakes=1000, resolution=33)
    mesh = terrain.data
    assert len(mesh.materials) == (1 if name == "mountain_valley" else 2)
    ground = mesh.materials[0]
    ramp = next(n for n in ground.node_tree.nodes if n.type == "VALTORGB")
    for element in ramp.color_ramp.elements:   # far darker than the snow's 0.9 albedo
        assert max(element.color[:3]) < 0.3
    principled = next(n for n in ground.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
    assert principled.inputs["Base Color"].links[0].from_node == ramp
    index = np.array([p.material_index for p in mesh.polygons])
    if name != "mountain_valley":
        raised = np.array([max(mesh.vertices[v].co.z for v in p.vertices) > 0.05
                           for p in mesh.polygons])
        assert raised.any() and (~raised).any()
        np.testing.assert_array_equal(index, raised.astype(int))
        assert "Block" in mesh.materials[1].name
    else:
        assert (index == 0).all()
