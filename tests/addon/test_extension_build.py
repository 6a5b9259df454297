"""The zips written by tools/build_extension.py are valid Blender extensions
(docs/extension_builds.md).

- The build tool's logic (wheel selection by tags, the per-zip manifest, the dependency
  check) on fake wheels: no network.
- The CPU zips for linux-x64, windows-x64 and macos-arm64: each bundles Numba and llvmlite
  for Python 3.11 and 3.13, names exactly those wheels and its platform in its manifest, and
  Blender's own validator (``blender_ext.py validate``, shipped with the bpy module) accepts
  it, in every Blender found (below).
- The linux-x64 zip installs into a scratch user profile of this interpreter's Blender
  (tools/test.sh runs the add-on suite in 5.2 and 4.2, so both are covered), which picks the wheels of its own Python, registers the
  add-on as ``bl_ext.user_default.snowfall``, runs a Numba kernel from the bundled wheels,
  and bakes a tiny box test (3 frames, 400 flakes) on the CPU backend with them. A Blender
  outside the manifest's range refuses the zip.
- The linux-x64 GPU zip (CuPy 13/14, CUDA 12.9 runtime and NVRTC; 470 MB) installs the same
  way, CuPy loads from Blender's extension folder with the bundled CUDA libraries, and the
  bundled NVRTC compiles every GPU kernel of the engine (no GPU needed).
- ``SNOWFALL_TEST_GPU_ZIPS=1`` (marked slow): the windows-x64 GPU zip too (360 MB more to
  download), checked and validated. ``SNOWFALL_TEST_ALL_BLENDERS=1``: the install tests in
  every Blender found that the manifest admits, not only this interpreter's.

Blenders: this interpreter's bpy, plus every ``.venv*/bin/python`` at the repository root
whose bpy imports (e.g. ``.venv-blender-4.2``, ``.venv-blender-5.2``), plus the interpreters
listed in ``SNOWFALL_BLENDER_PYTHONS`` (separated by ``os.pathsep``).

The wheels are downloaded once into ``wheels/`` (gitignored; the build tool's own cache)
and reused; without network the tests that need them skip, saying so.
"""
import glob
import importlib.metadata
import importlib.util
import io
import json
import os
import platform as platform_module
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "bl_ext.user_default.snowfall"
RESULT_MARK = "SNOWFALL-EXTENSION-RESULT "
CACHE = ROOT / "wheels"


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


# --- Blenders to test in ----------------------------------------------------------------------

def _other_blender_pythons():
    found = []
    for path in sorted(glob.glob(str(ROOT / ".venv*" / "bin" / "python"))):
        found.append(path)
    found += [p for p in os.environ.get("SNOWFALL_BLENDER_PYTHONS", "").split(os.pathsep) if p]
    own = os.path.realpath(sys.prefix)
    unique = []
    for path in found:
        prefix = os.path.realpath(os.path.dirname(os.path.dirname(path)))
        if prefix != own and path not in unique:
            unique.append(path)
    return unique


_PROBE = ("import sys, bpy, numpy; print(bpy.app.version_string.split()[0], "
          "'%d.%d' % sys.version_info[:2], numpy.__version__, "
          "bpy.utils.system_resource('SCRIPTS'))")


def _blender_info(python):
    """(blender version, python version, numpy version, scripts folder) of an interpreter's
    bpy, or None when it has none."""
    if python == sys.executable:
        import numpy
        return (bpy.app.version_string.split()[0], PYTHON, numpy.__version__,
                bpy.utils.system_resource("SCRIPTS"))
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                              timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return tuple(done.stdout.strip().splitlines()[-1].split(" ", 3))


BLENDER_PYTHONS = [sys.executable] + _other_blender_pythons()
_BLENDER_IDS = ["this"] + [Path(p).parents[1].name for p in BLENDER_PYTHONS[1:]]
_infos = {}


def _cached_info(python):
    if python not in _infos:
        _infos[python] = _blender_info(python)
    return _infos[python]


def _version_tuple(text):
    return tuple(int(part) for part in text.split(".")[:3])


def _manifest_range():
    manifest = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    return (_version_tuple(manifest["blender_version_min"]),
            _version_tuple(manifest["blender_version_max"]) if manifest.get(
                "blender_version_max") else None)


def _admitted(version):
    low, high = _manifest_range()
    return _version_tuple(version) >= low and (high is None or _version_tuple(version) < high)


def _install_candidates():
    """The Blenders the install tests run in: this interpreter's (tools/test.sh runs the
    add-on suite in the newest and the oldest release, so each installs in its own), and
    with SNOWFALL_TEST_ALL_BLENDERS=1 every other one found that the manifest admits."""
    if os.environ.get("SNOWFALL_TEST_ALL_BLENDERS") == "1":
        return {python for python in BLENDER_PYTHONS
                if (info := _cached_info(python)) is not None and _admitted(info[0])}
    return {sys.executable}


@pytest.fixture(scope="module", params=BLENDER_PYTHONS, ids=_BLENDER_IDS)
def blender(request):
    """An interpreter with the bpy module: dict(python, version, python_version, numpy,
    scripts)."""
    info = _cached_info(request.param)
    if info is None:
        pytest.skip(f"{request.param} has no importable bpy module")
    version, python_version, numpy_version, scripts = info
    return {"python": request.param, "version": version, "python_version": python_version,
            "numpy": numpy_version, "scripts": scripts}


# --- the build tool on fake wheels (no network) ----------------------------------------------

def _fake_wheel(folder, filename, requires=()):
    name, version = filename.split("-")[:2]
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    path = Path(folder) / filename
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return str(path)


@pytest.mark.parametrize("filename, requirement, platform, python, expected", [
    ("numba-0.68.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
     "numba==0.68.1", "linux-x64", "3.11", True),
    ("numba-0.68.1-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
     "numba==0.68.1", "linux-x64", "3.11", False),
    ("numba-0.68.1-cp311-cp311-win_amd64.whl", "numba==0.68.1", "linux-x64", "3.11", False),
    ("numba-0.68.1-cp311-cp311-win_amd64.whl", "numba==0.68.1", "windows-x64", "3.11", True),
    ("numba-0.68.0-cp311-cp311-win_amd64.whl", "numba==0.68.1", "windows-x64", "3.11", False),
    ("llvmlite-0.50.0-cp313-cp313-macosx_12_0_arm64.whl", "llvmlite==0.50.0",
     "macos-arm64", "3.13", True),
    ("llvmlite-0.50.0-cp313-cp313-macosx_12_0_x86_64.whl", "llvmlite==0.50.0",
     "macos-arm64", "3.13", False),
    ("cupy_cuda12x-13.6.0-cp311-cp311-manylinux2014_x86_64.whl", "cupy-cuda12x==13.6.0",
     "linux-x64", "3.11", True),
    ("nvidia_cuda_nvrtc_cu12-12.9.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
     "nvidia-cuda-nvrtc-cu12==12.9.86", "linux-x64", None, True),
    ("nvidia_cuda_nvrtc_cu12-12.9.86-py3-none-win_amd64.whl",
     "nvidia-cuda-nvrtc-cu12==12.9.86", "linux-x64", None, False),
    ("cuda_pathfinder-1.9.0-py3-none-any.whl", "cuda-pathfinder==1.9.0", "windows-x64", "3.13",
     True),
])
def test_wheels_are_chosen_by_name_version_python_and_platform(filename, requirement, platform,
                                                               python, expected):
    assert build_extension.wheel_matches(filename, requirement, platform, python) is expected


def test_requirements_per_variant_cover_both_pythons():
    cpu = build_extension.requirements("cpu")
    assert sorted(cpu) == sorted([(build_extension.NUMBA, "3.11"), (build_extension.LLVMLITE, "3.11"),
                                  (build_extension.NUMBA, "3.13"), (build_extension.LLVMLITE, "3.13")])
    gpu = build_extension.requirements("gpu")
    assert set(cpu) <= set(gpu)
    cupy = {python: req for req, python in gpu if req.startswith("cupy-")}
    assert cupy["3.11"].startswith("cupy-cuda12x==13.")     # NumPy 1.26 (Blender 4.2-5.0)
    assert cupy["3.13"].startswith("cupy-cuda12x==14.")     # NumPy 2 (Blender 5.1-5.2)
    shared = [req for req, python in gpu if python is None]
    assert sorted(r.split("==")[0] for r in shared) == ["nvidia-cuda-nvrtc-cu12",
                                                         "nvidia-cuda-runtime-cu12"]
    # CuPy 13 takes the runtime headers of the NVRTC's CUDA minor version
    versions = {r.split("==")[1].rsplit(".", 1)[0] for r in shared}
    assert len(versions) == 1, shared
    with pytest.raises(ValueError):
        build_extension.requirements("rocm")


def test_the_bundled_llvmlite_is_the_one_numba_asks_for_and_numba_is_the_tested_one():
    from packaging.requirements import Requirement
    assert build_extension.NUMBA == f"numba=={importlib.metadata.version('numba')}"
    wanted = [Requirement(r) for r in importlib.metadata.requires("numba")
              if r.startswith("llvmlite")]
    assert wanted and build_extension.LLVMLITE.split("==")[1] in wanted[0].specifier


def test_dependency_check_finds_what_a_zip_lacks(tmp_path):
    ok = [_fake_wheel(tmp_path, "cupy_cuda12x-13.6.0-cp311-cp311-win_amd64.whl",
                      ["numpy<2.6,>=1.22", "fastrlock>=0.5", 'scipy; extra == "all"']),
          _fake_wheel(tmp_path, "fastrlock-0.8.4-cp311-cp311-win_amd64.whl"),
          _fake_wheel(tmp_path, "cupy_cuda12x-14.2.0-cp313-cp313-win_amd64.whl",
                      ["numpy<2.6,>=2.0", "cuda-pathfinder==1.*,>=1.3.4"]),
          _fake_wheel(tmp_path, "cuda_pathfinder-1.9.0-py3-none-any.whl")]
    build_extension.check_dependencies(ok)
    # fastrlock bundled for 3.11 only does not serve a 3.13 CuPy 13
    lacking = ok[2:] + [_fake_wheel(tmp_path, "cupy_cuda12x-13.6.0-cp313-cp313-win_amd64.whl",
                                    ["fastrlock>=0.5"]), ok[1]]
    with pytest.raises(SystemExit, match="fastrlock"):
        build_extension.check_dependencies(lacking)


def test_manifest_gets_one_platform_and_exactly_the_wheels():
    text = build_extension.platform_manifest("windows-x64", ["a-1-cp311-cp311-win_amd64.whl",
                                                             "a-1-cp313-cp313-win_amd64.whl"])
    manifest = tomllib.loads(text)
    assert manifest["platforms"] == ["windows-x64"]
    assert manifest["wheels"] == ["./wheels/a-1-cp311-cp311-win_amd64.whl",
                                  "./wheels/a-1-cp313-cp313-win_amd64.whl"]
    assert manifest["id"] == "snowfall"
    # the rest of the manifest is the repository's, unchanged
    repository = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    for key in ("id", "version", "blender_version_min", "permissions", "build"):
        assert manifest.get(key) == repository.get(key), key


def test_offline_build_without_the_wheel_says_so(tmp_path):
    with pytest.raises(SystemExit, match="offline"):
        build_extension.fetch_wheel(build_extension.NUMBA, "linux-x64", "3.11", str(tmp_path),
                                    offline=True)


# --- the real wheels and zips -----------------------------------------------------------------

def _wheels_or_skip(platform, variant):
    try:
        return build_extension.collect_wheels(platform, variant, str(CACHE))
    except SystemExit as failure:
        pytest.skip(f"the {variant} wheels for {platform} are not in {CACHE} and could not "
                    f"be downloaded (no network?): {str(failure)[-400:]}")


_zips = {}


def _zip_or_skip(platform, variant, out_dir):
    key = (platform, variant)
    if key not in _zips:
        wheels = _wheels_or_skip(platform, variant)
        _zips[key] = (Path(build_extension.build_zip(platform, wheels, str(out_dir),
                                                     build_extension.read_version(), variant)),
                      wheels)
    return _zips[key]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    return tmp_path_factory.mktemp("dist")


_MORE_GPU_ZIPS = pytest.mark.skipif(os.environ.get("SNOWFALL_TEST_GPU_ZIPS") != "1",
                                    reason="the windows-x64 GPU zip (360 MB more wheels) "
                                           "only with SNOWFALL_TEST_GPU_ZIPS=1")
_NO_GPU_ZIPS = pytest.mark.skipif(os.environ.get("SNOWFALL_TEST_GPU_ZIPS") == "0",
                                  reason="SNOWFALL_TEST_GPU_ZIPS=0")
ZIPS = ([pytest.param(p, "cpu", id=f"{p}-cpu") for p in build_extension.DEFAULT_PLATFORMS]
        + [pytest.param("linux-x64", "gpu", id="linux-x64-gpu", marks=_NO_GPU_ZIPS)]
        + [pytest.param(p, "gpu", id=f"{p}-gpu", marks=[pytest.mark.slow, _MORE_GPU_ZIPS])
           for p in build_extension.GPU_PLATFORMS if p != "linux-x64"])


def _wheel_tags(name):
    parts = name[:-4].split("-")
    return build_extension.normalize(parts[0]), parts[1], parts[-3]


@pytest.mark.parametrize("platform, variant", ZIPS)
def test_zip_holds_the_addon_and_the_wheels_of_both_pythons(platform, variant, dist):
    target, wheels = _zip_or_skip(platform, variant, dist)
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
        manifest = tomllib.loads(archive.read("blender_manifest.toml").decode())
        infos = {i.filename: i for i in archive.infolist()}
    for required in ("blender_manifest.toml", "__init__.py", "snow_addon/simulation.py",
                     "snow_addon/backend.py", "kernels/cpu/cover.py", "kernels/gpu/wind.py",
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
    assert bundled == sorted("wheels/" + os.path.basename(w) for w in wheels)
    assert all(infos[n].compress_type == zipfile.ZIP_STORED for n in bundled)
    assert manifest["id"] == "snowfall" and manifest["type"] == "add-on"
    assert manifest["platforms"] == [platform]
    assert sorted(manifest["wheels"]) == sorted("./" + n for n in bundled)
    tags = [_wheel_tags(n.split("/")[1]) for n in bundled]
    for python in ("cp311", "cp313"):
        for name in ("numba", "llvmlite"):
            assert [t for t in tags if t[0] == name and t[2] == python], (name, python, tags)
    for name in bundled:
        assert build_extension.platform_matches(name[:-4].split("-")[-1], platform), name
    cupy = sorted((t[2], t[1]) for t in tags if t[0].startswith("cupy"))
    if variant == "gpu":
        assert [c[0] for c in cupy] == ["cp311", "cp313"], cupy
        assert cupy[0][1].startswith("13.") and cupy[1][1].startswith("14."), cupy
        assert {t[0] for t in tags} >= {"nvidia_cuda_runtime_cu12", "nvidia_cuda_nvrtc_cu12",
                                        "fastrlock", "cuda_pathfinder"}
    else:
        assert cupy == [] and not [t for t in tags if t[0].startswith("nvidia")]
    assert os.path.getsize(target) < (600e6 if variant == "gpu" else 160e6)


@pytest.mark.parametrize("platform, variant", ZIPS)
def test_blender_validates_the_zip(platform, variant, dist, blender):
    target, _wheels = _zip_or_skip(platform, variant, dist)
    script = Path(blender["scripts"]) / "addons_core" / "bl_pkg" / "cli" / "blender_ext.py"
    if not script.exists():
        pytest.skip(f"Blender {blender['version']}'s blender_ext.py is not shipped with its bpy")
    done = subprocess.run([blender["python"], str(script), "validate", str(target)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout, done.stdout + done.stderr


# Runs in a fresh interpreter whose Blender user profile is a scratch folder: installs the
# zip, checks the engine on the bundled wheels, bakes a tiny box test, and prints what the
# parent test asserts on (one JSON line after RESULT_MARK).
_CHILD_INSTALL = r"""
import importlib, importlib.metadata, json, os, sys, time
import numpy as np
import bpy

zip_path, profile, mark, work = sys.argv[1:5]
facts = {"extensions_dir": bpy.utils.user_resource("EXTENSIONS"),
         "blender": bpy.app.version_string, "numpy": np.__version__}
if not os.path.realpath(facts["extensions_dir"]).startswith(os.path.realpath(profile)):
    print(mark + json.dumps(facts)); sys.exit(0)   # never touch a real profile

started = time.perf_counter()
result = bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                  enable_on_install=True)
facts["install_seconds"] = time.perf_counter() - started
package = "bl_ext.user_default.snowfall"
facts["install"] = sorted(result)
facts["enabled"] = package in bpy.context.preferences.addons
if not facts["enabled"]:      # refused (e.g. a Blender the manifest does not admit)
    print(mark + json.dumps(facts)); sys.exit(0)
"""

_CHILD_EXIT = r"""
print(mark + json.dumps(facts))
sys.stdout.flush()
# The bpy 4.2 module segfaults at interpreter exit once any Panel was registered (a
# one-Panel script does it too; 5.x does not): leave without the interpreter's teardown.
os._exit(0)
"""

_CHILD = _CHILD_INSTALL + r"""
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
facts["gpu_reason"] = backend_module.gpu_unavailable_reason()
import numba, llvmlite
facts["numba_file"], facts["llvmlite_file"] = numba.__file__, llvmlite.__file__
facts["numba_wheel_tag"] = [line.split(":", 1)[1].strip() for line in
                            importlib.metadata.distribution("numba").read_text("WHEEL").splitlines()
                            if line.startswith("Tag:")]
site = os.path.dirname(os.path.dirname(numba.__file__))
facts["site_packages"] = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))

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

bpy.ops.preferences.addon_disable(module=package)
facts["disabled"] = package not in bpy.context.preferences.addons
facts["scene_property_after_disable"] = hasattr(bpy.types.Scene, "snowfall")

# The box test, tiny, baked headless with the extension's own modules on the CPU backend
# (registered by the scene builder itself, as the sample scripts do: the scene starts from
# factory settings, which would disable an add-on enabled in the preferences).
build = importlib.import_module(package + ".sample_scenes.build")
headless = importlib.import_module(package + ".operators.headless")
terrain = build.build("box_test", frames=3, flakes=400, resolution=33)
scene = bpy.context.scene
props = scene.snowfall
props.heightmap_resolution, props.wind_resolution, props.sky_height = 32, 8, 4.0
props.substeps, props.backend, props.snowfall_rate = 1, "cpu", 400.0
blend = os.path.join(work, "box.blend")
bpy.ops.wm.save_as_mainfile(filepath=blend)
started = time.perf_counter()
facts["last_frame"] = headless.bake_file(blend, backend="cpu", log=lambda *a: None)
facts["bake_seconds"] = time.perf_counter() - started
terrain = bpy.data.objects["Box Test Terrain"]
# The snow of the baked frames, as the snow surface shows it: the bake folder's depth files.
snow_surface = importlib.import_module(package + ".operators.snow_surface")
facts["snow_frames"] = snow_surface.baked_frames()
depth = {}
for frame in (2, 3):
    values = snow_surface.read_depth_frame(frame)
    if values is not None:
        depth[str(frame)] = [float(values.min()), float(values.max()), float(values.sum())]
facts["snow_depth"] = depth
facts["frame_attributes"] = [a.name for a in terrain.data.attributes
                             if a.name.startswith("snow_depth_")]
facts["backend_used"] = bpy.context.scene.snowfall.backend_used
facts["surface"] = snow_surface.OBJECT_NAME in bpy.data.objects
sys.modules[package].unregister()
""" + _CHILD_EXIT


def _run_child(child, python, python_version, zip_path, tmp_path):
    """Run ``child`` (installs the zip first) in ``python`` with a scratch Blender profile;
    returns (facts, profile, the profile's wheel site-packages, output)."""
    profile = tmp_path / "blender-user"
    # Blender installs the wheels here; putting it first on the path makes the child import
    # the bundled wheels rather than copies installed in the interpreter's own environment.
    site_packages = (profile / "extensions" / ".local" / "lib" / f"python{python_version}"
                     / "site-packages")
    site_packages.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BLENDER_USER_", "BLENDER_SYSTEM_", "NUMBA_CACHE_DIR",
                                "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_PATH",
                                "CUDA_HOME"))}
    env["BLENDER_USER_RESOURCES"] = str(profile)
    env["PYTHONPATH"] = str(site_packages)
    env["CUPY_CACHE_DIR"] = str(tmp_path / "cupy-cache")
    done = subprocess.run([python, "-c", child, str(zip_path), str(profile), RESULT_MARK,
                           str(work)], capture_output=True, text=True, timeout=1800, env=env,
                          cwd=str(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    assert lines, output[-4000:]
    return json.loads(lines[-1][len(RESULT_MARK):]), profile, site_packages, output


def test_linux_zip_installs_and_bakes_the_box_test(blender, dist, tmp_path):
    if PLATFORM != "linux-x64":
        pytest.skip(f"the install test runs the linux-x64 zip; this is {PLATFORM}")
    admitted = _admitted(blender["version"])
    if admitted and blender["python"] not in _install_candidates():
        pytest.skip(f"Blender {blender['version']}: the install runs in this interpreter's "
                    "Blender only (SNOWFALL_TEST_ALL_BLENDERS=1: in every one found)")
    target, _wheels = _zip_or_skip("linux-x64", "cpu", dist)
    facts, profile, site_packages, output = _run_child(
        _CHILD, blender["python"], blender["python_version"], target, tmp_path)
    if not admitted:
        # a Blender outside the manifest's range refuses the zip at install, saying why
        assert not facts["enabled"], facts
        assert blender["version"] in output and ("minimum" in output or "maximum" in output), \
            output[-2000:]
        return

    def inside(path, folder):
        return path is not None and Path(path).resolve().is_relative_to(folder.resolve())

    installed = profile / "extensions" / "user_default" / "snowfall"
    assert inside(facts["extensions_dir"], profile), facts
    assert facts["install"] == ["FINISHED"], output[-4000:]
    assert facts["enabled"], output[-4000:]
    assert inside(facts["addon_file"], installed), facts
    assert facts["scene_property"] and facts["bake_in_ops"], facts
    assert facts["bake_rna"] == "SNOWFALL_OT_bake"
    # Blender installed the wheels of its own Python only, and the engine runs on them
    python_tag = "cp" + blender["python_version"].replace(".", "")
    assert any(tag.startswith(python_tag + "-") for tag in facts["numba_wheel_tag"]), facts
    dists = facts["site_packages"]
    assert sorted(d.split("-")[0] for d in dists) == ["llvmlite", "numba"], dists
    assert facts["cpu_name"] == "cpu"
    # the CPU zip: no CuPy, so the panel says why (no driver here, or no GPU build)
    assert facts["gpu_reason"].startswith(("no NVIDIA driver", "no GPU build")), facts
    for key in ("backend_file", "cover_kernel_file"):
        assert inside(facts[key], installed), (key, facts[key])
    for key in ("numba_file", "llvmlite_file"):
        assert inside(facts[key], site_packages), (key, facts[key])
    assert facts["hit_totals"][0] == facts["hit_totals"][1] > 0
    assert facts["deposited"] > 0.0 and facts["cpu_vs_reference"] <= 1e-7, facts
    # the box test baked: frames 2 and 3 stored, snow on the ground, on the CPU backend
    assert facts["last_frame"] == 3, facts
    assert facts["snow_frames"] == [1, 2, 3], facts
    assert set(facts["snow_depth"]) == {"2", "3"}, facts
    low, high, total = facts["snow_depth"]["3"]
    assert low >= 0.0 and high > 0.0 and total > facts["snow_depth"]["2"][2] >= 0.0
    assert facts["frame_attributes"] == [], facts     # nothing per frame in the .blend
    assert facts["backend_used"] == "cpu" and facts["surface"], facts
    assert facts["disabled"] and not facts["scene_property_after_disable"], facts
    print(f"Blender {facts['blender']} (NumPy {facts['numpy']}): install "
          f"{facts['install_seconds']:.1f} s, bake {facts['bake_seconds']:.1f} s")


# The GPU zip in a scratch profile: the wheels of Blender's Python (CuPy 13 on 3.11, CuPy 14
# on 3.13) and the CUDA 12 runtime are installed, the backend loads the bundled libcudart
# and NVRTC from Blender's extension site-packages, CuPy imports from there, and the
# bundled NVRTC compiles every GPU kernel of the engine to native code for a Turing
# (sm_75) and a Blackwell (sm_120) card: no GPU needed for any of it.
_GPU_CHILD = _CHILD_INSTALL + r"""
backend = importlib.import_module(package + ".snow_addon.backend")
facts["bundled"] = backend.bundled_cuda_libraries()
diagnosis = backend.diagnose_gpu()
facts["cause"], facts["reason"] = diagnosis.cause, diagnosis.reason
facts["driver"] = backend.SystemProbe().driver_cuda_version()
facts["preloaded"] = list(backend.preload_bundled_cuda())
import cupy
from cupy.cuda import nvrtc
facts["cupy"], facts["cupy_file"] = cupy.__version__, cupy.__file__
facts["nvrtc"] = list(nvrtc.getVersion())
site = os.path.dirname(os.path.dirname(cupy.__file__))
facts["dists"] = sorted(n[:-len(".dist-info")] for n in os.listdir(site)
                        if n.endswith(".dist-info"))
common = importlib.import_module(package + ".kernels.gpu.common")
facts["cubins"] = {}
for name in ("cover", "flakes", "pressure", "wind"):
    module = importlib.import_module(package + ".kernels.gpu." + name)
    for arch in ("75", "120"):
        program = nvrtc.createProgram(common.COMMON_SOURCE + module.SOURCE, name + ".cu", (), ())
        for expression in getattr(module, "_NAMES", ()):
            nvrtc.addNameExpression(program, expression)
        try:
            nvrtc.compileProgram(program, list(common.COMPILE_OPTIONS) + ["-arch=sm_" + arch])
            facts["cubins"][name + "-sm" + arch] = len(nvrtc.getCUBIN(program))
        except Exception as exc:
            log = nvrtc.getProgramLog(program)
            errors = [line for line in log.splitlines() if "error" in line] or [log[:500]]
            facts["cubins"][name + "-sm" + arch] = f"{exc}: " + " | ".join(errors)[:800]
""" + _CHILD_EXIT


def test_linux_gpu_zip_installs_and_its_nvrtc_compiles_the_kernels(blender, dist, tmp_path):
    if PLATFORM != "linux-x64":
        pytest.skip(f"the install test runs the linux-x64 zip; this is {PLATFORM}")
    if not _admitted(blender["version"]):
        pytest.skip(f"the manifest does not admit Blender {blender['version']}")
    if blender["python"] not in _install_candidates():
        pytest.skip(f"Blender {blender['version']}: the install runs in this interpreter's "
                    "Blender only (SNOWFALL_TEST_ALL_BLENDERS=1: in every one found)")
    if os.environ.get("SNOWFALL_TEST_GPU_ZIPS") == "0":
        pytest.skip("SNOWFALL_TEST_GPU_ZIPS=0")
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    if free < 4e9:
        pytest.skip(f"{free / 1e9:.1f} GB free in {tmp_path}; the installed GPU build takes "
                    "about 2 GB")
    target, _wheels = _zip_or_skip("linux-x64", "gpu", dist)
    facts, _profile, site_packages, output = _run_child(
        _GPU_CHILD, blender["python"], blender["python_version"], target, tmp_path)
    assert facts["enabled"], output[-4000:]

    def inside(path):
        return Path(path).resolve().is_relative_to(site_packages.resolve())

    names = {d.rsplit("-", 1)[0]: d.rsplit("-", 1)[1] for d in facts["dists"]}
    python = blender["python_version"]
    cupy_major = "13" if python == "3.11" else "14"
    assert names["cupy_cuda12x"].startswith(cupy_major + "."), names
    assert facts["cupy"].startswith(cupy_major + ".") and inside(facts["cupy_file"]), facts
    assert ("fastrlock" in names) == (python == "3.11"), names
    assert {"numba", "llvmlite", "nvidia_cuda_runtime_cu12", "nvidia_cuda_nvrtc_cu12",
            "cuda_pathfinder"} <= set(names), names
    # the bundled runtime and NVRTC, loaded by the backend from Blender's extension folder
    loaded = [os.path.basename(p) for p in facts["preloaded"]]
    assert loaded[0].startswith("libcudart.so.12") and "libnvrtc.so.12" in loaded, loaded
    assert all(inside(p) for p in facts["preloaded"]) and facts["bundled"] == facts["preloaded"]
    assert facts["nvrtc"] == [12, 9], facts["nvrtc"]
    if facts["driver"] is None:
        assert facts["cause"] == "no-driver" and facts["reason"].startswith(
            "no NVIDIA driver found"), facts
    else:
        assert facts["cause"] not in ("no-gpu-build", "cuda-failed"), facts
    failed = {k: v for k, v in facts["cubins"].items() if not isinstance(v, int) or v <= 0}
    assert not failed and len(facts["cubins"]) == 8, failed
    print(f"Blender {blender['version']}: GPU zip install {facts['install_seconds']:.1f} s, "
          f"CuPy {facts['cupy']}, kernels compiled for sm_75 and sm_120")
