"""Snow on disk at the simulation's resolution: OpenEXR depth files in the bake folder, shown
by the "Snowfall Snow Surface" Geometry Nodes object (the default form of new bakes: the
Bake operator's vertex_frames off).
A coarse terrain (a few large quads) gets a snow surface as fine as the heightmap; the
.blend does not grow with the frame count; a fresh Blender without the add-on evaluates the
same surface; a bake stopped and resumed from the folder alone ends the same."""
import os

import bpy
import numpy as np

from snowfall.operators import snow_surface
from snowfall.operators.bake import BakeJob, scene_cache_folder
from snowfall.properties import resume_available, to_snow_settings
from snowfall.snow_addon import Simulation, bake_cache, exr


def _coarse_terrain(tools):
    """A 10 x 8 m terrain of 2 x 2 quads with a raised middle vertex: 9 vertices."""
    return tools.grid_object(cells=(2, 2), bump=1.0)


def _engine_depths(scene, obj, frames):
    mesh = obj.data
    mesh.calc_loop_triangles()
    triangles = np.array([tuple(t.vertices) for t in mesh.loop_triangles], dtype=np.int64)
    coords = np.array([tuple(v.co) for v in mesh.vertices], dtype=np.float64)
    matrix = np.array(obj.matrix_world, dtype=np.float64)
    vertices = coords @ matrix[:3, :3].T + matrix[:3, 3]
    sim = Simulation(to_snow_settings(scene.snowfall, scene), vertices, triangles, backend="cpu")
    depths = {}
    for frame in frames:
        if frame > frames[0]:
            sim.step(scene.snowfall.substeps)
        depths[frame] = sim.snow_depth()
    return sim.heightmap, depths


def test_coarse_terrain_gets_snow_as_fine_as_the_heightmap(addon, tools, tmp_path):
    scene = addon
    props = tools.small_settings(scene, tmp_path, frames=4)
    props.heightmap_resolution = 40
    terrain = _coarse_terrain(tools)
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    assert not [a.name for a in terrain.data.attributes if a.name.startswith("snow_depth_")]
    assert terrain.modifiers.get("Snowfall Snow") is None
    folder = bake_cache.BakeFolder(scene_cache_folder(str(tmp_path), scene))
    heightmap, expected = _engine_depths(scene, terrain, [1, 2, 3, 4])
    for frame in (1, 2, 3, 4):     # the files hold the engine's grid exactly
        with open(folder.depth_path(frame), "rb") as handle:
            channels = exr.decode(handle.read())
        np.testing.assert_array_equal(channels["R"], expected[frame])
        np.testing.assert_array_equal(channels["G"], heightmap.height)
    for frame in (2, 4):           # the evaluated surface: one vertex per snowy node
        scene.frame_set(frame)
        points, depth = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
        want_points, want_depth = tools.expected_surface(heightmap, expected[frame])
        assert len(points) == len(want_points) > 20 * len(terrain.data.vertices)
        np.testing.assert_allclose(tools.sorted_points(points), want_points, atol=2e-5)
        np.testing.assert_allclose(np.sort(depth), np.sort(want_depth), atol=1e-7)
    # Snow varies between neighbouring nodes inside one terrain quad: the terrain's 9
    # vertices could not carry it.
    quad = expected[4][5:15, 5:15]
    assert np.ptp(quad) > 1e-3


def test_blend_does_not_grow_with_frames(addon, tools, tmp_path):
    """A default bake: the .blend saved after 12 frames is the size of one after 3."""
    assert bpy.ops.snowfall.bake.get_rna_type().properties["vertex_frames"].default is False
    scene = addon
    sizes = {}
    for frames in (3, 12):
        tools.small_settings(scene, tmp_path / f"cache{frames}", frames=frames)
        if not scene.snowfall.terrain_objects:
            _coarse_terrain(tools)
            bpy.ops.snowfall.set_terrain()
        assert bpy.ops.snowfall.bake() == {"FINISHED"}
        path = str(tmp_path / f"baked{frames}.blend")
        bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, compress=False)
        sizes[frames] = os.path.getsize(path)
        bpy.ops.snowfall.free()
    assert sizes[12] <= sizes[3] * 1.01 + 4096, sizes


FRESH_CODE = """
import bpy, numpy as np
bpy.ops.wm.open_mainfile(filepath={blend!r})
assert not hasattr(bpy.types.Scene, "snowfall"), "the add-on must not be registered here"
scene = bpy.context.scene
scene.frame_set({frame})
obj = bpy.data.objects["Snowfall Snow Surface"].evaluated_get(bpy.context.evaluated_depsgraph_get())
mesh = obj.to_mesh()
co = np.zeros(len(mesh.vertices) * 3, np.float32)
mesh.vertices.foreach_get("co", co)
np.save({npy!r}, co.reshape(-1, 3))
print("OK")
"""


def test_fresh_blender_without_addon_shows_the_same_surface(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, "//snowfall_cache", frames=3)
    _coarse_terrain(tools)
    bpy.ops.snowfall.set_terrain()
    blend = str(tmp_path / "scene.blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    bpy.ops.wm.save_mainfile()
    image = bpy.data.images[snow_surface.IMAGE_NAME]
    assert image.filepath.startswith("//snowfall_cache/")      # travels with the .blend
    scene.frame_set(3)
    here, _ = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
    npy = str(tmp_path / "fresh.npy")
    assert "OK" in tools.run_python(FRESH_CODE.format(blend=blend, frame=3, npy=npy))
    np.testing.assert_array_equal(tools.sorted_points(np.load(npy)), tools.sorted_points(here))


def test_resume_from_the_folder_alone_shows_the_same_surface(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache", frames=5)
    _coarse_terrain(tools)
    bpy.ops.snowfall.set_terrain()
    blend = str(tmp_path / "unbaked.blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend, copy=True)
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    scene.frame_set(5)
    full, _ = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
    folder = bake_cache.BakeFolder(scene_cache_folder(str(tmp_path / "cache"), scene))
    full_files = {f: open(folder.depth_path(f), "rb").read() for f in range(1, 6)}
    bpy.ops.snowfall.free()

    job = BakeJob(bpy.context)
    job.advance_frame()
    job.advance_frame()
    job.cancel()
    bpy.ops.wm.open_mainfile(filepath=blend)       # the .blend never saw the bake
    scene = bpy.context.scene
    # Opening it picks the bake up from the folder (its frames 1-3), and Resume continues.
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == 3
    assert resume_available(scene)
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert not resume_available(scene)
    assert scene.snowfall.baked_frame_end == 5
    for frame, data in full_files.items():
        assert open(folder.depth_path(frame), "rb").read() == data
    scene.frame_set(5)
    resumed, _ = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
    np.testing.assert_array_equal(tools.sorted_points(resumed), tools.sorted_points(full))


def _render_top_down(scene, path, size=(40, 32)):
    cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(cam)
    cam.data.type = "ORTHO"
    cam.data.ortho_scale = 10.0
    cam.location = (5.0, 4.0, 20.0)
    scene.camera = cam
    sun = bpy.data.objects.new("Sun", bpy.data.lights.new("Sun", "SUN"))
    sun.data.energy = 4.0
    sun.rotation_euler = (np.radians(70.0), 0.0, np.radians(30.0))   # low, grazing light
    scene.collection.objects.link(sun)
    for owner, values in ((scene.render, {"engine": "CYCLES", "resolution_x": size[0],
                                          "resolution_y": size[1], "filepath": path,
                                          "resolution_percentage": 100}),
                          (scene.cycles, {"device": "CPU", "samples": 8, "seed": 0,
                                          "use_denoising": False})):
        for key, value in values.items():
            setattr(owner, key, value)
    scene.render.image_settings.file_format = "PNG"
    bpy.ops.render.render(write_still=True)
    image = bpy.data.images.load(path)
    try:
        pixels = np.array(image.pixels[:], np.float32).reshape(size[1], size[0], 4)[..., :3]
    finally:
        bpy.data.images.remove(image)
    return pixels.mean(axis=2)


def test_render_shows_the_drift_pattern_on_a_coarse_terrain(addon, tools, tmp_path):
    """Rendered top-down, the snow on a 2 x 2 quad terrain follows the heightmap's depth
    field: nodes under full cover render bright, nodes without snow show the dark terrain,
    and a thin dusting lets the terrain show through (the material's cover fade)."""
    scene = addon
    props = tools.small_settings(scene, tmp_path, frames=3)
    props.heightmap_resolution = 40
    props.snowfall_rate = 40.0           # a thin, patchy cover: some nodes stay bare
    terrain = _coarse_terrain(tools)
    tools.dark_material(terrain)
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    scene.frame_set(3)
    points, _ = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
    folder = bake_cache.BakeFolder(scene_cache_folder(str(tmp_path), scene))
    depth = bake_cache.read_depth(folder.depth_path(3))
    covered = (depth >= snow_surface.MIN_DEPTH).mean()
    assert 0.05 < covered < 0.95, covered          # patchy: a pattern to see
    brightness = _render_top_down(scene, str(tmp_path / "frame3.png"))
    # Sample the render at the heightmap nodes (ortho camera: 4 px per metre; Blender's
    # pixel rows start at the bottom, as y does).
    meta = folder.read_meta()["snow"]
    j, i = np.mgrid[0:depth.shape[0], 0:depth.shape[1]]
    x, y = meta["x0"] + i * meta["spacing"], meta["y0"] + j * meta["spacing"]
    inside = (x > 0.2) & (x < 9.8) & (y > 0.2) & (y < 7.8)
    px = np.clip(x * 4.0, 0, 39).astype(int)
    py = np.clip(y * 4.0, 0, 31).astype(int)
    values = brightness[py, px]
    snowy = values[inside & (depth >= snow_surface.FULL_COVER_DEPTH)]
    dusted = values[inside & (depth >= 2 * snow_surface.MIN_DEPTH)
                    & (depth < 0.3 * snow_surface.FULL_COVER_DEPTH)]
    bare = values[inside & (depth < 0.5 * snow_surface.MIN_DEPTH)]
    assert len(snowy) > 10 and len(bare) > 10 and len(dusted) > 10, (
        len(snowy), len(bare), len(dusted))
    assert np.median(snowy) > np.median(bare) + 0.3, (np.median(snowy), np.median(bare))
    assert np.median(bare) < np.median(dusted) < np.median(snowy) - 0.15, (
        np.median(bare), np.median(dusted), np.median(snowy))


def _surface_mesh(depsgraph):
    """(ground heights (N,) m, edges (E, 2), faces as lists of vertex indices, positions
    (N, 3)) of the evaluated snow surface (units per metre 1)."""
    obj = bpy.data.objects[snow_surface.OBJECT_NAME].evaluated_get(depsgraph)
    mesh = obj.to_mesh()
    try:
        positions = np.array([tuple(v.co) for v in mesh.vertices], np.float64)
        depth = np.zeros(len(positions), np.float32)
        mesh.attributes[snow_surface.DEPTH_ATTRIBUTE].data.foreach_get("value", depth)
        edges = np.array([tuple(e.vertices) for e in mesh.edges], np.int64).reshape(-1, 2)
        faces = [tuple(p.vertices) for p in mesh.polygons]
        assert snow_surface.GROUND_ATTRIBUTE not in mesh.attributes   # a build-time helper
    finally:
        obj.to_mesh_clear()
    return positions[:, 2] - depth, edges, faces, positions


def test_walls_get_no_skin_of_snow(addon, tools, tmp_path):
    """A block on a plane: the snow surface has no face across the block's walls (ground
    steeper than Max Ground Slope), so the block's own faces show there; every other quad
    with snow at a corner is kept, on the roof and on the ground alike."""
    from snowfall.snow_addon import scenes
    from snowfall.sample_scenes.build import mesh_object

    scene = addon
    props = tools.small_settings(scene, tmp_path, frames=3)
    props.heightmap_resolution = 41          # 0.25 m nodes: walls rise 1 m over one spacing
    vertices, triangles = scenes.box_test(size=10.0, block=3.0, block_height=1.0,
                                          resolution=41)
    terrain = mesh_object("Block Terrain", vertices, triangles)
    tools.select_only(terrain)
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    scene.frame_set(3)
    ground, edges, faces, positions = _surface_mesh(bpy.context.evaluated_depsgraph_get())
    folder = bake_cache.BakeFolder(scene_cache_folder(str(tmp_path), scene))
    channels = exr.decode(open(folder.depth_path(3), "rb").read())
    depth, height = channels["R"], channels["G"]
    meta = folder.read_meta()["snow"]
    spacing = meta["spacing"]
    steep = np.tan(np.radians(snow_surface.MAX_GROUND_SLOPE)) * spacing
    snowy = depth >= snow_surface.MIN_DEPTH
    # The heightmap has walls, and snow on both sides of them: something to cut.
    wall_x = np.abs(np.diff(height, axis=1)) > steep
    assert (wall_x & snowy[:, 1:] & snowy[:, :-1]).sum() >= 8
    # No surface edge climbs a wall ...
    rise = np.abs(ground[edges[:, 0]] - ground[edges[:, 1]])
    run = np.hypot(*(positions[edges[:, 0], :2] - positions[edges[:, 1], :2]).T)
    assert len(edges) and (rise <= np.tan(np.radians(snow_surface.MAX_GROUND_SLOPE)) * run
                           + 1e-4).all()
    # ... and every quad with snow at a corner that spans no wall is there.
    flat_x = ~wall_x
    flat_y = np.abs(np.diff(height, axis=0)) <= steep
    want = ((snowy[:-1, :-1] | snowy[:-1, 1:] | snowy[1:, :-1] | snowy[1:, 1:])
            & flat_x[:-1, :] & flat_x[1:, :] & flat_y[:, :-1] & flat_y[:, 1:])
    roof = height[:-1, :-1] > 0.5
    assert (want & roof).sum() >= 4 and (want & ~roof).sum() >= 100
    assert len(faces) == want.sum()


def test_a_file_baked_earlier_gets_the_new_surface_when_baked_again(addon, tools, tmp_path):
    """A file whose snow surface group and material predate the wall cut and the cover fade
    (a group without Max Ground Slope, a material without Full Cover Depth) gets the new
    ones on its next bake; the old ones are renamed, not reused."""
    scene = addon
    old_group = bpy.data.node_groups.new(snow_surface.NODE_GROUP_NAME, "GeometryNodeTree")
    old_material = bpy.data.materials.new(snow_surface.MATERIAL_NAME)
    tools.small_settings(scene, tmp_path, frames=2)
    _coarse_terrain(tools)
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    modifier = bpy.data.objects[snow_surface.OBJECT_NAME].modifiers[snow_surface.NODE_GROUP_NAME]
    group = modifier.node_group
    assert group != old_group and group.name == snow_surface.NODE_GROUP_NAME
    assert "Max Ground Slope" in [item.name for item in group.interface.items_tree]
    assert old_group.name != snow_surface.NODE_GROUP_NAME
    material = bpy.data.materials[snow_surface.MATERIAL_NAME]
    assert material != old_material and material.node_tree.nodes.get("Full Cover Depth")


def test_surface_evaluation_benchmark_runs_and_reports(tools):
    """benchmarks/snow_surface_eval.py (docs/benchmarks.md) bakes, covers every node and
    times the surface: at 48 x 48 nodes under snow everywhere only the block's walls are
    cut."""
    import re

    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                          "snow_surface_eval.py")
    out = tools.run_python(f"import sys; sys.argv = ['x', '--size', '48', '--cover', '0.05', "
                           f"'--repeats', '2']; exec(open({os.path.abspath(script)!r}).read())")
    match = re.search(r"48 x 48 heightmap under 0.05 m of snow: ([\d,]+) vertices, "
                      r"([\d,]+) faces; evaluation (\d+) ms", out)
    assert match, out[-2000:]
    vertices, faces = (int(match.group(i).replace(",", "")) for i in (1, 2))
    assert vertices == 48 * 48 and 0.8 * 47 * 47 < faces < 47 * 47
