"""``python -m snowfall ...``: the command line (snow_addon/cli.py)."""
import sys

from .snow_addon.cli import main

sys.exit(main())
