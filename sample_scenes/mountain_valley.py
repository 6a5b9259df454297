"""A mountain valley with a slowly turning wind.
``python -m snowfall.sample_scenes.mountain_valley out.blend [--frames N --flakes N]``"""
from .build import main
from .build import mountain_valley as scene  # noqa: F401  (importable: the scene builder)

if __name__ == "__main__":
    from ..blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main("mountain_valley"))
