"""The Snowfall panels: one in the Properties editor's Physics tab (beside Blender's own
simulations) and one in the 3D view sidebar (tab "Snow"). Both draw the same settings,
estimates, backend and bake controls from ``Scene.snowfall``."""
from __future__ import annotations


import bpy

from ..properties import resume_available, terrain_objects, unit_scale
from ..snow_addon.errors import SnowInputError


def _megabytes(count: int) -> str:
    return f"{count / 1024**2:,.0f} MB" if count >= 1024**2 else f"{count / 1024:,.0f} kB"


def draw_snowfall(layout, context):
    # Imported here: operators/ imports panels.wind_overlay, so a module-level import of
    # operators/ from panels/ would be circular.
    from ..operators.bake import running_job
    from ..operators.estimates import backend_choice, estimate

    scene = context.scene
    props = scene.snowfall
    job = running_job(scene)
    layout.use_property_split = True
    layout.use_property_decorate = True

    # --- terrain ---------------------------------------------------------------------------
    box = layout.box()
    objects = terrain_objects(props)
    row = box.row()
    row.label(text="Terrain: " + (", ".join(o.name for o in objects[:3])
                                  + (" ..." if len(objects) > 3 else "") if objects else "not set"),
              icon="MESH_GRID")
    row.operator("snowfall.set_terrain", text="Set Terrain")
    box.prop(props, "heightmap_resolution")

    col = layout.column(heading="Wind Grid")
    col.prop(props, "wind_cell_size")
    sub = col.column()
    sub.active = props.wind_cell_size == 0.0
    sub.prop(props, "wind_resolution")
    col.prop(props, "sky_height")
    col.prop(props, "wind_boundary")
    col.prop(props, "side_walls")

    col = layout.column(heading="Wind")
    col.prop(props, "wind_speed")
    col.prop(props, "wind_direction")
    col.prop(props, "gust_strength")
    col.prop(props, "gust_period")
    col.prop(props, "gust_direction_jitter")
    col.prop(props, "wind_mixing")
    # Porous snow fences slow the wind only; the porosity greys out until a collection is set.
    box = col.box()
    box.label(text="Porous Fences")
    box.prop(props, "fence_collection", text="Collection")
    sub = box.column()
    sub.active = props.fence_collection is not None
    sub.prop(props, "fence_porosity")
    box = col.box()
    box.label(text="Drift")
    box.prop(props, "drift_enabled")
    sub = box.column()
    sub.active = props.drift_enabled
    sub.prop(props, "drift_threshold")
    sub.prop(props, "drift_strength")
    sub.prop(props, "roughness_length")
    sub.prop(props, "turbulence")

    col = layout.column(heading="Snow")
    col.prop(props, "flake_count")
    col.prop(props, "snow_type")
    col.prop(props, "flake_size")
    col.prop(props, "snowfall_rate")
    col.prop(props, "use_redistribution")
    sub = col.column()
    sub.active = props.use_redistribution
    sub.prop(props, "angle_of_repose")
    sub.prop(props, "redistribution_min_depth")
    sub.prop(props, "redistribution_fraction")

    col = layout.column(heading="Simulation")
    col.prop(props, "substeps")
    col.prop(props, "seed")
    col.prop(props, "pressure_solver")
    col.prop(props, "backend")
    col.prop(props, "cache_folder")

    # --- estimates -------------------------------------------------------------------------
    box = layout.box()
    box.use_property_split = False
    if job is not None:
        name, reason = job.sim.backend.name, job.sim.backend.reason
    elif props.has_bake and props.backend_used:
        name, reason = props.backend_used, props.backend_reason
    else:
        name, reason = backend_choice(props.backend)
    box.label(text=f"Backend: {name}", icon="MEMORY")
    if not name.startswith("gpu"):
        box.label(text=f"Why: {reason}")
    if objects:
        try:
            guess = estimate(context)
        except SnowInputError as error:
            box.label(text=str(error), icon="ERROR")
        else:
            hm, wg = guess.heightmap, guess.wind
            scale = unit_scale(scene)
            box.label(text=f"Heightmap {hm.nx} x {hm.ny} nodes, {hm.spacing / scale:.3g} apart")
            box.label(text=f"Wind {wg.nx} x {wg.ny} x {wg.nz} = {wg.cell_count:,} cells "
                      f"of {wg.cell_size / scale:.3g}")
            box.label(text=f"Memory {_megabytes(guess.total_bytes)} (wind "
                      f"{_megabytes(guess.wind_bytes)}, flakes {_megabytes(guess.flake_bytes)})")
    frames = max(0, scene.frame_end - scene.frame_start)
    row = box.row(align=True)
    if props.seconds_per_frame > 0.0:
        total = props.seconds_per_frame * frames
        row.label(text=f"{props.seconds_per_frame:.2f} s/frame measured, ~{total / 60:.1f} min "
                  f"for {frames} frames")
    else:
        row.label(text="Time per frame: not measured yet")
    row.operator("snowfall.measure", text="", icon="TIME")

    # --- bake --------------------------------------------------------------------------------
    col = layout.column(align=True)
    if job is not None:
        col.progress(factor=job.progress, type="BAR", text=job.status_text())
        col.label(text="Press Esc to stop (finished frames are kept)")
        return
    if props.has_bake:
        col.label(text=f"Baked frames {props.baked_frame_start}-{props.baked_frame_end}",
                  icon="CHECKMARK")
    row = col.row(align=True)
    row.operator("snowfall.bake", text="Bake", icon="PHYSICS")
    sub = row.row(align=True)
    # The bake folder decides, not the .blend: after a crash or a kill the .blend may never
    # have been saved, yet Resume continues from the folder's last committed frame.
    sub.enabled = resume_available(scene)
    sub.operator("snowfall.resume", text="Resume", icon="PLAY")
    sub = row.row(align=True)
    sub.enabled = props.has_bake
    sub.operator("snowfall.free", text="Free", icon="TRASH")


class _SnowfallPanel:
    """The same settings panel, shown in the Physics tab and in the 3D-view sidebar."""

    bl_label = "Snowfall"

    @classmethod
    def poll(cls, context):
        return context.scene is not None and hasattr(context.scene, "snowfall")

    def draw(self, context):
        draw_snowfall(self.layout, context)


class PHYSICS_PT_snowfall(_SnowfallPanel, bpy.types.Panel):
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "physics"


class VIEW3D_PT_snowfall(_SnowfallPanel, bpy.types.Panel):
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Snow"


CLASSES = (PHYSICS_PT_snowfall, VIEW3D_PT_snowfall)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
