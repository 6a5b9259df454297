#!/usr/bin/env bash
# Set up (tools/setup.sh) and run the whole test suite: engine, add-on (bpy module) and,
# where CuPy sees a CUDA device, the GPU parity tests (skipped elsewhere, with the reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec .venv/bin/python -m pytest -q "$@"
