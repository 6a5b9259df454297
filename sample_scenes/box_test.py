"""The papers' box test (001, fig. 4.10): a flat plane with a block and a strong wind from
one side. ``python -m snowfall.sample_scenes.box_test out.blend [--frames N --flakes N]``"""
import sys

from .build import box_test as scene  # noqa: F401  (importable: the scene builder)
from .build import main

if __name__ == "__main__":
    sys.exit(main("box_test"))
