#!/usr/bin/env bash
# Set up (tools/setup.sh), then the main job: build the mountain-valley sample scene,
# bake it headless with the bpy module and render one frame with Cycles to out/valley.png.
# Extra arguments go to the demo (see: .venv/bin/python -m snowfall.sample_scenes.demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/python -m snowfall.sample_scenes.demo --scene mountain_valley --frames 96 --out out/valley.png "$@"
