"""Set Terrain: take the selected mesh(es) as the terrain, build the heightmap obstacle field
the engine will see, and show it as a preview object ("Snowfall Heightmap": a wire grid of
the top-most surface, open nodes left out)."""
from __future__ import annotations

import bpy
import numpy as np

from ..snow_addon.errors import SnowInputError
from ..snow_addon.terrain import build_heightmap, check_terrain_arrays
from ..properties import unit_scale
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


def set_terrain(context, objects):
    """Validate ``objects``, build their heightmap, store them as the scene's terrain and
    replace the heightmap preview. Raises SnowInputError (nothing changed) for bad input.
    Returns the Heightmap."""
    scene = context.scene
    props = scene.snowfall
    terrain = read_terrain(context, objects)
    vertices, triangles = check_terrain_arrays(terrain.vertices, terrain.triangles)
    heightmap = build_heightmap(vertices, triangles, int(props.heightmap_resolution))
    mesh = heightmap_mesh(heightmap, unit_scale(scene), PREVIEW_NAME)

    # --- valid: change the file ---------------------------------------------------------------
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


class SNOWFALL_OT_set_terrain(bpy.types.Operator):
    """Use the selected mesh(es) as the terrain and show the heightmap built from them"""

    bl_idname = "snowfall.set_terrain"
    bl_label = "Set Terrain"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        from .bake import running_job

        if running_job(context.scene) is not None:
            self.report({"ERROR"}, "Snowfall: a bake is running; stop it first")
            return {"CANCELLED"}
        selected = [obj for obj in context.selected_objects
                    if obj.name != PREVIEW_NAME and not obj.name.startswith(PREVIEW_NAME + ".")]
        try:
            heightmap = set_terrain(context, selected)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        grid = heightmap.grid
        spacing = grid.spacing / unit_scale(context.scene)
        self.report({"INFO"}, f"Snowfall terrain: {len(selected)} object(s) -> heightmap "
                    f"{grid.nx} x {grid.ny} nodes, {spacing:.4g} units apart, "
                    f"{100.0 * float(np.mean(heightmap.has_surface)):.0f}% surface")
        return {"FINISHED"}


CLASSES = (SNOWFALL_OT_set_terrain,)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
