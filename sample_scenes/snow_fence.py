"""A solid snow fence across the wind on flat ground (issue 10's fence validation scene).
``python -m snowfall.sample_scenes.snow_fence out.blend [--frames N --flakes N]``"""
from .build import main
from .build import snow_fence as scene  # noqa: F401  (importable: the scene builder)

if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main("snow_fence"))
