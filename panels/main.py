"""The Snowfall panels: one in the Properties editor's Physics tab (beside Blender's own
simulations) and one in the 3D view sidebar (tab "Snow"). Both draw the same things from
``Scene.snowfall``: the preset menu in the header; Bake, Resume, Free and the bake's
progress at the top; then one sub-panel per topic (Terrain, Wind, Snowfall, Drift, Flakes,
Cache, Simulation), each with the values the automatic settings resolve to and what the
settings mean for the bake (the real-world snowfall rate of a depth, whether the wind
drifts snow, the size of the bake on disk)."""
from __future__ import annotations

import math
import os
import time

import bpy

from ..properties import (bake_seconds, flake_count, flake_radius, resume_available,
                          scene_bake_folder, snowfall_rate, terrain_objects, unit_scale)
from ..properties.mapping import automatic_value
from ..snow_addon.drift import THRESHOLD_FRICTION_VELOCITY
from ..snow_addon.errors import SnowInputError
from .presets import draw_preset_header

#: Wind speed (m/s, 10 m above the snow) from which the wind lifts snow, by snow type: the
#: threshold friction velocities of snow_addon.drift through the log law (Li and Pomeroy
#: 1997: 7.7 m/s dry, 9.9 m/s wet).
DRIFT_WIND_SPEED = {"dry": 7.7, "wet": 9.9}
assert set(DRIFT_WIND_SPEED) == set(THRESHOLD_FRICTION_VELOCITY)

_COMPASS = ("north", "north-east", "east", "south-east", "south", "south-west", "west",
            "north-west")


def compass_name(degrees: float) -> str:
    """The 8-point compass name of a bearing (degrees clockwise from north = +Y)."""
    return _COMPASS[int(math.floor(((degrees % 360.0) + 22.5) / 45.0)) % 8]


def _megabytes(count: int) -> str:
    if count >= 1024**3:
        return f"{count / 1024**3:,.1f} GB"
    return f"{count / 1024**2:,.0f} MB" if count >= 1024**2 else f"{count / 1024:,.0f} kB"


def _length(value: float, scene) -> str:
    """A length in Blender units, shown in the scene's unit system."""
    return bpy.utils.units.to_string(scene.unit_settings.system, "LENGTH",
                                     value * unit_scale(scene), precision=3) \
        if scene.unit_settings.system != "NONE" else f"{value:.3g}"


def _rate_text(metres_per_hour: float) -> str:
    if metres_per_hour >= 1.0:
        return f"{metres_per_hour:,.1f} m/h"
    return f"{metres_per_hour * 100.0:.2g} cm/h"


# --------------------------------------------------------------------------------------------
# size on disk, cached (a panel redraws often; a bake folder may hold thousands of files)

class FolderSize:
    """``size(path)``: bytes under ``path``, walked again only when its progress.json (the
    bake's commit record) changed and at least ``MIN_INTERVAL`` seconds went by."""

    MIN_INTERVAL = 2.0
    _cache: dict = {}        # path -> (stamp, bytes, time walked)

    @classmethod
    def size(cls, path: str | None) -> int | None:
        if not path or not os.path.isdir(path):
            return None
        try:
            stamp = os.stat(os.path.join(path, "progress.json")).st_mtime_ns
        except OSError:
            stamp = None
        now = time.monotonic()
        cached = cls._cache.get(path)
        if cached is not None and (cached[0] == stamp or now - cached[2] < cls.MIN_INTERVAL):
            return cached[1]
        total = _walk_size(path)
        cls._cache[path] = (stamp, total, now)
        return total


def _walk_size(path: str) -> int:
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
    return total


# --------------------------------------------------------------------------------------------
# the parts

def _auto_setting(layout, props, scene, name: str, label: str, unit: str = "LENGTH") -> None:
    """An Automatic toggle and, below it, the value: what Automatic resolves to (greyed),
    or the field to type one."""
    col = layout.column()
    col.prop(props, f"use_auto_{name}", text=label)
    if getattr(props, f"use_auto_{name}"):
        value = automatic_value(props, scene, name)
        row = col.row()
        row.active = False
        if value > 0.0:
            text = _length(value, scene) if unit == "LENGTH" else \
                f"{value * unit_scale(scene):.3g} m/s"
            row.label(text=f"{text} (automatic)")
        else:
            row.label(text="Automatic (set the terrain to see it)")
    else:
        col.prop(props, name, text=" ")


def draw_bake_controls(layout, context) -> None:
    """Bake, Resume, Free, or the running bake's progress (any ``stage`` it reports, e.g.
    the first use's kernel compile, on a line of its own)."""
    from ..operators.bake import running_job

    scene = context.scene
    props = scene.snowfall
    col = layout.column(align=True)
    job = running_job(scene)
    if job is not None:
        stage = getattr(job, "stage", "") or ""
        if stage:
            col.label(text=str(stage), icon="TIME")
        progress = float(job.progress)
        col.progress(factor=min(1.0, max(0.0, progress)), type="BAR",
                     text=f"{100.0 * progress:.0f}%  {job.status_text()}")
        col.label(text="Press Esc to stop (finished frames are kept)")
        return
    if not terrain_objects(props):
        col.label(text="Select the terrain mesh(es), then Set Terrain", icon="INFO")
    row = col.row(align=True)
    row.scale_y = 1.3
    row.operator("snowfall.bake", text="Bake", icon="PHYSICS")
    sub = row.row(align=True)
    # The bake folder decides, not the .blend: after a crash or a kill the .blend may never
    # have been saved, yet Resume continues from the folder's last committed frame.
    sub.enabled = resume_available(scene)
    sub.operator("snowfall.resume", text="Resume", icon="PLAY")
    sub = row.row(align=True)
    sub.enabled = props.has_bake
    sub.operator("snowfall.free", text="Free", icon="TRASH")
    if props.has_bake:
        col.label(text=f"Baked frames {props.baked_frame_start}-{props.baked_frame_end}",
                  icon="CHECKMARK")


def draw_terrain(layout, context) -> None:
    from ..operators.estimates import estimate

    scene = context.scene
    props = scene.snowfall
    objects = terrain_objects(props)
    row = layout.row()
    row.label(text=(", ".join(o.name for o in objects[:3]) + (" ..." if len(objects) > 3 else ""))
              if objects else "No terrain set", icon="MESH_GRID")
    row.operator("snowfall.set_terrain", text="Set Terrain")
    layout.use_property_split = True
    layout.use_property_decorate = False
    layout.prop(props, "heightmap_resolution")
    if hasattr(props, "terrain_at_first_frame"):    # animated terrains (operators/scene_io.py)
        layout.prop(props, "terrain_at_first_frame")
    col = layout.column(heading="Wind Grid")
    _auto_setting(col, props, scene, "wind_cell_size", "Cell Size Automatic")
    sub = col.column()
    sub.active = props.use_auto_wind_cell_size
    sub.prop(props, "wind_resolution")
    _auto_setting(col, props, scene, "sky_height", "Sky Height Automatic")
    col.prop(props, "wind_boundary")
    col.prop(props, "side_walls")
    col.prop(props, "upwind_fetch")
    if objects:
        box = layout.box()
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


def draw_wind(layout, context) -> None:
    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = True      # Wind Speed and Wind From follow keyframes
    col = layout.column()
    col.prop(props, "wind_speed")
    speed = props.wind_speed * unit_scale(scene)
    needed = DRIFT_WIND_SPEED[props.snow_type]
    if props.drift_enabled and speed < needed:
        row = col.row()
        row.active = False
        row.label(text=f"Below about {needed:g} m/s little snow drifts", icon="INFO")
    col.prop(props, "wind_from")
    source = math.degrees(props.wind_from)
    row = col.row()
    row.active = False
    row.label(text=f"From the {compass_name(source)}, toward the "
                   f"{compass_name(source + 180.0)} (the viewport arrow)")
    col = layout.column()
    col.use_property_decorate = False
    col.prop(props, "gust_strength")
    col.prop(props, "gust_period")
    col.prop(props, "gust_direction_jitter")
    col.prop(props, "wind_mixing")
    overlay = getattr(scene, "snowfall_wind_preview", None)
    if overlay is not None and hasattr(overlay, "show_direction"):
        col.prop(overlay, "show_direction")
    box = layout.box()
    box.use_property_decorate = False
    box.label(text="Porous Fences")
    box.prop(props, "fence_collection", text="Collection")
    sub = box.column()
    sub.active = props.fence_collection is not None
    sub.prop(props, "fence_porosity")


def draw_amount(layout, context) -> None:
    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = False
    layout.row().prop(props, "snowfall_mode", expand=True)
    seconds = bake_seconds(scene)
    col = layout.column()
    info = col.row()
    info.active = False
    if props.snowfall_mode == "DEPTH":
        col.prop(props, "snow_depth")
        try:
            rate = snowfall_rate(props, scene)
        except SnowInputError as error:
            col.label(text=error.problem, icon="ERROR")
        else:
            row = col.row()
            row.active = False
            row.label(text=f"Rate {_rate_text(rate)} over {seconds:.3g} s "
                      f"(frames {scene.frame_start}-{scene.frame_end})")
    else:
        col.prop(props, "snowfall_rate")
        row = col.row()
        row.active = False
        depth = props.snowfall_rate * seconds / 3600.0
        row.label(text=f"About {_length(depth / unit_scale(scene), scene)} by frame "
                  f"{scene.frame_end}")
    row = col.row()
    row.active = False
    row.label(text="Real heavy snowfall: 2-5 cm/h (a bake is a time-lapse)")
    layout.prop(props, "snow_type")
    col = layout.column(heading="Slopes")
    col.prop(props, "use_redistribution")
    sub = col.column()
    sub.active = props.use_redistribution
    sub.prop(props, "angle_of_repose")
    sub.prop(props, "redistribution_min_depth")
    sub.prop(props, "redistribution_fraction")


def draw_drift(layout, context) -> None:
    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = False
    layout.active = props.drift_enabled
    _auto_setting(layout, props, scene, "drift_threshold", "Threshold Automatic",
                  unit="VELOCITY")
    layout.prop(props, "drift_strength")
    layout.prop(props, "roughness_length")
    layout.prop(props, "turbulence")


def draw_flakes(layout, context) -> None:
    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = False
    col = layout.column()
    col.prop(props, "use_auto_flake_count", text="Count Automatic")
    if props.use_auto_flake_count:
        row = col.row()
        row.active = False
        row.label(text=f"{flake_count(props, scene):,} flakes (automatic)")
    else:
        col.prop(props, "flake_count", text=" ")
    col = layout.column()
    col.prop(props, "use_auto_flake_size", text="Radius Automatic")
    if props.use_auto_flake_size:
        row = col.row()
        row.active = False
        radius = flake_radius(props, scene)
        row.label(text=f"Radius {_length(radius, scene)} (automatic)")
    else:
        col.prop(props, "flake_size")
    col = layout.column(heading="Write")
    col.prop(props, "camera_only")
    sub = col.column()
    sub.active = props.camera_only
    sub.prop(props, "camera_margin")
    sub.prop(props, "use_camera_falloff")
    sub2 = sub.column()
    sub2.active = props.use_camera_falloff
    sub2.prop(props, "camera_falloff_distance")
    if props.camera_only and scene.camera is None:
        col.label(text="The scene has no camera", icon="ERROR")
    layout.operator("snowfall.setup_render", icon="RENDER_STILL")


def draw_cache(layout, context) -> None:
    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = False
    layout.prop(props, "cache_folder")
    folder = scene_bake_folder(scene)
    col = layout.column(align=True)
    if folder is None:
        col.label(text="Save the .blend: the bake goes beside it", icon="INFO")
        return
    col.label(text=folder, icon="FILE_FOLDER")
    if props.has_bake:
        col.label(text=f"Frames {props.baked_frame_start}-{props.baked_frame_end} baked "
                  f"(scene {scene.frame_start}-{scene.frame_end})")
    else:
        col.label(text=f"No bake (scene frames {scene.frame_start}-{scene.frame_end})")
    size = FolderSize.size(folder)
    col.label(text=f"On disk: {_megabytes(size)}" if size is not None else "On disk: nothing")
    if hasattr(bpy.types, "SNOWFALL_OT_take_over_bake"):   # a bake another .blend made
        layout.operator("snowfall.take_over_bake", icon="LOCKED")


def draw_simulation(layout, context) -> None:
    from ..operators.bake import running_job
    from ..operators.estimates import backend_choice

    scene = context.scene
    props = scene.snowfall
    layout.use_property_split = True
    layout.use_property_decorate = False
    col = layout.column()
    col.prop(props, "substeps")
    col.prop(props, "seed")
    col.prop(props, "pressure_solver")
    col.prop(props, "backend")
    box = layout.box()
    job = running_job(scene)
    if job is not None and getattr(job, "sim", None) is not None:
        name, reason = job.sim.backend.name, job.sim.backend.reason
    elif props.has_bake and props.backend_used:
        name, reason = props.backend_used, props.backend_reason
    else:
        name, reason = backend_choice(props.backend)
    box.label(text=f"Backend: {name}", icon="MEMORY")
    if not name.startswith("gpu"):
        box.label(text=f"Why: {reason}")
    frames = max(0, scene.frame_end - scene.frame_start)
    row = box.row(align=True)
    if props.seconds_per_frame > 0.0:
        total = props.seconds_per_frame * frames
        row.label(text=f"{props.seconds_per_frame:.2f} s/frame measured, ~{total / 60:.1f} min "
                  f"for {frames} frames")
    else:
        row.label(text="Time per frame: not measured yet")
    row.operator("snowfall.measure", text="", icon="TIME")


# --------------------------------------------------------------------------------------------
# the panels

class _SnowfallPanel:
    """The top panel, shown in the Physics tab and in the 3D-view sidebar."""

    bl_label = "Snowfall"

    @classmethod
    def poll(cls, context):
        return context.scene is not None and hasattr(context.scene, "snowfall")

    def draw_header_preset(self, _context):
        draw_preset_header(self.layout)

    def draw(self, context):
        draw_bake_controls(self.layout, context)


class PHYSICS_PT_snowfall(_SnowfallPanel, bpy.types.Panel):
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "physics"


class VIEW3D_PT_snowfall(_SnowfallPanel, bpy.types.Panel):
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "Snow"


#: (id suffix, label, draw function, closed by default, header property)
SUB_PANELS = (
    ("terrain", "Terrain", draw_terrain, False, None),
    ("wind", "Wind", draw_wind, False, None),
    ("snowfall", "Snowfall", draw_amount, False, None),
    ("drift", "Drift", draw_drift, True, "drift_enabled"),
    ("flakes", "Flakes", draw_flakes, True, None),
    ("cache", "Cache", draw_cache, True, None),
    ("simulation", "Simulation", draw_simulation, True, None),
)


def draw_snowfall(layout, context) -> None:
    """Everything the panel and its sub-panels draw, one after the other (for scripts and
    tests; Blender draws each sub-panel itself)."""
    draw_bake_controls(layout, context)
    props = context.scene.snowfall
    for _suffix, label, draw, _closed, header_prop in SUB_PANELS:
        layout.label(text=label)
        if header_prop is not None:
            layout.prop(props, header_prop)
        draw(layout.column(), context)


def _sub_panel(parent, suffix, label, draw, closed, header_prop):
    def draw_method(self, context):
        draw(self.layout, context)

    attributes = {
        "bl_label": label, "bl_idname": f"{parent.__name__}_{suffix}",
        "bl_parent_id": parent.__name__, "bl_space_type": parent.bl_space_type,
        "bl_region_type": parent.bl_region_type,
        "bl_options": {"DEFAULT_CLOSED"} if closed else set(),
        "poll": classmethod(lambda cls, context: _SnowfallPanel.poll.__func__(cls, context)),
        "draw": draw_method,
    }
    for name in ("bl_context", "bl_category"):
        if hasattr(parent, name):
            attributes[name] = getattr(parent, name)
    if header_prop is not None:
        def draw_header(self, context):
            self.layout.prop(context.scene.snowfall, header_prop, text="")
        attributes["draw_header"] = draw_header
    return type(f"{parent.__name__}_{suffix}", (bpy.types.Panel,), attributes)


CLASSES = (PHYSICS_PT_snowfall, VIEW3D_PT_snowfall) + tuple(
    _sub_panel(parent, *spec) for parent in (PHYSICS_PT_snowfall, VIEW3D_PT_snowfall)
    for spec in SUB_PANELS)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
