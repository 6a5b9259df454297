"""The one mapping from the scene's Snowfall properties (``Scene.snowfall``, see groups.py)
onto the engine's ``SnowSettings``, in SI units, and the scene facts it needs (unit scale,
frame rate, keyframed wind, the terrain objects).

Lengths and velocities are multiplied by the scene's ``unit_settings.scale_length``;
angles go from radians to degrees.

Conversions beyond units (docs/addon.md, "Settings"):

* Snow amount. By Snow Depth (the default), the engine's ``snowfall_rate`` (m/h of
  simulated time) is the depth over the bake's simulated time: ``rate = depth /
  ((frame_end - frame_start) / fps / 3600)``, since frame_start holds the initial state and
  every later frame is one frame's time of snowfall. By Rate, the rate as set.
* Wind. Wind From is where the wind comes from, clockwise from north = +Y (meteorological);
  the engine's ``wind_direction`` is the heading it blows toward, counter-clockwise from +X:
  ``heading = 270 deg - from`` (not wrapped, so keyframed wind turns smoothly).
* Automatic values: Wind Cell Size, Sky Height and the drift threshold are stored as 0 when
  Automatic (the engine's None); flake count and radius resolve from the terrain's bounding
  box and the scene camera (``flake_count``, ``flake_radius``).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..blender_compat import action_fcurves
from ..snow_addon.drift import THRESHOLD_FRICTION_VELOCITY
from ..snow_addon.errors import SnowInputError
from ..snow_addon.settings import SnowSettings

#: Engine settings that exist in this engine's ``SnowSettings`` (optional ones map only
#: when present).
_ENGINE_FIELDS = frozenset(field.name for field in dataclasses.fields(SnowSettings))

_ANIMATED = ("wind_speed", "wind_from")

#: Wind From (radians) to the engine's heading (radians) and back: heading = this - from.
_HEADING_TURN = 1.5 * math.pi

#: Automatic flake count: flakes per square metre of terrain, and the range kept to.
FLAKES_PER_SQUARE_METRE = 15.0
FLAKE_COUNT_RANGE = (50_000, 1_000_000)
#: Automatic flake radius: this share of the camera's distance to the terrain's centre (a
#: flake there is about 5 pixels across in a 960 px wide 35 mm shot), or of the terrain's
#: longer side without a camera; kept within FLAKE_RADIUS_RANGE metres.
FLAKE_RADIUS_PER_DISTANCE = 1.0 / 400.0
FLAKE_RADIUS_PER_SIDE = 1.0 / 2000.0
FLAKE_RADIUS_RANGE = (0.002, 0.5)


def unit_scale(scene) -> float:
    """Metres per Blender unit in ``scene``."""
    scale = float(scene.unit_settings.scale_length)
    return scale if scale > 0.0 else 1.0


def frames_per_second(scene) -> float:
    return scene.render.fps / scene.render.fps_base


def _fcurve(scene, data_path):
    """The F-curve animating ``scene.<data_path>``, or None."""
    fcurves = action_fcurves(scene.animation_data)
    return fcurves.find(data_path) if fcurves is not None else None


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
        direction = heading_degrees(sample_property(scene, "wind_from", frame))
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
        wind_direction=heading_degrees(sample_property(scene, "wind_from", frame_start)),
        wind_keys=wind_keys(scene, frame_start, frame_end),
        gust_strength=float(props.gust_strength),
        gust_period=float(props.gust_period),
        gust_direction_jitter=math.degrees(props.gust_direction_jitter),
        pressure_solver=props.pressure_solver,
        wind_boundary=props.wind_boundary,
        side_walls=bool(props.side_walls),
        upwind_fetch=props.upwind_fetch,
        wind_mixing=float(props.wind_mixing),
        flake_count=flake_count(props, scene),
        snow_type=props.snow_type,
        snowfall_rate=snowfall_rate(props, scene, frame_start, frame_end),
        angle_of_repose=math.degrees(props.angle_of_repose),
        redistribution_min_depth=props.redistribution_min_depth * scale,
        redistribution_fraction=(float(props.redistribution_fraction)
                                 if props.use_redistribution else 0.0),
        time_step=1.0 / (fps * int(props.substeps)),
        seed=int(props.seed),
        **_drift_settings(props, scale),
    )
    return settings.validate()


def _drift_settings(props, scale: float) -> dict:
    """The wind-driven drift settings, for those fields the engine has."""
    values = {
        "drift_enabled": bool(props.drift_enabled),
        "drift_threshold": (props.drift_threshold * scale if props.drift_threshold > 0.0
                            else None),
        "drift_strength": float(props.drift_strength),
        "roughness_length": props.roughness_length * scale,
        "turbulence": float(props.turbulence),
    }
    return {name: value for name, value in values.items() if name in _ENGINE_FIELDS}


def heading_degrees(wind_from: float) -> float:
    """The engine's heading (degrees, counter-clockwise from +X, where the wind blows) of
    Wind From ``wind_from`` (radians, clockwise from +Y, where it comes from)."""
    return math.degrees(_HEADING_TURN - wind_from)


def bake_seconds(scene, frame_start: int | None = None, frame_end: int | None = None) -> float:
    """Simulated seconds of a bake of ``frame_start..frame_end`` (the scene's range by
    default): frame_start holds the initial state, each later frame one frame's time."""
    frame_start = scene.frame_start if frame_start is None else frame_start
    frame_end = scene.frame_end if frame_end is None else frame_end
    fps = frames_per_second(scene)
    return max(0, frame_end - frame_start) / fps if fps > 0.0 else 0.0


def snowfall_rate(props, scene, frame_start: int | None = None,
                  frame_end: int | None = None) -> float:
    """The engine's snowfall rate (m/h of simulated time): By Rate, the setting; By Snow
    Depth, the depth (metres) over the bake's simulated hours. SnowInputError when a depth
    is asked of a bake with no simulated time."""
    if props.snowfall_mode == "RATE":
        return float(props.snowfall_rate)
    depth = float(props.snow_depth) * unit_scale(scene)
    if depth == 0.0:
        return 0.0
    seconds = bake_seconds(scene, frame_start, frame_end)
    if not seconds > 0.0:
        raise SnowInputError("snow_depth", "the bake has no simulated time to reach a depth "
                             "in (its end frame is its start frame)",
                             "a later end frame, or Amount: Snowfall Rate")
    return depth / (seconds / 3600.0)


def terrain_bounds(props):
    """(min xyz, max xyz) in Blender units of the terrain objects' world bounding boxes (8
    corners each, no mesh evaluation: cheap enough for a panel), or None without terrain."""
    corners = []
    for obj in terrain_objects(props):
        matrix = np.array(obj.matrix_world, dtype=np.float64)
        box = np.array([tuple(c) for c in obj.bound_box], dtype=np.float64)
        corners.append(box @ matrix[:3, :3].T + matrix[:3, 3])
    if not corners:
        return None
    points = np.concatenate(corners)
    return points.min(axis=0), points.max(axis=0)


def flake_count(props, scene) -> int:
    """The flake count of a bake: the setting, or (Automatic) FLAKES_PER_SQUARE_METRE of the
    terrain's bounding box, rounded to thousands, within FLAKE_COUNT_RANGE."""
    if not props.use_auto_flake_count:
        return int(props.flake_count)
    bounds = terrain_bounds(props)
    low, high = FLAKE_COUNT_RANGE
    if bounds is None:
        return low
    size = (bounds[1] - bounds[0]) * unit_scale(scene)
    count = FLAKES_PER_SQUARE_METRE * float(size[0]) * float(size[1])
    return int(min(high, max(low, round(count / 1000.0) * 1000)))


def flake_radius(props, scene) -> float:
    """The radius (Blender units) of the largest rendered flake: the setting, or (Automatic)
    FLAKE_RADIUS_PER_DISTANCE of the scene camera's distance to the terrain's centre
    (FLAKE_RADIUS_PER_SIDE of the terrain's longer side without a camera), within
    FLAKE_RADIUS_RANGE metres."""
    if not props.use_auto_flake_size:
        return float(props.flake_size)
    scale = unit_scale(scene)
    bounds = terrain_bounds(props)
    if bounds is None:
        return float(props.flake_size)
    centre = 0.5 * (bounds[0] + bounds[1])
    camera = scene.camera
    if camera is not None:
        distance = float(np.linalg.norm(np.array(camera.matrix_world.translation) - centre))
        metres = FLAKE_RADIUS_PER_DISTANCE * distance * scale
    else:
        side = float(max(bounds[1][0] - bounds[0][0], bounds[1][1] - bounds[0][1]))
        metres = FLAKE_RADIUS_PER_SIDE * side * scale
    low, high = FLAKE_RADIUS_RANGE
    return min(high, max(low, metres)) / scale


def automatic_value(props, scene, name: str) -> float:
    """What Automatic resolves ``name`` (wind_cell_size, sky_height, drift_threshold) to
    for the current terrain, in Blender units (0 without terrain): the engine's rules
    (snow_addon.grid.WindGrid.for_terrain, snow_addon.drift.threshold)."""
    scale = unit_scale(scene)
    if name == "drift_threshold":
        return THRESHOLD_FRICTION_VELOCITY[props.snow_type] / scale
    bounds = terrain_bounds(props)
    if bounds is None:
        return 0.0
    longer = float(max(bounds[1][0] - bounds[0][0], bounds[1][1] - bounds[0][1]))
    cell = props.wind_cell_size if props.wind_cell_size > 0.0 else \
        longer / max(1, int(props.wind_resolution))
    if name == "wind_cell_size":
        return cell
    if name == "sky_height":
        return max(0.25 * longer, 8.0 * cell)
    raise KeyError(name)


def terrain_objects(props) -> list:
    """The terrain objects still present (deleted objects drop out of the list)."""
    return [item.object for item in props.terrain_objects if item.object is not None]
