"""Baked flakes as a Geometry Nodes bake on disk (the flake cache under Blender 4.2 to 4.5).

An object (an empty mesh) carries a Geometry Nodes modifier whose group starts with a Bake
node reading the bake folder (``bake_mode`` ANIMATION, on disk, a custom folder, relative to
the .blend where the cache folder is); snow_addon/formats/gn_bake.py writes the folder on the bake's writer
thread. The nodes after the Bake node decode the velocity planes into the ``velocity``
attribute (units/s: Cycles' motion blur of a point cloud extrapolates from it, so a flake
that respawns is blurred along its new velocity and no streak is drawn), set every point's
radius (random per flake, as the particle system's size and size randomness) and the snow
material, and drop the helper attributes. Plain Blender (a render farm) reads and renders
it: the .blend holds the node group and the folder's path, the folder travels with it.

Blender lists a bake folder's frames once per modifier runtime (the first evaluation), so
the modifier stays disabled while a bake writes and is re-created, enabled, when the bake
finishes (``finish``); opening a saved .blend builds a new runtime that lists the folder.
"""
from __future__ import annotations

import os

import bpy
import numpy as np

from .. import blender_compat
from ..snow_addon.errors import SnowInputError
from ..snow_addon.formats import gn_bake
from .flake_material import ensure_flake_material

MODIFIER_NAME = "SnowfallFlakesGN"
GROUP_NAME = "SnowfallFlakesGN"
BAKE_NODE_NAME = "Snowfall Flake Bake"
RANDOM_NODE_NAME = "Snowfall Flake Radius"
#: The object's custom property holding the bake folder as given (``//``-relative or absolute;
#: properties.groups.pin_legacy_cache_folders reads it too).
BAKE_DIR_PROPERTY = "snowfall_flake_bake_dir"
#: The radius's random stream (any fixed number: the same sizes on every machine).
RADIUS_SEED = 7


def is_gn_flakes(obj) -> bool:
    """Whether ``obj`` carries the flakes as a Geometry Nodes bake (not a particle system)."""
    return obj is not None and _modifier(obj) is not None


def _modifier(obj):
    modifier = obj.modifiers.get(MODIFIER_NAME)
    return modifier if modifier is not None and modifier.type == 'NODES' else None


def ensure_flakes(scene, name: str, bake_dir: str, flake_size: float = 0.004,
                  size_random: float = 0.67):
    """Create or reuse the flakes object ``name`` reading the bake folder ``bake_dir``
    (absolute or ``//``-relative); its modifier is left disabled until ``finish``."""
    if not (np.isfinite(flake_size) and flake_size > 0.0):
        raise SnowInputError("flake_size", f"must be a positive length in metres, got "
                             f"{flake_size!r}", "0.004")
    if not (0.0 <= size_random <= 1.0):
        raise SnowInputError("size_random", f"must lie in [0, 1], got {size_random!r}", "0.3")
    if bake_dir.startswith("//") and not bpy.data.filepath:
        raise SnowInputError("cache_dir", f"{bake_dir!r} is relative to an unsaved .blend",
                             "an absolute folder, or saving the .blend first")
    obj = bpy.data.objects.get(name)
    if obj is None:
        obj = bpy.data.objects.new(name, bpy.data.meshes.new(name))
    if obj.type != 'MESH':
        raise SnowInputError("flakes", f"{name!r} is a {obj.type}, not a mesh",
                             "renaming that object")
    if obj.name not in scene.objects:
        scene.collection.objects.link(obj)
    group = _ensure_group(flake_size, size_random)
    modifier = _modifier(obj) or obj.modifiers.new(MODIFIER_NAME, 'NODES')
    modifier.node_group = group
    obj[BAKE_DIR_PROPERTY] = bake_dir.rstrip("/\\")
    _configure(modifier, obj, enabled=False)
    return obj


def _configure(modifier, obj, enabled: bool) -> None:
    bake = modifier.bakes[0]
    bake.bake_mode = 'ANIMATION'
    if hasattr(bake, "bake_target"):          # 4.3+ (4.2 bakes to disk only)
        bake.bake_target = 'DISK'
    bake.use_custom_path = True
    bake.directory = obj[BAKE_DIR_PROPERTY]
    modifier.show_viewport = modifier.show_render = enabled


def _ensure_group(flake_size: float, size_random: float):
    """The node group: Bake node -> velocity from the planes -> radius -> drop the planes ->
    snow material. Rebuilt on every call (a few nodes), so it always matches the add-on."""
    group = bpy.data.node_groups.get(GROUP_NAME)
    if group is None:
        group = bpy.data.node_groups.new(GROUP_NAME, "GeometryNodeTree")
        group.interface.new_socket("Geometry", in_out="INPUT", socket_type="NodeSocketGeometry")
        group.interface.new_socket("Geometry", in_out="OUTPUT",
                                   socket_type="NodeSocketGeometry")
    nodes, links = group.nodes, group.links
    nodes.clear()
    group_in, group_out = nodes.new("NodeGroupInput"), nodes.new("NodeGroupOutput")
    bake = nodes.new("GeometryNodeBake")
    bake.name = BAKE_NODE_NAME
    # Items in the order of gn_bake's identifiers: Geometry ("0"; 4.x creates it,
    # 5.x starts empty), then the three velocity scales.
    if len(bake.bake_items) == 0:
        bake.bake_items.new("GEOMETRY", gn_bake.GEOMETRY_ITEM[1])
    for _key, name in gn_bake.SCALE_ITEMS:
        bake.bake_items.new("FLOAT", name)
    links.new(group_in.outputs[0], bake.inputs[0])

    planes, scales = nodes.new("ShaderNodeCombineXYZ"), nodes.new("ShaderNodeCombineXYZ")
    for axis, name in enumerate(gn_bake.VELOCITY_PLANES):
        plane = _named_attribute(nodes, name, 'FLOAT')
        links.new(plane.outputs["Attribute"], planes.inputs[axis])
        links.new(bake.outputs[axis + 1], scales.inputs[axis])
    velocity = nodes.new("ShaderNodeVectorMath")
    velocity.operation = 'MULTIPLY'
    links.new(planes.outputs[0], velocity.inputs[0])
    links.new(scales.outputs[0], velocity.inputs[1])
    store = nodes.new("GeometryNodeStoreNamedAttribute")
    store.data_type, store.domain = 'FLOAT_VECTOR', 'POINT'
    store.inputs["Name"].default_value = "velocity"
    links.new(bake.outputs[0], store.inputs["Geometry"])
    links.new(velocity.outputs[0], store.inputs["Value"])

    # Radius: random per flake in [size (1 - size_random), size], as the particle system's
    # size randomness; keyed by the point's index (flake i is point i), or by its ``seed``
    # where a camera-culled bake stores one.
    seed = _named_attribute(nodes, gn_bake.SEED_ATTRIBUTE, 'INT')
    key = nodes.new("GeometryNodeSwitch")
    key.input_type = 'INT'
    links.new(seed.outputs["Exists"], key.inputs[0])
    links.new(nodes.new("GeometryNodeInputIndex").outputs[0], key.inputs[1])
    links.new(seed.outputs["Attribute"], key.inputs[2])
    radius = nodes.new("FunctionNodeRandomValue")
    radius.name = RANDOM_NODE_NAME
    radius.data_type = 'FLOAT'
    low, high = [s for s in radius.inputs if s.type == 'VALUE'][:2]     # Min, Max
    low.default_value = flake_size * (1.0 - size_random)
    high.default_value = flake_size
    radius.inputs["Seed"].default_value = RADIUS_SEED
    links.new(key.outputs[0], radius.inputs["ID"])
    set_radius = nodes.new("GeometryNodeSetPointRadius")
    links.new(store.outputs[0], set_radius.inputs[0])
    links.new([s for s in radius.outputs if s.type == 'VALUE'][0], set_radius.inputs["Radius"])

    geometry = set_radius.outputs[0]
    for name in (*gn_bake.VELOCITY_PLANES, gn_bake.SEED_ATTRIBUTE):
        remove = nodes.new("GeometryNodeRemoveAttribute")
        remove.inputs["Name"].default_value = name
        links.new(geometry, remove.inputs[0])
        geometry = remove.outputs[0]
    material = nodes.new("GeometryNodeSetMaterial")
    material.inputs["Material"].default_value = ensure_flake_material(flake_size)
    links.new(geometry, material.inputs[0])
    links.new(material.outputs[0], group_out.inputs[0])
    for column, node in enumerate(nodes):
        node.location = (200.0 * column, 0.0)
    return group


def _named_attribute(nodes, name: str, data_type: str):
    node = nodes.new("GeometryNodeInputNamedAttribute")
    node.data_type = data_type
    node.inputs["Name"].default_value = name
    return node


# --- the bake ---------------------------------------------------------------------------------

def bake_directory(obj) -> str:
    """Absolute folder of the flakes' bake (meta/ and blobs/)."""
    return os.path.normpath(bpy.path.abspath(obj[BAKE_DIR_PROPERTY]))


def frame_path(obj, frame: int) -> str:
    """The blob (the arrays) of ``frame``."""
    return gn_bake.blob_path(bake_directory(obj), frame)


def set_enabled(obj, enabled: bool) -> None:
    """Enable (re-created: Blender lists the folder anew) or disable the bake modifier."""
    modifier = _modifier(obj)
    if enabled:
        group = modifier.node_group
        index = list(obj.modifiers).index(modifier)
        obj.modifiers.remove(modifier)
        modifier = obj.modifiers.new(MODIFIER_NAME, 'NODES')
        modifier.node_group = group
        if index != len(obj.modifiers) - 1:
            obj.modifiers.move(len(obj.modifiers) - 1, index)
    _configure(modifier, obj, enabled)
    obj.update_tag()


def finish(obj, first_frame: int, last_frame: int) -> None:
    """Check every frame in [first_frame, last_frame] is on disk and readable, drop frames
    outside it, and show the bake (modifier re-created so that Blender lists the folder)."""
    root = bake_directory(obj)
    for frame in range(first_frame, last_frame + 1):
        gn_bake.check_frame(root, frame)
    for frame in gn_bake.cached_frames(root):
        if not first_frame <= frame <= last_frame:
            gn_bake.remove_frame(root, frame)
    set_enabled(obj, True)
    shown = baked_range(obj)
    if shown != (first_frame, last_frame):
        raise RuntimeError(f"Blender did not load the flake bake in {root}: frames {shown}")


def baked_range(obj):
    """(first, last) frame on disk, or None."""
    frames = gn_bake.cached_frames(bake_directory(obj))
    return (int(frames[0]), int(frames[-1])) if frames else None


def free(obj) -> None:
    """Delete the bake's files (and the folder when it is left empty); the modifier is
    disabled (it would hold the frames it listed)."""
    gn_bake.free(bake_directory(obj))
    set_enabled(obj, False)


_UNSAVED = [False]


@bpy.app.handlers.persistent
def _before_save(*_args):
    _UNSAVED[0] = not bpy.data.filepath


@bpy.app.handlers.persistent
def _after_save(*_args):
    """Blender 4.2 lists a bake folder only in a saved .blend: after the first save, the
    finished flake bakes' modifiers are re-created so that they list it."""
    if not (_UNSAVED[0] and blender_compat.BAKE_NEEDS_SAVED_BLEND):
        return
    _UNSAVED[0] = False
    for obj in bpy.data.objects:
        modifier = _modifier(obj)
        if modifier is not None and modifier.show_render:
            set_enabled(obj, True)


HANDLERS = ((bpy.app.handlers.save_pre, _before_save), (bpy.app.handlers.save_post, _after_save))


def register():
    for handlers, handler in HANDLERS:
        if handler not in handlers:
            handlers.append(handler)


def unregister():
    for handlers, handler in HANDLERS:
        if handler in handlers:
            handlers.remove(handler)


def evaluate(obj, frame: float):
    """Blender's evaluation at a (sub)frame: positions (M,3) float32, velocities (M,3)
    float32 units/s and alive (M,) bool (all True: every point is drawn). M is the flake
    count, or the flakes in view of a camera-culled bake. The scene frame is restored."""
    scene = bpy.context.scene
    restore = (scene.frame_current, scene.frame_subframe)
    whole = int(np.floor(frame))
    scene.frame_set(whole, subframe=float(frame - whole))
    try:
        cloud = evaluated_point_cloud(obj, bpy.context.evaluated_depsgraph_get())
        if cloud is None:
            empty = np.zeros((0, 3), np.float32)
            return empty, empty.copy(), np.zeros(0, bool)
        count = len(cloud.points)
        positions = np.empty(count * 3, np.float32)
        velocities = np.zeros(count * 3, np.float32)
        cloud.attributes["position"].data.foreach_get("vector", positions)
        if "velocity" in cloud.attributes:
            cloud.attributes["velocity"].data.foreach_get("vector", velocities)
    finally:
        scene.frame_set(restore[0], subframe=restore[1])
    return positions.reshape(count, 3), velocities.reshape(count, 3), np.ones(count, bool)


def evaluated_point_cloud(obj, depsgraph):
    """The point cloud ``obj``'s modifier outputs (an instance of it), or None."""
    for instance in depsgraph.object_instances:
        if instance.object.type != 'POINTCLOUD':
            continue
        owner = instance.parent if instance.is_instance else instance.object
        if owner is not None and owner.original == obj:
            return instance.object.data
    return None
