"""A mountain valley with a slowly turning wind.
``python -m snowfall.sample_scenes.mountain_valley out.blend [--frames N --flakes N]``"""
import sys

from .build import main
from .build import mountain_valley as scene  # noqa: F401  (importable: the scene builder)

if __name__ == "__main__":
    sys.exit(main("mountain_valley"))
