"""Snowfall: GPU snowfall simulation for Blender.

This file is the extension's entry point and nothing more: ``register()`` and
``unregister()`` wire the bpy-facing sub-packages ``properties`` (the scene's settings),
``operators`` and ``panels``. The engine (``snow_addon``, ``kernels``) never imports bpy,
so ``import snowfall`` works without Blender (tests, command line, benchmarks). See
docs/architecture.md ("Packaging") for how the same tree is both the Blender extension and
the standalone package ``snowfall``.
"""


def register():
    # bpy is imported only here, inside Blender. An unsupported Blender stops here with a
    # readable message (UnsupportedBlenderError), before anything is registered.
    from .blender_compat import check_version

    check_version()
    from . import operators, panels, properties

    properties.register()
    operators.register()
    panels.register()


def unregister():
    from . import operators, panels, properties

    panels.unregister()
    operators.unregister()
    properties.unregister()
