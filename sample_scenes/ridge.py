"""A smooth 2D ridge across the wind (issue 10's ridge validation scene).
``python -m snowfall.sample_scenes.ridge out.blend [--frames N --flakes N]``"""
from .build import main
from .build import ridge as scene  # noqa: F401  (importable: the scene builder)

if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main("ridge"))
