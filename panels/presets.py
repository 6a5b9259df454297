"""The settings preset menu in the Snowfall panel's header: Blender's own preset pattern
(a ``bpy.types.Menu`` with ``preset_subdir`` and ``script.execute_preset``, and an
``AddPresetBase`` operator to save or remove the artist's own). It lists the presets
shipped in ``presets/settings`` (made from the sample scenes) and the artist's, which
Blender keeps in its user scripts folder under ``presets/snowfall/settings``.

A preset sets the storm (amount of snow, wind speed and gusts, drift, snow type, substeps,
what lies upwind); it leaves the terrain, the wind's direction, the flakes and the cache
alone.
"""
from __future__ import annotations

import bpy
from bl_operators.presets import AddPresetBase

from ..presets import SETTINGS_DIR

PRESET_SUBDIR = "snowfall/settings"

#: What a preset stores (the artist's own presets save these), in this order: setting the
#: rate or the depth switches Amount to it, so the Amount comes after both.
PRESET_VALUES = (
    "settings.snowfall_rate", "settings.snow_depth", "settings.snowfall_mode",
    "settings.snow_type", "settings.wind_speed", "settings.gust_strength",
    "settings.gust_period", "settings.gust_direction_jitter", "settings.drift_enabled",
    "settings.drift_strength", "settings.turbulence", "settings.substeps",
    "settings.upwind_fetch",
)


def preset_folders() -> list:
    """The shipped folder, then the artist's preset folders that exist."""
    return [SETTINGS_DIR] + [path for path in bpy.utils.preset_paths(PRESET_SUBDIR)
                             if path != SETTINGS_DIR]


def shipped_presets() -> dict:
    """Display name -> path of the presets shipped with the add-on."""
    import os

    return {bpy.path.display_name(name[:-3], title_case=False): os.path.join(SETTINGS_DIR, name)
            for name in sorted(os.listdir(SETTINGS_DIR)) if name.endswith(".py")}


class SNOWFALL_MT_presets(bpy.types.Menu):
    bl_label = "Snowfall Presets"
    preset_subdir = PRESET_SUBDIR
    preset_operator = "script.execute_preset"
    preset_add_operator = "snowfall.preset_add"

    def draw(self, _context):
        self.path_menu(preset_folders(), self.preset_operator,
                       filter_ext=lambda ext: ext.lower() == ".py",
                       add_operator=self.preset_add_operator,
                       display_name=lambda name: bpy.path.display_name(name, title_case=False))


class SNOWFALL_OT_preset_add(AddPresetBase, bpy.types.Operator):
    """Save the storm settings as a preset (or remove one)"""
    bl_idname = "snowfall.preset_add"
    bl_label = "Add Snowfall Preset"
    preset_menu = "SNOWFALL_MT_presets"
    preset_subdir = PRESET_SUBDIR
    preset_defines = ["settings = bpy.context.scene.snowfall"]
    preset_values = list(PRESET_VALUES)


def draw_preset_header(layout) -> None:
    """The preset menu with its add and remove buttons (a panel header's right side)."""
    row = layout.row(align=True)
    row.menu("SNOWFALL_MT_presets", text=SNOWFALL_MT_presets.bl_label)
    row.operator("snowfall.preset_add", text="", icon="ADD")
    row.operator("snowfall.preset_add", text="", icon="REMOVE").remove_active = True


CLASSES = (SNOWFALL_MT_presets, SNOWFALL_OT_preset_add)

register, unregister = bpy.utils.register_classes_factory(CLASSES)
