"""A porous (half-open, slatted) snow fence across the wind on flat ground: the snow_fence
scene's layout, the fence a vertical plane in the "Porous Fences" collection.
``python -m snowfall.sample_scenes.porous_fence out.blend [--frames N --flakes N]``"""
from .build import main
from .build import porous_fence as scene  # noqa: F401  (importable: the scene builder)

if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main("porous_fence"))
