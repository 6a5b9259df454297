"""The scene's Snowfall settings (``Scene.snowfall``): data, not UI.

``groups`` holds the property groups, ``mapping`` their one conversion into the engine's
``SnowSettings`` (``to_snow_settings``) and the scene facts it needs, ``bake_folder`` where a
scene's bake lives on disk and whether Resume can continue it. ``operators/`` and
``panels/`` both import from here; this package imports neither (only ``snow_addon``).
Registered first by the add-on's ``register()``, unregistered last.
"""
from .bake_folder import cache_folder_setting, folder_owner, resume_available, scene_bake_folder
from .groups import (ANIMATED, CLASSES, DEFAULT_CACHE_FOLDER, LEGACY_CACHE_FOLDER,
                     SETTINGS_VERSION, SnowfallSettings, SnowfallTerrainItem, migrate_scene,
                     register, unregister)
from .mapping import (bake_seconds, flake_count, flake_radius, frames_per_second,
                      heading_degrees, sample_property, snowfall_rate, terrain_bounds,
                      terrain_objects, to_snow_settings, unit_scale, wind_keys)

__all__ = ["ANIMATED", "CLASSES", "DEFAULT_CACHE_FOLDER", "LEGACY_CACHE_FOLDER",
           "SETTINGS_VERSION", "SnowfallSettings", "SnowfallTerrainItem", "bake_seconds",
           "cache_folder_setting", "flake_count", "flake_radius", "frames_per_second",
           "heading_degrees", "migrate_scene", "register", "resume_available",
           "sample_property", "scene_bake_folder", "snowfall_rate", "terrain_bounds",
           "terrain_objects", "to_snow_settings", "unit_scale", "unregister", "wind_keys"]
