"""The add-on's settings as Blender properties (``Scene.snowfall``) and their one mapping
onto the engine's ``SnowSettings`` (``to_snow_settings``).

Units: properties typed as lengths or velocities are stored in Blender units (and shown
in the scene's unit system); ``to_snow_settings`` converts them to SI with the scene's
``unit_settings.scale_length``. Angles are stored in radians (Blender's convention) and
handed to the engine in degrees. The snowfall rate is a real-world rate in m/h.

Nothing here records that a bake is running: that lives only in the running operator
(see operators/bake.py), so no "running" state is ever saved in a .blend.
"""
from __future__ import annotations

import math

import bpy
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty,
                       IntProperty, PointerProperty, StringProperty)

from ..snow_addon.backend import BACKEND_CHOICES
from ..snow_addon.errors import SnowInputError
from ..snow_addon.settings import SnowSettings

#: Default cache folder, relative to the .blend ("//" is Blender's blend-relative prefix).
DEFAULT_CACHE_FOLDER = "//snowfall_cache"

_DEFAULTS = SnowSettings()


def _is_mesh(_self, obj):
    return obj.type == "MESH"


class SnowfallTerrainItem(bpy.types.PropertyGroup):
    """One terrain object (a mesh) taking part in the bake."""

    object: PointerProperty(name="Object", type=bpy.types.Object, poll=_is_mesh)


_BACKEND_ITEMS = [
    ("auto", "Automatic", "The GPU (CuPy + CUDA) when there is one, else the CPU"),
    ("gpu", "GPU", "CuPy on an NVIDIA card (fails when CuPy or CUDA is missing)"),
    ("cpu", "CPU", "Numba on all CPU cores"),
    ("numpy", "NumPy reference", "The plain NumPy reference kernels (very slow; for checks)"),
]
assert tuple(item[0] for item in _BACKEND_ITEMS) == BACKEND_CHOICES


class SnowfallSettings(bpy.types.PropertyGroup):
    """Everything a snowfall bake needs (``Scene.snowfall``)."""

    # --- terrain ---------------------------------------------------------------------------
    terrain_objects: CollectionProperty(type=SnowfallTerrainItem, name="Terrain Objects")
    heightmap_resolution: IntProperty(
        name="Heightmap Resolution", default=_DEFAULTS.heightmap_resolution, min=4, max=8192,
        soft_max=2048, description="Heightmap nodes along the longer side of the terrain")

    # --- wind grid ---------------------------------------------------------------------------
    wind_cell_size: FloatProperty(
        name="Wind Cell Size", default=0.0, min=0.0, subtype="DISTANCE", unit="LENGTH",
        description="Edge of the cubic wind cells. 0: the longer terrain side divided by "
                    "Wind Resolution")
    wind_resolution: IntProperty(
        name="Wind Resolution", default=_DEFAULTS.wind_resolution, min=4, max=2048,
        soft_max=512, description="Wind cells along the longer side (when Wind Cell Size is 0)")
    sky_height: FloatProperty(
        name="Sky Height", default=0.0, min=0.0, subtype="DISTANCE", unit="LENGTH",
        description="Height of the wind domain above the highest terrain point. 0: a quarter "
                    "of the longer terrain side, at least 8 wind cells")

    # --- wind (keyframable) -----------------------------------------------------------------
    wind_speed: FloatProperty(
        name="Wind Speed", default=_DEFAULTS.wind_speed, min=0.0, soft_max=40.0,
        unit="VELOCITY", options={"ANIMATABLE"},
        description="Inflow wind speed before gusts (keyframable)")
    wind_direction: FloatProperty(
        name="Wind Direction", default=math.radians(_DEFAULTS.wind_direction),
        subtype="ANGLE", unit="ROTATION", options={"ANIMATABLE"},
        description="Heading the wind blows toward, counter-clockwise from +X "
                    "(90 degrees = toward +Y; keyframable)")
    gust_strength: FloatProperty(
        name="Gust Strength", default=_DEFAULTS.gust_strength, min=0.0, max=1.0,
        subtype="FACTOR", description="Relative speed variation of the gusts (0 = steady)")
    gust_period: FloatProperty(
        name="Gust Period", default=_DEFAULTS.gust_period, min=0.01, soft_max=30.0,
        subtype="TIME_ABSOLUTE", unit="TIME_ABSOLUTE", description="Seconds between gusts")
    gust_direction_jitter: FloatProperty(
        name="Gust Direction Jitter", default=math.radians(_DEFAULTS.gust_direction_jitter),
        min=0.0, max=math.pi, subtype="ANGLE", unit="ROTATION",
        description="Largest deviation of a gust from the mean direction")

    # --- flakes ------------------------------------------------------------------------------
    flake_count: IntProperty(
        name="Flakes", default=_DEFAULTS.flake_count, min=1, soft_max=10_000_000,
        description="Number of snowflakes simulated (and shown as particles)")
    snow_type: EnumProperty(
        name="Snow", default=_DEFAULTS.snow_type,
        items=[("dry", "Dry", "Dry snow: flakes fall at 1-2 m/s"),
               ("wet", "Wet", "Wet snow: flakes fall at 0.5-1.5 m/s")])
    flake_size: FloatProperty(
        name="Flake Size", default=0.01, min=0.0001, soft_max=0.1, subtype="DISTANCE",
        unit="LENGTH", description="Size of a rendered snowflake")

    # --- snow cover --------------------------------------------------------------------------
    snowfall_rate: FloatProperty(
        name="Snowfall Rate (m/h)", default=_DEFAULTS.snowfall_rate, min=0.0, soft_max=100.0,
        description="Snow depth added per hour on open level ground, in metres per hour")
    use_redistribution: BoolProperty(
        name="Redistribution", default=True,
        description="Let snow steeper than the angle of repose slide down-slope")
    angle_of_repose: FloatProperty(
        name="Angle of Repose", default=math.radians(_DEFAULTS.angle_of_repose),
        min=math.radians(1.0), max=math.radians(89.0), subtype="ANGLE", unit="ROTATION",
        description="Steepest stable snow slope")
    redistribution_min_depth: FloatProperty(
        name="Minimum Depth", default=_DEFAULTS.redistribution_min_depth, min=0.0,
        subtype="DISTANCE", unit="LENGTH", description="Snow thinner than this stays put")
    redistribution_fraction: FloatProperty(
        name="Transfer Fraction", default=_DEFAULTS.redistribution_fraction, min=0.0,
        max=0.25, description="Fraction of the unstable snow moved per step and neighbour pair")

    # --- stepping ----------------------------------------------------------------------------
    substeps: IntProperty(
        name="Substeps", default=1, min=1, max=64,
        description="Simulation steps per frame (time step = 1 / (fps x substeps))")
    seed: IntProperty(name="Seed", default=0, min=0, description="Random seed of the bake")
    backend: EnumProperty(name="Backend", items=_BACKEND_ITEMS, default="auto")
    pressure_solver: EnumProperty(
        name="Pressure Solver", default=_DEFAULTS.pressure_solver,
        items=[("mgpcg", "Multigrid CG", "Solve to the relative tolerance (recommended)"),
               ("sor5", "5 SOR sweeps", "The papers' fixed five SOR sweeps (for comparison)")])
    cache_folder: StringProperty(
        name="Cache Folder", default=DEFAULT_CACHE_FOLDER, subtype="DIR_PATH",
        options={"PATH_SUPPORTS_BLEND_RELATIVE"},
        description="Folder for the resume state of a bake ('//' = beside the .blend file)")

    # --- results of the last bake (data, not a running state) ---------------------------------
    baked_frame_start: IntProperty(name="First Baked Frame", default=0,
                                   options=set())
    baked_frame_end: IntProperty(
        name="Last Baked Frame", default=0, options=set(),
        description="Last frame whose snow and flakes are stored")
    has_bake: BoolProperty(name="Has Bake", default=False, options=set())
    backend_used: StringProperty(name="Backend Used", default="", options=set())
    backend_reason: StringProperty(name="Backend Reason", default="", options=set())
    seconds_per_frame: FloatProperty(
        name="Seconds per Frame", default=0.0, options=set(),
        description="Measured wall time per baked frame (last bake or measurement)")
    heightmap_object: PointerProperty(name="Heightmap Preview", type=bpy.types.Object)
    flake_emitter: PointerProperty(name="Flake Emitter", type=bpy.types.Object)


_ANIMATED = ("wind_speed", "wind_direction")


def unit_scale(scene) -> float:
    """Metres per Blender unit in ``scene``."""
    scale = float(scene.unit_settings.scale_length)
    return scale if scale > 0.0 else 1.0


def frames_per_second(scene) -> float:
    return scene.render.fps / scene.render.fps_base


def _fcurve(scene, data_path):
    """The F-curve animating ``scene.<data_path>``, or None (Blender 4.4+ slotted actions,
    with the pre-4.4 ``action.fcurves`` as fallback)."""
    anim = scene.animation_data
    if anim is None or anim.action is None:
        return None
    action = anim.action
    fcurves = None
    slot = getattr(anim, "action_slot", None)
    if slot is not None:
        from bpy_extras import anim_utils

        bag = anim_utils.action_get_channelbag_for_slot(action, slot)
        fcurves = bag.fcurves if bag is not None else None
    elif hasattr(action, "fcurves"):
        fcurves = action.fcurves
    if fcurves is None:
        return None
    return fcurves.find(data_path)


def sample_property(scene, name: str, frame: float) -> float:
    """The value of ``scene.snowfall.<name>`` at ``frame`` (its F-curve when animated)."""
    curve = _fcurve(scene, f"snowfall.{name}")
    if curve is None:
        return float(getattr(scene.snowfall, name))
    return float(curve.evaluate(frame))


def wind_keys(scene, frame_start: int, frame_end: int) -> tuple:
    """((time_s, speed_m_s, direction_deg), ...) sampled at every frame from ``frame_start``
    to ``frame_end`` when the wind is keyframed; () when it is not (the constant values
    are then used). Time 0 is ``frame_start``."""
    if all(_fcurve(scene, f"snowfall.{name}") is None for name in _ANIMATED):
        return ()
    fps = frames_per_second(scene)
    scale = unit_scale(scene)
    keys = []
    for frame in range(frame_start, frame_end + 1):
        speed = max(0.0, sample_property(scene, "wind_speed", frame)) * scale
        direction = math.degrees(sample_property(scene, "wind_direction", frame))
        keys.append(((frame - frame_start) / fps, speed, direction))
    return tuple(keys)


def to_snow_settings(props, scene, frame_start: int | None = None,
                     frame_end: int | None = None) -> SnowSettings:
    """The engine settings for ``props`` (a ``SnowfallSettings``) in ``scene``, in SI units.

    Animated wind is sampled at every frame of ``frame_start..frame_end`` (the scene's
    frame range by default). Raises SnowInputError (via ``validate``) for bad values.
    """
    if frame_start is None:
        frame_start = scene.frame_start
    if frame_end is None:
        frame_end = scene.frame_end
    scale = unit_scale(scene)
    fps = frames_per_second(scene)
    if not (fps > 0.0):
        raise SnowInputError("fps", f"the scene's frame rate must be positive, got {fps}",
                             "24 fps")
    settings = SnowSettings(
        heightmap_resolution=int(props.heightmap_resolution),
        wind_resolution=int(props.wind_resolution),
        wind_cell_size=props.wind_cell_size * scale if props.wind_cell_size > 0.0 else None,
        sky_height=props.sky_height * scale if props.sky_height > 0.0 else None,
        wind_speed=sample_property(scene, "wind_speed", frame_start) * scale,
        wind_direction=math.degrees(sample_property(scene, "wind_direction", frame_start)),
        wind_keys=wind_keys(scene, frame_start, frame_end),
        gust_strength=float(props.gust_strength),
        gust_period=float(props.gust_period),
        gust_direction_jitter=math.degrees(props.gust_direction_jitter),
        pressure_solver=props.pressure_solver,
        flake_count=int(props.flake_count),
        snow_type=props.snow_type,
        snowfall_rate=float(props.snowfall_rate),
        angle_of_repose=math.degrees(props.angle_of_repose),
        redistribution_min_depth=props.redistribution_min_depth * scale,
        redistribution_fraction=(float(props.redistribution_fraction)
                                 if props.use_redistribution else 0.0),
        time_step=1.0 / (fps * int(props.substeps)),
        seed=int(props.seed),
    )
    return settings.validate()


def terrain_objects(props) -> list:
    """The terrain objects still present (deleted objects drop out of the list)."""
    return [item.object for item in props.terrain_objects if item.object is not None]


CLASSES = (SnowfallTerrainItem, SnowfallSettings)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.snowfall = PointerProperty(type=SnowfallSettings)


def unregister():
    del bpy.types.Scene.snowfall
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
