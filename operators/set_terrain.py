"""Set Terrain: take the selected mesh(es) as the terrain, build the heightmap obstacle field
the engine will see, and show it as a preview object ("Snowfall Heightmap": a wire grid of
the top-most surface, open nodes left out)."""
from __future__ import annotations

import bpy
import numpy as np

from ..snow_addon.errors import SnowInputError
from ..snow_addon.terrain import build_heightmap, check_terrain_arrays
from ..properties import unit_scale
from .background import BackgroundOperator
from .scene_io import read_terrain

PREVIEW_NAME = "Snowfall Heightmap"
PREVIEW_COLLECTION = "Snowfall"


def heightmap_mesh(heightmap, metres_per_unit: float, name: str) -> bpy.types.Mesh:
    """A grid mesh of the heightmap's surface nodes (Blender units, world space); a quad
    wherever all four corners have a surface."""
    grid = heightmap.grid
    ny, nx = grid.shape
    has = np.asarray(heightmap.has_surface, dtype=bool)
    index = np.full((ny, nx), -1, dtype=np.int64)
    index[has] = np.arange(int(has.sum()))
    jj, ii = np.nonzero(has)
    coords = np.stack([grid.x0 + ii * grid.spacing, grid.y0 + jj * grid.spacing,
                       np.asarray(heightmap.height, dtype=np.float64)[jj, ii]], axis=1)
    coords /= metres_per_unit
    quad = has[:-1, :-1] & has[:-1, 1:] & has[1:, 1:] & has[1:, :-1]
    qj, qi = np.nonzero(quad)
    faces = np.stack([index[qj, qi], index[qj, qi + 1], index[qj + 1, qi + 1],
                      index[qj + 1, qi]], axis=1)
    mesh = bpy.data.meshes.new(name)
    mesh.vertices.add(len(coords))
    mesh.vertices.foreach_set("co", coords.astype(np.float32).ravel())
    mesh.loops.add(faces.size)
    mesh.loops.foreach_set("vertex_index", faces.astype(np.int32).ravel())
    mesh.polygons.add(len(faces))
    mesh.polygons.foreach_set("loop_start", np.arange(0, faces.size, 4, dtype=np.int32))
    mesh.update(calc_edges=True)
    mesh.validate()
    return mesh


def _preview_collection(scene):
    collection = bpy.data.collections.get(PREVIEW_COLLECTION)
    if collection is None:
        collection = bpy.data.collections.new(PREVIEW_COLLECTION)
    if scene.collection.children.get(collection.name) is None:
        scene.collection.children.link(collection)
    return collection


def read_set_terrain(context, objects):
    """Blender's half before the heavy part: the terrain's world-space arrays and the
    heightmap resolution (SnowInputError, nothing changed, for bad input)."""
    from .estimates import check_set_terrain

    check_set_terrain(context, objects)   # refuses what would not fit in memory
    terrain = read_terrain(context, objects)
    return terrain, int(context.scene.snowfall.heightmap_resolution)


def build_set_terrain(terrain, resolution: int):
    """The heavy part, no Blender data (the simulation thread): the heightmap."""
    vertices, triangles = check_terrain_arrays(terrain.vertices, terrain.triangles)
    return build_heightmap(vertices, triangles, resolution)


def apply_set_terrain(context, terrain, heightmap):
    """Blender's half after it: store the terrain objects and replace the preview."""
    scene = context.scene
    props = scene.snowfall
    mesh = heightmap_mesh(heightmap, unit_scale(scene), PREVIEW_NAME)
    props.terrain_objects.clear()
    for part in terrain.parts:
        props.terrain_objects.add().object = part.obj
    old = props.heightmap_object
    if old is not None and old.name not in [p.obj.name for p in terrain.parts]:
        old_mesh = old.data
        bpy.data.objects.remove(old)
        if old_mesh is not None and old_mesh.users == 0:
            bpy.data.meshes.remove(old_mesh)
    preview = bpy.data.objects.new(PREVIEW_NAME, mesh)
    preview.display_type = "WIRE"
    preview.hide_render = True
    preview.hide_select = True
    _preview_collection(scene).objects.link(preview)
    props.heightmap_object = preview
    return heightmap


def set_terrain(context, objects):
    """Validate ``objects``, build their heightmap, store them as the scene's terrain and
    replace the heightmap preview, all at once on this thread. Raises SnowInputError
    (nothing changed) for bad input. Returns the Heightmap."""
    terrain, resolution = read_set_terrain(context, objects)
    return apply_set_terrain(context, terrain, build_set_terrain(terrain, resolution))


class SNOWFALL_OT_set_terrain(BackgroundOperator, bpy.types.Operator):
    """Use the selected mesh(es) as the terrain and show the heightmap built from them"""

    bl_idname = "snowfall.set_terrain"
    bl_label = "Set Terrain"
    bl_options = {"REGISTER", "UNDO"}

    def prepare(self, context):
        from .bake import running_job

        if running_job(context.scene) is not None:
            raise SnowInputError("bake", "a bake is running", "stopping it first (Esc)")
        selected = [obj for obj in context.selected_objects
                    if obj.name != PREVIEW_NAME and not obj.name.startswith(PREVIEW_NAME + ".")]
        terrain, resolution = read_set_terrain(context, selected)

        def work(task):
            task.report(0.1, "building the heightmap")
            return build_set_terrain(terrain, resolution)

        def apply(context, heightmap):
            apply_set_terrain(context, terrain, heightmap)
            grid = heightmap.grid
            spacing = grid.spacing / unit_scale(context.scene)
            self.report({"INFO"}, f"Snowfall terrain: {len(selected)} object(s) -> heightmap "
                        f"{grid.nx} x {grid.ny} nodes, {spacing:.4g} units apart, "
                        f"{100.0 * float(np.mean(heightmap.has_surface)):.0f}% surface")
            return {"FINISHED"}

        return work, apply


CLASSES = (SNOWFALL_OT_set_terrain,)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
