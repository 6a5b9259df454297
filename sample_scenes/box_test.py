"""The papers' box test (001, fig. 4.10): a flat plane with a block and a strong wind from
one side. ``python -m snowfall.sample_scenes.box_test out.blend [--frames N --flakes N]``"""
from .build import box_test as scene  # noqa: F401  (importable: the scene builder)
from .build import main

if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main("box_test"))
