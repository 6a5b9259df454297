"""Reading Blender data into the engine's arrays: the terrain objects' evaluated meshes
(modifiers applied, the add-on's own snow modifier left out) in world space and SI metres,
the porous snow fences (the mesh objects of the Porous Fences collection, read the same
way), and the cache folder. Both are read as they are at the scene's first frame (the
bake's first frame), whatever frame the timeline shows. Nothing here changes the .blend
except the brief, restored toggle of the snow modifier and change of frame while a terrain
is read.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import bpy
import numpy as np

from ..snow_addon import bake_cache
from ..snow_addon.errors import SnowInputError
from ..snow_addon.fences import PorousFence, check_porosity
from ..properties import cache_folder_setting, terrain_objects, unit_scale

#: Name of the Geometry Nodes modifier the add-on puts on each terrain object.
SNOW_MODIFIER_NAME = "Snowfall Snow"
#: The setting that bad porous fence objects are reported against (properties/groups.py).
FENCE_SETTING = "fence_collection"


@dataclass
class TerrainPart:
    """One terrain object (or porous fence) as the engine sees it: world-space vertices in
    metres."""

    obj: bpy.types.Object
    vertices: np.ndarray        # (N, 3) float64, metres, world space
    triangles: np.ndarray       # (M, 3) int64, indices into ``vertices``


@dataclass
class Terrain:
    parts: list

    @property
    def vertices(self) -> np.ndarray:
        return np.concatenate([p.vertices for p in self.parts], axis=0)

    @property
    def triangles(self) -> np.ndarray:
        offsets = np.cumsum([0] + [len(p.vertices) for p in self.parts[:-1]])
        return np.concatenate([p.triangles + o for p, o in zip(self.parts, offsets)], axis=0)


def check_terrain_objects(objects, setting: str = "terrain") -> list:
    """Raise SnowInputError unless ``objects`` is a non-empty list of mesh objects."""
    objects = [obj for obj in objects if obj is not None]
    if not objects:
        raise SnowInputError(setting, "no terrain object is selected",
                             "selecting the terrain mesh(es) in the 3D view")
    for obj in objects:
        if obj.type != "MESH":
            raise SnowInputError(setting, f"'{obj.name}' is not a mesh (its type is "
                                 f"{obj.type})", "selecting mesh objects only (convert curves or "
                                 "surfaces first: Object > Convert > Mesh)")
    return objects


def _snow_modifiers(obj):
    return [m for m in obj.modifiers if m.name.startswith(SNOW_MODIFIER_NAME)]


def read_terrain(context, objects, setting: str = "terrain") -> Terrain:
    """World-space triangle soup of ``objects`` with their modifiers (except the add-on's
    snow modifier) applied, in metres, as they are at the scene's first frame (the bake's
    first frame, whatever frame the timeline shows). Modifiers that add vertices
    (Subdivision, Geometry Nodes) are applied like any other: the bake takes the evaluated
    mesh. Raises SnowInputError for non-meshes, meshes with no faces, and a terrain that
    moves or changes during the frame range unless Terrain at First Frame is on."""
    objects = check_terrain_objects(objects, setting)
    scene = context.scene
    first, last = int(scene.frame_start), int(scene.frame_end)
    with _at_frame(scene, first):
        parts = _world_meshes(context, objects, setting, same_vertex_count=False)
    if last > first and not scene.snowfall.terrain_at_first_frame:
        _refuse_moving(context, objects, parts, first, last, setting)
    return Terrain(parts)


#: Modifier types whose result depends only on the mesh and their own (unanimated)
#: settings; any other (Geometry Nodes, Wave, Ocean, Cloth, Armature, Hook, ...) may change
#: the terrain from frame to frame, which ``read_terrain`` then checks by sampling frames.
STILL_MODIFIERS = {"SUBSURF", "MULTIRES", "MIRROR", "ARRAY", "SOLIDIFY", "BEVEL",
                   "DECIMATE", "TRIANGULATE", "WELD", "EDGE_SPLIT", "REMESH", "SMOOTH",
                   "LAPLACIANSMOOTH", "CORRECTIVE_SMOOTH", "WEIGHTED_NORMAL", "SCREW",
                   "SKIN", "WIREFRAME", "TRIANGULATE", "BOOLEAN", "DISPLACE", "NORMAL_EDIT",
                   "UV_PROJECT", "UV_WARP", "MASK", "EDGE_SPLIT", "DATA_TRANSFER",
                   "SHRINKWRAP", "SIMPLE_DEFORM", "CAST"}


def _animated(idblock) -> bool:
    data = getattr(idblock, "animation_data", None)
    return data is not None and (data.action is not None or len(data.drivers) > 0
                                 or len(data.nla_tracks) > 0)


def may_move(obj) -> bool:
    """Whether ``obj``'s evaluated mesh may differ between frames: animation or drivers on
    it, its parents or its mesh (shape keys included), constraints, or a modifier that is
    not in STILL_MODIFIERS."""
    chain = obj
    while chain is not None:
        if _animated(chain) or len(chain.constraints) > 0:
            return True
        chain = chain.parent
    data = obj.data
    if _animated(data) or (getattr(data, "shape_keys", None) is not None
                           and _animated(data.shape_keys)):
        return True
    return any(mod.type not in STILL_MODIFIERS for mod in obj.modifiers
               if not mod.name.startswith(SNOW_MODIFIER_NAME))


class _at_frame:
    """Evaluate the scene at ``frame`` inside the block (the frame the timeline showed is
    restored after; nothing happens when it already shows ``frame``)."""

    def __init__(self, scene, frame: int):
        self.scene, self.frame = scene, int(frame)

    def __enter__(self):
        self.before = (self.scene.frame_current, self.scene.frame_subframe)
        self.moved = self.before != (self.frame, 0.0)
        if self.moved:
            self.scene.frame_set(self.frame)
        return self

    def __exit__(self, *_exc):
        if self.moved:
            self.scene.frame_set(self.before[0], subframe=self.before[1])
        return False


def _refuse_moving(context, objects, parts, first: int, last: int, setting: str) -> None:
    """SnowInputError naming ``terrain_at_first_frame`` when an object of ``objects`` that
    may move (``may_move``) is not where it was at ``first`` at the middle or last frame."""
    moving = [obj for obj in objects if may_move(obj)]
    if not moving:
        return
    reference = {part.obj.as_pointer(): part for part in parts}
    for frame in sorted({(first + last) // 2, last}):
        with _at_frame(context.scene, frame):
            sampled = _world_meshes(context, moving, setting, same_vertex_count=False)
        for part in sampled:
            start = reference[part.obj.as_pointer()]
            if start.vertices.shape != part.vertices.shape or \
                    not np.array_equal(start.triangles, part.triangles) or \
                    not np.allclose(start.vertices, part.vertices, rtol=0.0, atol=1e-6):
                raise SnowInputError(
                    "terrain_at_first_frame", f"the terrain '{part.obj.name}' moves or changes "
                    f"between frames {first} and {frame} (animation, drivers, constraints, a "
                    "parent or a modifier), and the bake holds the terrain still",
                    f"turning on Terrain at First Frame to bake it as it is at frame {first}, "
                    "or removing the animation")


def _world_meshes(context, objects, setting: str, same_vertex_count: bool) -> list:
    """A TerrainPart per mesh object of ``objects``: its evaluated mesh (modifiers applied,
    the add-on's snow modifier briefly turned off and back on) in world space and metres.
    Raises SnowInputError naming ``setting`` for a mesh with no faces and, with
    ``same_vertex_count``, for modifiers that change the vertex count."""
    scale = unit_scale(context.scene)
    toggled = []
    for obj in objects:
        for mod in _snow_modifiers(obj):
            if mod.show_viewport:
                mod.show_viewport = False
                toggled.append(mod)
    try:
        depsgraph = context.evaluated_depsgraph_get()
        if toggled:
            depsgraph.update()
        parts = []
        for obj in objects:
            evaluated = obj.evaluated_get(depsgraph)
            mesh = evaluated.to_mesh()
            try:
                if len(mesh.polygons) == 0:
                    raise SnowInputError(setting, f"mesh '{obj.name}' has no faces",
                                         "a mesh with faces (a plane, a grid or a "
                                         "landscape), not only vertices or edges")
                if same_vertex_count and len(mesh.vertices) != len(obj.data.vertices):
                    raise SnowInputError(
                        setting, f"the modifiers of '{obj.name}' change its vertex count "
                        f"({len(obj.data.vertices)} -> {len(mesh.vertices)})",
                        "applying those modifiers (Ctrl+A > All Modifiers) first")
                mesh.calc_loop_triangles()
                coords = np.empty(len(mesh.vertices) * 3, dtype=np.float64)
                mesh.vertices.foreach_get("co", coords)
                coords = coords.reshape(-1, 3)
                tris = np.empty(len(mesh.loop_triangles) * 3, dtype=np.int64)
                mesh.loop_triangles.foreach_get("vertices", tris)
            finally:
                evaluated.to_mesh_clear()
            matrix = np.array(obj.matrix_world, dtype=np.float64)
            world = coords @ matrix[:3, :3].T + matrix[:3, 3]
            parts.append(TerrainPart(obj, world * scale, tris.reshape(-1, 3)))
    finally:
        for mod in toggled:
            mod.show_viewport = True
    return parts


def read_fences(context, collection, porosity, terrain=None) -> list:
    """The porous snow fences (snow_addon.fences.PorousFence, all of ``porosity``) of the
    mesh objects in ``collection`` and its child collections, sorted by name: evaluated
    (modifiers applied) in world space and metres, as ``read_terrain`` reads the terrain.
    None or an empty collection: no fences. Raises SnowInputError naming
    ``fence_collection`` for an object that is not a mesh, a mesh with no faces, or an
    object of ``terrain`` (default: the scene's terrain objects), and ``fence_porosity``
    for a porosity out of range. Changes nothing in the .blend."""
    if collection is None:
        return []
    porosity = check_porosity(porosity)
    holder = {}          # object -> the (child) collection it is in, to name in messages
    for child in (collection, *collection.children_recursive):
        for obj in child.objects:
            holder.setdefault(obj.as_pointer(), child.name)
    # the wind objects of Wind to Object (operators/wind_preview.py) are no fences
    objects = sorted((obj for obj in collection.all_objects if "snowfall_speed_max" not in obj),
                     key=lambda obj: obj.name_full)
    if terrain is None:
        terrain = terrain_objects(context.scene.snowfall)
    terrain = {obj.as_pointer() for obj in terrain if obj is not None}
    for obj in objects:
        where = holder.get(obj.as_pointer(), collection.name)
        if obj.type != "MESH":
            raise SnowInputError(
                FENCE_SETTING, f"'{obj.name}' in the collection '{where}' is not a mesh (its "
                f"type is {obj.type})", "only mesh objects in the fence collection: move the "
                "others out, or convert them (Object > Convert > Mesh)")
        if obj.as_pointer() in terrain:
            raise SnowInputError(
                FENCE_SETTING, f"'{obj.name}' is both a terrain object and a porous fence",
                f"taking it out of the collection '{where}', or out of the terrain (Set "
                "Terrain without it): a solid wall belongs in the terrain, a slatted fence "
                "in the fence collection")
    fences = []
    with _at_frame(context.scene, context.scene.frame_start):     # as the terrain is read
        fence_parts = _world_meshes(context, objects, FENCE_SETTING, same_vertex_count=False)
    for part in fence_parts:
        try:
            fences.append(PorousFence(part.vertices, part.triangles, porosity))
        except SnowInputError as error:
            if error.setting != "fences":
                raise
            raise SnowInputError(FENCE_SETTING, f"fence '{part.obj.name}': {error.problem}",
                                 error.suggestion) from None
    return fences


def scene_fences(context, terrain=None) -> list:
    """The scene's porous fences: ``read_fences`` of its Porous Fences collection and
    Fence Porosity."""
    props = context.scene.snowfall
    return read_fences(context, props.fence_collection, props.fence_porosity, terrain)


def world_bounds(context, objects):
    """(min xyz, max xyz) in metres of the objects' world bounding boxes (cheap: 8 corners
    per object, no mesh evaluation)."""
    scale = unit_scale(context.scene)
    corners = []
    for obj in objects:
        matrix = np.array(obj.matrix_world, dtype=np.float64)
        box = np.array([tuple(c) for c in obj.bound_box], dtype=np.float64)
        corners.append(box @ matrix[:3, :3].T + matrix[:3, 3])
    if not corners:
        return None
    points = np.concatenate(corners) * scale
    return points.min(axis=0), points.max(axis=0)


def flake_cache_folder(cache_folder: str, scene) -> str:
    """The particle cache folder: ``<cache folder>/<scene>/flakes/``, kept blend-relative
    ("//...") when the cache folder is, so it travels with the .blend."""
    raw = cache_folder.strip() or cache_folder_setting(scene)
    scene_dir = bpy.path.clean_name(scene.name)
    if raw.startswith("//"):
        return raw.rstrip("/\\") + "/" + scene_dir + "/" + bake_cache.FLAKE_DIR + "/"
    return os.path.join(os.path.normpath(bpy.path.abspath(raw)), scene_dir,
                        bake_cache.FLAKE_DIR) + os.sep


def resolve_cache_folder(props, setting: str = "cache_folder") -> str:
    """The absolute cache folder. Raises SnowInputError for a blend-relative folder in an
    unsaved file, or a folder that cannot be created or written. Creates nothing."""
    raw = cache_folder_setting(props.id_data)
    if raw.startswith("//") and not bpy.data.filepath:
        raise SnowInputError(setting, f"'{raw}' is relative to the .blend file, which is not "
                             "saved yet", "saving the file first, or an absolute folder")
    folder = os.path.normpath(bpy.path.abspath(raw))
    probe = folder
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.exists(probe) and not os.path.isdir(probe):
        raise SnowInputError(setting, f"'{probe}' is a file, not a folder",
                             "a folder path")
    problem = None
    if not os.access(probe, os.W_OK | os.X_OK):
        problem = "permission denied"
    else:
        try:  # access() passes for root and on read-only mounts: really try to write
            with tempfile.TemporaryFile(dir=probe):
                pass
        except OSError as exc:
            problem = exc.strerror or str(exc)
    if problem is not None:
        raise SnowInputError(setting, f"cannot write to '{probe}' ({problem})",
                             "a folder you can write to, e.g. '//snowfall_cache'")
    return folder
