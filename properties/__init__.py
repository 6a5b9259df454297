"""The scene's Snowfall settings (``Scene.snowfall``): data, not UI.

``groups`` holds the property groups, ``mapping`` their one conversion into the engine's
``SnowSettings`` (``to_snow_settings``) and the scene facts it needs, ``bake_folder`` where a
scene's bake lives on disk and whether Resume can continue it. ``operators/`` and
``panels/`` both import from here; this package imports neither (only ``snow_addon``).
Registered first by the add-on's ``register()``, unregistered last.
"""
from .bake_folder import cache_folder_setting, resume_available, scene_bake_folder
from .groups import (CLASSES, DEFAULT_CACHE_FOLDER, LEGACY_CACHE_FOLDER, SnowfallSettings,
                     SnowfallTerrainItem, register, unregister)
from .mapping import (frames_per_second, sample_property, terrain_objects, to_snow_settings,
                      unit_scale, wind_keys)

__all__ = ["CLASSES", "DEFAULT_CACHE_FOLDER", "LEGACY_CACHE_FOLDER", "SnowfallSettings",
           "SnowfallTerrainItem", "cache_folder_setting", "frames_per_second", "register",
           "resume_available", "sample_property", "scene_bake_folder", "terrain_objects",
           "to_snow_settings", "unit_scale", "unregister", "wind_keys"]
