"""The viewport wind overlay: its settings (``Scene.snowfall_wind_preview``), the 3D-view
draw handler that shows the latest wind field, and the sidebar sub-panel.

The geometry comes from ``snow_addon.wind_preview`` (pure NumPy, tested without a GPU);
this module only turns it into ``gpu`` batches. Blender has no GPU drawing in background
mode, so there no handler is ever added and nothing here touches ``gpu``.

An arrow over the terrain shows where the wind blows (``WindArrow``, the setting
``show_direction``): from the side Wind From names, downwind. Its geometry is
``wind_arrow`` (NumPy only; tested), drawn as lines.

The field shown lives in ``operators/shown_wind.ShownWind.store`` (a ``WindPreviewStore``
owned by a class, not a module global; ``WindOverlay.store`` is the same object); the
preview and bake operators publish into it with ``ShownWind.publish``, which tells the
overlay (its viewer while registered) to rebuild its batches and draw. Loading a file
clears it and removes the handler (the field belonged to the old file); unregistering
removes the handler and the file hooks.
"""
from __future__ import annotations

import bpy
from bpy.app.handlers import persistent
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty

import math

import numpy as np

from ..operators.shown_wind import ShownWind
from ..snow_addon.wind_preview import OverlayOptions, slice_height, speed_scale

#: The add-on's main sidebar panel (written by the add-on core); the wind preview panel
#: nests under it when it is registered, else it stands on its own in the same tab.
PARENT_PANEL_ID = "VIEW3D_PT_snowfall"
SIDEBAR_CATEGORY = "Snowfall"


def _unit_scale(scene) -> float:
    """Metres per Blender unit (the engine works in metres, the viewport in units)."""
    scale = float(scene.unit_settings.scale_length)
    return scale if scale > 0.0 else 1.0


def _redraw(_self=None, _context=None):
    WindOverlay.tag_redraw()


def _show_changed(self, context):
    if self.show_overlay:
        WindOverlay.enable()
    else:
        WindOverlay.disable()
    WindOverlay.tag_redraw()


def wind_arrow(low, high, wind_from: float) -> np.ndarray:
    """Line segments (2K, 3) float64, Blender units, of an arrow over a terrain whose
    bounding box is ``low``..``high``: across its middle, a little above its top, 0.4 of
    its longer side long, pointing downwind. ``wind_from`` (radians) is where the wind comes
    from, clockwise from north = +Y (the Wind From setting); the arrow points toward the
    heading 270 degrees - wind_from, counter-clockwise from +X. Rows 0-1 are the shaft
    (tail, tip); then the two barbs of the head, each (tip, barb end)."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    side = float(max(high[0] - low[0], high[1] - low[1], 1e-6))
    heading = 1.5 * math.pi - float(wind_from)
    down = np.array([math.cos(heading), math.sin(heading), 0.0])
    centre = np.array([0.5 * (low[0] + high[0]), 0.5 * (low[1] + high[1]),
                       high[2] + 0.05 * side])
    half = 0.2 * side
    tail, tip = centre - half * down, centre + half * down
    segments = [tail, tip]
    for turn in (math.radians(150.0), math.radians(-150.0)):
        barb = np.array([math.cos(heading + turn), math.sin(heading + turn), 0.0])
        segments += [tip, tip + 0.25 * half * 2.0 * barb]
    return np.array(segments)


class WindArrow:
    """The 3D-view draw handler of the wind-direction arrow (added where Blender can draw;
    never in background mode)."""

    _handle = None
    COLOUR = (0.35, 0.75, 1.0, 0.9)

    @classmethod
    def enable(cls) -> None:
        if cls._handle is None and WindOverlay.can_draw():
            cls._handle = bpy.types.SpaceView3D.draw_handler_add(cls._draw, (), "WINDOW",
                                                                 "POST_VIEW")

    @classmethod
    def disable(cls) -> None:
        if cls._handle is not None:
            bpy.types.SpaceView3D.draw_handler_remove(cls._handle, "WINDOW")
            cls._handle = None

    @classmethod
    def _draw(cls):
        from ..properties import terrain_bounds

        scene = bpy.context.scene
        settings = getattr(scene, "snowfall_wind_preview", None)
        props = getattr(scene, "snowfall", None)
        if settings is None or props is None or not settings.show_direction:
            return
        bounds = terrain_bounds(props)
        if bounds is None:
            return
        import gpu
        from gpu_extras.batch import batch_for_shader

        segments = wind_arrow(bounds[0], bounds[1], props.wind_from).astype(np.float32)
        shader = gpu.shader.from_builtin("POLYLINE_UNIFORM_COLOR")
        batch = batch_for_shader(shader, "LINES", {"pos": segments})
        viewport = gpu.state.viewport_get()
        gpu.state.blend_set("ALPHA")
        try:
            shader.bind()
            shader.uniform_float("viewportSize", (viewport[2], viewport[3]))
            shader.uniform_float("lineWidth", 4.0)
            shader.uniform_float("color", cls.COLOUR)
            batch.draw(shader)
        finally:
            gpu.state.blend_set("NONE")


class SnowfallWindPreviewSettings(bpy.types.PropertyGroup):
    """What the wind overlay shows (``Scene.snowfall_wind_preview``)."""

    show_direction: BoolProperty(
        name="Wind Arrow", default=True, update=_redraw, options=set(),
        description="Draw an arrow over the terrain in the 3D view, pointing where the wind "
                    "blows (from the side Wind From names)")

    show_overlay: BoolProperty(
        name="Show Wind", default=True, update=_show_changed,
        description="Draw the wind field (from Preview Wind or the running bake) in the 3D "
                    "view")
    show_arrows: BoolProperty(name="Arrows", default=True, update=_redraw,
                              description="Arrows along the wind, coloured by speed")
    show_streamlines: BoolProperty(
        name="Streamlines", default=False, update=_redraw,
        description="Lines that follow the wind through the seeds, coloured by speed")
    show_obstacles: BoolProperty(
        name="Obstacles", default=False, update=_redraw,
        description="The obstacle cells the wind flows around (terrain and snow)")
    show_pressure: BoolProperty(
        name="Pressure", default=False, update=_redraw,
        description="Pressure on the slice: yellow = low, red = high")
    placement: EnumProperty(
        name="Placement", default="SLICE", update=_redraw,
        description="Where arrows and streamline seeds go",
        items=[("SLICE", "Slice", "A lattice on the horizontal slice"),
               ("VOLUME", "Volume", "A 3D lattice through the whole wind domain"),
               ("UPWIND", "Upwind Rake", "A rake on the domain sides the wind blows in "
                "through, from the ground up to the slice height (streamlines then cross "
                "the whole domain)")])
    slice_height: FloatProperty(
        name="Slice Height", default=0.3, min=0.0, max=1.0, subtype="FACTOR", update=_redraw,
        description="Height of the horizontal slice (and top of the upwind rake), from the "
                    "bottom (0) to the top (1) of the wind domain")
    density: IntProperty(
        name="Density", default=24, min=2, soft_max=128, max=512, update=_redraw,
        description="Arrows (or streamline seeds) along the longer side of the domain")
    arrow_scale: FloatProperty(
        name="Arrow Scale", default=1.0, min=0.01, soft_max=5.0, update=_redraw,
        description="Length of an arrow at the top of the speed scale, in arrow spacings")
    speed_max: FloatProperty(
        name="Speed Scale (m/s)", default=0.0, min=0.0, soft_max=50.0, update=_redraw,
        description="Wind speed shown red, in m/s (0 = the fastest wind in the field). "
                    "Colours run blue, cyan, green, yellow, red from 0 to this speed")
    obstacle_style: EnumProperty(
        name="Obstacle Style", default="FACES", update=_redraw,
        items=[("FACES", "Faces", "The surface of the obstacle cells"),
               ("POINTS", "Points", "One point per obstacle cell")])
    line_width: FloatProperty(name="Line Width", default=2.0, min=1.0, max=10.0,
                              update=_redraw, description="Width of arrows and streamlines "
                              "in pixels")
    preview_steps: IntProperty(
        name="Preview Steps", default=0, min=0, soft_max=2000,
        description="Wind steps Preview Wind runs (0 = enough for the wind to cross the "
                    "domain twice)")
    cells_per_step: FloatProperty(
        name="Cells per Step", default=1.0, min=0.0, soft_max=4.0,
        description="How far the inflow wind moves per preview step, in wind cells: larger "
                    "develops the flow in fewer steps. 0 = the bake's own time step")

    def options(self) -> OverlayOptions:
        return OverlayOptions(
            show_arrows=self.show_arrows, show_streamlines=self.show_streamlines,
            show_obstacles=self.show_obstacles, show_pressure=self.show_pressure,
            placement=self.placement, slice_fraction=float(self.slice_height),
            density=int(self.density), arrow_scale=float(self.arrow_scale),
            speed_max=float(self.speed_max), obstacle_style=self.obstacle_style)


class WindOverlay:
    """Owns the 3D-view draw handler, the shown wind field and the GPU batches built from
    it. Class-level state: one overlay per Blender session."""

    store = ShownWind.store
    _handle = None
    _batches = None       # (geometry list id, unit scale, [(primitive, shader, batch)])

    # --- the field ------------------------------------------------------------------------
    @classmethod
    def field_changed(cls) -> None:
        """``ShownWind.publish`` showed a new field: rebuild the batches and draw it."""
        cls._batches = None
        settings = getattr(bpy.context.scene, "snowfall_wind_preview", None)
        if settings is not None and settings.show_overlay:
            cls.enable()
        cls.tag_redraw()

    @classmethod
    def wants_field(cls, scene) -> bool:
        """True when the overlay is on and drawing, so a bake should publish its wind
        (each publish copies the field to the host)."""
        settings = getattr(scene, "snowfall_wind_preview", None)
        return bool(cls._handle is not None and settings is not None and settings.show_overlay)

    @classmethod
    def clear(cls) -> None:
        cls.store.clear()
        cls._batches = None

    # --- the handler ------------------------------------------------------------------------
    @classmethod
    def is_enabled(cls) -> bool:
        return cls._handle is not None

    @staticmethod
    def can_draw() -> bool:
        """Blender has no GPU drawing in background mode."""
        return not bpy.app.background

    @classmethod
    def enable(cls) -> bool:
        """Add the draw handler (only where Blender can draw); True when it is in place."""
        if cls._handle is not None:
            return True
        if not cls.can_draw():
            return False
        cls._handle = bpy.types.SpaceView3D.draw_handler_add(cls._draw, (), "WINDOW",
                                                             "POST_VIEW")
        return True

    @classmethod
    def disable(cls) -> None:
        if cls._handle is not None:
            bpy.types.SpaceView3D.draw_handler_remove(cls._handle, "WINDOW")
            cls._handle = None
        cls._batches = None

    @classmethod
    def tag_redraw(cls) -> None:
        window_manager = getattr(bpy.context, "window_manager", None)
        if window_manager is None:
            return
        for window in window_manager.windows:
            for area in window.screen.areas:
                if area.type == "VIEW_3D":
                    area.tag_redraw()

    # --- drawing (GPU only; never reached in background mode) -------------------------------
    @classmethod
    def _draw(cls):
        scene = bpy.context.scene
        settings = getattr(scene, "snowfall_wind_preview", None)
        if settings is None or not settings.show_overlay or cls.store.wind_field is None:
            return
        geometry = cls.store.geometry(settings.options())
        if not geometry:
            return
        import gpu

        scale = _unit_scale(scene)
        if cls._batches is None or cls._batches[0] != id(geometry) or cls._batches[1] != scale:
            cls._batches = (id(geometry), scale, cls._build_batches(geometry, scale))
        viewport = gpu.state.viewport_get()
        gpu.state.blend_set("ALPHA")
        gpu.state.depth_test_set("LESS_EQUAL")
        gpu.state.depth_mask_set(False)
        try:
            for primitive, shader, batch in cls._batches[2]:
                shader.bind()
                if primitive == "LINES":
                    shader.uniform_float("viewportSize", (viewport[2], viewport[3]))
                    shader.uniform_float("lineWidth", float(settings.line_width))
                elif primitive == "POINTS":
                    gpu.state.point_size_set(max(2.0, 2.0 * float(settings.line_width)))
                batch.draw(shader)
        finally:
            gpu.state.depth_mask_set(True)
            gpu.state.depth_test_set("NONE")
            gpu.state.blend_set("NONE")

    @staticmethod
    def _build_batches(geometry, scale):
        import gpu
        from gpu_extras.batch import batch_for_shader

        shaders = {"LINES": "POLYLINE_SMOOTH_COLOR", "TRIS": "SMOOTH_COLOR",
                   "POINTS": "POINT_FLAT_COLOR"}
        batches = []
        for item in geometry:
            if len(item.positions) == 0:
                continue
            shader = gpu.shader.from_builtin(shaders[item.primitive])
            positions = item.positions / scale if scale != 1.0 else item.positions
            batch = batch_for_shader(shader, item.primitive,
                                     {"pos": positions, "color": item.colors})
            batches.append((item.primitive, shader, batch))
        return batches


@persistent
def _on_load(*_args):
    WindOverlay.disable()
    WindOverlay.clear()


class VIEW3D_PT_snowfall_wind_preview(bpy.types.Panel):
    bl_label = "Wind Preview"
    bl_idname = "VIEW3D_PT_snowfall_wind_preview"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = SIDEBAR_CATEGORY
    bl_parent_id = PARENT_PANEL_ID
    bl_options = {"DEFAULT_CLOSED"}

    def draw_header(self, context):
        self.layout.prop(context.scene.snowfall_wind_preview, "show_overlay", text="")

    def draw(self, context):
        layout = self.layout
        settings = context.scene.snowfall_wind_preview
        layout.use_property_split = True
        layout.use_property_decorate = False

        row = layout.row(align=True)
        row.operator("snowfall.preview_wind", icon="FORCE_WIND")
        row.operator("snowfall.wind_to_object", text="To Object", icon="OUTLINER_OB_CURVES")
        store = WindOverlay.store
        if store.wind_field is None:
            layout.label(text="No wind yet: press Preview Wind (or bake)", icon="INFO")
        else:
            source = f"{store.source}, " if store.source else ""
            layout.label(text=f"Showing {source}step {store.step_index}, "
                              f"t = {store.time:.1f} s")

        column = layout.column(heading="Show")
        column.active = settings.show_overlay
        column.prop(settings, "show_arrows")
        column.prop(settings, "show_streamlines")
        column.prop(settings, "show_obstacles")
        if settings.show_obstacles:
            column.prop(settings, "obstacle_style", text="Style")
        column.prop(settings, "show_pressure")

        column = layout.column()
        column.active = settings.show_overlay
        column.prop(settings, "placement")
        sub = column.column()
        sub.active = settings.placement != "VOLUME" or settings.show_pressure
        sub.prop(settings, "slice_height")
        if store.wind_field is not None:
            grid = store.wind_field.grid
            metres = slice_height(grid, settings.slice_height)
            sub.label(text=f"Slice at z = {metres:.4g} m")
        column.prop(settings, "density")
        column.prop(settings, "arrow_scale")
        column.prop(settings, "line_width")

        box = layout.box()
        box.prop(settings, "speed_max")
        if store.wind_field is not None:
            scale = speed_scale(settings.speed_max or store.field_speed_max())
            box.label(text=f"Colour: blue 0 > cyan > green > yellow > red {scale.maximum:.3g} m/s")
        else:
            box.label(text="Colour: blue 0 m/s > cyan > green > yellow > red max")

        column = layout.column()
        column.prop(settings, "preview_steps")
        column.prop(settings, "cells_per_step")


CLASSES = (SnowfallWindPreviewSettings, VIEW3D_PT_snowfall_wind_preview)


def register():
    """Register the settings, the sub-panel and the file-load hooks. The draw handler is
    added on demand: when a wind field is published or Show Wind is switched on."""
    bpy.utils.register_class(SnowfallWindPreviewSettings)
    ShownWind.viewer = WindOverlay
    bpy.types.Scene.snowfall_wind_preview = PointerProperty(type=SnowfallWindPreviewSettings)
    # Nest under the main panel when it exists; otherwise stand alone in the same tab.
    if hasattr(bpy.types, PARENT_PANEL_ID):
        VIEW3D_PT_snowfall_wind_preview.bl_parent_id = PARENT_PANEL_ID
    elif "bl_parent_id" in VIEW3D_PT_snowfall_wind_preview.__dict__:
        del VIEW3D_PT_snowfall_wind_preview.bl_parent_id
    bpy.utils.register_class(VIEW3D_PT_snowfall_wind_preview)
    for hooks in (bpy.app.handlers.load_pre, bpy.app.handlers.load_post):
        if _on_load not in hooks:
            hooks.append(_on_load)
    WindArrow.enable()


def unregister():
    WindArrow.disable()
    WindOverlay.disable()
    WindOverlay.clear()
    if ShownWind.viewer is WindOverlay:
        ShownWind.viewer = None
    for hooks in (bpy.app.handlers.load_pre, bpy.app.handlers.load_post):
        while _on_load in hooks:
            hooks.remove(_on_load)
    bpy.utils.unregister_class(VIEW3D_PT_snowfall_wind_preview)
    del bpy.types.Scene.snowfall_wind_preview
    bpy.utils.unregister_class(SnowfallWindPreviewSettings)
