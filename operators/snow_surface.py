"""Snow as a surface read from the bake folder: one OpenEXR heightmap per frame at the
simulation's resolution, turned into a mesh by a Geometry Nodes modifier (plain Blender
data: a baked file renders without the add-on, as long as the cache folder travels with it).

Files: ``<cache folder>/<scene>/snow/depth_<frame:06d>.exr``, float32, one pixel per
heightmap node (pixel (i, j) from the bottom-left is node [j, i]): R = snow depth (m),
G = ground height under the snow (m; the heightmap, -1e30 where there is no surface),
B = 0.

Object "Snowfall Snow Surface": an empty mesh whose modifier ("Snowfall Snow Surface",
node group of the same name) builds a grid of the heightmap's nodes, samples the frame's
image (Image Texture, closest pixel, the image an image *sequence* whose frame is the scene
frame clamped to the baked range), puts each node at ground + depth (converted to scene
units), stores ``snow_depth`` on the points for the material, and deletes the nodes
without ground and the faces whose corners all have less than ``Min Depth`` of snow.
Edges whose ground rises steeper than ``Max Ground Slope`` (a wall, a fence, a cliff at
the heightmap's spacing) are cut with their faces: snow cannot lie there, and a surface
spanning them would wrap walls in a skin of snow; the terrain's own faces show instead.
The .blend holds only this node group, the image's path and a few numbers: it does not
grow with the frame count, and the snow is as fine as the simulation, whatever the terrain
mesh's resolution.
"""
from __future__ import annotations

import os

import bpy

from ..blender_compat import (get_modifier_input, principled_material, set_modifier_input,
                              transparent_where)
from ..snow_addon import bake_cache
from . import snow_output

OBJECT_NAME = "Snowfall Snow Surface"
NODE_GROUP_NAME = "Snowfall Snow Surface"
IMAGE_NAME = "Snowfall Snow Depth"
MATERIAL_NAME = "Snowfall Snow Surface"
DEPTH_ATTRIBUTE = "snow_depth"
#: The ground height (m) on the nodes while the surface is built (removed at its end).
GROUND_ATTRIBUTE = ".snowfall_ground"
#: Nodes with less snow than this (m) are left out of the surface (the terrain shows).
MIN_DEPTH = 0.001
#: Snow this deep (m) hides the ground; thinner snow fades toward transparent at MIN_DEPTH.
FULL_COVER_DEPTH = 0.01
#: Surface edges whose ground is steeper than this (degrees) are cut with their faces.
MAX_GROUND_SLOPE = 60.0
#: Ground heights below this are "no surface" nodes (snow_addon.grid.OPEN_HEIGHT = -1e30).
NO_GROUND = -1e29


def depth_file_name(frame: int) -> str:
    return f"depth_{int(frame):06d}.exr"


def _socket(group, name, in_out, socket_type, default=None, description=""):
    socket = snow_output._socket(group, name, in_out, socket_type)
    if default is not None:
        socket.default_value = default
    socket.description = description
    return socket


def _typed(sockets, socket_type):
    """The enabled socket of ``socket_type`` (4.2 keeps one socket per type on some nodes)."""
    return next(s for s in sockets if s.enabled and s.type == socket_type)


def _raise_nodes(new, links, geometry, metres, units):
    """Set Position nodes that lift ``geometry`` (a socket) by ``metres`` (a field socket, m)
    times ``units`` (scene units per metre): (multiply, combine, set position); the set
    position's output is the raised geometry."""
    to_units = new("ShaderNodeMath")
    to_units.operation = "MULTIPLY"
    up = new("ShaderNodeCombineXYZ")
    set_position = new("GeometryNodeSetPosition")
    links.new(metres, to_units.inputs[0])
    links.new(units, to_units.inputs[1])
    links.new(to_units.outputs[0], up.inputs["Z"])
    links.new(geometry, set_position.inputs["Geometry"])
    links.new(up.outputs["Vector"], set_position.inputs["Offset"])
    return to_units, up, set_position


def ensure_node_group():
    group = bpy.data.node_groups.get(NODE_GROUP_NAME)
    if group is not None and group.bl_idname == "GeometryNodeTree":
        if any(item.name == "Max Ground Slope" for item in group.interface.items_tree):
            return group
        group.name = NODE_GROUP_NAME + " (before walls were cut)"   # a file baked earlier
    group = bpy.data.node_groups.new(NODE_GROUP_NAME, "GeometryNodeTree")
    _socket(group, "Geometry", "INPUT", "NodeSocketGeometry")
    _socket(group, "Image", "INPUT", "NodeSocketImage")
    _socket(group, "First Frame", "INPUT", "NodeSocketFloat", 1.0)
    _socket(group, "Last Frame", "INPUT", "NodeSocketFloat", 1.0)
    _socket(group, "Origin", "INPUT", "NodeSocketVector", (0.0, 0.0, 0.0),
            "World position of heightmap node [0, 0] (scene units)")
    _socket(group, "Size", "INPUT", "NodeSocketVector", (1.0, 1.0, 0.0),
            "Extent of the heightmap from its first to its last node (scene units)")
    _socket(group, "Columns", "INPUT", "NodeSocketInt", 2, "Heightmap nodes along X")
    _socket(group, "Rows", "INPUT", "NodeSocketInt", 2, "Heightmap nodes along Y")
    _socket(group, "Units per Metre", "INPUT", "NodeSocketFloat", 1.0)
    _socket(group, "Min Depth", "INPUT", "NodeSocketFloat", MIN_DEPTH,
            "Nodes with less snow (m) are left out")
    _socket(group, "Max Ground Slope", "INPUT", "NodeSocketFloat", MAX_GROUND_SLOPE,
            "Edges whose ground is steeper (degrees) are cut: walls and cliffs get no snow skin")
    _socket(group, "Material", "INPUT", "NodeSocketMaterial")
    _socket(group, "Geometry", "OUTPUT", "NodeSocketGeometry")

    nodes, links = group.nodes, group.links
    new = nodes.new
    group_in, group_out = new("NodeGroupInput"), new("NodeGroupOutput")
    time = new("GeometryNodeInputSceneTime")
    rounded = new("ShaderNodeMath")
    rounded.operation = "ROUND"
    clamp = new("ShaderNodeClamp")
    grid = new("GeometryNodeMeshGrid")
    size_xyz = new("ShaderNodeSeparateXYZ")
    half = new("ShaderNodeVectorMath")
    half.operation = "MULTIPLY_ADD"
    half.inputs[1].default_value = (0.5, 0.5, 0.0)
    move = new("GeometryNodeTransform")
    texture = new("GeometryNodeImageTexture")
    texture.interpolation = "Closest"
    texture.extension = "EXTEND"
    channels = new("FunctionNodeSeparateColor")
    # The image is sampled twice (once per stored channel), not once per node that needs a
    # channel: depth and ground are stored on the points and read back.
    store = new("GeometryNodeStoreNamedAttribute")
    store.data_type, store.domain = "FLOAT", "POINT"
    store.inputs["Name"].default_value = DEPTH_ATTRIBUTE
    store_ground = new("GeometryNodeStoreNamedAttribute")
    store_ground.data_type, store_ground.domain = "FLOAT", "POINT"
    store_ground.inputs["Name"].default_value = GROUND_ATTRIBUTE
    depth = new("GeometryNodeInputNamedAttribute")
    depth.data_type = "FLOAT"
    depth.inputs["Name"].default_value = DEPTH_ATTRIBUTE
    ground = new("GeometryNodeInputNamedAttribute")
    ground.data_type = "FLOAT"
    ground.inputs["Name"].default_value = GROUND_ATTRIBUTE
    no_ground = new("FunctionNodeCompare")
    no_ground.data_type, no_ground.operation = "FLOAT", "LESS_THAN"
    no_ground.inputs[1].default_value = NO_GROUND
    delete = new("GeometryNodeDeleteGeometry")
    delete.domain = "POINT"
    thin = new("FunctionNodeCompare")
    thin.data_type, thin.operation = "FLOAT", "LESS_THAN"
    thin_nodes = new("GeometryNodeFieldOnDomain")
    thin_nodes.domain, thin_nodes.data_type = "POINT", "BOOLEAN"
    delete_thin = new("GeometryNodeDeleteGeometry")
    delete_thin.domain, delete_thin.mode = "FACE", "ALL"
    # Cliff edges: |dz| / |edge| of the ground above sin(Max Ground Slope).
    edge_ends = new("GeometryNodeInputMeshEdgeVertices")
    edge_vector = new("ShaderNodeVectorMath")
    edge_vector.operation = "SUBTRACT"
    edge_direction = new("ShaderNodeVectorMath")
    edge_direction.operation = "NORMALIZE"
    edge_xyz = new("ShaderNodeSeparateXYZ")
    edge_rise = new("ShaderNodeMath")
    edge_rise.operation = "ABSOLUTE"
    slope_radians = new("ShaderNodeMath")
    slope_radians.operation = "RADIANS"
    slope_sine = new("ShaderNodeMath")
    slope_sine.operation = "SINE"
    cliff = new("FunctionNodeCompare")
    cliff.data_type, cliff.operation = "FLOAT", "GREATER_THAN"
    cut_cliffs = new("GeometryNodeDeleteGeometry")
    cut_cliffs.domain, cut_cliffs.mode = "EDGE", "EDGE_FACE"
    drop_ground = new("GeometryNodeRemoveAttribute")
    drop_ground.inputs["Name"].default_value = GROUND_ATTRIBUTE
    smooth = new("GeometryNodeSetShadeSmooth")
    set_material = new("GeometryNodeSetMaterial")

    # Frame: the scene frame, rounded, clamped to the baked range (the sequence's files).
    links.new(time.outputs["Frame"], rounded.inputs[0])
    links.new(rounded.outputs[0], clamp.inputs["Value"])
    links.new(group_in.outputs["First Frame"], clamp.inputs["Min"])
    links.new(group_in.outputs["Last Frame"], clamp.inputs["Max"])
    # The grid of heightmap nodes, centred on Origin + Size / 2.
    links.new(group_in.outputs["Size"], size_xyz.inputs[0])
    links.new(size_xyz.outputs["X"], grid.inputs["Size X"])
    links.new(size_xyz.outputs["Y"], grid.inputs["Size Y"])
    links.new(group_in.outputs["Columns"], grid.inputs["Vertices X"])
    links.new(group_in.outputs["Rows"], grid.inputs["Vertices Y"])
    links.new(group_in.outputs["Size"], half.inputs[0])
    links.new(group_in.outputs["Origin"], half.inputs[2])
    links.new(grid.outputs["Mesh"], move.inputs["Geometry"])
    links.new(half.outputs["Vector"], move.inputs["Translation"])
    # Depth and ground of each node from the frame's image, stored on the nodes.
    links.new(group_in.outputs["Image"], texture.inputs["Image"])
    links.new(grid.outputs["UV Map"], texture.inputs["Vector"])
    links.new(clamp.outputs["Result"], texture.inputs["Frame"])
    links.new(texture.outputs["Color"], channels.inputs["Color"])
    links.new(move.outputs["Geometry"], store.inputs["Geometry"])
    links.new(channels.outputs["Red"], store.inputs["Value"])
    links.new(store.outputs["Geometry"], store_ground.inputs["Geometry"])
    links.new(channels.outputs["Green"], store_ground.inputs["Value"])
    # Nodes on the ground first; then the nodes without ground and the faces whose corners
    # all have less than Min Depth of snow go (a face with one snowy corner stays: the
    # material fades it to its thin corners, so a bare patch has no hard edge); the cliff
    # edges are cut from what is left, and the nodes raised by the snow's depth.
    units = group_in.outputs["Units per Metre"]
    ground_to_units, ground_up, set_ground = _raise_nodes(
        new, links, store_ground.outputs["Geometry"], ground.outputs["Attribute"], units)
    links.new(ground.outputs["Attribute"], no_ground.inputs[0])
    links.new(set_ground.outputs["Geometry"], delete.inputs["Geometry"])
    links.new(no_ground.outputs["Result"], delete.inputs["Selection"])
    links.new(depth.outputs["Attribute"], thin.inputs[0])
    links.new(group_in.outputs["Min Depth"], thin.inputs[1])
    links.new(thin.outputs["Result"], _typed(thin_nodes.inputs, "BOOLEAN"))
    links.new(delete.outputs["Geometry"], delete_thin.inputs["Geometry"])
    links.new(_typed(thin_nodes.outputs, "BOOLEAN"), delete_thin.inputs["Selection"])
    links.new(edge_ends.outputs["Position 2"], edge_vector.inputs[0])
    links.new(edge_ends.outputs["Position 1"], edge_vector.inputs[1])
    links.new(edge_vector.outputs["Vector"], edge_direction.inputs[0])
    links.new(edge_direction.outputs["Vector"], edge_xyz.inputs[0])
    links.new(edge_xyz.outputs["Z"], edge_rise.inputs[0])
    links.new(group_in.outputs["Max Ground Slope"], slope_radians.inputs[0])
    links.new(slope_radians.outputs[0], slope_sine.inputs[0])
    links.new(edge_rise.outputs[0], cliff.inputs[0])
    links.new(slope_sine.outputs[0], cliff.inputs[1])
    links.new(delete_thin.outputs["Geometry"], cut_cliffs.inputs["Geometry"])
    links.new(cliff.outputs["Result"], cut_cliffs.inputs["Selection"])
    to_units, up, set_position = _raise_nodes(
        new, links, cut_cliffs.outputs["Geometry"], depth.outputs["Attribute"], units)
    links.new(set_position.outputs["Geometry"], drop_ground.inputs["Geometry"])
    links.new(drop_ground.outputs["Geometry"], smooth.inputs["Geometry"])
    links.new(smooth.outputs["Geometry"], set_material.inputs["Geometry"])
    links.new(group_in.outputs["Material"], set_material.inputs["Material"])
    links.new(set_material.outputs["Geometry"], group_out.inputs["Geometry"])
    for index, node in enumerate((group_in, time, rounded, clamp, size_xyz, grid, half, move,
                                  texture, channels, store, store_ground, depth, ground,
                                  ground_to_units, ground_up, set_ground, no_ground, delete,
                                  thin, thin_nodes, delete_thin, edge_ends, edge_vector,
                                  edge_direction, edge_xyz, edge_rise, slope_radians,
                                  slope_sine, cliff, cut_cliffs, to_units, up, set_position,
                                  drop_ground, smooth, set_material, group_out)):
        node.location = (200 * index, 0)
    return group


def ensure_material():
    """White, soft snow (Principled BSDF with a little subsurface scattering) that covers
    the ground fully from ``FULL_COVER_DEPTH`` of snow and fades to transparent toward
    ``MIN_DEPTH``: a scoured slope shows its ground through a dusting, and the edge of a
    bare patch is soft. The depth is the surface's ``snow_depth`` attribute; the value
    node "Full Cover Depth" (m) sets the fade."""
    material = bpy.data.materials.get(MATERIAL_NAME)
    if material is not None:
        if material.node_tree is not None and material.node_tree.nodes.get("Full Cover Depth"):
            return material
        material.name = MATERIAL_NAME + " (before the cover fade)"   # a file baked earlier
    material, principled, output = principled_material(MATERIAL_NAME, (0.90, 0.93, 0.97, 1.0))
    if principled is None or output is None:
        return material
    nodes, links = material.node_tree.nodes, material.node_tree.links
    for name, value in (("Roughness", 0.45), ("Subsurface Weight", 0.3), ("Sheen Weight", 0.3)):
        if name in principled.inputs:
            principled.inputs[name].default_value = value
    depth = nodes.new("ShaderNodeAttribute")
    depth.attribute_type, depth.attribute_name = "GEOMETRY", DEPTH_ATTRIBUTE
    full = nodes.new("ShaderNodeValue")
    full.name = full.label = "Full Cover Depth"
    full.outputs[0].default_value = FULL_COVER_DEPTH
    cover = nodes.new("ShaderNodeMapRange")
    cover.interpolation_type = "SMOOTHSTEP"
    cover.clamp = True
    cover.inputs["From Min"].default_value = MIN_DEPTH
    links.new(depth.outputs["Fac"], cover.inputs["Value"])
    links.new(full.outputs[0], cover.inputs["From Max"])
    transparent_where(material, principled, output, cover.outputs["Result"], transparent_at=0)
    return material


def ensure_image(snow_dir: str, first_frame: int):
    """The image sequence of the depth files. ``snow_dir``: the folder as the .blend should
    store it (``//``-relative when the cache folder is)."""
    path = snow_dir.rstrip("/\\") + "/" + depth_file_name(first_frame)
    image = bpy.data.images.get(IMAGE_NAME)
    if image is None:
        image = bpy.data.images.new(IMAGE_NAME, 1, 1, float_buffer=True)
    image.source = "FILE"
    image.filepath = path
    image.source = "SEQUENCE"
    image.colorspace_settings.name = "Non-Color"
    image.reload()
    return image


def ensure_surface(scene, snow_dir: str, grid, units_per_metre: float, first_frame: int,
                   last_frame: int):
    """The snow surface object (created, or updated for a new bake). ``grid``: the engine's
    HeightmapGrid (metres)."""
    obj = bpy.data.objects.get(OBJECT_NAME)
    if obj is None:
        obj = bpy.data.objects.new(OBJECT_NAME, bpy.data.meshes.new(OBJECT_NAME))
    if obj.name not in scene.collection.all_objects:
        scene.collection.objects.link(obj)
    obj.matrix_world.identity()
    modifier = obj.modifiers.get(NODE_GROUP_NAME) or obj.modifiers.new(NODE_GROUP_NAME, "NODES")
    modifier.node_group = ensure_node_group()
    image = ensure_image(snow_dir, first_frame)
    group = modifier.node_group
    values = {"Image": image, "Origin": [grid.x0 * units_per_metre, grid.y0 * units_per_metre, 0.0],
              "Size": [(grid.nx - 1) * grid.spacing * units_per_metre,
                       (grid.ny - 1) * grid.spacing * units_per_metre, 0.0],
              "Columns": int(grid.nx), "Rows": int(grid.ny),
              "Units per Metre": float(units_per_metre), "Material": ensure_material()}
    for name, value in values.items():
        set_modifier_input(modifier, snow_output._input_identifier(group, name), value)
    set_range(obj, first_frame, last_frame)
    return obj


def set_range(obj, first: int, last: int) -> None:
    modifier = obj.modifiers[NODE_GROUP_NAME]
    group = modifier.node_group
    set_modifier_input(modifier, snow_output._input_identifier(group, "First Frame"), float(first))
    set_modifier_input(modifier, snow_output._input_identifier(group, "Last Frame"), float(last))
    obj.update_tag()


def shown_range(obj=None):
    """(first, last) frame the snow surface shows, or None when there is no surface."""
    obj = obj or bpy.data.objects.get(OBJECT_NAME)
    modifier = obj.modifiers.get(NODE_GROUP_NAME) if obj is not None else None
    if modifier is None or modifier.node_group is None:
        return None
    group = modifier.node_group
    return tuple(int(round(get_modifier_input(
        modifier, snow_output._input_identifier(group, name))))
        for name in ("First Frame", "Last Frame"))


def depth_file(frame: int) -> str | None:
    """The absolute path of ``frame``'s depth file as the snow surface's image names it
    (None without the image)."""
    image = bpy.data.images.get(IMAGE_NAME)
    if image is None:
        return None
    folder = os.path.dirname(bpy.path.abspath(image.filepath))
    return os.path.join(folder, depth_file_name(frame))


def baked_frames() -> list:
    """The frames the snow surface shows whose depth file is on disk (the counterpart of
    ``snow_output.baked_frames`` for the per-frame attribute form)."""
    shown = shown_range()
    if shown is None:
        return []
    return [frame for frame in range(shown[0], shown[1] + 1)
            if os.path.isfile(depth_file(frame) or "")]


def read_depth_frame(frame: int):
    """The snow depth grid (float32 (ny, nx), metres) the surface shows at ``frame``, read
    from its file; None when the frame is not baked."""
    if frame not in baked_frames():
        return None
    return bake_cache.read_depth(depth_file(frame))


def free_surface() -> None:
    obj = bpy.data.objects.get(OBJECT_NAME)
    if obj is not None:
        mesh = obj.data
        bpy.data.objects.remove(obj)
        if mesh is not None and mesh.users == 0:
            bpy.data.meshes.remove(mesh)
    image = bpy.data.images.get(IMAGE_NAME)
    if image is not None:
        bpy.data.images.remove(image)


def evaluated_surface(depsgraph):
    """(positions (N,3) scene units, snow_depth (N,) m) of the evaluated snow surface."""
    import numpy as np

    obj = bpy.data.objects[OBJECT_NAME].evaluated_get(depsgraph)
    mesh = obj.to_mesh()
    try:
        count = len(mesh.vertices)
        positions = np.empty(count * 3, np.float32)
        mesh.vertices.foreach_get("co", positions)
        depth = np.zeros(count, np.float32)
        attribute = mesh.attributes.get(DEPTH_ATTRIBUTE)
        if attribute is not None and count:
            attribute.data.foreach_get("value", depth)
    finally:
        obj.to_mesh_clear()
    return positions.reshape(-1, 3), depth


def snow_folder_for_blend(cache_folder: str, scene, snow_dir_name: str = "snow") -> str:
    """The snow folder as the .blend stores it: ``//``-relative when the cache folder is."""
    raw = cache_folder.strip()
    scene_dir = bpy.path.clean_name(scene.name)
    if raw.startswith("//"):
        return raw.rstrip("/\\") + "/" + scene_dir + "/" + snow_dir_name + "/"
    return os.path.join(os.path.normpath(bpy.path.abspath(raw)), scene_dir, snow_dir_name) + os.sep
