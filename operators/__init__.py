"""bpy operators: thin glue between Blender data and the engine (snow_addon).

Registered by the add-on's ``register()``; each module owns its classes and handlers.
The operator modules (which import bpy) load inside register(); the bpy-free file formats
they write are in ``snow_addon/formats/``.
"""


def _modules():
    from . import bake, engine, estimates, ownership, render_setup, set_terrain, wind_preview

    # engine first: the simulation thread and the kernels' compile cache folder, before
    # anything imports the kernels
    return (engine, set_terrain, estimates, bake, ownership, wind_preview, render_setup)


def register():
    for module in _modules():
        module.register()


def unregister():
    for module in reversed(_modules()):
        module.unregister()
