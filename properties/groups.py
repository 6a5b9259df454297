"""The add-on's settings as Blender properties: the property groups behind ``Scene.snowfall``.

Units: properties typed as lengths or velocities are stored in Blender units (and shown
in the scene's unit system); ``mapping.to_snow_settings`` converts them to SI with the
scene's ``unit_settings.scale_length``. Angles are stored in radians (Blender's convention)
and handed to the engine in degrees. The snowfall rate is a real-world rate in m/h.

Defaults are the add-on's own, chosen so that a first bake of a new scene shows snow and
drifts (``ARTIST_DEFAULTS``): the engine's ``SnowSettings()`` defaults (benchmarks and
validation use them) differ for the amount of snow, the wind speed and the flakes.

Only Wind Speed and Wind From are animatable (the bake follows their keyframes); every
other setting has ``options=set()``, so Blender shows no keyframe dot where a keyframe
would be ignored.

Files saved before this layout (``SETTINGS_VERSION`` 2) load with their own values:
``migrate_scene`` runs on load and keeps their snowfall rate (mode By Rate), their wind
(the stored heading, keyframes included, turned into Wind From), their wind speed and
their flake count and size (Automatic off), defaults of then included. Files saved before
``SETTINGS_VERSION`` 4 keep the wrap-around upwind fetch they baked with, unless they chose
another (the open snowfield is the default from version 4 on).

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


#: Version of the settings layout a scene was last saved (or registered) with. 2: snow
#: depth / rate modes, Wind From, automatic flake count and size; 3: Upwind Fetch (open
#: snowfield by default; older files keep "wrap"). Scenes with stored
#: settings and no version are older files (``migrate_scene``).
SETTINGS_VERSION = 4

#: The defaults of the settings that differ from an older add-on's; ``migrate_scene``
#: restores the old ones (what an older file meant by a setting it did not store).
OLD_DEFAULTS = {"snowfall_rate": 1.0, "wind_speed": 5.0, "flake_count": 100_000,
                "flake_size": 0.01, "wind_direction": 0.0}

#: The add-on's own defaults for a new scene (a first bake shows snow and drifts):
#: 10 cm of snow by the end of the bake, an 11 m/s wind (the dry snow's drift threshold is
#: about 7.7 m/s at 10 m, Li and Pomeroy 1997), from the west (blowing toward +X).
ARTIST_DEFAULTS = {"snow_depth": 0.10, "snowfall_rate": 20.0, "wind_speed": 11.0,
                   "wind_from": 270.0}

#: Setting values for "Automatic" when its toggle is switched off and no manual value was
#: ever typed (lengths in metres, velocities in m/s; then divided by the unit scale).
_FIRST_MANUAL = {"wind_cell_size": 1.0, "sky_height": 10.0, "drift_threshold": 0.32}


def _auto_getter(name):
    def get(self):
        return not getattr(self, name) > 0.0
    return get


def _auto_setter(name):
    """Automatic on: the value is kept aside and the setting stored as 0 (which older files
    and scripts mean by automatic, so they keep working). Off: the value kept aside, else
    the resolved automatic value for the current terrain (mapping.automatic_value)."""
    def set_(self, value):
        current = float(getattr(self, name))
        if value:
            if current > 0.0:
                setattr(self, name + "_manual", current)
                setattr(self, name, 0.0)
            return
        if current > 0.0:
            return
        manual = float(getattr(self, name + "_manual"))
        if not manual > 0.0:
            from .mapping import automatic_value
            scene = self.id_data if isinstance(self.id_data, bpy.types.Scene) else None
            manual = automatic_value(self, scene, name) if scene is not None else 0.0
            if not manual > 0.0:
                manual = _FIRST_MANUAL[name]
        setattr(self, name, manual)
    return set_


def _manual_count(self, _context):
    """A flake count typed (in the panel or by a script) is a count the artist wants."""
    if self.use_auto_flake_count:
        self.use_auto_flake_count = False


def _manual_size(self, _context):
    if self.use_auto_flake_size:
        self.use_auto_flake_size = False


def _by_rate(self, _context):
    """A snowfall rate set (a script's, or typed) is the amount wanted: Amount By Rate, as
    files and scripts from before the depth setting mean it."""
    if self.snowfall_mode != "RATE":
        self.snowfall_mode = "RATE"


def _by_depth(self, _context):
    if self.snowfall_mode != "DEPTH":
        self.snowfall_mode = "DEPTH"


def _heading_get(self):
    return 1.5 * math.pi - self.wind_from


def _heading_set(self, value):
    self.wind_from = 1.5 * math.pi - value


class SnowfallSettings(bpy.types.PropertyGroup):
    """Everything a snowfall bake needs (``Scene.snowfall``)."""

    settings_version: IntProperty(name="Settings Version", default=0, options=set(),
                                  description="Layout version the settings were saved with")

    # --- terrain ---------------------------------------------------------------------------
    terrain_objects: CollectionProperty(type=SnowfallTerrainItem, name="Terrain Objects",
                                        options=set())
    heightmap_resolution: IntProperty(
        name="Heightmap Resolution", default=_DEFAULTS.heightmap_resolution, min=4, max=8192,
        soft_max=2048, options=set(),
        description="Heightmap nodes along the longer side of the terrain")

    # --- wind grid ---------------------------------------------------------------------------
    wind_cell_size: FloatProperty(
        name="Wind Cell Size", default=0.0, min=0.0, subtype="DISTANCE", unit="LENGTH",
        options=set(),
        description="Edge of the cubic wind cells (when Automatic is off)")
    wind_cell_size_manual: FloatProperty(name="Wind Cell Size (kept)", default=0.0, min=0.0,
                                         options=set(), subtype="DISTANCE", unit="LENGTH")
    use_auto_wind_cell_size: BoolProperty(
        name="Automatic", options=set(),
        get=_auto_getter("wind_cell_size"), set=_auto_setter("wind_cell_size"),
        description="Wind cells of the longer terrain side divided by Wind Resolution")
    wind_resolution: IntProperty(
        name="Wind Resolution", default=_DEFAULTS.wind_resolution, min=4, max=2048,
        soft_max=512, options=set(),
        description="Wind cells along the longer side (when the cell size is automatic)")
    sky_height: FloatProperty(
        name="Sky Height", default=0.0, min=0.0, subtype="DISTANCE", unit="LENGTH",
        options=set(),
        description="Height of the wind domain above the highest terrain point (when "
                    "Automatic is off)")
    sky_height_manual: FloatProperty(name="Sky Height (kept)", default=0.0, min=0.0,
                                     options=set(), subtype="DISTANCE", unit="LENGTH")
    use_auto_sky_height: BoolProperty(
        name="Automatic", options=set(),
        get=_auto_getter("sky_height"), set=_auto_setter("sky_height"),
        description="A quarter of the longer terrain side, at least 8 wind cells")

    # --- wind (keyframable) -----------------------------------------------------------------
    wind_speed: FloatProperty(
        name="Wind Speed", default=ARTIST_DEFAULTS["wind_speed"], min=0.0, soft_max=40.0,
        unit="VELOCITY", options={"ANIMATABLE"},
        description="Inflow wind speed before gusts (keyframable). Snow drifts above about "
                    "8 m/s (dry snow; 10 m/s wet)")
    wind_from: FloatProperty(
        name="Wind From", default=math.radians(ARTIST_DEFAULTS["wind_from"]),
        subtype="ANGLE", unit="ROTATION", options={"ANIMATABLE"},
        description="Where the wind comes from, clockwise from north = +Y (0 = from +Y, "
                    "90 = from +X, 180 = from -Y, 270 = from -X, so it blows toward +X), as "
                    "weather reports give it (keyframable)")
    wind_direction: FloatProperty(
        name="Wind Heading", subtype="ANGLE", unit="ROTATION", options=set(),
        get=_heading_get, set=_heading_set,
        description="Heading the wind blows toward, counter-clockwise from +X (the engine's "
                    "convention; the same wind as Wind From, kept for older scripts)")
    gust_strength: FloatProperty(
        name="Gust Strength", default=_DEFAULTS.gust_strength, min=0.0, max=1.0,
        subtype="FACTOR", options=set(),
        description="Relative speed variation of the gusts (0 = steady)")
    gust_period: FloatProperty(
        name="Gust Period", default=_DEFAULTS.gust_period, min=0.01, soft_max=30.0,
        subtype="TIME_ABSOLUTE", unit="TIME_ABSOLUTE", options=set(),
        description="Seconds between gusts")
    gust_direction_jitter: FloatProperty(
        name="Gust Direction Jitter", default=math.radians(_DEFAULTS.gust_direction_jitter),
        min=0.0, max=math.pi, subtype="ANGLE", unit="ROTATION", options=set(),
        description="Largest deviation of a gust from the mean direction")

    # --- wind-driven drift (saltation along the surface wind) --------------------------------
    drift_enabled: BoolProperty(
        name="Wind-driven Drift", default=True, options=set(),
        description="Saltation: snow eroded where the surface wind is strong moves along it "
                    "and settles where it slows (drifts in the lee, scoured crests)")
    drift_threshold: FloatProperty(
        name="Threshold Friction Velocity", default=0.0, min=0.0, soft_max=2.0,
        unit="VELOCITY", options=set(),
        description="Friction velocity u*_t above which the wind lifts snow (when Automatic "
                    "is off)")
    drift_threshold_manual: FloatProperty(name="Threshold (kept)", default=0.0, min=0.0,
                                          options=set(), unit="VELOCITY")
    use_auto_drift_threshold: BoolProperty(
        name="Automatic", options=set(),
        get=_auto_getter("drift_threshold"), set=_auto_setter("drift_threshold"),
        description="By snow type: 0.32 m/s dry, 0.41 m/s wet (Li and Pomeroy 1997: 7.7 "
                    "and 9.9 m/s of wind at 10 m)")
    drift_strength: FloatProperty(
        name="Drift Strength", default=_DRIFT_STRENGTH, min=0.0, soft_max=10.0, options=set(),
        description="Multiplier on the saltation flux (0 = no drift, 1 = the model's flux)")
    roughness_length: FloatProperty(
        name="Roughness Length", default=_ROUGHNESS_LENGTH, min=1e-6, soft_max=0.01,
        precision=5, subtype="DISTANCE", unit="LENGTH", options=set(),
        description="Aerodynamic roughness z0 of the snow surface (log wind profile), "
                    "typically 0.0001 to 0.001 m")
    wind_mixing: FloatProperty(
        name="Wind Mixing", default=_WIND_MIXING, min=0.0, max=10.0, soft_max=3.0,
        options=set(),
        description="Multiplier on the wind's turbulent mixing (eddy viscosity): fast air "
                    "mixes down behind fences and blocks, so their wakes close again "
                    "(0 = inviscid wind, whose wakes keep growing)")
    turbulence: FloatProperty(
        name="Turbulence", default=_TURBULENCE, min=0.0, max=100.0, soft_max=5.0,
        options=set(),
        description="Multiplier on the near-ground eddies that swirl the flakes and mix them "
                    "into the lee of obstacles (0 = flakes follow the mean wind only)")

    # --- porous snow fences (a Simulation argument of their own, not a SnowSettings field) --
    fence_collection: PointerProperty(
        name="Porous Fences", type=bpy.types.Collection, options=set(),
        description="Mesh objects in this collection (and its child collections) are slatted "
                    "snow fences that slow the wind; flakes and snow pass through them. Model "
                    "each as a vertical plane or a box thinner than a wind cell")
    fence_porosity: FloatProperty(
        name="Fence Porosity", default=DEFAULT_POROSITY, min=MIN_POROSITY, max=MAX_POROSITY,
        subtype="FACTOR", options=set(),
        description="The open share of the fences' face (0.5 is the usual snow fence, "
                    "Tabler); a solid wall belongs in the terrain")

    # --- flakes ------------------------------------------------------------------------------
    flake_count: IntProperty(
        name="Flakes", default=OLD_DEFAULTS["flake_count"], min=1, soft_max=10_000_000,
        options=set(), update=_manual_count,
        description="Number of snowflakes simulated (and shown as particles), when Automatic "
                    "is off")
    use_auto_flake_count: BoolProperty(
        name="Automatic", default=True, options=set(),
        description="Flakes by the terrain's area: 15 per square metre, 50,000 to 1,000,000")
    snow_type: EnumProperty(
        name="Snow", default=_DEFAULTS.snow_type, options=set(),
        items=[("dry", "Dry", "Dry snow: flakes fall at 1-2 m/s"),
               ("wet", "Wet", "Wet snow: flakes fall at 0.5-1.5 m/s")])
    flake_size: FloatProperty(
        name="Flake Radius", default=OLD_DEFAULTS["flake_size"], min=0.0001, soft_max=0.1,
        subtype="DISTANCE", unit="LENGTH", options=set(), update=_manual_size,
        description="Radius of the largest rendered flake (its diameter is twice this; "
                    "flakes vary down to a third of it), when Automatic is off")
    use_auto_flake_size: BoolProperty(
        name="Automatic", default=True, options=set(),
        description="A radius that reads in a render: 1/400 of the scene camera's distance "
                    "to the terrain's centre (a flake there is about 5 pixels across in a "
                    "960 px wide 35 mm shot), or 1/2000 of the terrain's longer side without "
                    "a camera")

    # --- camera-only flakes -------------------------------------------------------------------
    camera_only: BoolProperty(
        name="Camera Only", default=False, options=set(),
        description="Write only the flakes the scene camera sees (plus a margin); every "
                    "flake is still simulated. Uses the camera as it is when the bake starts")
    camera_margin: FloatProperty(
        name="Margin", default=0.1, min=0.0, max=10.0, subtype="FACTOR", options=set(),
        description="Extra room around the camera's view, as a share of its width and height")
    use_camera_falloff: BoolProperty(
        name="Thin Out Far Flakes", default=True, options=set(),
        description="Beyond Full Density Distance from a perspective camera, write a share "
                    "(distance / depth)^2 of the flakes (the same flakes every frame), so far "
                    "flakes do not fill the image like noise")
    camera_falloff_distance: FloatProperty(
        name="Full Density Distance", default=15.0, min=0.01, soft_max=200.0,
        subtype="DISTANCE", unit="LENGTH", options=set(),
        description="Flakes nearer the camera than this are all written")

    # --- snow cover --------------------------------------------------------------------------
    snowfall_mode: EnumProperty(
        name="Amount", default="DEPTH", options=set(),
        items=[("DEPTH", "Snow Depth", "The depth of new snow on open level ground by the end "
                "of the bake (the scene's frame range); the snowfall rate follows from it"),
               ("RATE", "Snowfall Rate", "A snowfall rate in metres per hour of simulated "
                "time (how files before the depth setting worked)")],
        description="How the amount of snow is set")
    snow_depth: FloatProperty(
        name="Snow Depth", default=ARTIST_DEFAULTS["snow_depth"], min=0.0, soft_max=2.0,
        subtype="DISTANCE", unit="LENGTH", options=set(), update=_by_depth,
        description="Mean depth of new snow on open level ground at the scene's end frame "
                    "(drifts are deeper, scoured ground bare)")
    snowfall_rate: FloatProperty(
        name="Snowfall Rate (m/h)", default=ARTIST_DEFAULTS["snowfall_rate"], min=0.0,
        soft_max=100.0, options=set(), update=_by_rate,
        description="Snow depth added per hour on open level ground, in metres per hour "
                    "(real heavy snowfall is 0.02-0.05 m/h; a few seconds of bake need tens "
                    "of m/h)")
    use_redistribution: BoolProperty(
        name="Redistribution", default=True, options=set(),
        description="Let snow steeper than the angle of repose slide down-slope")
    angle_of_repose: FloatProperty(
        name="Angle of Repose", default=math.radians(_DEFAULTS.angle_of_repose),
        min=math.radians(1.0), max=math.radians(89.0), subtype="ANGLE", unit="ROTATION",
        options=set(), description="Steepest stable snow slope")
    redistribution_min_depth: FloatProperty(
        name="Minimum Depth", default=_DEFAULTS.redistribution_min_depth, min=0.0,
        subtype="DISTANCE", unit="LENGTH", options=set(),
        description="Snow thinner than this stays put")
    redistribution_fraction: FloatProperty(
        name="Transfer Fraction", default=_DEFAULTS.redistribution_fraction, min=0.0,
        max=0.25, options=set(),
        description="Fraction of the unstable snow moved per step and neighbour pair")

    # --- stepping ----------------------------------------------------------------------------
    substeps: IntProperty(
        name="Substeps", default=1, min=1, max=64, options=set(),
        description="Simulation steps per frame (time step = 1 / (fps x substeps))")
    seed: IntProperty(name="Seed", default=0, min=0, options=set(),
                      description="Random seed of the bake")
    backend: EnumProperty(name="Backend", items=_BACKEND_ITEMS, default="auto", options=set())
    pressure_solver: EnumProperty(
        name="Pressure Solver", default=_DEFAULTS.pressure_solver, options=set(),
        items=[("mgpcg", "Multigrid CG", "Solve to the relative tolerance (recommended)"),
               ("sor5", "5 SOR sweeps", "The papers' fixed five SOR sweeps (for comparison)")])
    wind_boundary: EnumProperty(
        name="Terrain Boundary", default=_DEFAULTS.wind_boundary, options=set(),
        items=[("cut_cells", "Cut Cells",
                "Every face of the wind grid open by the share of it above the terrain: the "
                "wind follows slopes and speeds up over crests (recommended)"),
               ("voxels", "Voxels",
                "A wind cell is solid when its centre lies below the terrain: a staircase "
                "that slows the wind over slopes (earlier versions; a cheaper pressure solve)")],
        description="How the terrain meets the wind")
    side_walls: BoolProperty(
        name="Side Walls", default=_DEFAULTS.side_walls, options=set(),
        description="The sides of the wind domain that the wind runs parallel to are "
                    "free-slip walls that carry the gusts' crosswind, so the snow along them "
                    "is like the snow between them. Off: they are open, let the gusts' "
                    "crosswind air out but not in, and snow piles or scours along those edges")
    upwind_fetch: EnumProperty(
        name="Upwind Fetch", default=_DEFAULTS.upwind_fetch, options=set(),
        items=[("open_snowfield", "Open Snowfield",
                "The terrain is part of a snowy landscape: snowfall and blowing snow come in "
                "with the wind and leave downwind"),
               ("bare_ground", "Bare Ground",
                "Snowfall comes in from upwind, but no blowing snow: the land upwind is bare"),
               ("wrap", "Wrap Around",
                "The terrain repeats along the wind: what blows off downwind comes back "
                "upwind (the engine before open inflow)")],
        description="What lies upwind of the terrain")
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
    heightmap_object: PointerProperty(name="Heightmap Preview", type=bpy.types.Object,
                                      options=set())
    flake_emitter: PointerProperty(name="Flake Emitter", type=bpy.types.Object, options=set())
    # --- bake ownership and the terrain's frame (operators/ownership.py, scene_io.py) ----------
    bake_owner: StringProperty(
        name="Bake Owner", default="", options=set(),
        description="Id of this file's bakes, also recorded in each bake folder's bake.json: "
                    "Free and Bake touch only folders recorded with it")
    terrain_at_first_frame: BoolProperty(
        name="Terrain at First Frame", default=False, options=set(),
        description="The terrain moves or changes during the frame range: bake it as it is "
                    "at the first frame (off: such a terrain is refused)")


#: Settings that follow their keyframes through a bake (mapping.wind_keys); every other
#: setting is not animatable.
ANIMATED = ("wind_speed", "wind_from")


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


def _convert_heading_curves(scene) -> None:
    """Keyframes of the old Wind Direction (a heading, counter-clockwise from +X) become
    keyframes of Wind From: from = 270 degrees - heading, exact for Bezier keys and handles
    (an affine map of the values)."""
    from ..blender_compat import action_fcurves

    fcurves = action_fcurves(scene.animation_data)
    if fcurves is None:
        return
    old = fcurves.find("snowfall.wind_direction")
    if old is None or fcurves.find("snowfall.wind_from") is not None:
        return
    old.data_path = "snowfall.wind_from"
    turn = 1.5 * math.pi
    for point in old.keyframe_points:
        point.co[1] = turn - point.co[1]
        point.handle_left[1] = turn - point.handle_left[1]
        point.handle_right[1] = turn - point.handle_right[1]
    old.update()


def migrate_scene(scene) -> bool:
    """Bring the settings of a scene saved by an older add-on to this layout, keeping what
    they meant: the snowfall rate (mode By Rate), the wind (its heading, keyframes included,
    as Wind From), the wind speed and the flake count and size (Automatic off), with the
    defaults of then for the settings such a file did not store. A scene without stored
    settings, or already at SETTINGS_VERSION, is left alone. True when it changed."""
    if scene.library is not None:
        return False
    props = scene.snowfall
    stored = _stored(props)
    if not stored or props.settings_version >= SETTINGS_VERSION:
        return False
    if props.settings_version < 2:
        heading = float(props.get("wind_direction", OLD_DEFAULTS["wind_direction"]))
        for name in ("snowfall_rate", "wind_speed", "flake_count", "flake_size"):
            if name not in stored:
                setattr(props, name, OLD_DEFAULTS[name])
        props.snowfall_mode = "RATE"
        props.wind_from = 1.5 * math.pi - heading
        if "wind_direction" in stored:
            del props["wind_direction"]
        _convert_heading_curves(scene)
        props.use_auto_flake_count = False
        props.use_auto_flake_size = False
    if props.settings_version < 4 and "upwind_fetch" not in stored:
        # Saved while the wrap was the default (or before open inflow): the snow wrapped
        # around the terrain then (and Resume of such a bake needs the same setting).
        props.upwind_fetch = "wrap"
    props.settings_version = SETTINGS_VERSION
    return True


#: Settings that point at an ID: reading one stores an empty entry, which is no setting.
_POINTERS = ("fence_collection", "heightmap_object", "flake_emitter")


def _stored(props) -> set:
    """The names of the settings ``props`` stores (what a file saved; unset ones read
    their default)."""
    return {name for name in props.keys() if name not in _POINTERS or props.get(name)}


def _stamp(scene) -> None:
    if scene.library is None and scene.snowfall.settings_version != SETTINGS_VERSION:
        scene.snowfall.settings_version = SETTINGS_VERSION


@persistent
def migrate_loaded_file(*_args):
    """load_post: older files' settings to this layout (``migrate_scene``)."""
    for scene in bpy.data.scenes:
        migrate_scene(scene)


@persistent
def stamp_settings_version(*_args):
    """save_pre: every scene is saved with this layout's version, so it is never migrated."""
    for scene in bpy.data.scenes:
        _stamp(scene)


_HANDLERS = ((bpy.app.handlers.load_post, pin_legacy_cache_folders),
             (bpy.app.handlers.load_post, migrate_loaded_file),
             (bpy.app.handlers.save_pre, stamp_settings_version))


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.snowfall = PointerProperty(type=SnowfallSettings)
    for hooks, handler in _HANDLERS:
        if handler not in hooks:
            hooks.append(handler)
    if isinstance(bpy.data, bpy.types.BlendData):   # not while Blender starts up
        pin_legacy_cache_folders()                  # a file opened before registering
        migrate_loaded_file()


def unregister():
    for hooks, handler in _HANDLERS:
        while handler in hooks:
            hooks.remove(handler)
    # Settings made in this session are of this layout: a later register (the add-on
    # enabled again) must not take them for an older file's.
    if isinstance(bpy.data, bpy.types.BlendData):
        for scene in bpy.data.scenes:
            if scene.library is None and _stored(scene.snowfall):
                _stamp(scene)
    del bpy.types.Scene.snowfall
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
