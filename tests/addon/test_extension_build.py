"""The zip written by tools/build_extension.py is a valid Blender extension: Blender's own
validator accepts its manifest, and it installs into a scratch user profile, registers under
Blender's package name (bl_ext.user_default.snowfall), installs its bundled Numba/llvmlite
wheels, and runs the engine from inside the extension package.

The Numba and llvmlite wheels (about 60 MB) are downloaded once per version into the pytest
cache (.pytest_cache/d/...) and reused; without network the tests are skipped.
"""
import importlib.metadata
import importlib.util
import json
import os
import platform as platform_module
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "bl_ext.user_default.snowfall"
RESULT_MARK = "SNOWFALL-EXTENSION-RESULT "


def _load_build_tool():
    spec = importlib.util.spec_from_file_location("build_extension",
                                                  ROOT / "tools" / "build_extension.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_extension = _load_build_tool()


def _blender_platform():
    machine = platform_module.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    system = {"linux": "linux", "win32": "windows", "darwin": "macos"}.get(sys.platform)
    name = f"{system}-{arch}"
    return name if name in build_extension.PLATFORM_TAGS else None


PLATFORM = _blender_platform()
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def wheels(request):
    """numba and llvmlite binary wheels of the versions installed here, for this platform and
    Python, from the pytest cache (downloaded there on first use)."""
    if PLATFORM is None:
        pytest.skip(f"no extension platform for {sys.platform}/{platform_module.machine()}")
    versions = {name: importlib.metadata.version(name) for name in ("numba", "llvmlite")}
    folder = Path(request.config.cache.mkdir(
        f"extension-wheels-{PLATFORM}-cp{PYTHON.replace('.', '')}-numba{versions['numba']}"
        f"-llvmlite{versions['llvmlite']}"))

    def cached():
        found = {}
        for path in folder.glob("*.whl"):
            name, version = path.name.split("-")[:2]
            if versions.get(name) == version and zipfile.is_zipfile(path):
                found[name] = path
        return found

    found = cached()
    missing = sorted(set(versions) - set(found))
    if missing:
        # into a private folder first, then renamed: a concurrent run never sees half a wheel
        download = Path(tempfile.mkdtemp(dir=folder, prefix="download-"))
        command = [sys.executable, "-m", "pip", "download", "--no-deps",
                   "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
                   "--dest", str(download), "--disable-pip-version-check"]
        for tag in build_extension.PLATFORM_TAGS[PLATFORM]:
            command += ["--platform", tag]
        command += [f"{name}=={versions[name]}" for name in missing]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            for wheel in download.glob("*.whl"):
                os.replace(wheel, folder / wheel.name)
        except subprocess.TimeoutExpired:
            pytest.skip("pip download of the numba/llvmlite wheels timed out")
        finally:
            shutil.rmtree(download, ignore_errors=True)
        found = cached()
        if done.returncode != 0 or set(found) != set(versions):
            pytest.skip("could not download the numba/llvmlite wheels (no network?): "
                        + (done.stderr or done.stdout).strip()[-500:])
    return [found["numba"], found["llvmlite"]]


@pytest.fixture(scope="module")
def extension_zip(wheels, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return Path(build_extension.build_zip(PLATFORM, [str(w) for w in wheels], str(out),
                                          build_extension.read_version()))


def test_zip_holds_the_addon_and_its_wheels_only(extension_zip, wheels):
    with zipfile.ZipFile(extension_zip) as archive:
        names = archive.namelist()
        manifest = tomllib.loads(archive.read("blender_manifest.toml").decode())
    for required in ("blender_manifest.toml", "__init__.py", "snow_addon/simulation.py",
                     "snow_addon/backend.py", "kernels/cpu/cover.py",
                     "kernels/reference/cover.py", "operators/__init__.py",
                     "panels/__init__.py"):
        assert required in names
    unwanted = [n for n in names
                if n.split("/")[0] in ("tests", "tools", "benchmarks", ".venv", "dist", "out",
                                       ".git", ".pytest_cache", "build")
                or "__pycache__" in n.split("/") or n.endswith((".pyc", ".npz"))
                or ".egg-info" in n]
    assert unwanted == []
    bundled = sorted(n for n in names if n.startswith("wheels/"))
    assert bundled == sorted("wheels/" + w.name for w in wheels)
    assert manifest["id"] == "snowfall" and manifest["type"] == "add-on"
    assert manifest["platforms"] == [PLATFORM]
    assert sorted(manifest["wheels"]) == sorted("./" + n for n in bundled)


def test_build_tool_bundles_the_numba_the_tests_run_on():
    """The release zips pin the Numba the suite runs on (and its llvmlite follows it)."""
    assert build_extension.NUMBA == f"numba=={importlib.metadata.version('numba')}"


def _blender_ext_script():
    scripts = Path(bpy.utils.system_resource("SCRIPTS"))
    found = sorted(scripts.glob("addons_core/bl_pkg/cli/blender_ext.py"))
    return found[0] if found else None


def test_blender_validates_the_manifest(extension_zip):
    script = _blender_ext_script()
    if script is None:
        pytest.skip("Blender's blender_ext.py is not shipped with this bpy module")
    done = subprocess.run([sys.executable, str(script), "validate", str(extension_zip)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout, done.stdout + done.stderr


# Runs in a fresh interpreter whose Blender user profile is a scratch folder: installs the
# zip, then gathers what the parent test asserts on (one JSON line after RESULT_MARK).
_CHILD = r"""
import importlib, json, os, sys
import numpy as np
import bpy

zip_path, profile, mark = sys.argv[1:4]
facts = {"extensions_dir": bpy.utils.user_resource("EXTENSIONS")}
if not os.path.realpath(facts["extensions_dir"]).startswith(os.path.realpath(profile)):
    print(mark + json.dumps(facts)); sys.exit(0)   # never touch a real profile

result = bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                  enable_on_install=True)
package = "bl_ext.user_default.snowfall"
facts["install"] = sorted(result)
facts["enabled"] = package in bpy.context.preferences.addons
facts["addon_file"] = getattr(sys.modules.get(package), "__file__", None)
facts["scene_property"] = hasattr(bpy.types.Scene, "snowfall")
facts["bake_in_ops"] = "bake" in dir(bpy.ops.snowfall)
try:
    facts["bake_rna"] = bpy.ops.snowfall.bake.get_rna_type().identifier
except KeyError:
    facts["bake_rna"] = None

backend_module = importlib.import_module(package + ".snow_addon.backend")
cpu = backend_module.select_backend("cpu")
facts["backend_file"] = backend_module.__file__
facts["cpu_name"] = cpu.name
import numba, llvmlite
facts["numba_file"], facts["llvmlite_file"] = numba.__file__, llvmlite.__file__

# One Numba kernel of the extension (compiled by the bundled Numba) against its reference.
rng = np.random.default_rng(3)
hits = rng.integers(0, 5, (9, 11)).astype(np.int32)
scale = rng.uniform(0.0, 1e-3, (9, 11)).astype(np.float32)
surface = rng.random((9, 11)) > 0.2
depths = []
for kernels in (cpu.kernel_module("cover"),
                backend_module.select_backend("numpy").kernel_module("cover")):
    depth = np.full((9, 11), 0.05, np.float32)
    total, next_hits = np.zeros(1, np.int64), np.ones((9, 11), np.int32)
    kernels.deposit_hits(hits, scale, surface, depth, total, next_hits)
    depths.append(depth)
    facts.setdefault("hit_totals", []).append(int(total[0]))
facts["cover_kernel_file"] = cpu.kernel_module("cover").__file__
facts["cpu_vs_reference"] = float(np.abs(depths[0] - depths[1]).max())
facts["deposited"] = float((depths[1] - 0.05).sum())

# A tiny simulation, one step, on the engine imported from the extension package.
simulation = importlib.import_module(package + ".snow_addon.simulation")
scenes = importlib.import_module(package + ".snow_addon.scenes")
settings_module = importlib.import_module(package + ".snow_addon.settings")
settings = settings_module.SnowSettings(heightmap_resolution=16, wind_resolution=8,
                                        flake_count=200, seed=1)
sim = simulation.Simulation(settings, *scenes.gaussian_hill(20.0, 4.0, 3.0, 9),
                            backend="numpy")
diagnostics = sim.step(1)
positions = sim.flake_positions()
facts["simulation_file"] = simulation.__file__
facts["step"] = diagnostics.step
facts["wind_converged"] = bool(diagnostics.wind.converged)
facts["positions_finite"] = bool(np.isfinite(positions).all()) and positions.shape == (200, 3)
facts["volumes"] = [diagnostics.deposited_volume, diagnostics.snow_volume]

bpy.ops.preferences.addon_disable(module=package)
facts["disabled"] = package not in bpy.context.preferences.addons
facts["scene_property_after_disable"] = hasattr(bpy.types.Scene, "snowfall")
print(mark + json.dumps(facts))
"""


def test_installs_and_registers_as_a_blender_extension(extension_zip, tmp_path):
    profile = tmp_path / "blender-user"
    # Blender installs the wheels here; putting it first on the path makes the child import
    # the bundled numba/llvmlite rather than the copies installed in this environment.
    site_packages = profile / "extensions" / ".local" / "lib" / f"python{PYTHON}" / "site-packages"
    site_packages.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BLENDER_USER_", "BLENDER_SYSTEM_", "NUMBA_CACHE_DIR"))}
    env["BLENDER_USER_RESOURCES"] = str(profile)
    env["PYTHONPATH"] = os.pathsep.join([str(site_packages)]
                                        + ([os.environ["PYTHONPATH"]]
                                           if os.environ.get("PYTHONPATH") else []))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(extension_zip), str(profile),
                           RESULT_MARK], capture_output=True, text=True, timeout=600, env=env,
                          cwd=str(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    assert lines, output[-4000:]
    facts = json.loads(lines[-1][len(RESULT_MARK):])

    def inside(path, folder):
        return path is not None and Path(path).resolve().is_relative_to(folder.resolve())

    installed = profile / "extensions" / "user_default" / "snowfall"
    assert inside(facts["extensions_dir"], profile), facts
    assert facts["install"] == ["FINISHED"], output[-4000:]
    assert facts["enabled"], output[-4000:]
    assert inside(facts["addon_file"], installed), facts
    assert facts["scene_property"] and facts["bake_in_ops"], facts
    assert facts["bake_rna"] == "SNOWFALL_OT_bake"
    # the engine runs as a sub-package of the extension, on the bundled wheels
    assert facts["cpu_name"] == "cpu"
    for key in ("backend_file", "cover_kernel_file", "simulation_file"):
        assert inside(facts[key], installed), (key, facts[key])
    for key in ("numba_file", "llvmlite_file"):
        assert inside(facts[key], site_packages), (key, facts[key])
    assert facts["hit_totals"][0] == facts["hit_totals"][1] > 0
    assert facts["deposited"] > 0.0 and facts["cpu_vs_reference"] <= 1e-7, facts
    assert facts["step"] == 1 and facts["wind_converged"] and facts["positions_finite"], facts
    deposited, snow = facts["volumes"]
    assert snow == pytest.approx(deposited, rel=1e-5, abs=1e-9)
    assert facts["disabled"] and not facts["scene_property_after_disable"], facts
