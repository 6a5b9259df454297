#!/usr/bin/env bash
# Set up and run the tests (what CI runs, through .ci/run):
#   1. .venv (Blender 5.2 LTS, Python 3.13, NumPy 2): the whole suite: engine, add-on and,
#      where CuPy sees a CUDA device, the GPU tests (skipped elsewhere, with the reason);
#   2. .venv-blender-4.2 (Blender 4.2 LTS, the oldest supported, Python 3.11, NumPy 1.26):
#      the add-on suite again.
# With arguments, only step 1 runs, with them handed to pytest (e.g. tests/engine -k wind).
# Every supported release (4.2, 4.5, 5.0, 5.1, 5.2): bash tools/test_blender_versions.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash tools/setup.sh | tail -n 1)
if [ $# -gt 0 ]; then
    exec "$venv/bin/python" -m pytest -q "$@"
fi
"$venv/bin/python" -m pytest -q
oldest=$(bash tools/setup.sh 4.2 | tail -n 1)
"$oldest/bin/python" -m pytest -q tests/addon
