"""Set Terrain: the selected meshes become the heightmap obstacle field, shown as a
preview object; bad input is reported and changes nothing."""
import bpy
import numpy as np
import pytest


def _snapshot():
    return (sorted(o.name for o in bpy.data.objects), sorted(m.name for m in bpy.data.meshes),
            [i.object.name for i in bpy.context.scene.snowfall.terrain_objects])


def test_set_terrain_builds_the_heightmap_preview(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path)
    terrain = tools.grid_object()
    terrain.location = (3.0, -2.0, 0.5)
    bpy.context.view_layer.update()
    assert bpy.ops.snowfall.set_terrain() == {"FINISHED"}
    props = scene.snowfall
    assert [i.object for i in props.terrain_objects] == [terrain]
    preview = props.heightmap_object
    assert preview is not None and preview.hide_render
    coords = np.array([tuple(v.co) for v in preview.data.vertices])
    world = tools.world_vertices(terrain)
    # The heightmap covers the terrain's XY box at its resolution, with its heights.
    assert len(coords) == 24 * 19  # 10 x 8 m at 24 nodes along the longer side
    np.testing.assert_allclose(coords[:, :2].min(axis=0), world[:, :2].min(axis=0), atol=1e-5)
    assert coords[:, 0].max() == pytest.approx(world[:, 0].max(), abs=1e-4)
    assert coords[:, 2].min() == pytest.approx(world[:, 2].min(), abs=1e-3)
    assert coords[:, 2].max() == pytest.approx(world[:, 2].max(), abs=0.1)
    assert len(preview.data.polygons) == 23 * 18

    # Setting it again replaces the preview instead of piling them up.
    tools.select_only(terrain)
    bpy.ops.snowfall.set_terrain()
    assert sum(o.name.startswith("Snowfall Heightmap") for o in bpy.data.objects) == 1


def _points_object():
    mesh = bpy.data.meshes.new("Points")
    mesh.vertices.add(3)
    mesh.vertices.foreach_set("co", [0, 0, 0, 1, 0, 0, 0, 1, 0])
    obj = bpy.data.objects.new("Points", mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def _empty_object():
    obj = bpy.data.objects.new("Empty", None)
    bpy.context.scene.collection.objects.link(obj)
    return obj


@pytest.mark.parametrize("case, message", [
    ("nothing selected", "no terrain object is selected"),
    ("non-mesh object", "is not a mesh"),
    ("mesh without faces", "has no faces"),
])
def test_bad_terrain_is_reported_and_changes_nothing(addon, tools, tmp_path, case, message):
    tools.small_settings(addon, tmp_path)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    if case == "nothing selected":
        tools.select_only()
    elif case == "non-mesh object":
        tools.select_only(_empty_object())
    else:
        tools.select_only(_points_object())
    before = _snapshot()
    with pytest.raises(RuntimeError, match=message):
        bpy.ops.snowfall.set_terrain()
    assert _snapshot() == before
    assert [i.object for i in addon.snowfall.terrain_objects] == [terrain]
