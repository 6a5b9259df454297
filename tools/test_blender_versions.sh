#!/usr/bin/env bash
# Before a release: the add-on suite (tests/addon) on every supported Blender, each in its
# own venv (tools/setup.sh X.Y: .venv for 5.2, .venv-blender-X.Y for the others).
#
#   bash tools/test_blender_versions.sh              # 4.2 4.5 5.0 5.1 5.2
#   bash tools/test_blender_versions.sh 4.2 5.2      # some of them
#
# Prints one line per release (pytest's summary) and exits non-zero if any release failed.
# Extra pytest arguments: PYTEST_ARGS="-x -k bake" bash tools/test_blender_versions.sh
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(4.2 4.5 5.0 5.1 5.2)
mkdir -p out
failed=0
summary=()
for version in "${versions[@]}"; do
    echo "=== Blender $version ==="
    if ! venv=$(bash tools/setup.sh "$version" | tail -n 1); then
        summary+=("Blender $version: setup failed"); failed=1; continue
    fi
    log=out/test-blender-$version.log
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pytest -q tests/addon ${PYTEST_ARGS:-} 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    bpy_version=$("$venv/bin/python" -c "import bpy; print(bpy.app.version_string)" 2>/dev/null)
    summary+=("Blender $version (bpy $bpy_version, $("$venv/bin/python" -c \
        'import sys, numpy; print(f"Python {sys.version.split()[0]}, NumPy {numpy.__version__}")')): $(tail -n 1 "$log")")
    [ "$status" -eq 0 ] || failed=1
done
echo
printf '%s\n' "${summary[@]}"
exit $failed
