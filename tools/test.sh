#!/usr/bin/env bash
# Set up and run the tests (what CI runs, through .ci/run):
#   1. .venv (Blender 5.2 LTS, Python 3.13, NumPy 2): the whole suite: engine, add-on and,
#      where CuPy sees a CUDA device, the GPU tests (skipped elsewhere, with the reason);
#   2. .venv-blender-4.2 (Blender 4.2 LTS, the oldest supported, Python 3.11, NumPy 1.26):
#      the add-on suite again, alongside the first (its output is printed when both are
#      done). Much of either run is Numba compiling kernels, one core each, so together
#      they take about the longer one's time instead of the sum (on 2 cores: 42.5 min one
#      after the other in CI).
# With arguments, only step 1 runs, with them handed to pytest (e.g. tests/engine -k wind).
# Every supported release (4.2, 4.5, 5.0, 5.1, 5.2): bash tools/test_blender_versions.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash tools/setup.sh | tail -n 1)
if [ $# -gt 0 ]; then
    exec "$venv/bin/python" -m pytest -q "$@"
fi
oldest=$(bash tools/setup.sh 4.2 | tail -n 1)
oldest_log=$(mktemp -t snowfall-tests-blender-4.2.XXXXXX)
trap 'kill "${oldest_pid:-}" 2>/dev/null || true; rm -f "$oldest_log"' EXIT
"$oldest/bin/python" -m pytest -q tests/addon > "$oldest_log" 2>&1 &
oldest_pid=$!
echo "tools/test.sh: the Blender 4.2 add-on suite runs alongside; its output follows this run's"
status=0
"$venv/bin/python" -m pytest -q || status=$?
oldest_status=0
wait "$oldest_pid" || oldest_status=$?
echo
echo "== Blender 4.2 LTS ($oldest): the add-on suite =="
cat "$oldest_log"
if [ "$status" -ne 0 ] || [ "$oldest_status" -ne 0 ]; then
    echo "tools/test.sh: FAILED (Blender 5.2 suite exit $status, Blender 4.2 add-on suite exit $oldest_status)" >&2
    exit 1
fi
