"""Snow on the terrain: per-frame depth attributes, the Geometry Nodes modifier that shows
the current frame's depth as ``snow_depth`` and displaces the terrain by it, and the snow
material that blends to snow with depth.

Storage: each baked frame ``f`` is a float point attribute ``snow_depth_<f>`` (metres,
e.g. ``snow_depth_12``, ``snow_depth_-3``) on the terrain's own mesh, so it is saved in
the .blend. The modifier ("Snowfall Snow", node group "Snowfall Snow") builds the name
from the scene frame (clamped to the baked range), reads it with Named Attribute, stores
it as ``snow_depth`` and offsets the vertices up by it (world +Z). The material reads
``snow_depth`` with an Attribute node. All of it is plain Blender data: a baked file
renders without the add-on installed.
"""
from __future__ import annotations

import bpy
import numpy as np

from ..blender_compat import node_tree, set_modifier_input
from .scene_io import SNOW_MODIFIER_NAME

NODE_GROUP_NAME = "Snowfall Snow"
MATERIAL_NAME = "Snowfall Snow Material"
FRAME_ATTRIBUTE_PREFIX = "snow_depth_"
DEPTH_ATTRIBUTE = "snow_depth"
#: Depth (m) at which the material is fully snow-covered.
FULL_COVER_DEPTH = 0.02


def frame_attribute_name(frame: int) -> str:
    return f"{FRAME_ATTRIBUTE_PREFIX}{int(frame)}"


def _socket(group, name, in_out, socket_type):
    return group.interface.new_socket(name=name, in_out=in_out, socket_type=socket_type)


def ensure_snow_node_group() -> bpy.types.NodeTree:
    """The shared node group (built once per file)."""
    group = bpy.data.node_groups.get(NODE_GROUP_NAME)
    if group is not None and group.bl_idname == "GeometryNodeTree":
        return group
    group = bpy.data.node_groups.new(NODE_GROUP_NAME, "GeometryNodeTree")
    _socket(group, "Geometry", "INPUT", "NodeSocketGeometry")
    up = _socket(group, "Offset per Metre", "INPUT", "NodeSocketVector")
    up.default_value = (0.0, 0.0, 1.0)
    up.description = "Object-space offset of one metre of snow along world +Z"
    first = _socket(group, "First Frame", "INPUT", "NodeSocketFloat")
    last = _socket(group, "Last Frame", "INPUT", "NodeSocketFloat")
    first.default_value, last.default_value = 0.0, 0.0
    material = _socket(group, "Material", "INPUT", "NodeSocketMaterial")
    material.description = "Snow material (none: keep the terrain's own)"
    _socket(group, "Geometry", "OUTPUT", "NodeSocketGeometry")

    nodes, links = group.nodes, group.links
    group_in = nodes.new("NodeGroupInput")
    group_out = nodes.new("NodeGroupOutput")
    time = nodes.new("GeometryNodeInputSceneTime")
    rounded = nodes.new("ShaderNodeMath")
    rounded.operation = "ROUND"
    clamp = nodes.new("ShaderNodeClamp")
    to_string = nodes.new("FunctionNodeValueToString")
    to_string.inputs["Decimals"].default_value = 0
    prefix = nodes.new("FunctionNodeInputString")
    prefix.string = FRAME_ATTRIBUTE_PREFIX
    join = nodes.new("GeometryNodeStringJoin")
    named = nodes.new("GeometryNodeInputNamedAttribute")
    named.data_type = "FLOAT"
    store = nodes.new("GeometryNodeStoreNamedAttribute")
    store.data_type = "FLOAT"
    store.domain = "POINT"
    store.inputs["Name"].default_value = DEPTH_ATTRIBUTE
    offset = nodes.new("ShaderNodeVectorMath")
    offset.operation = "SCALE"
    set_position = nodes.new("GeometryNodeSetPosition")
    set_material = nodes.new("GeometryNodeSetMaterial")

    links.new(time.outputs["Frame"], rounded.inputs[0])
    links.new(rounded.outputs[0], clamp.inputs["Value"])
    links.new(group_in.outputs["First Frame"], clamp.inputs["Min"])
    links.new(group_in.outputs["Last Frame"], clamp.inputs["Max"])
    links.new(clamp.outputs["Result"], to_string.inputs["Value"])
    # Multi-input sockets join the most recently linked input first: link the suffix first.
    links.new(to_string.outputs["String"], join.inputs["Strings"])
    links.new(prefix.outputs["String"], join.inputs["Strings"])
    links.new(join.outputs["String"], named.inputs["Name"])
    links.new(group_in.outputs["Geometry"], store.inputs["Geometry"])
    links.new(named.outputs["Attribute"], store.inputs["Value"])
    links.new(store.outputs["Geometry"], set_position.inputs["Geometry"])
    links.new(group_in.outputs["Offset per Metre"], offset.inputs[0])
    links.new(named.outputs["Attribute"], offset.inputs["Scale"])
    links.new(offset.outputs["Vector"], set_position.inputs["Offset"])
    links.new(set_position.outputs["Geometry"], set_material.inputs["Geometry"])
    links.new(group_in.outputs["Material"], set_material.inputs["Material"])
    links.new(set_material.outputs["Geometry"], group_out.inputs["Geometry"])
    for index, node in enumerate((group_in, time, rounded, clamp, to_string, prefix, join,
                                  named, store, offset, set_position, set_material, group_out)):
        node.location = (220 * index, 0)
    return group


def ensure_snow_material() -> bpy.types.Material:
    """Rock blending to snow with depth: cover = smoothstep(0, FULL_COVER_DEPTH, snow_depth)."""
    material = bpy.data.materials.get(MATERIAL_NAME)
    if material is not None:
        return material
    material = bpy.data.materials.new(MATERIAL_NAME)
    tree = node_tree(material)
    nodes, links = tree.nodes, tree.links
    nodes.clear()
    output = nodes.new("ShaderNodeOutputMaterial")
    bsdf = nodes.new("ShaderNodeBsdfPrincipled")
    attribute = nodes.new("ShaderNodeAttribute")
    attribute.attribute_type = "GEOMETRY"
    attribute.attribute_name = DEPTH_ATTRIBUTE
    cover = nodes.new("ShaderNodeMapRange")
    cover.interpolation_type = "SMOOTHSTEP"
    cover.inputs["From Min"].default_value = 0.0
    cover.inputs["From Max"].default_value = FULL_COVER_DEPTH
    colour = nodes.new("ShaderNodeMix")
    colour.data_type = "RGBA"
    colour.inputs["A"].default_value = (0.16, 0.13, 0.10, 1.0)   # rock / soil
    colour.inputs["B"].default_value = (0.90, 0.93, 0.97, 1.0)   # snow
    rough = nodes.new("ShaderNodeMix")
    rough.data_type = "FLOAT"
    rough.inputs["A"].default_value = 0.9
    rough.inputs["B"].default_value = 0.45
    links.new(attribute.outputs["Fac"], cover.inputs["Value"])
    links.new(cover.outputs["Result"], colour.inputs["Factor"])
    links.new(cover.outputs["Result"], rough.inputs["Factor"])
    links.new(colour.outputs["Result"], bsdf.inputs["Base Color"])
    links.new(rough.outputs["Result"], bsdf.inputs["Roughness"])
    links.new(bsdf.outputs["BSDF"], output.inputs["Surface"])
    for index, node in enumerate((attribute, cover, colour, bsdf, output)):
        node.location = (250 * index, 0)
    rough.location = (500, -250)
    return material


def _input_identifier(group, name):
    for item in group.interface.items_tree:
        if getattr(item, "in_out", None) == "INPUT" and item.name == name:
            return item.identifier
    raise KeyError(name)


def snow_modifier(obj):
    return obj.modifiers.get(SNOW_MODIFIER_NAME)


def ensure_snow_modifier(obj, metres_per_unit: float):
    """The snow modifier on ``obj`` (last in the stack), set for the object's current
    transform and the scene's unit scale."""
    group = ensure_snow_node_group()
    modifier = snow_modifier(obj)
    if modifier is None:
        modifier = obj.modifiers.new(SNOW_MODIFIER_NAME, "NODES")
    modifier.node_group = group
    # A world offset (0, 0, d) is M3^-1 (0, 0, d) in object space; d metres = d / scale units.
    inverse = np.linalg.inv(np.array(obj.matrix_world, dtype=np.float64)[:3, :3])
    up = inverse @ np.array([0.0, 0.0, 1.0 / metres_per_unit])
    set_modifier_input(modifier, _input_identifier(group, "Offset per Metre"),
                       [float(x) for x in up])
    set_modifier_input(modifier, _input_identifier(group, "Material"), ensure_snow_material())
    return modifier


def set_baked_range(obj, first: int, last: int) -> None:
    modifier = snow_modifier(obj)
    group = modifier.node_group
    set_modifier_input(modifier, _input_identifier(group, "First Frame"), float(first))
    set_modifier_input(modifier, _input_identifier(group, "Last Frame"), float(last))
    obj.data.update()


def write_snow_frame(obj, frame: int, depth) -> None:
    """Store ``depth`` ((N,) metres, one per vertex of ``obj``'s mesh) for ``frame``."""
    depth = np.ascontiguousarray(depth, dtype=np.float32).reshape(-1)
    mesh = obj.data
    if depth.shape[0] != len(mesh.vertices):
        raise ValueError(f"{depth.shape[0]} depths for {len(mesh.vertices)} vertices")
    name = frame_attribute_name(frame)
    existing = mesh.attributes.get(name)
    if existing is not None:
        mesh.attributes.remove(existing)
    attribute = mesh.attributes.new(name, "FLOAT", "POINT")
    attribute.data.foreach_set("value", depth)


def read_snow_frame(obj, frame: int):
    """The stored depths (metres) of ``frame``, or None when it is not baked."""
    attribute = obj.data.attributes.get(frame_attribute_name(frame))
    if attribute is None:
        return None
    values = np.empty(len(attribute.data), dtype=np.float32)
    attribute.data.foreach_get("value", values)
    return values


def baked_frames(obj) -> list:
    frames = []
    for attribute in obj.data.attributes:
        name = attribute.name
        if name.startswith(FRAME_ATTRIBUTE_PREFIX):
            try:
                frames.append(int(name[len(FRAME_ATTRIBUTE_PREFIX):]))
            except ValueError:
                pass
    return sorted(frames)


def remove_frames_after(obj, frame: int) -> None:
    """Drop stored frames later than ``frame`` (a resumed bake rewrites them)."""
    for f in baked_frames(obj):
        if f > frame:
            mesh = obj.data
            mesh.attributes.remove(mesh.attributes[frame_attribute_name(f)])


def free_snow(obj) -> None:
    """Remove every stored frame and the snow modifier: the terrain is as before the bake."""
    remove_frames_after(obj, -(2**31))
    modifier = snow_modifier(obj)
    if modifier is not None:
        obj.modifiers.remove(modifier)


def evaluated_snow_depth(obj, depsgraph):
    """``snow_depth`` (metres) and world-space vertex positions (Blender units) of the
    evaluated terrain at the depsgraph's current frame."""
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        count = len(mesh.vertices)
        coords = np.empty(count * 3, dtype=np.float64)
        mesh.vertices.foreach_get("co", coords)
        attribute = mesh.attributes.get(DEPTH_ATTRIBUTE)
        depth = np.zeros(count, dtype=np.float32)
        if attribute is not None:
            attribute.data.foreach_get("value", depth)
    finally:
        evaluated.to_mesh_clear()
    matrix = np.array(obj.matrix_world, dtype=np.float64)
    world = coords.reshape(-1, 3) @ matrix[:3, :3].T + matrix[:3, 3]
    return depth, world
