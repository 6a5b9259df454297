"""Heavy work is estimated first and refused when it would not fit in memory (Set Terrain
at a huge heightmap resolution, a bake or a wind preview too big for the machine); the
terrain is read at the bake's first frame, a terrain that moves during the frame range is
refused unless Terrain at First Frame is on, and terrains with Subdivision or Geometry
Nodes modifiers are baked from their evaluated mesh."""
import bpy
import numpy as np
import pytest

from snowfall.operators import estimates, set_terrain
from snowfall.operators.scene_io import read_terrain
from snowfall.snow_addon import backend as backend_module


def test_set_terrain_refuses_a_heightmap_that_does_not_fit(addon, tools, monkeypatch):
    scene = addon
    terrain = tools.grid_object(size=(100.0, 80.0))
    scene.snowfall.heightmap_resolution = 8192
    monkeypatch.setattr(estimates, "available_memory", lambda: 512 * 1024**2)
    with pytest.raises(RuntimeError) as error:
        bpy.ops.snowfall.set_terrain()
    text = str(error.value)
    assert "heightmap_resolution: a 8192 x 6554 heightmap" in text, text
    assert "512 MiB of memory are available" in text and "heightmap_resolution <=" in text
    assert len(scene.snowfall.terrain_objects) == 0               # nothing changed
    assert bpy.data.objects.get(set_terrain.PREVIEW_NAME) is None
    suggested = int(text.rsplit("heightmap_resolution <= ", 1)[1].split(")")[0])
    scene.snowfall.heightmap_resolution = min(suggested, 256)
    assert bpy.ops.snowfall.set_terrain() == {"FINISHED"}
    assert scene.snowfall.terrain_objects[0].object == terrain
    needed, seconds = estimates.check_set_terrain(bpy.context, [terrain])
    assert 0 < needed < 512 * 1024**2 and seconds > 0


@pytest.mark.parametrize("what", ["bake", "preview_wind"])
def test_bake_and_preview_refuse_what_does_not_fit(addon, tools, tmp_path, monkeypatch, what):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache")
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    # Just enough for the heightmap, not for the wind (and flakes) on top.
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: 40 * 1024)
    with pytest.raises(RuntimeError) as error:
        getattr(bpy.ops.snowfall, what)()
    text = str(error.value)
    assert "more than fits in cpu memory" in text, text
    assert not scene.snowfall.has_bake and bpy.data.objects.get("Snowfall Flakes") is None


def _animated_terrain(tools):
    terrain = tools.grid_object(bump=1.0)
    terrain.location.z = 0.0
    terrain.keyframe_insert("location", frame=1)
    terrain.location.z = 2.0
    terrain.keyframe_insert("location", frame=4)
    return terrain


def test_a_moving_terrain_is_read_at_the_first_frame_or_refused(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache", frames=4)
    terrain = _animated_terrain(tools)
    scene.frame_set(3)                          # the timeline shows another frame
    with pytest.raises(RuntimeError, match="terrain_at_first_frame: the terrain 'Terrain' "
                                           "moves or changes between frames 1 and"):
        bpy.ops.snowfall.set_terrain()
    scene.snowfall.terrain_at_first_frame = True
    assert bpy.ops.snowfall.set_terrain() == {"FINISHED"}
    assert scene.frame_current == 3
    read = read_terrain(bpy.context, [terrain])
    scene.frame_set(1)
    np.testing.assert_allclose(read.vertices, tools.world_vertices(terrain), atol=1e-6)
    scene.frame_set(3)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert scene.frame_current == 3
    scene.snowfall.terrain_at_first_frame = False
    with pytest.raises(RuntimeError, match="terrain_at_first_frame"):
        bpy.ops.snowfall.bake()
    assert scene.snowfall.has_bake                # the refused bake changed nothing

    # A still terrain with a time-dependent kind of modifier is sampled, not refused.
    terrain.animation_data_clear()
    terrain.location.z = 0.0
    terrain.modifiers.new("Wave", "WAVE").height = 0.0
    assert bpy.ops.snowfall.set_terrain() == {"FINISHED"}


def _subdivide_nodes(obj):
    group = bpy.data.node_groups.new("Subdivide", "GeometryNodeTree")
    if hasattr(group, "interface"):
        group.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
        group.interface.new_socket("Geometry", in_out="OUTPUT",
                                   socket_type="NodeSocketGeometry")
    else:                                                      # pragma: no cover (3.x)
        group.inputs.new("NodeSocketGeometry", "Geometry")
        group.outputs.new("NodeSocketGeometry", "Geometry")
    source = group.nodes.new("NodeGroupInput")
    sink = group.nodes.new("NodeGroupOutput")
    subdivide = group.nodes.new("GeometryNodeSubdivideMesh")
    subdivide.inputs["Level"].default_value = 1
    group.links.new(source.outputs[0], subdivide.inputs["Mesh"])
    group.links.new(subdivide.outputs["Mesh"], sink.inputs[0])
    modifier = obj.modifiers.new("Subdivide", "NODES")
    modifier.node_group = group
    return modifier


@pytest.mark.parametrize("kind", ["subdivision", "geometry nodes"])
def test_terrains_with_modifiers_bake_from_their_evaluated_mesh(addon, tools, tmp_path, kind):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache")
    terrain = tools.grid_object(cells=(8, 6))
    if kind == "subdivision":
        terrain.modifiers.new("Subdivision", "SUBSURF").levels = 1
    else:
        _subdivide_nodes(terrain)
    assert bpy.ops.snowfall.set_terrain() == {"FINISHED"}
    read = read_terrain(bpy.context, [terrain])
    assert len(read.vertices) > len(terrain.data.vertices)        # the evaluated mesh
    evaluated = terrain.evaluated_get(bpy.context.evaluated_depsgraph_get()).to_mesh()
    try:
        assert len(read.vertices) == len(evaluated.vertices)
    finally:
        terrain.evaluated_get(bpy.context.evaluated_depsgraph_get()).to_mesh_clear()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == scene.frame_end
