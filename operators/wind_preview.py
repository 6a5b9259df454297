"""Preview Wind (step the wind alone, no flakes, and show it in the overlay) and Wind to
Object (turn the shown wind into streamline curves or an arrow mesh, with a ``speed``
point attribute and a material that colours by it, for Cycles).

The wind is published into ``shown_wind.ShownWind.store`` (the viewport overlay draws it);
nothing here keeps state in module globals. Engine units are metres; Blender positions are divided by the
scene's unit scale.
"""
from __future__ import annotations

import math
import time

import bpy
import numpy as np
from bpy.props import EnumProperty, FloatProperty, IntProperty

from ..blender_compat import node_tree
from ..properties import terrain_objects, to_snow_settings, unit_scale
from ..snow_addon.grid import HeightmapGrid
from ..snow_addon.wind_preview import (SPEED_COLORMAP, arrow_mesh, seed_points, slice_height,
                                       speed_scale, stride_for_density, trace_streamlines,
                                       wind_arrows)
from .background import BackgroundOperator
from .scene_io import read_terrain, scene_fences
from .shown_wind import ShownWind

#: Upper bound of automatic preview steps (the user can ask for more).
MAX_AUTO_STEPS = 2000
#: Longest preview time step (s) the engine's settings accept.
MAX_TIME_STEP = 10.0

STREAMLINES_OBJECT = "Snowfall Wind Streamlines"
ARROWS_OBJECT = "Snowfall Wind Arrows"
SPEED_MATERIAL = "Snowfall Wind Speed"


# --- building the wind-only simulation -------------------------------------------------------

def _preview_objects(context, props):
    """The bake's terrain objects, else the selected meshes (but the porous fences)."""
    objects = terrain_objects(props)
    if not objects:
        fences = props.fence_collection
        fences = set(fences.all_objects) if fences is not None else set()
        objects = [obj for obj in context.selected_objects
                   if obj.type == "MESH" and obj not in fences]
    return objects


def _fastest_inflow(settings) -> float:
    """Largest inflow speed (m/s) the settings can produce, gusts included."""
    speeds = [settings.wind_speed] + [key[1] for key in settings.wind_keys]
    return max(speeds) * (1.0 + settings.gust_strength)


def preview_plan(settings, vertices, cells_per_step: float, steps: int):
    """(settings with the preview time step, number of steps) for a wind preview.

    ``cells_per_step > 0``: the time step moves the fastest inflow that many wind cells
    (at least the bake's step, at most ``MAX_TIME_STEP``), so the flow develops in about
    ``domain cells / cells_per_step`` steps. ``steps == 0``: enough steps for the inflow
    to cross the domain twice (at most ``MAX_AUTO_STEPS``).
    """
    vertices = np.asarray(vertices, dtype=np.float64)
    low, high = vertices[:, :2].min(axis=0), vertices[:, :2].max(axis=0)
    heightmap = HeightmapGrid.covering(low[0], low[1], high[0], high[1],
                                       settings.heightmap_resolution)
    lx, ly = heightmap.extent
    cell = settings.wind_cell_size or max(lx, ly) / settings.wind_resolution
    speed = _fastest_inflow(settings)
    dt = settings.time_step
    if cells_per_step > 0.0 and speed > 0.0:
        dt = min(max(dt, cells_per_step * cell / speed), MAX_TIME_STEP)
    if steps <= 0:
        if speed > 0.0:
            steps = int(math.ceil(2.0 * max(lx, ly) / (speed * dt)))
        else:
            steps = 1
        steps = min(max(steps, 10), MAX_AUTO_STEPS)
    return settings.replace(time_step=dt), int(steps)


def read_preview(context, cells_per_step: float, steps: int):
    """Blender's half of a wind preview: (a function building the wind-only Simulation, its
    step count). Raises SnowInputError for bad settings, terrain or fences."""
    from ..snow_addon.simulation import Simulation

    scene = context.scene
    props = scene.snowfall
    objects = _preview_objects(context, props)
    terrain = read_terrain(context, objects)
    fences = scene_fences(context, objects)
    vertices, triangles = terrain.vertices, terrain.triangles
    settings = to_snow_settings(props, scene)
    settings, steps = preview_plan(settings, vertices, cells_per_step, steps)
    settings.validate()
    backend = props.backend

    def build():
        return Simulation(settings, vertices, triangles, backend=backend, flakes=False,
                          fences=fences)

    return build, steps


def build_preview_simulation(context, cells_per_step: float, steps: int):
    """A wind-only ``Simulation`` of the scene's terrain, porous fences and settings, and
    its step count. Raises SnowInputError for bad settings, terrain or fences (before
    allocating)."""
    build, steps = read_preview(context, cells_per_step, steps)
    return build(), steps


def _describe(simulation, steps_done: int, seconds: float) -> str:
    text = (f"Wind preview: {steps_done} steps of {simulation.settings.time_step:.3g} s on "
            f"{simulation.backend.describe()} in {seconds:.2f} s")
    diagnostics = simulation.diagnostics.wind if simulation.step_index else None
    if diagnostics is not None:
        state = "converged" if diagnostics.converged else "NOT converged"
        text += (f"; pressure solve {state} (residual {diagnostics.relative_residual:.2g}, "
                 f"{diagnostics.iterations} iterations), max |div| "
                 f"{diagnostics.divergence_before:.3g} -> {diagnostics.divergence_after:.3g} 1/s")
    return text


class SNOWFALL_OT_preview_wind(BackgroundOperator, bpy.types.Operator):
    """Step the wind alone (no flakes) from the current settings and show it in the
    viewport as it develops; Esc stops (the wind so far stays shown)"""

    bl_idname = "snowfall.preview_wind"
    bl_label = "Preview Wind"
    bl_options = {"REGISTER"}

    steps: IntProperty(
        name="Steps", default=-1, min=-1,
        description="Wind steps to run (-1 = the panel's Preview Steps; 0 = automatic)")

    #: Least time (s) between two host copies of the field shown while it develops.
    PUBLISH_SECONDS = 0.1

    @classmethod
    def poll(cls, context):
        return (hasattr(context.scene, "snowfall")
                and hasattr(context.scene, "snowfall_wind_preview"))

    def prepare(self, context):
        preview = context.scene.snowfall_wind_preview
        steps = self.steps if self.steps >= 0 else preview.preview_steps
        build, total = read_preview(context, preview.cells_per_step, steps)
        started = time.perf_counter()

        def work(task):
            task.report(0.0, "building the wind grid")
            sim = build()
            last_publish = 0.0
            while sim.step_index < total:
                task.check_stop()
                sim.step(1)
                task.report(sim.step_index / total, f"step {sim.step_index} of {total}")
                now = time.perf_counter()
                # each publish copies the field to the host and makes the overlay rebuild
                # its geometry: keep that under about a third of the time
                interval = max(self.PUBLISH_SECONDS, 3.0 * ShownWind.store.build_seconds)
                if sim.step_index < total and now - last_publish >= interval:
                    task.post((sim.wind_field(), sim.step_index, sim.time))
                    last_publish = now
            task.post((sim.wind_field(), sim.step_index, sim.time))
            return _describe(sim, total, time.perf_counter() - started)

        def apply(_context, message):
            self.report({"INFO"}, message)
            return {"FINISHED"}

        return work, apply

    def on_message(self, context, message):
        field, step, seconds = message
        ShownWind.publish(field, step, seconds, source="preview")


# --- wind to object ----------------------------------------------------------------------------

def _srgb_to_linear(channel: float) -> float:
    if channel <= 0.04045:
        return channel / 12.92
    return ((channel + 0.055) / 1.055) ** 2.4


def speed_material(speed_max: float, name: str = SPEED_MATERIAL):
    """A material colouring by the ``speed`` attribute on the overlay's colour scale
    (0 .. ``speed_max`` m/s), slightly emissive so thin lines read in renders."""
    material = bpy.data.materials.new(name)
    tree = node_tree(material)
    nodes, links = tree.nodes, tree.links
    principled = next(n for n in nodes if n.type == "BSDF_PRINCIPLED")
    attribute = nodes.new("ShaderNodeAttribute")
    attribute.attribute_type = "GEOMETRY"
    attribute.attribute_name = "speed"
    attribute.location = (-900, 300)
    to_unit = nodes.new("ShaderNodeMapRange")
    to_unit.location = (-680, 300)
    to_unit.inputs["From Min"].default_value = 0.0
    to_unit.inputs["From Max"].default_value = float(speed_max)
    to_unit.clamp = True
    ramp = nodes.new("ShaderNodeValToRGB")
    ramp.location = (-460, 300)
    elements = ramp.color_ramp.elements
    while len(elements) < len(SPEED_COLORMAP):
        elements.new(0.5)
    for element, (position, rgb) in zip(elements, SPEED_COLORMAP):
        element.position = position
        element.color = tuple(_srgb_to_linear(c) for c in rgb) + (1.0,)
    links.new(attribute.outputs["Fac"], to_unit.inputs["Value"])
    links.new(to_unit.outputs["Result"], ramp.inputs["Fac"])
    links.new(ramp.outputs["Color"], principled.inputs["Base Color"])
    links.new(ramp.outputs["Color"], principled.inputs["Emission Color"])
    principled.inputs["Emission Strength"].default_value = 0.6
    principled.inputs["Roughness"].default_value = 0.6
    material["snowfall_speed_max"] = float(speed_max)
    return material


def streamline_object(context, streamlines, radius: float, name: str = STREAMLINES_OBJECT):
    """A Curves object of ``streamlines`` (metres -> scene units) with float point
    attributes ``speed`` (m/s) and ``radius``, linked to the active collection."""
    scale = unit_scale(context.scene)
    curves = bpy.data.hair_curves.new(name)
    curves.add_curves([int(c) for c in streamlines.counts])
    curves.position_data.foreach_set(
        "vector", (streamlines.points / scale).astype(np.float32).ravel())
    speed = curves.attributes.new("speed", "FLOAT", "POINT")
    speed.data.foreach_set("value", streamlines.speeds.astype(np.float32))
    radius_attribute = curves.attributes.get("radius") or curves.attributes.new(
        "radius", "FLOAT", "POINT")
    radius_attribute.data.foreach_set(
        "value", np.full(len(streamlines.points), radius / scale, np.float32))
    curves.materials.append(speed_material(streamlines.scale.maximum))
    obj = bpy.data.objects.new(name, curves)
    obj["snowfall_speed_max"] = streamlines.scale.maximum
    _output_collection(context).objects.link(obj)
    return obj


def _output_collection(context):
    """The active collection, but the scene's own where the active one is (in) the Porous
    Fences collection: a wind object there would be baked as a fence."""
    fences = context.scene.snowfall.fence_collection
    active = context.collection
    if fences is not None and (active == fences or active in fences.children_recursive):
        return context.scene.collection
    return active


def arrow_object(context, arrows, name: str = ARROWS_OBJECT):
    """A mesh object of 3D ``arrows`` with a float point attribute ``speed`` (m/s)."""
    scale = unit_scale(context.scene)
    vertices, triangles, speeds = arrow_mesh(arrows)
    mesh = bpy.data.meshes.new(name)
    mesh.vertices.add(len(vertices))
    mesh.vertices.foreach_set("co", (vertices / scale).astype(np.float32).ravel())
    mesh.loops.add(triangles.size)
    mesh.loops.foreach_set("vertex_index", triangles.astype(np.int32).ravel())
    mesh.polygons.add(len(triangles))
    mesh.polygons.foreach_set("loop_start", np.arange(0, triangles.size, 3, dtype=np.int32))
    mesh.update()
    mesh.validate()
    speed = mesh.attributes.new("speed", "FLOAT", "POINT")
    speed.data.foreach_set("value", speeds.astype(np.float32))
    mesh.materials.append(speed_material(arrows.scale.maximum))
    obj = bpy.data.objects.new(name, mesh)
    obj["snowfall_speed_max"] = arrows.scale.maximum
    _output_collection(context).objects.link(obj)
    return obj


class SNOWFALL_OT_wind_to_object(bpy.types.Operator):
    """Turn the wind shown in the viewport into a renderable object: streamline curves or
    a mesh of arrows, with a 'speed' attribute (m/s) and a material colouring by it"""

    bl_idname = "snowfall.wind_to_object"
    bl_label = "Wind to Object"
    bl_options = {"REGISTER", "UNDO"}

    style: EnumProperty(
        name="Style", default="STREAMLINES",
        items=[("STREAMLINES", "Streamlines", "Curves that follow the wind"),
               ("ARROWS", "Arrows", "A mesh of 3D arrows along the wind")])
    density: IntProperty(
        name="Density", default=0, min=0, soft_max=128,
        description="Seeds (or arrows) along the longer side (0 = the overlay's density)")
    thickness: FloatProperty(
        name="Thickness", default=0.06, min=0.001, soft_max=0.5,
        description="Streamline radius as a fraction of a wind cell")

    @classmethod
    def poll(cls, context):
        return hasattr(context.scene, "snowfall_wind_preview")

    def execute(self, context):
        field = ShownWind.store.wind_field
        if field is None:
            self.report({"ERROR"}, "No wind to convert: run Preview Wind (or bake) first")
            return {"CANCELLED"}
        preview = context.scene.snowfall_wind_preview
        grid = field.grid
        stride = stride_for_density(grid, self.density or preview.density)
        seeds = seed_points(field.u, field.v, field.w, field.solid, grid, preview.placement,
                            stride, slice_height(grid, preview.slice_height))
        speed_max = preview.speed_max or ShownWind.store.field_speed_max()
        if self.style == "STREAMLINES":
            lines = trace_streamlines(field.u, field.v, field.w, field.solid, grid, seeds,
                                      speed_max=speed_max)
            if lines.line_count == 0:
                self.report({"ERROR"}, "No streamline: every seed is inside an obstacle or in "
                            "still air (raise Slice Height)")
                return {"CANCELLED"}
            obj = streamline_object(context, lines, self.thickness * grid.cell_size)
            what = f"{lines.line_count} streamlines"
        else:
            arrows = wind_arrows(field.u, field.v, field.w, field.solid, grid, seeds,
                                 stride * grid.cell_size, preview.arrow_scale, speed_max)
            if len(arrows.speeds) == 0:
                self.report({"ERROR"}, "No arrow: every point is inside an obstacle or in "
                            "still air (raise Slice Height)")
                return {"CANCELLED"}
            obj = arrow_object(context, arrows)
            what = f"{len(arrows.speeds)} arrows"
        for other in context.selected_objects:
            other.select_set(False)
        obj.select_set(True)
        context.view_layer.objects.active = obj
        self.report({"INFO"}, f"{obj.name}: {what}, colour scale "
                              f"{speed_scale(speed_max).describe()}")
        return {"FINISHED"}


CLASSES = (SNOWFALL_OT_preview_wind, SNOWFALL_OT_wind_to_object)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
