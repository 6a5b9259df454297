"""Build the installable Blender extension zips: one per platform, and for NVIDIA platforms
a GPU build beside it. Every zip bundles its dependencies as wheels (the extension
platform's rule: nothing is installed at run time) for both Pythons Blender ships.

    python tools/build_extension.py [--platforms linux-x64 windows-x64 macos-arm64]
                                    [--pythons 3.11 3.13] [--variants cpu gpu]
                                    [--out dist] [--cache wheels] [--offline]

What goes in (pinned, see ``requirements``):

- every zip: Numba and its llvmlite for Python 3.11 (Blender 4.2-5.0) and 3.13 (Blender
  5.1-5.2). Blender installs only the wheels whose tags match its own Python and platform.
- the GPU build (linux-x64, windows-x64): also CuPy for each Python, CuPy 13 (cupy-cuda12x
  13.6, NumPy 1.26) for 3.11 and CuPy 14 (cupy-cuda12x 14.2, NumPy 2) for 3.13, with their
  own dependencies, and the CUDA 12 runtime and NVRTC wheels CuPy loads at run time
  (one copy, they are not tied to a Python). The user needs only an NVIDIA driver that
  supports CUDA 12.0 or newer; ``snow_addon/backend.py`` loads the bundled libraries.

NumPy is never bundled: Blender ships its own, and a second copy would clash.

Downloads go through ``pip download --only-binary=:all: --no-deps`` with explicit
``--platform/--python-version/--abi`` tags into ``<cache>/<platform>/`` (default
``wheels/``, gitignored) and are reused: a wheel already there is not fetched again, and
``--offline`` fails instead of downloading. Each zip is
``dist/snowfall-<version>-<platform>[-gpu].zip`` (platform with ``_``, as Blender names
its own builds) with a manifest whose ``platforms`` and ``wheels`` name exactly that zip.
Install it with Edit > Preferences > Get Extensions > Install from Disk.

Only the standard library is used here (no import of the add-on). Sizes of the zips and
what each holds: docs/extension_builds.md.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Blender platform -> pip --platform tags (any of them matches). Blender itself accepts any
#: manylinux tag of the right architecture, any macOS version of the right architecture.
PLATFORM_TAGS = {
    "linux-x64": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                  "manylinux_2_28_x86_64"],
    "linux-arm64": ["manylinux2014_aarch64", "manylinux_2_17_aarch64",
                    "manylinux_2_27_aarch64", "manylinux_2_28_aarch64"],
    "windows-x64": ["win_amd64"],
    "macos-arm64": ["macosx_11_0_arm64", "macosx_12_0_arm64", "macosx_14_0_arm64"],
    "macos-x64": ["macosx_10_9_x86_64", "macosx_10_15_x86_64", "macosx_11_0_x86_64"],
}

#: Blender's Pythons: 3.11 in Blender 4.2-5.0 (NumPy 1.26), 3.13 in 5.1-5.2 (NumPy 2).
PYTHONS = ("3.11", "3.13")
DEFAULT_PLATFORMS = ("linux-x64", "windows-x64", "macos-arm64")
#: CuPy publishes wheels for x86-64 Linux and Windows (and aarch64 Linux; not built here).
GPU_PLATFORMS = ("linux-x64", "windows-x64")

#: What the zip holds from the repository: every top-level package (a folder with an
#: ``__init__.py``) and top-level module but these, and the files below; everything else
#: (tests/, tools/, docs/, build outputs) stays out.
EXCLUDE_TOP = ("tests", "tools", "benchmarks", "docs", "build", "dist", "wheels", "out",
               "__main__.py")
INCLUDE_FILES = ("LICENSE", "README.md")
EXCLUDE_PATTERNS = ("*/__pycache__/*", "*.pyc", "*.npz")


def include_top_level() -> tuple:
    """(top-level modules, top-level packages) of the add-on tree that the zip holds."""
    names = sorted(n for n in os.listdir(ROOT) if not n.startswith(".") and n not in EXCLUDE_TOP)
    modules = tuple(n for n in names if n.endswith(".py")
                    and os.path.isfile(os.path.join(ROOT, n)))
    packages = tuple(n for n in names
                     if os.path.isfile(os.path.join(ROOT, n, "__init__.py")))
    return modules, packages

#: Numba release bundled (the one the test suite runs on; it supports NumPy 1.22-2.5, which
#: covers the NumPy of every supported Blender) and the llvmlite its metadata asks for.
NUMBA = "numba==0.68.1"
LLVMLITE = "llvmlite==0.50.0"

#: CuPy per Python: 13.x is the last series for NumPy 1.x (Blender 4.2-5.0), 14.x needs
#: NumPy >= 2 (Blender 5.1-5.2). Both the cuda12x flavour, so one set of CUDA 12 runtime
#: wheels serves both, and drivers from R525 (CUDA 12.0) on work; cupy-cuda13x would need
#: an R580 driver. CuPy's own run-time dependencies follow (checked against the wheels'
#: metadata by ``check_dependencies``).
CUPY = {
    "3.11": ["cupy-cuda12x==13.6.0", "fastrlock==0.8.4"],
    "3.13": ["cupy-cuda12x==14.2.0", "cuda-pathfinder==1.9.0"],
}
#: The CUDA libraries CuPy loads at run time for what the engine uses (raw kernels compiled
#: by NVRTC, reductions, scans): the runtime (libcudart, and the headers CuPy 13 passes to
#: NVRTC) and NVRTC, of one CUDA minor version (CuPy 13 looks for the runtime headers of
#: the NVRTC's version). Not bundled: cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE, which
#: CuPy loads only for linalg/fft/random/sparse calls the engine does not make (about
#: 1 GB more). NVRTC 12.9 compiles native code up to sm_120 (RTX 50 series).
CUDA_WHEELS = ["nvidia-cuda-runtime-cu12==12.9.79", "nvidia-cuda-nvrtc-cu12==12.9.86"]
#: Provided by Blender, never bundled.
PROVIDED_BY_BLENDER = {"numpy"}


def read_version() -> str:
    with open(os.path.join(ROOT, "blender_manifest.toml")) as handle:
        match = re.search(r'^version\s*=\s*"([^"]+)"', handle.read(), re.M)
    return match.group(1)


def normalize(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def requirements(variant: str, pythons=PYTHONS) -> list:
    """(requirement, python or None) pairs a zip of ``variant`` ("cpu" or "gpu") bundles;
    None: one wheel for every Python (pure or py3-tagged)."""
    wanted = [(req, python) for python in pythons for req in (NUMBA, LLVMLITE)]
    if variant == "gpu":
        wanted += [(req, python) for python in pythons for req in CUPY[python]]
        wanted += [(req, None) for req in CUDA_WHEELS]
    elif variant != "cpu":
        raise ValueError(f"unknown variant {variant!r}")
    return wanted


def _python_tags(python: str | None) -> set:
    if python is None:
        return {"py3", "py2.py3"}
    digits = python.replace(".", "")
    return {"cp" + digits, "py3", "py2.py3", "py" + digits}


def wheel_matches(filename: str, requirement: str, platform: str,
                  python: str | None) -> bool:
    """Whether the wheel file ``filename`` is ``requirement`` (name==version) for
    ``platform`` and ``python``, judged from its name alone."""
    name, version = requirement.split("==")
    parts = filename[:-len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        return False
    python_tag, _abi, platform_tag = parts[-3:]
    if normalize(parts[0]) != normalize(name) or parts[1] != version:
        return False
    if not set(python_tag.split(".")) & _python_tags(python):
        return False
    return platform_matches(platform_tag, platform)


def platform_matches(platform_tag: str, platform: str) -> bool:
    """Whether a wheel's platform tag (possibly compressed, ``a.b``) runs on the Blender
    ``platform``, as Blender judges it: "any", or the OS family and the architecture."""
    platforms = set(platform_tag.split("."))
    if "any" in platforms:
        return True
    suffix = {"linux-x64": "_x86_64", "linux-arm64": "_aarch64", "windows-x64": "win_amd64",
              "macos-arm64": "_arm64", "macos-x64": "_x86_64"}[platform]
    family = {"linux": "manylinux", "windows": "win", "macos": "macosx"}[platform.split("-")[0]]
    return any(p.startswith(family) and p.endswith(suffix) for p in platforms)


def fetch_wheel(requirement: str, platform: str, python: str | None, folder: str,
                offline: bool = False) -> str:
    """The wheel of ``requirement`` for ``platform``/``python`` from ``folder``, downloaded
    there first (pip, binary only, no dependencies) when it is not there yet."""
    os.makedirs(folder, exist_ok=True)

    def cached():
        found = sorted(n for n in os.listdir(folder)
                       if wheel_matches(n, requirement, platform, python)
                       and zipfile.is_zipfile(os.path.join(folder, n)))
        return os.path.join(folder, found[0]) if found else None

    if (path := cached()) is not None:
        return path
    if offline:
        raise SystemExit(f"{requirement} for {platform}/{python or 'py3'} is not in {folder} "
                         "and --offline forbids downloading it")
    digits = (python or "3.11").replace(".", "")
    # into a private folder first, then moved: a concurrent build never sees half a wheel
    download = tempfile.mkdtemp(dir=folder, prefix=".download-")
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
               "--disable-pip-version-check", "--dest", download,
               "--python-version", python or "3.11", "--implementation", "cp"]
    if python is not None:
        command += ["--abi", "cp" + digits, "--abi", "abi3", "--abi", "none"]
    for tag in PLATFORM_TAGS[platform]:
        command += ["--platform", tag]
    try:
        done = subprocess.run(command + [requirement], capture_output=True, text=True)
        for name in os.listdir(download):
            if wheel_matches(name, requirement, platform, python):
                os.replace(os.path.join(download, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(download, ignore_errors=True)
    if (path := cached()) is None:
        raise SystemExit(f"pip found no {requirement} wheel for {platform}/{python or 'py3'}:\n"
                         + (done.stderr or done.stdout).strip()[-2000:])
    return path


def wheel_metadata(path: str) -> str:
    with zipfile.ZipFile(path) as wheel:
        name = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")
                and n.count("/") == 1][0]
        return wheel.read(name).decode("utf-8", "replace")


def runtime_requirements(path: str) -> list:
    """Names this wheel requires at run time (``Requires-Dist`` without an extra)."""
    names = []
    for line in wheel_metadata(path).splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec, _, marker = line[len("Requires-Dist:"):].partition(";")
        if "extra" in marker:
            continue
        names.append(normalize(re.match(r"\s*([A-Za-z0-9_.\-]+)", spec).group(1)))
    return names


def check_dependencies(wheels: list) -> None:
    """Every run-time requirement of every bundled wheel is bundled too (or is NumPy): for
    a wheel of one Python, among that Python's wheels and the Python-independent ones."""
    def tag(path):
        return os.path.basename(path)[:-4].split("-")[-3]

    def name(path):
        return normalize(os.path.basename(path).split("-")[0])

    independent = {name(p) for p in wheels if not tag(p).startswith("cp")}
    for path in wheels:
        present = ({name(p) for p in wheels if tag(p) == tag(path)} | independent
                   if tag(path).startswith("cp") else {name(p) for p in wheels})
        missing = [n for n in runtime_requirements(path)
                   if n not in present and n not in PROVIDED_BY_BLENDER]
        if missing:
            raise SystemExit(f"{os.path.basename(path)} needs {missing}, which the zip lacks")


def collect_wheels(platform: str, variant: str, cache: str, pythons=PYTHONS,
                   offline: bool = False) -> list:
    """Paths of every wheel a zip of ``variant`` for ``platform`` bundles."""
    if variant == "gpu" and platform not in GPU_PLATFORMS:
        raise SystemExit(f"no GPU build for {platform}: CuPy has wheels for "
                         f"{', '.join(GPU_PLATFORMS)}")
    folder = os.path.join(cache, platform)
    wheels = [fetch_wheel(req, platform, python, folder, offline)
              for req, python in requirements(variant, pythons)]
    wheels = sorted(set(wheels))
    check_dependencies(wheels)
    return wheels


def platform_manifest(platform: str, wheel_names: list) -> str:
    """The repository's manifest with ``platforms`` and ``wheels`` for one platform zip."""
    with open(os.path.join(ROOT, "blender_manifest.toml")) as handle:
        text = handle.read()
    wheels = "[\n" + "".join(f'  "./wheels/{name}",\n' for name in wheel_names) + "]"
    for key, value in (("platforms", f'["{platform}"]'), ("wheels", wheels)):
        # a one-line or multi-line array at the top level (the first match: before tables)
        text, count = re.subn(rf"^{key}\s*=\s*\[[^\]]*\]", lambda _m, v=value: f"{key} = {v}",
                              text, count=1, flags=re.M)
        if count == 0:
            raise SystemExit(f"blender_manifest.toml has no top-level `{key} = [...]` to fill")
    return text


def _tree_files():
    modules, packages = include_top_level()
    for name in modules + INCLUDE_FILES:
        if os.path.exists(os.path.join(ROOT, name)):
            yield name
    for top in packages:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                relative = os.path.relpath(os.path.join(folder, name), ROOT)
                if not any(fnmatch.fnmatch("/" + relative, p) for p in EXCLUDE_PATTERNS):
                    yield relative.replace(os.sep, "/")


def zip_name(platform: str, version: str, variant: str = "cpu") -> str:
    suffix = "-gpu" if variant == "gpu" else ""
    return f"snowfall-{version}-{platform.replace('-', '_')}{suffix}.zip"


def build_zip(platform: str, wheels: list, out_dir: str, version: str,
              variant: str = "cpu") -> str:
    """Write the zip: manifest for ``platform``, the add-on tree, ``wheels`` under wheels/
    (stored: wheels are compressed already). Returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, zip_name(platform, version, variant))
    names = sorted(os.path.basename(w) for w in wheels)
    partial = target + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("blender_manifest.toml", platform_manifest(platform, names))
        for relative in sorted(_tree_files()):
            archive.write(os.path.join(ROOT, relative), relative)
        for wheel in sorted(wheels, key=os.path.basename):
            archive.write(wheel, "wheels/" + os.path.basename(wheel),
                          compress_type=zipfile.ZIP_STORED)
    os.replace(partial, target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platforms", nargs="+", default=list(DEFAULT_PLATFORMS),
                        choices=sorted(PLATFORM_TAGS))
    parser.add_argument("--pythons", nargs="+", default=list(PYTHONS), choices=PYTHONS,
                        help="Blender's Pythons to bundle wheels for (default: both)")
    parser.add_argument("--variants", nargs="+", default=["cpu"], choices=("cpu", "gpu"),
                        help="cpu: Numba only; gpu: also CuPy and the CUDA runtime "
                             f"(for {', '.join(GPU_PLATFORMS)} only)")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--cache", "--wheels", dest="cache", default=os.path.join(ROOT, "wheels"),
                        help="download cache (one sub-folder per platform), reused")
    parser.add_argument("--offline", action="store_true",
                        help="use only wheels already in the cache")
    args = parser.parse_args(argv)
    version = read_version()
    for variant in args.variants:
        for platform in args.platforms:
            if variant == "gpu" and platform not in GPU_PLATFORMS:
                print(f"{platform}: no GPU build (CuPy wheels exist for "
                      f"{', '.join(GPU_PLATFORMS)}), skipped")
                continue
            wheels = collect_wheels(platform, variant, args.cache, args.pythons, args.offline)
            target = build_zip(platform, wheels, args.out, version, variant)
            size = os.path.getsize(target) / 1e6
            print(f"{platform} {variant}: {target} ({size:.1f} MB)")
            for wheel in wheels:
                print(f"    {os.path.getsize(wheel) / 1e6:7.1f} MB  {os.path.basename(wheel)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
