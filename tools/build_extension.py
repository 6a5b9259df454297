"""Build the installable Blender extension zips, one per platform, with the Numba and
llvmlite wheels bundled (Blender 4.2+ extension wheels: nothing is installed at run time).

    python tools/build_extension.py [--platforms linux-x64 windows-x64 macos-arm64]
                                    [--python 3.11] [--out dist]

For each platform: ``pip download`` numba and llvmlite binary wheels for Blender's Python
(3.11 for Blender 5.0) into ``wheels/<platform>/``, then write
``dist/snowfall-<version>-<platform>.zip`` holding the add-on tree, the wheels under
``wheels/`` and a manifest whose ``platforms`` and ``wheels`` name exactly that platform's
wheels. NumPy is not bundled: Blender ships its own, and a second copy would clash.
Install the zip with Edit > Preferences > Get Extensions > Install from Disk.

Only the standard library is used here (no import of the add-on).
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Blender platform -> pip --platform tags (most specific first).
PLATFORM_TAGS = {
    "linux-x64": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"],
    "linux-arm64": ["manylinux2014_aarch64", "manylinux_2_17_aarch64"],
    "windows-x64": ["win_amd64"],
    "macos-arm64": ["macosx_11_0_arm64", "macosx_12_0_arm64", "macosx_14_0_arm64"],
    "macos-x64": ["macosx_10_9_x86_64", "macosx_10_15_x86_64", "macosx_11_0_x86_64"],
}

#: What the zip holds from the repository (everything else, e.g. tests/, stays out).
INCLUDE_DIRS = ("snow_addon", "kernels", "operators", "panels", "sample_scenes")
INCLUDE_FILES = ("__init__.py", "LICENSE", "README.md")
EXCLUDE_PATTERNS = ("*/__pycache__/*", "*.pyc", "*.npz")

#: Numba release bundled (the one the test suite runs on; it supports NumPy 1.22-2.5, which
#: covers the NumPy Blender ships). Its llvmlite is the one its wheel metadata requires.
NUMBA = "numba==0.68.1"


def read_version() -> str:
    with open(os.path.join(ROOT, "blender_manifest.toml")) as handle:
        match = re.search(r'^version\s*=\s*"([^"]+)"', handle.read(), re.M)
    return match.group(1)


def llvmlite_requirement(numba_wheel: str) -> str:
    """The llvmlite requirement in a numba wheel's metadata, e.g. 'llvmlite<0.51,>=0.50.0dev0'."""
    with zipfile.ZipFile(numba_wheel) as wheel:
        name = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")][0]
        metadata = wheel.read(name).decode()
    match = re.search(r"^Requires-Dist:\s*(llvmlite[^;\n]*)", metadata, re.M)
    if match is None:
        raise SystemExit(f"{numba_wheel} does not name its llvmlite")
    return match.group(1).replace(" ", "")


def download_wheels(platform: str, python: str, folder: str) -> list:
    """Binary wheels of REQUIREMENTS (without NumPy) for one platform; returns their paths."""
    os.makedirs(folder, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
               "--python-version", python, "--implementation", "cp", "--dest", folder]
    for tag in PLATFORM_TAGS[platform]:
        command += ["--platform", tag]
    subprocess.run(command + [NUMBA], check=True)
    numba_wheels = [n for n in os.listdir(folder)
                    if n.startswith("numba-" + NUMBA.split("==")[1] + "-") and n.endswith(".whl")]
    if not numba_wheels:
        raise SystemExit(f"pip found no {NUMBA} wheel for {platform}")
    subprocess.run(command + [llvmlite_requirement(os.path.join(folder, numba_wheels[0]))],
                   check=True)
    wheels = sorted(os.path.join(folder, name) for name in os.listdir(folder)
                    if name.endswith(".whl") and name.split("-")[0] in ("numba", "llvmlite"))
    names = {os.path.basename(w).split("-")[0] for w in wheels}
    if names != {"numba", "llvmlite"}:
        raise SystemExit(f"missing wheels for {platform}: got {sorted(names)}")
    return wheels


def platform_manifest(platform: str, wheel_names: list) -> str:
    """The repository's manifest with ``platforms`` and ``wheels`` for one platform."""
    with open(os.path.join(ROOT, "blender_manifest.toml")) as handle:
        text = handle.read()
    wheels = "[\n" + "".join(f'  "./wheels/{name}",\n' for name in wheel_names) + "]"
    text = re.sub(r"^platforms\s*=.*$", f'platforms = ["{platform}"]', text, flags=re.M)
    text = re.sub(r"^wheels\s*=.*$", "wheels = " + wheels, text, flags=re.M)
    return text


def _tree_files():
    for name in INCLUDE_FILES:
        if os.path.exists(os.path.join(ROOT, name)):
            yield name
    for top in INCLUDE_DIRS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                relative = os.path.relpath(os.path.join(folder, name), ROOT)
                if not any(fnmatch.fnmatch("/" + relative, p) for p in EXCLUDE_PATTERNS):
                    yield relative


def build_zip(platform: str, wheels: list, out_dir: str, version: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, f"snowfall-{version}-{platform.replace('-', '_')}.zip")
    names = [os.path.basename(w) for w in wheels]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("blender_manifest.toml", platform_manifest(platform, names))
        for relative in sorted(_tree_files()):
            archive.write(os.path.join(ROOT, relative), relative)
        for wheel in wheels:
            archive.write(wheel, "wheels/" + os.path.basename(wheel))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platforms", nargs="+", default=["linux-x64", "windows-x64",
                                                            "macos-arm64"],
                        choices=sorted(PLATFORM_TAGS))
    parser.add_argument("--python", default="3.11", help="Blender's Python version")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--wheels", default=os.path.join(ROOT, "wheels"),
                        help="download folder (one sub-folder per platform)")
    args = parser.parse_args(argv)
    version = read_version()
    for platform in args.platforms:
        wheels = download_wheels(platform, args.python, os.path.join(args.wheels, platform))
        target = build_zip(platform, wheels, args.out, version)
        size = os.path.getsize(target) / 1024**2
        print(f"{platform}: {target} ({size:.1f} MiB; {', '.join(map(os.path.basename, wheels))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
