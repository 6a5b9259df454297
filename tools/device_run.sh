#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CuPy (no install of the package needed): the engine
# test suite (GPU parity tests included) and the GPU benchmark, logs and JSON under $OUT
# (default out/device). Usage: bash tools/device_run.sh [tests] [bench-a] [bench-b]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/device}
mkdir -p "$OUT" /tmp/snowfall-site
# Import the checkout as the package `snowfall` without installing it.
ln -sfn "$PWD" /tmp/snowfall-site/snowfall
export PYTHONPATH=/tmp/snowfall-site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import cupy, numpy, numba; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests bench-a bench-b)
for part in "${parts[@]}"; do
  case $part in
    tests)
      python3 -m pytest -q -p no:cacheprovider tests/engine -x 2>&1 | tee "$OUT/tests.log" ;;
    bench-a)
      python3 -m snowfall benchmark --backend gpu --out "$OUT/gpu-a.json" --scenes \
        profile-2009 profile-2013 balanced-2013 flake-sweep-1M flake-sweep-2M \
        flake-sweep-4.7M flake-sweep-10M flake-sweep-25M flake-sweep-50M flake-sweep-100M \
        big-100M 2>&1 | tee "$OUT/bench-a.log" ;;
    bench-b)
      python3 -m snowfall benchmark --backend gpu --out "$OUT/gpu-b.json" --scenes \
        wind-sweep-64 wind-sweep-128 wind-sweep-256 wind-sweep-512 wind-sweep-1024 \
        wind-sweep-512x64 terrain-sweep-256 terrain-sweep-512 terrain-sweep-1024 \
        terrain-sweep-2048 terrain-sweep-4096 2>&1 | tee "$OUT/bench-b.log" ;;
  esac
done
