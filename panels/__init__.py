"""bpy UI: the Physics-tab and 3D-view sidebar panels and the viewport wind overlay (its
sub-panel hangs under ``VIEW3D_PT_snowfall``). The settings they draw (``Scene.snowfall``)
live in ``properties/``."""
from . import main, presets, wind_overlay


def register():
    presets.register()
    main.register()
    wind_overlay.register()   # after main: its sub-panel's parent must exist


def unregister():
    wind_overlay.unregister()
    main.unregister()
    presets.unregister()
