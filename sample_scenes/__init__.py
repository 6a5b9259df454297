"""Sample scenes a new user can bake at once, built by scripts (so they stay small and in
step with the add-on): ``box_test`` (the papers' box test, 001 fig. 4.10),
``mountain_valley``, the drift validation scenes ``snow_fence`` and ``ridge``
(docs/drift_validation.md), and ``porous_fence``: the snow fence's layout with a half-open
slatted fence, a vertical plane in the "Porous Fences" collection that only the wind feels
(docs/addon.md, "Porous snow fences"). Each is importable (``build(name)``) and runnable::

    python -m snowfall.sample_scenes.box_test box_test.blend
    python -m snowfall.sample_scenes.mountain_valley valley.blend
    python -m snowfall.sample_scenes.snow_fence fence.blend
    python -m snowfall.sample_scenes.porous_fence porous.blend
    python -m snowfall.sample_scenes.ridge ridge.blend
    python -m snowfall.sample_scenes.demo --scene box_test --out out/box_test.png

Importing this package needs no Blender; the modules inside need the bpy module.
"""
