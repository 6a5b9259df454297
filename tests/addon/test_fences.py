"""Porous snow fences in the add-on: the mesh objects of the scene's Porous Fences collection
(fence_collection, fence_porosity) reach the engine as PorousFence objects (world space,
metres, modifiers applied), slow the bake's wind, take part in the bake's digest (a resume
refuses a moved or changed fence), and bad fence input is refused before anything
changes."""
import math
import os

import bpy
import numpy as np
import pytest

from snowfall.operators.bake import BakeJob, read_meta, scene_cache_folder
from snowfall.operators.scene_io import read_fences, read_terrain
from snowfall.snow_addon.bake_cache import terrain_digest
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.fences import PorousFence

#: The test fence: a vertical plane across the wind (+X) at x = FENCE_X (a 0.5 m wind
#: cell's centre on the 10 x 8 m ground), FENCE_HEIGHT high, from y = 1 to 7.
FENCE_X, FENCE_HEIGHT = 3.75, 2.0


def _fence_plane(name, collection, x=FENCE_X, height=FENCE_HEIGHT, y=(1.0, 7.0)):
    """A vertical plane (one quad, no thickness) across x, linked into ``collection``."""
    mesh = bpy.data.meshes.new(name)
    mesh.from_pydata([(x, y[0], 0.0), (x, y[1], 0.0), (x, y[1], height), (x, y[0], height)],
                     [], [(0, 1, 2, 3)])
    mesh.update()
    obj = bpy.data.objects.new(name, mesh)
    collection.objects.link(obj)
    return obj


def _fence_scene(scene, tools, cache, frames=4, porosity=0.4):
    """Flat 10 x 8 m ground as the terrain, one fence plane in a "Porous Fences" collection
    set as the scene's fences; small, fast settings with 0.5 m wind cells (4 up the fence).
    Returns (ground, fence, collection)."""
    props = tools.small_settings(scene, cache, frames=frames)
    props.wind_cell_size = 0.5
    props.sky_height = 3.0
    props.wind_speed = 6.0
    props.wind_direction = 0.0
    props.gust_strength = 0.0
    ground = tools.grid_object("Ground", bump=0.0)
    bpy.ops.snowfall.set_terrain()
    collection = bpy.data.collections.new("Porous Fences")
    scene.collection.children.link(collection)
    fence = _fence_plane("Fence", collection)
    props.fence_collection = collection
    props.fence_porosity = porosity
    bpy.context.view_layer.update()
    return ground, fence, collection


def _bake(context):
    """Bake the scene's frame range with the Bake button's code; returns the job (its
    ``sim`` is the engine the bake ran)."""
    job = BakeJob(context)
    try:
        while job.advance_frame():
            pass
    finally:
        job.finish()
    return job


def _lee_wind_speed(sim):
    """Mean wind speed (m/s) in the fence's lee: 0.25-1.75 m behind it, 0.25-1.5 m above
    the ground, across its middle."""
    x, y, z = np.meshgrid(np.linspace(FENCE_X + 0.25, FENCE_X + 1.75, 7),
                          np.linspace(2.5, 5.5, 7), np.linspace(0.25, 1.5, 6), indexing="ij")
    points = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    return float(np.linalg.norm(sim.wind_at(points), axis=1).mean())


def test_bake_passes_the_fences_and_they_slow_the_wind(addon, tools, tmp_path):
    scene = addon
    _ground, fence, _collection = _fence_scene(scene, tools, tmp_path / "fenced", porosity=0.4)
    fenced = _bake(bpy.context)
    sim = fenced.sim
    assert len(sim.fences) == 1 and isinstance(sim.fences[0], PorousFence)
    assert sim.fences[0].porosity == pytest.approx(0.4)
    np.testing.assert_allclose(sim.fences[0].vertices, tools.world_vertices(fence))
    assert sim.wind.fence_resistance is not None
    meta = read_meta(scene_cache_folder(str(tmp_path / "fenced"), scene))
    assert [f["porosity"] for f in meta["fences"]] == [pytest.approx(0.4)]
    lee_fenced = _lee_wind_speed(sim)

    scene.snowfall.fence_collection = None          # the same scene without fences
    scene.snowfall.cache_folder = str(tmp_path / "open")
    open_sim = _bake(bpy.context).sim
    assert open_sim.fences == () and open_sim.wind.fence_resistance is None
    lee_open = _lee_wind_speed(open_sim)
    assert lee_open > 4.0                           # the 6 m/s wind over open flat ground
    assert lee_fenced < 0.8 * lee_open, (lee_fenced, lee_open)
    # Upwind, far from the fence, the wind is about the same.
    upwind = np.array([[0.75, 4.0, 1.0]])
    fenced_up = np.linalg.norm(sim.wind_at(upwind))
    assert fenced_up == pytest.approx(np.linalg.norm(open_sim.wind_at(upwind)), rel=0.35)


def test_read_fences_in_world_space_and_metres(addon, tools, tmp_path):
    """Object transforms, the unit scale, modifiers and child collections are followed;
    the fences are sorted by name; reading changes nothing in the file."""
    scene = addon
    scene.unit_settings.scale_length = 0.5          # 1 Blender unit = 0.5 m
    _ground, fence, collection = _fence_scene(scene, tools, tmp_path)
    fence.location = (1.0, -0.5, 0.25)
    fence.rotation_euler = (0.0, 0.0, math.radians(20.0))
    fence.scale = (1.0, 0.5, 1.5)
    child = bpy.data.collections.new("Fence Row")
    collection.children.link(child)
    arrayed = _fence_plane("A Fence Row", child, x=6.0, height=1.0)
    array = arrayed.modifiers.new("Array", "ARRAY")   # two planes, 1 unit apart along x
    array.use_relative_offset, array.use_constant_offset = False, True
    array.constant_offset_displace = (1.0, 0.0, 0.0)
    bpy.context.view_layer.update()
    counts = (len(bpy.data.meshes), len(bpy.data.objects), len(arrayed.modifiers))

    fences = read_fences(bpy.context, collection, 0.3)
    assert [type(f) for f in fences] == [PorousFence, PorousFence]
    assert all(f.porosity == pytest.approx(0.3) for f in fences)
    row, plane = fences                             # "A Fence Row" before "Fence"
    np.testing.assert_allclose(plane.vertices, tools.world_vertices(fence) * 0.5, atol=1e-6)
    assert len(plane.triangles) == 2
    assert len(row.vertices) == 8 and len(row.triangles) == 4     # the modifier applied
    np.testing.assert_allclose(np.unique(np.round(row.vertices[:, 0], 6)), [3.0, 3.5])
    assert row.vertices[:, 2].max() == pytest.approx(0.5)
    assert (len(bpy.data.meshes), len(bpy.data.objects), len(arrayed.modifiers)) == counts

    assert read_fences(bpy.context, None, 0.5) == []
    assert read_fences(bpy.context, bpy.data.collections.new("Empty Fences"), 0.5) == []
    with pytest.raises(SnowInputError) as error:
        read_fences(bpy.context, collection, 0.99)
    assert error.value.setting == "fence_porosity"


def test_fences_change_the_digest_and_resume_refuses_a_changed_fence(addon, tools, tmp_path):
    scene = addon
    ground, fence, collection = _fence_scene(scene, tools, tmp_path, frames=4, porosity=0.5)
    terrain = read_terrain(bpy.context, [ground])

    def digest():
        fences = read_fences(bpy.context, scene.snowfall.fence_collection,
                             scene.snowfall.fence_porosity)
        return terrain_digest(terrain.vertices, terrain.triangles, fences)

    first = digest()
    fence.location.x += 0.5
    bpy.context.view_layer.update()
    moved = digest()
    fence.location.x -= 0.5
    bpy.context.view_layer.update()
    assert digest() == first
    scene.snowfall.fence_porosity = 0.6
    porous = digest()
    scene.snowfall.fence_porosity = 0.5
    scene.snowfall.fence_collection = None
    bare = digest()
    scene.snowfall.fence_collection = collection
    assert len({first, moved, porous, bare}) == 4
    # Without fences the digest is the terrain's alone, as bakes made before fences hold it.
    assert bare == terrain_digest(terrain.vertices, terrain.triangles)

    job = BakeJob(bpy.context)
    job.advance_frame()
    job.cancel()
    assert scene.snowfall.baked_frame_end == 2
    fence.location.x += 0.5
    bpy.context.view_layer.update()
    with pytest.raises(RuntimeError, match="fences changed since the bake"):
        bpy.ops.snowfall.resume()
    fence.location.x -= 0.5
    scene.snowfall.fence_porosity = 0.6
    bpy.context.view_layer.update()
    with pytest.raises(RuntimeError, match="fences changed since the bake"):
        bpy.ops.snowfall.resume()
    assert scene.snowfall.baked_frame_end == 2
    scene.snowfall.fence_porosity = 0.5             # restored: the bake resumes
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == 4


def _files(folder):
    """Every file under ``folder`` with its size and modification time."""
    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = (os.path.getsize(path),
                                                    os.stat(path).st_mtime_ns)
    return found


def _scene_state(scene):
    props = scene.snowfall
    return (sorted(o.name for o in bpy.data.objects), sorted(m.name for m in bpy.data.meshes),
            [i.object.name for i in props.terrain_objects], props.has_bake,
            props.baked_frame_start, props.baked_frame_end,
            props.flake_emitter.name if props.flake_emitter else None)


@pytest.mark.parametrize("case, message", [
    ("empty in a child collection", "'Marker' in the collection 'Gate' is not a mesh"),
    ("terrain object in the collection", "'Ground' is both a terrain object and a porous fence"),
    ("fence mesh without faces", "mesh 'Fence' has no faces"),
])
def test_bad_fences_are_refused_and_change_nothing(addon, tools, tmp_path, case, message):
    """A bake of bad fences raises naming fence_collection before anything changes: an
    earlier bake in the cache folder and the scene stay as they were."""
    scene = addon
    ground, fence, collection = _fence_scene(scene, tools, tmp_path, frames=2)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    if case == "empty in a child collection":
        child = bpy.data.collections.new("Gate")
        collection.children.link(child)
        child.objects.link(bpy.data.objects.new("Marker", None))
    elif case == "terrain object in the collection":
        collection.objects.link(ground)
    else:
        fence.data.clear_geometry()
    bpy.context.view_layer.update()
    before, files = _scene_state(scene), _files(tmp_path)
    assert files
    with pytest.raises(SnowInputError) as error:
        BakeJob(bpy.context)
    assert error.value.setting == "fence_collection" and message in error.value.problem
    with pytest.raises(RuntimeError, match="fence_collection: " + message):
        bpy.ops.snowfall.bake()
    assert _scene_state(scene) == before
    assert _files(tmp_path) == files


def test_wind_preview_feels_the_fences(addon, tools, tmp_path):
    """The wind preview builds its simulation with the fences, also from the selection
    (no terrain set), where a selected fence is not taken for terrain."""
    from snowfall.operators.wind_preview import build_preview_simulation

    scene = addon
    ground, fence, _collection = _fence_scene(scene, tools, tmp_path, porosity=0.4)
    simulation, _steps = build_preview_simulation(bpy.context, 1.0, 5)
    assert [f.porosity for f in simulation.fences] == [pytest.approx(0.4)]
    assert simulation.flakes is None and simulation.wind.fence_resistance is not None
    scene.snowfall.terrain_objects.clear()
    tools.select_only(ground, fence)
    simulation, _steps = build_preview_simulation(bpy.context, 1.0, 5)
    assert len(simulation.fences) == 1
    assert simulation.heightmap.z_max == pytest.approx(0.0, abs=1e-6)   # the fence is no terrain


def test_wind_objects_never_become_fences(addon, tools, tmp_path):
    """Wind to Object puts its objects beside, not into, the Porous Fences collection when
    that is the active one, and an earlier wind object moved into it is no fence."""
    from snowfall.operators.scene_io import read_fences
    from snowfall.operators.wind_preview import _output_collection

    scene = addon
    _ground, _fence, collection = _fence_scene(scene, tools, tmp_path)
    layer = bpy.context.view_layer
    layer.active_layer_collection = layer.layer_collection.children[collection.name]
    assert bpy.context.collection == collection
    assert _output_collection(bpy.context) == scene.collection
    wind = _fence_plane("Wind Arrows", collection)
    wind["snowfall_speed_max"] = 6.0
    bpy.context.view_layer.update()
    fences = read_fences(bpy.context, collection, 0.4)
    assert len(fences) == 1
