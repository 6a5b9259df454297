"""One click to make the scene's render settings suit falling snow (``snowfall.setup_render``):
Cycles motion blur with a short shutter (flakes draw short streaks, as on film at a 90
degree shutter), enough transparent bounces for the soft flake material to stay soft
where flakes overlap, and the flake material and size variation of the current add-on on
an already baked flakes object. Optionally depth of field focused on the terrain, so
flakes close to the camera turn into large soft discs.

Only render settings, the camera's depth of field and the flakes' material change; the bake
and the snow do not.
"""
from __future__ import annotations

import bpy
import numpy as np

from ..properties import flake_radius, terrain_bounds
from . import particle_output
from .flake_material import ensure_flake_material

#: Shutter in frames: 0.25, a 90 degree shutter (1/96 s at 24 fps): flakes in a 10 m/s
#: wind draw streaks of about 10 cm, a few times their size, instead of the faint smears
#: of film's 180 degree shutter (0.5) that 16 samples break into noise.
SHUTTER = 0.25
#: Transparent bounces Cycles follows (the flakes' soft rims are transparent).
TRANSPARENT_BOUNCES = 32
#: f-stop of the depth of field (larger: less blur).
F_STOP = 4.0


def setup_render(scene, depth_of_field: bool = False, shutter: float = SHUTTER) -> list:
    """Apply the snow render settings to ``scene``; returns what changed, as short texts."""
    changes = []
    render = scene.render
    render.use_motion_blur = True
    render.motion_blur_shutter = float(shutter)
    changes.append(f"motion blur on, shutter {shutter:g} frame")
    for owner in (render, getattr(scene, "cycles", None)):
        if owner is not None and hasattr(owner, "motion_blur_position"):
            owner.motion_blur_position = 'CENTER'
            break
    cycles = getattr(scene, "cycles", None)
    if cycles is not None and hasattr(cycles, "transparent_max_bounces"):
        cycles.transparent_max_bounces = max(int(cycles.transparent_max_bounces),
                                             TRANSPARENT_BOUNCES)
        changes.append(f"{cycles.transparent_max_bounces} transparent bounces")
    props = scene.snowfall
    emitter = props.flake_emitter
    if emitter is not None:
        radius = flake_radius(props, scene)
        ensure_flake_material(radius)
        for modifier in emitter.modifiers:
            if modifier.type == 'PARTICLE_SYSTEM' and \
                    modifier.particle_system.name == particle_output.SYSTEM_NAME:
                modifier.particle_system.settings.size_random = particle_output.FLAKE_SIZE_RANDOM
        changes.append("soft flake material")
    camera = scene.camera
    if depth_of_field and camera is not None and camera.type == 'CAMERA':
        bounds = terrain_bounds(props)
        if bounds is not None:
            centre = 0.5 * (bounds[0] + bounds[1])
            distance = float(np.linalg.norm(np.array(camera.matrix_world.translation) - centre))
            camera.data.dof.use_dof = True
            camera.data.dof.focus_object = None
            camera.data.dof.focus_distance = distance
            camera.data.dof.aperture_fstop = F_STOP
            changes.append(f"depth of field at {distance:.3g} (f/{F_STOP:g})")
    return changes


class SNOWFALL_OT_setup_render(bpy.types.Operator):
    """Set the scene's render up for falling snow: motion blur with a short shutter, enough
    transparent bounces, the soft flake material (optionally depth of field on the terrain)"""
    bl_idname = "snowfall.setup_render"
    bl_label = "Set Up Render for Snow"
    bl_options = {"REGISTER", "UNDO"}

    depth_of_field: bpy.props.BoolProperty(
        name="Depth of Field", default=False,
        description="Focus the scene camera on the terrain's centre (f/4): flakes near the "
                    "camera blur into large soft discs (needs more samples)")
    shutter: bpy.props.FloatProperty(
        name="Shutter", default=SHUTTER, min=0.01, max=2.0,
        description="Motion blur shutter, in frames (0.25: a 90 degree shutter; 0.5: film's "
                    "180 degree shutter, longer streaks)")

    @classmethod
    def poll(cls, context):
        return context.scene is not None and hasattr(context.scene, "snowfall")

    def execute(self, context):
        changes = setup_render(context.scene, self.depth_of_field, self.shutter)
        self.report({"INFO"}, "Snow render: " + ", ".join(changes))
        return {"FINISHED"}


CLASSES = (SNOWFALL_OT_setup_render,)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
