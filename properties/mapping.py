"""The one mapping from the scene's Snowfall properties (``Scene.snowfall``, see groups.py)
onto the engine's ``SnowSettings``, in SI units, and the scene facts it needs (unit scale,
frame rate, keyframed wind, the terrain objects).

Lengths and velocities are multiplied by the scene's ``unit_settings.scale_length``;
angles go from radians to degrees.
"""
from __future__ import annotations

import dataclasses
import math

from ..blender_compat import action_fcurves
from ..snow_addon.errors import SnowInputError
from ..snow_addon.settings import SnowSettings

#: Engine settings that exist in this engine's ``SnowSettings`` (optional ones map only
#: when present).
_ENGINE_FIELDS = frozenset(field.name for field in dataclasses.fields(SnowSettings))

_ANIMATED = ("wind_speed", "wind_direction")


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
        wind_boundary=props.wind_boundary,
        side_walls=bool(props.side_walls),
        wind_mixing=float(props.wind_mixing),
        flake_count=int(props.flake_count),
        snow_type=props.snow_type,
        snowfall_rate=float(props.snowfall_rate),
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


def terrain_objects(props) -> list:
    """The terrain objects still present (deleted objects drop out of the list)."""
    return [item.object for item in props.terrain_objects if item.object is not None]
