#!/usr/bin/env bash
# Create a virtual environment with the engine (editable), the test tools and the bpy module
# (Blender as a Python module) for one Blender release. Safe to run again.
#
#   bash tools/setup.sh          # .venv: Blender 5.2 LTS (the current LTS), Python 3.13
#   bash tools/setup.sh 4.2      # .venv-blender-4.2: Blender 4.2 LTS, Python 3.11
#
# Supported releases and the Python each one's bpy module is built for (as Blender ships):
# 4.2, 4.5, 5.0 on Python 3.11 (NumPy 1.26); 5.1, 5.2 on Python 3.13 (NumPy 2).
# SNOWFALL_VENV=folder picks another venv folder. The interpreter comes from $PYTHON, else python3.X on the PATH, else pyenv's 3.X.
# Prints the venv's folder as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_BLENDER=5.2
BLENDER=${1:-$DEFAULT_BLENDER}
# NUMPY: the NumPy that Blender release ships (bpy 4.2 on PyPI would take NumPy 2).
case "$BLENDER" in
    4.2|4.5|5.0) PY=3.11; NUMPY="numpy==1.26.*" ;;
    5.1|5.2) PY=3.13; NUMPY="numpy>=2.2,<3" ;;
    *) echo "tools/setup.sh: unsupported Blender '$BLENDER' (supported: 4.2 4.5 5.0 5.1 5.2)" >&2
       exit 2 ;;
esac
if [ "$BLENDER" = "$DEFAULT_BLENDER" ]; then VENV=.venv; else VENV=.venv-blender-$BLENDER; fi
VENV=${SNOWFALL_VENV:-$VENV}   # another folder, if wanted
IS_PY="import sys; sys.exit(sys.version_info[:2] != (${PY/./, }))"

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" "python$PY"; do
        if [ -n "$candidate" ] && "$candidate" -c "$IS_PY" >/dev/null 2>&1; then
            echo "$candidate"; return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/"$PY".*/bin/python"$PY"; do
            if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
        done
    fi
    echo "tools/setup.sh: Blender $BLENDER's bpy module needs Python $PY; none found" \
         "(set PYTHON=/path/to/python$PY)" >&2
    return 1
}

# An existing .venv of another Python (an older checkout's, on 3.11) is left as it is: this
# release then gets its own folder, .venv-blender-X.Y. Remove .venv to make it the default.
if [ -z "${SNOWFALL_VENV:-}" ] && [ "$VENV" = .venv ] && [ -x .venv/bin/python ] \
        && ! .venv/bin/python -c "$IS_PY"; then
    echo "tools/setup.sh: .venv is not Python $PY; leaving it and using .venv-blender-$BLENDER" >&2
    VENV=.venv-blender-$BLENDER
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$(find_python)" -m venv "$VENV"
fi
# What the install depends on; when a finished install recorded the same, pip is skipped
# (the engine is installed editable: its source needs no reinstall). Delete the file to force one.
STAMP="$VENV/.snowfall-setup"
WANTED="$BLENDER $NUMPY $(cksum < pyproject.toml)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANTED" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[test]" "bpy==$BLENDER.*" "$NUMPY"
    echo "$WANTED" > "$STAMP"
fi
echo "$VENV"
