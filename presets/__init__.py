"""Presets shipped with the add-on. ``settings/`` holds Blender preset scripts for the
Snowfall settings (the scene's ``snowfall`` group), made from the sample scenes; the panel's
preset menu (panels/presets.py) lists them beside the artist's own presets, which Blender
keeps in its user scripts folder (``presets/snowfall/settings``). Applying one runs it with
``script.execute_preset``. This package holds no code: it exists so the extension's zip
carries the folder (tools/build_extension.py packs the top-level packages)."""
import os

#: The folder of the shipped settings presets.
SETTINGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings")
