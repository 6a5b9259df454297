"""bpy UI: the settings (``Scene.snowfall``), the Physics-tab and 3D-view sidebar panels,
and the viewport wind overlay (its sub-panel hangs under ``VIEW3D_PT_snowfall``)."""
from . import main, properties, wind_overlay


def register_properties():
    properties.register()


def unregister_properties():
    properties.unregister()


def register():
    main.register()
    wind_overlay.register()   # after main: its sub-panel's parent must exist


def unregister():
    wind_overlay.unregister()
    main.unregister()
