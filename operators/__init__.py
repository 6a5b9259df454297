"""bpy operators: thin glue between Blender data and the engine (snow_addon).

Registered by the add-on's ``register()``; each module owns its classes and handlers.
"""
from . import bake, estimates, set_terrain, wind_preview

_MODULES = (set_terrain, estimates, bake, wind_preview)


def register():
    for module in _MODULES:
        module.register()


def unregister():
    for module in reversed(_MODULES):
        module.unregister()
