"""bpy operators: thin glue between Blender data and the engine (snow_addon).

Registered by the add-on's ``register()``; each module owns its classes and handlers.
The operator modules (which import bpy) load inside register(), so the pure-Python
helpers here (``ptcache_format``) import without Blender.
"""


def _modules():
    from . import bake, estimates, set_terrain, wind_preview

    return (set_terrain, estimates, bake, wind_preview)


def register():
    for module in _modules():
        module.register()


def unregister():
    for module in reversed(_modules()):
        module.unregister()
