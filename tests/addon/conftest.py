"""Add-on tests run on the bpy module (skipped without it): each test starts from a
factory-reset empty scene with the add-on registered, and unregisters it afterwards."""
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

import snowfall  # noqa: E402  (after the bpy skip)
from snowfall import blender_compat  # noqa: E402

# The bpy module of Blender 4.2/4.5 dies at exit once the add-on has registered (see
# blender_compat.EXIT_CRASHES): end pytest with its own status instead.
_EXIT_STATUS = [0]
blender_compat.guard_exit(lambda: _EXIT_STATUS[0])


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS[0] = int(exitstatus)


@pytest.fixture
def factory_scene():
    """A factory-reset empty file, without the add-on."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    yield bpy.context.scene
    bpy.ops.wm.read_factory_settings(use_empty=True)


@pytest.fixture
def addon(factory_scene):
    """A factory-reset empty scene with the add-on registered."""
    snowfall.register()
    try:
        yield factory_scene
    finally:
        snowfall.unregister()


def grid_object(name="Terrain", size=(10.0, 8.0), cells=(16, 12), bump=1.0):
    """A terrain mesh: a grid with a Gaussian bump, returned as a linked, selected object."""
    nx, ny = cells[0] + 1, cells[1] + 1
    x, y = np.meshgrid(np.linspace(0, size[0], nx), np.linspace(0, size[1], ny))
    z = bump * np.exp(-((x - 0.5 * size[0]) ** 2 + (y - 0.5 * size[1]) ** 2) / 4.0)
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    index = np.arange(nx * ny).reshape(ny, nx)
    quads = np.stack([index[:-1, :-1].ravel(), index[:-1, 1:].ravel(), index[1:, 1:].ravel(),
                      index[1:, :-1].ravel()], axis=1)
    mesh = bpy.data.meshes.new(name)
    mesh.vertices.add(len(vertices))
    mesh.vertices.foreach_set("co", vertices.astype(np.float32).ravel())
    mesh.loops.add(quads.size)
    mesh.loops.foreach_set("vertex_index", quads.astype(np.int32).ravel())
    mesh.polygons.add(len(quads))
    mesh.polygons.foreach_set("loop_start", np.arange(0, quads.size, 4, dtype=np.int32))
    mesh.update(calc_edges=True)
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    select_only(obj)
    return obj


def select_only(*objects):
    for obj in bpy.context.view_layer.objects:
        obj.select_set(False)
    for obj in objects:
        obj.select_set(True)
    if objects:
        bpy.context.view_layer.objects.active = objects[0]


def small_settings(scene, cache_folder, frames=4):
    """Tiny, fast bake settings: flakes hit the ground within the first frames. The
    wrap-around fetch: its flakes fill the terrain from the first step (with the open
    snowfield, the default, some land in its margins upwind and downwind, and 1,500 flakes
    leave a fifth of a small terrain bare after 4 frames)."""
    props = scene.snowfall
    props.upwind_fetch = "wrap"
    props.heightmap_resolution = 24
    props.wind_resolution = 8
    props.sky_height = 1.5
    props.flake_count = 1500
    props.snowfall_rate = 400.0
    props.substeps = 2
    props.backend = "cpu"
    props.cache_folder = str(cache_folder)
    scene.render.fps = 8
    scene.frame_start, scene.frame_end = 1, frames
    return props


def world_vertices(obj):
    """World-space vertex positions (Blender units) of ``obj``'s own mesh, computed here
    independently of the add-on."""
    coords = np.array([tuple(v.co) for v in obj.data.vertices], dtype=np.float64)
    matrix = np.array(obj.matrix_world, dtype=np.float64)
    return coords @ matrix[:3, :3].T + matrix[:3, 3]


#: Runs a test's code in the child and exits through blender_compat.exit_process (the bpy
#: module of 4.2/4.5 would crash at a plain exit); the code's SystemExit status is kept.
_CHILD = """
import traceback
from snowfall.blender_compat import exit_process
try:
    exec(compile({code!r}, "<test code>", "exec"), {{"__name__": "__main__"}})
except SystemExit as error:
    exit_process(error.code)
except BaseException:
    traceback.print_exc()
    exit_process(1)
exit_process(0)
"""


def run_python(code, timeout=600):
    """Run ``code`` in a fresh Python process (the same venv, the add-on not registered);
    returns its stdout. Fails the test with the process's output when it fails."""
    result = subprocess.run([sys.executable, "-c", _CHILD.format(code=code)],
                            capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ))
    if result.returncode != 0:
        pytest.fail(f"subprocess failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                    f"{result.stderr[-3000:]}")
    return result.stdout


def dark_material(obj, name="Dark"):
    """Give ``obj`` a near-black material (bare ground renders dark, snow bright)."""
    dark = bpy.data.materials.new(name)
    dark.diffuse_color = (0.02, 0.02, 0.02, 1.0)
    if dark.node_tree is not None:
        bsdf = next(n for n in dark.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
        bsdf.inputs["Base Color"].default_value = (0.02, 0.02, 0.02, 1.0)
    obj.data.materials.append(dark)
    return dark


def sorted_points(points):
    """Points ordered by x, then y (a surface's vertices compared as a set)."""
    return points[np.lexsort((points[:, 1], points[:, 0]))]


def expected_surface(heightmap, depth, units_per_metre=1.0):
    """What the snow surface shows for the engine's ``depth`` grid: (sorted positions in
    scene units, depths in metres) of the nodes that are a corner of a kept face: a grid
    quad whose corners all have ground and not all less than MIN_DEPTH of snow."""
    from snowfall.operators.snow_surface import MIN_DEPTH

    grid = heightmap.grid
    ground, thin = heightmap.has_surface, depth < MIN_DEPTH

    def corners(a):
        return a[:-1, :-1], a[:-1, 1:], a[1:, :-1], a[1:, 1:]

    kept = np.logical_and.reduce(corners(ground)) & ~np.logical_and.reduce(corners(thin))
    used = np.zeros(depth.shape, bool)
    for dj in (0, 1):
        for di in (0, 1):
            used[dj:dj + kept.shape[0], di:di + kept.shape[1]] |= kept
    j, i = np.nonzero(used)
    z = heightmap.height[j, i] + depth[j, i]
    points = np.stack([grid.x0 + i * grid.spacing, grid.y0 + j * grid.spacing, z], axis=1)
    order = np.lexsort((points[:, 1], points[:, 0]))
    return points[order] * units_per_metre, depth[j, i][order]


@pytest.fixture
def tools():
    """The helpers above, for tests (conftest modules are not importable by name)."""
    return SimpleNamespace(grid_object=grid_object, select_only=select_only,
                           small_settings=small_settings, world_vertices=world_vertices,
                           run_python=run_python, sorted_points=sorted_points,
                           expected_surface=expected_surface, dark_material=dark_material)
