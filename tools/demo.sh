#!/usr/bin/env bash
# Set up (tools/setup.sh: .venv with Blender 5.2 LTS as the bpy module, Python 3.13), then
# the main job: build the mountain-valley sample scene, bake it headless and render one
# frame with Cycles to out/valley.png (the baked scene: out/valley.blend). Prints the time
# of each part. Another supported Blender: SNOWFALL_BLENDER=4.2 bash tools/demo.sh.
# Extra arguments go to the demo (see: .venv/bin/python -m snowfall.sample_scenes.demo --help).
#
# The first run on a machine compiles the CPU kernels with Numba; they are cached
# (kernels/cpu/__pycache__, or $NUMBA_CACHE_DIR when set), so later runs load them.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
venv=$(bash tools/setup.sh "${SNOWFALL_BLENDER:-5.2}" | tail -n 1)
echo "demo: set up $venv in $((SECONDS - started)) s"
"$venv/bin/python" -m snowfall.sample_scenes.demo --scene mountain_valley --frames 96 \
    --out out/valley.png "$@"
echo "demo: done in $((SECONDS - started)) s in all"
