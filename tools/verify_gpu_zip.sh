#!/usr/bin/env bash
# Check the GPU build of the extension zip on a machine with an NVIDIA GPU: the engine taken
# from the zip, the CUDA runtime and NVRTC wheels bundled in the zip installed into an empty
# folder (not a site-packages: as Blender installs extension wheels), CuPy imported from
# there, and the GPU test suite run on that.
#
#   here (network, the zip built):   bash tools/verify_gpu_zip.sh pack [ZIP] [--python 3.12]
#   on the GPU machine:              bash tools/verify_gpu_zip.sh run [KIT] [gpu|all]
#
# pack writes a kit under dist/gpu-kit/ (gitignored) in two parts of < 64 MiB each, the
# upload limit of the GPU machine:
#   base/  engine.zip (every file of the zip but its wheels, byte for byte), the
#          nvidia-cuda-runtime-cu12 wheel as bundled, the nvidia-cuda-nvrtc-cu12 wheel's
#          files as tar.xz (its unused .alt libraries left out), kit.json with sha256s
#   cupy/  the zip's CuPy 13 (cupy-cuda12x 13.6.0) and fastrlock, but built for the GPU
#          machine's Python (default 3.12; the zip holds cp311/cp313 wheels, which that
#          Python cannot import), as tar.xz; CuPy's thrust module (sorting only, unused
#          by the engine) left out to fit the limit
# run checks the sha256s, unpacks into /tmp/snowfall-zip/{pkg/snowfall,site}, puts both on
# PYTHONPATH (LD_LIBRARY_PATH untouched: snow_addon/backend.py must load the bundled
# libraries itself), checks that `snowfall`, CuPy, libcudart and libnvrtc all come from
# there and that the backend picks the GPU, then runs pytest on the checkout's tests:
# `gpu` (default) the GPU tests of tests/engine plus the backend diagnosis tests, `all`
# the whole engine suite. Logs under $OUT (default out/gpu-zip). Without cupy/ in the kit
# the GPU machine's own CuPy is used (then only the engine comes from the zip).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
PY=${PYTHON:-python3}

case $mode in
pack)
  zip=""
  target_python=3.12
  while [ $# -gt 0 ]; do
    case $1 in
      --python) target_python=$2; shift 2 ;;
      *) zip=$1; shift ;;
    esac
  done
  if [ -z "$zip" ]; then
    zip=$(ls dist/snowfall-*-linux_x64-gpu.zip 2>/dev/null | head -1 || true)
  fi
  [ -n "$zip" ] && [ -f "$zip" ] || {
    echo "no GPU zip: build it with python tools/build_extension.py --platforms linux-x64 --variants gpu" >&2
    exit 2; }
  PY=${PYTHON:-.venv/bin/python}
  "$PY" - "$zip" "$target_python" <<'EOF'
import hashlib, importlib.util, io, json, os, shutil, subprocess, sys, tarfile, tempfile, zipfile

zip_path, target_python = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("build_extension", "tools/build_extension.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
kit = os.path.join("dist", "gpu-kit")
shutil.rmtree(kit, ignore_errors=True)
base, cupy_dir = os.path.join(kit, "base"), os.path.join(kit, "cupy")
os.makedirs(base)
os.makedirs(cupy_dir)
LIMIT = 60 * 2**20


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tar_xz(target, folder, skip=lambda name: False):
    # xz through the tar binary when there is one (threads), else Python's lzma
    members = sorted(os.path.relpath(os.path.join(d, f), folder)
                     for d, _dirs, files in os.walk(folder) for f in files)
    members = [m for m in members if not skip(m)]
    listing = target + ".list"
    with open(listing, "w") as handle:
        handle.write("\n".join(members) + "\n")
    if shutil.which("tar") and shutil.which("xz"):
        env = dict(os.environ, XZ_OPT="-6 -T0")
        subprocess.run(["tar", "-cJf", target, "-C", folder, "-T", listing], check=True,
                       env=env)
    else:
        with tarfile.open(target, "w:xz") as archive:
            for member in members:
                archive.add(os.path.join(folder, member), member)
    os.remove(listing)


with zipfile.ZipFile(zip_path) as archive:
    names = archive.namelist()
    wheels = [n for n in names if n.startswith("wheels/")]
    with zipfile.ZipFile(os.path.join(base, "engine.zip"), "w", zipfile.ZIP_DEFLATED) as engine:
        for name in names:
            if not name.startswith("wheels/"):
                engine.writestr(archive.getinfo(name), archive.read(name))
    work = tempfile.mkdtemp(prefix="gpu-kit-")
    runtime = [w for w in wheels if os.path.basename(w).startswith("nvidia_cuda_runtime_cu12-")]
    nvrtc = [w for w in wheels if os.path.basename(w).startswith("nvidia_cuda_nvrtc_cu12-")]
    cupy13 = [w for w in wheels if os.path.basename(w).startswith("cupy_cuda12x-13.")]
    assert len(runtime) == len(nvrtc) == len(cupy13) == 1, (runtime, nvrtc, cupy13)
    with open(os.path.join(base, os.path.basename(runtime[0])), "wb") as out:
        out.write(archive.read(runtime[0]))
    nvrtc_wheel = os.path.join(work, os.path.basename(nvrtc[0]))
    with open(nvrtc_wheel, "wb") as out:
        out.write(archive.read(nvrtc[0]))
unpacked = os.path.join(work, "nvrtc")
with zipfile.ZipFile(nvrtc_wheel) as wheel:
    wheel.extractall(unpacked)
tar_xz(os.path.join(base, os.path.basename(nvrtc[0])[:-4] + ".tar.xz"), unpacked,
       skip=lambda name: ".alt." in os.path.basename(name))

# CuPy 13 of the zip's version and its fastrlock, for the GPU machine's Python
cupy_version = os.path.basename(cupy13[0]).split("-")[1]
cache = os.path.join(build.ROOT, "wheels", "linux-x64")
requirements = [f"cupy-cuda12x=={cupy_version}"] + [r for r in build.CUPY["3.11"]
                                                    if r.startswith("fastrlock")]
site = os.path.join(work, "cupy")
for requirement in requirements:
    path = build.fetch_wheel(requirement, "linux-x64", target_python, cache)
    with zipfile.ZipFile(path) as wheel:
        wheel.extractall(site)
tar_xz(os.path.join(cupy_dir, f"cupy-{cupy_version}-cp{target_python.replace('.', '')}.tar.xz"),
       site, skip=lambda name: name.startswith("cupy/cuda/thrust."))
shutil.rmtree(work)

record = {"zip": os.path.basename(zip_path), "zip_sha256": sha256(zip_path),
          "python": target_python, "files": {}}
for part in (base, cupy_dir):
    total = 0
    for name in sorted(os.listdir(part)):
        path = os.path.join(part, name)
        record["files"][os.path.relpath(path, kit)] = sha256(path)
        total += os.path.getsize(path)
    print(f"{part}: {total / 2**20:.1f} MiB")
    if total > LIMIT:
        raise SystemExit(f"{part} is over the 60 MiB a carry allows")
with open(os.path.join(kit, "base", "kit.json"), "w") as handle:
    json.dump(record, handle, indent=1)
print(json.dumps(record, indent=1))
EOF
  echo
  echo "Carry to the GPU machine in two calls (the machine keeps dist/ while it stays warm):"
  echo "  1. carry [\"dist/gpu-kit/cupy\"]  command: ls -la dist/gpu-kit/cupy"
  echo "  2. carry [\"dist/gpu-kit/base\"]  command: OUT=\$OUT bash tools/verify_gpu_zip.sh run dist/gpu-kit"
  ;;

run)
  kit=${1:-dist/gpu-kit}
  suite=${2:-gpu}
  OUT=${OUT:-out/gpu-zip}
  W=/tmp/snowfall-zip
  mkdir -p "$OUT"
  rm -rf "$W"
  mkdir -p "$W/pkg/snowfall" "$W/site"
  "$PY" - "$kit" "$W" <<'EOF' 2>&1 | tee "$OUT/unpack.log"
import hashlib, json, os, sys, tarfile, zipfile

kit, work = sys.argv[1:3]
record = json.load(open(os.path.join(kit, "base", "kit.json")))
for relative, expected in record["files"].items():
    path = os.path.join(kit, relative)
    if not os.path.exists(path):
        if relative.startswith("cupy/"):
            print(f"missing {relative}: the GPU machine's own CuPy will be used")
            continue
        raise SystemExit(f"missing {path}: carry dist/gpu-kit/base")
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if digest != expected:
        raise SystemExit(f"{path}: sha256 {digest} != {expected} (a part is stale or cut)")
print(f"kit of {record['zip']} (sha256 {record['zip_sha256'][:16]}...), parts verified")
with zipfile.ZipFile(os.path.join(kit, "base", "engine.zip")) as engine:
    engine.extractall(os.path.join(work, "pkg", "snowfall"))
site = os.path.join(work, "site")
for relative in record["files"]:
    path = os.path.join(kit, relative)
    if not os.path.exists(path):
        continue
    if path.endswith(".whl"):
        zipfile.ZipFile(path).extractall(site)
    elif path.endswith(".tar.xz"):
        with tarfile.open(path) as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(site, filter="data")
            else:
                archive.extractall(site)
    else:
        continue
    print(f"installed {relative} into {site}")
EOF
  export PYTHONPATH="$W/pkg:$W/site" PYTHONUNBUFFERED=1
  "$PY" - "$W" <<'EOF' 2>&1 | tee "$OUT/check.log"
import os, sys

work = sys.argv[1]
import snowfall
from snowfall.snow_addon import backend
assert snowfall.__file__.startswith(work), f"snowfall from {snowfall.__file__}, not the zip"
print("engine:", snowfall.__file__)
diagnosis = backend.diagnose_gpu()
print("diagnosis:", diagnosis)
import cupy
print("cupy", cupy.__version__, "from", cupy.__file__)
print("numpy", __import__("numpy").__version__)
maps = open("/proc/self/maps").read().split("\n")
loaded = sorted({line.split()[-1] for line in maps
                 if "libcudart" in line or "libnvrtc" in line})
print("CUDA libraries mapped:", *loaded, sep="\n  ")
chosen = backend.select_backend("auto")
print("backend:", chosen.describe())
problems = []
if not diagnosis.usable:
    problems.append("the GPU is not usable: " + diagnosis.reason)
if chosen.name != "gpu":
    problems.append("auto did not pick the GPU")
if cupy.__file__.startswith(work):
    # the kit's CuPy 13 (CUDA 12): its runtime and NVRTC must be the bundled ones
    for name in ("libcudart.so.12", "libnvrtc.so.12"):
        if not any(os.path.basename(p) == name and p.startswith(work) for p in loaded):
            problems.append(f"{name} not loaded from the kit")
    nvrtc = cupy.cuda.nvrtc.getVersion()
    print("NVRTC", nvrtc, "runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion())
else:
    print("(CuPy is the machine's own: only the engine comes from the zip)")
if problems:
    raise SystemExit("FAILED: " + "; ".join(problems))
print("OK: engine, CuPy and CUDA runtime as expected")
EOF
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/check.log" || true
  if [ "$suite" = all ]; then
    select=(tests/engine)
  else
    select=(tests/engine -k "gpu or diagnosis")
  fi
  "$PY" -m pytest -q -p no:cacheprovider -rs "${select[@]}" 2>&1 | tee "$OUT/tests.log"
  exit "${PIPESTATUS[0]}"
  ;;

*)
  sed -n '2,27p' "$0"
  exit 2
  ;;
esac
