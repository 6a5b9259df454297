#!/usr/bin/env bash
# Create .venv (Python 3.11, as Blender 4.2-5.0 ships) and install the engine, the test
# tools and the bpy module (Blender as a Python module). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,blender]"
