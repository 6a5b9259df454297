"""The add-on's settings as Blender properties: the property groups behind ``Scene.snowfall``.

Units: properties typed as lengths or velocities are stored in Blender units (and shown
in the scene's unit system); ``mapping.to_snow_settings`` converts them to SI with the
scene's ``unit_settings.scale_length``. Angles are stored in radians (Blender's convention)
and handed to the engine in degrees. The snowfall rate is a real-world rate in m/h.
Defaults come from ``SnowSettings()``.

Nothing here records that a bake is running: that lives only in the running operator
(see operators/bake.py), so no "running" state is ever saved in a .blend.
"""
from __future__ import annotations

import math

import bpy
from bpy.app.handlers import persistent
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty,
                       IntProperty, PointerProperty, StringProperty)

from ..blender_compat import PATH_OPTIONS
from ..snow_addon.backend import BACKEND_CHOICES
from ..snow_addon.fences import DEFAULT_POROSITY, MAX_POROSITY, MIN_POROSITY
from ..snow_addon.settings import SnowSettings

#: Default cache folder: empty, which means a folder of the .blend's own beside it,
#: ``//blendcache_<blend name>/snowfall`` ("//" is Blender's blend-relative prefix; see
#: bake_folder.cache_folder_setting), so two .blend files saved in one folder never share one.
DEFAULT_CACHE_FOLDER = ""
#: The default before: one folder shared by every .blend saved in the same folder. Files
#: baked into it keep it (``pin_legacy_cache_folders``).
LEGACY_CACHE_FOLDER = "//snowfall_cache"

_DEFAULTS = SnowSettings()

# Wind-driven drift: the engine's settings may not have these yet (they map only where
# they exist, see mapping.py); these stand-ins are the defaults until they do.
_DRIFT_STRENGTH = getattr(_DEFAULTS, "drift_strength", 1.0)
_ROUGHNESS_LENGTH = getattr(_DEFAULTS, "roughness_length", 5e-4)
_TURBULENCE = getattr(_DEFAULTS, "turbulence", 1.0)
_WIND_MIXING = getattr(_DEFAULTS, "wind_mixing", 1.0)


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

    # --- wind-driven drift (saltation along the surface wind) --------------------------------
    drift_enabled: BoolProperty(
        name="Wind-driven Drift", default=True,
        description="Saltation: snow eroded where the surface wind is strong moves along it "
                    "and settles where it slows (drifts in the lee, scoured crests)")
    drift_threshold: FloatProperty(
        name="Threshold Friction Velocity", default=0.0, min=0.0, soft_max=2.0,
        unit="VELOCITY",
        description="Friction velocity u*_t above which the wind lifts snow. 0: by snow type")
    drift_strength: FloatProperty(
        name="Drift Strength", default=_DRIFT_STRENGTH, min=0.0, soft_max=10.0,
        description="Multiplier on the saltation flux (0 = no drift, 1 = the model's flux)")
    roughness_length: FloatProperty(
        name="Roughness Length", default=_ROUGHNESS_LENGTH, min=1e-6, soft_max=0.01,
        precision=5, subtype="DISTANCE", unit="LENGTH",
        description="Aerodynamic roughness z0 of the snow surface (log wind profile), "
                    "typically 0.0001 to 0.001 m")
    wind_mixing: FloatProperty(
        name="Wind Mixing", default=_WIND_MIXING, min=0.0, max=10.0, soft_max=3.0,
        description="Multiplier on the wind's turbulent mixing (eddy viscosity): fast air "
                    "mixes down behind fences and blocks, so their wakes close again "
                    "(0 = inviscid wind, whose wakes keep growing)")
    turbulence: FloatProperty(
        name="Turbulence", default=_TURBULENCE, min=0.0, max=100.0, soft_max=5.0,
        description="Multiplier on the near-ground eddies that swirl the flakes and mix them "
                    "into the lee of obstacles (0 = flakes follow the mean wind only)")

    # --- porous snow fences (a Simulation argument of their own, not a SnowSettings field) --
    fence_collection: PointerProperty(
        name="Porous Fences", type=bpy.types.Collection,
        description="Mesh objects in this collection (and its child collections) are slatted "
                    "snow fences that slow the wind; flakes and snow pass through them. Model "
                    "each as a vertical plane or a box thinner than a wind cell")
    fence_porosity: FloatProperty(
        name="Fence Porosity", default=DEFAULT_POROSITY, min=MIN_POROSITY, max=MAX_POROSITY,
        subtype="FACTOR",
        description="The open share of the fences' face (0.5 is the usual snow fence, "
                    "Tabler); a solid wall belongs in the terrain")

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
    wind_boundary: EnumProperty(
        name="Terrain Boundary", default=_DEFAULTS.wind_boundary,
        items=[("cut_cells", "Cut Cells",
                "Every face of the wind grid open by the share of it above the terrain: the "
                "wind follows slopes and speeds up over crests (recommended)"),
               ("voxels", "Voxels",
                "A wind cell is solid when its centre lies below the terrain: a staircase "
                "that slows the wind over slopes (earlier versions; a cheaper pressure solve)")],
        description="How the terrain meets the wind")
    side_walls: BoolProperty(
        name="Side Walls", default=_DEFAULTS.side_walls,
        description="The sides of the wind domain that the wind runs parallel to are "
                    "free-slip walls that carry the gusts' crosswind, so the snow along them "
                    "is like the snow between them. Off: they are open, let the gusts' "
                    "crosswind air out but not in, and snow piles or scours along those edges")
    cache_folder: StringProperty(
        name="Cache Folder", default=DEFAULT_CACHE_FOLDER, subtype="DIR_PATH",
        options=PATH_OPTIONS,
        description="Folder of the bake: snow, flakes and resume state ('//' = beside the "
                    ".blend file). Empty: //blendcache_<blend name>/snowfall, the .blend's own")

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


CLASSES = (SnowfallTerrainItem, SnowfallSettings)


@persistent
def pin_legacy_cache_folders(*_args):
    """Versioning of files baked when every .blend's default cache folder was the shared
    ``//snowfall_cache``: a file stores no value for a setting left at its default, so such
    a file would read the new default and lose track of its bake (Resume, Free). A scene
    whose setting is empty and whose flake cache (a path the .blend stores) lies in the old
    folder gets the old folder as its setting, and keeps baking, resuming and freeing there."""
    for scene in bpy.data.scenes:
        props = scene.snowfall
        emitter = props.flake_emitter
        if props.cache_folder.strip() or emitter is None or scene.library is not None:
            continue
        paths = [system.point_cache.filepath.replace("\\", "/")
                 for system in emitter.particle_systems]
        # Flakes baked as a Geometry Nodes bake (Blender 4.2-4.5): their folder.
        paths.append(str(emitter.get("snowfall_flake_bake_dir", "")).replace("\\", "/"))
        if any(path.startswith(LEGACY_CACHE_FOLDER + "/") for path in paths):
            props.cache_folder = LEGACY_CACHE_FOLDER


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.snowfall = PointerProperty(type=SnowfallSettings)
    if pin_legacy_cache_folders not in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.append(pin_legacy_cache_folders)
    if isinstance(bpy.data, bpy.types.BlendData):   # not while Blender starts up
        pin_legacy_cache_folders()                  # a file opened before registering


def unregister():
    while pin_legacy_cache_folders in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.remove(pin_legacy_cache_folders)
    del bpy.types.Scene.snowfall
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
