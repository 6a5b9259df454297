"""Bake, Esc (stop), Resume and Free end to end on a small scene, compared with the engine
run directly on the same world-space terrain; bad input changes nothing. The snow is read
where new bakes keep it, the bake folder's depth files behind the snow surface; the older
per-frame attribute form is checked too (bakes made with it still open and render)."""
import math
import os
from types import SimpleNamespace

import bpy
import numpy as np
import pytest

from snowfall import blender_compat
from snowfall.operators import gn_flakes, particle_output, snow_output, snow_surface
from snowfall.operators.bake import BakeJob, read_meta, scene_cache_folder
from snowfall.properties import to_snow_settings
from snowfall.snow_addon import Simulation
from snowfall.snow_addon.formats import frame_store


def _frames(frames):
    """Snow depth grids (metres) of ``frames`` as the snow surface shows them."""
    return {f: snow_surface.read_depth_frame(f) for f in frames}


def _flakes(scene, frames):
    if blender_compat.BAKE_NEEDS_SAVED_BLEND and not bpy.data.filepath:
        # Blender 4.2 reads the flakes' Geometry Nodes bake only in a saved .blend.
        bpy.ops.wm.save_as_mainfile(filepath=os.path.join(
            bpy.path.abspath(scene.snowfall.cache_folder), "saved_to_read_flakes.blend"))
        scene = bpy.context.scene
    emitter = scene.snowfall.flake_emitter
    return {f: particle_output.read_flake_frame(emitter, f) for f in frames}


def _engine_run(scene, obj, frames, metres_per_unit=1.0):
    """The engine on the terrain's world-space arrays, built here from the mesh and the
    object's matrix: depth grid, depth per vertex and flake positions (Blender units) per
    frame, and the heightmap."""
    mesh = obj.data
    mesh.calc_loop_triangles()
    triangles = np.array([tuple(t.vertices) for t in mesh.loop_triangles], dtype=np.int64)
    coords = np.array([tuple(v.co) for v in mesh.vertices], dtype=np.float64)
    matrix = np.array(obj.matrix_world, dtype=np.float64)
    vertices = (coords @ matrix[:3, :3].T + matrix[:3, 3]) * metres_per_unit
    settings = to_snow_settings(scene.snowfall, scene)
    sim = Simulation(settings, vertices, triangles, backend="cpu")
    depth, vertex_depth, flakes = {}, {}, {}
    for frame in frames:
        if frame > frames[0]:
            sim.step(scene.snowfall.substeps)
        depth[frame] = sim.snow_depth()
        vertex_depth[frame] = sim.vertex_snow_depth(vertices)
        flakes[frame] = sim.flake_positions() / np.float32(metres_per_unit)
    return SimpleNamespace(depth=depth, vertex_depth=vertex_depth, flakes=flakes,
                           heightmap=sim.heightmap)


def _check_surface(tools, engine, frames, units_per_metre=1.0):
    """The evaluated snow surface at ``frames``: one vertex per snowy heightmap node at
    ground + depth (scene units), carrying the depth."""
    for frame in frames:
        bpy.context.scene.frame_set(frame)
        points, depth = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
        want_points, want_depth = tools.expected_surface(engine.heightmap, engine.depth[frame],
                                                         units_per_metre)
        assert len(points) == len(want_points) > 0
        np.testing.assert_allclose(tools.sorted_points(points), want_points,
                                   atol=2e-5 * units_per_metre)
        np.testing.assert_allclose(np.sort(depth), np.sort(want_depth), atol=1e-7)


def test_bake_end_to_end_matches_the_engine(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    props = scene.snowfall
    assert props.has_bake and (props.baked_frame_start, props.baked_frame_end) == (1, 4)
    assert props.backend_used == "cpu" and props.backend_reason
    assert snow_surface.baked_frames() == [1, 2, 3, 4]
    # New bakes store nothing per frame in the .blend: no attributes, no terrain modifier.
    assert snow_output.baked_frames(terrain) == []
    assert terrain.modifiers.get(snow_output.SNOW_MODIFIER_NAME) is None

    engine = _engine_run(scene, terrain, [1, 2, 3, 4])
    stored = _frames(range(1, 5))
    flakes = _flakes(scene, range(1, 5))
    for frame in range(1, 5):
        np.testing.assert_array_equal(stored[frame], engine.depth[frame])
        np.testing.assert_array_equal(flakes[frame], engine.flakes[frame])
    assert stored[1].max() == 0.0 and stored[4].max() > 0.0
    assert stored[4].sum() > stored[2].sum()   # snow builds up
    _check_surface(tools, engine, (2, 4))


def test_older_per_frame_attribute_bakes_still_work(addon, tools, tmp_path):
    """The older form (one attribute per frame on the terrain, displaced by the "Snowfall
    Snow" modifier): baked, the terrain carries the engine's per-vertex depth and is
    displaced by it; the depth files are written too."""
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake(vertex_frames=True) == {"FINISHED"}
    assert snow_output.baked_frames(terrain) == [1, 2, 3, 4]
    assert bpy.data.objects.get(snow_surface.OBJECT_NAME) is None
    engine = _engine_run(scene, terrain, [1, 2, 3, 4])
    stored = {f: snow_output.read_snow_frame(terrain, f) for f in range(1, 5)}
    folder = read_meta(scene_cache_folder(str(tmp_path), scene))
    assert folder["snow"]["vertex_frames"] is True
    for frame in range(1, 5):
        np.testing.assert_array_equal(stored[frame], engine.vertex_depth[frame])
    # The evaluated terrain carries `snow_depth` of the current frame and is displaced by it.
    original = tools.world_vertices(terrain)
    for frame in (2, 4):
        scene.frame_set(frame)
        depth, world = snow_output.evaluated_snow_depth(terrain,
                                                        bpy.context.evaluated_depsgraph_get())
        np.testing.assert_allclose(depth, stored[frame], rtol=0, atol=1e-7)
        np.testing.assert_allclose(world[:, 2] - original[:, 2], stored[frame], atol=2e-6)
        np.testing.assert_allclose(world[:, :2], original[:, :2], atol=2e-6)
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert snow_output.baked_frames(terrain) == []
    assert terrain.modifiers.get(snow_output.SNOW_MODIFIER_NAME) is None


def test_object_transform_and_unit_scale_are_respected(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=3)
    scene.unit_settings.scale_length = 0.5     # 1 Blender unit = 0.5 m
    terrain = tools.grid_object(size=(20.0, 16.0), bump=2.0)
    terrain.location = (5.0, -3.0, 1.0)
    terrain.rotation_euler = (0.0, 0.0, math.radians(30.0))
    terrain.scale = (1.5, 1.5, 1.2)
    bpy.context.view_layer.update()
    bpy.ops.snowfall.set_terrain()
    bpy.ops.snowfall.bake()
    engine = _engine_run(scene, terrain, [1, 2, 3], 0.5)
    for frame in (2, 3):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), engine.depth[frame])
        np.testing.assert_array_equal(_flakes(scene, [frame])[frame], engine.flakes[frame])
    assert engine.depth[3].max() > 0.0
    # Depth is metres; the surface lies at ground + depth in world Blender units (metres / 0.5).
    _check_surface(tools, engine, (3,), units_per_metre=2.0)


def _bake_two_frames(scene, tools, tmp_path):
    """(terrain, BakeJob) of a 6-frame bake of a small grid with frames 2 and 3 baked."""
    tools.small_settings(scene, tmp_path, frames=6)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    job = BakeJob(bpy.context)
    job.advance_frame()
    job.advance_frame()
    return terrain, job


def test_stopping_mid_bake_keeps_every_finished_frame(addon, tools, tmp_path):
    scene = addon
    terrain, job = _bake_two_frames(scene, tools, tmp_path)
    job.advance()              # half of frame 4's substeps: stopped in the middle of a frame
    job.cancel()               # what Esc does
    props = scene.snowfall
    assert props.has_bake and props.baked_frame_end == 3
    assert snow_surface.baked_frames() == [1, 2, 3]
    assert read_meta(scene_cache_folder(str(tmp_path), scene))["frame"] == 3
    assert particle_output.baked_range(props.flake_emitter)[1] == 3
    engine = _engine_run(scene, terrain, [1, 2, 3])
    for frame in (1, 2, 3):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), engine.depth[frame])
    np.testing.assert_array_equal(_flakes(scene, [3])[3], engine.flakes[3])


def test_a_run_that_leaves_the_models_range_stops_and_keeps_the_frames_before(addon, tools,
                                                                           tmp_path):
    """Snow piled up to the wind grid's top during frame 4 (as a runaway drift leaves it):
    the bake stops with a SnowSimulationError that says where and what to change, before
    it writes frame 4; frames 1-3 stay baked and equal the engine's."""
    from snowfall.snow_addon.errors import SnowSimulationError

    scene = addon
    terrain, job = _bake_two_frames(scene, tools, tmp_path)
    sim = job.sim
    lid = sim.grid.top
    depth = sim.backend.to_host(sim.cover.snow_depth)
    depth[2:6, 3:7] = lid        # a pile taller than the grid: the check must stop the bake
    sim.cover.snow_depth[...] = sim.backend.asarray(depth)
    with pytest.raises(SnowSimulationError) as raised:
        while job.advance():
            pass
    # the setting to change: the upwind fetch, or the wind where the terrain already wraps
    wrapped = scene.snowfall.upwind_fetch == "wrap"
    assert raised.value.setting == ("wind_speed" if wrapped else "upwind_fetch")
    assert "wind grid's top" in str(raised.value)
    job.finish()
    props = scene.snowfall
    assert props.has_bake and props.baked_frame_end == 3
    assert snow_surface.baked_frames() == [1, 2, 3]
    engine = _engine_run(scene, terrain, [1, 2, 3])
    for frame in (1, 2, 3):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), engine.depth[frame])


@pytest.mark.parametrize("form", ["surface", "vertex"])
def test_resume_after_reload_equals_an_uninterrupted_bake(addon, tools, tmp_path, form):
    """Resume after the .blend was saved and reopened, for new bakes and for the older
    per-frame attribute form (which a resumed bake keeps, whatever its operator says)."""
    vertex = form == "vertex"
    scene = addon
    tools.small_settings(scene, tmp_path / "cache", frames=6)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    bpy.ops.snowfall.bake(vertex_frames=vertex)

    def snow(terrain, frames):
        if form == "vertex":
            return {f: snow_output.read_snow_frame(terrain, f) for f in frames}
        return _frames(frames)

    def shown(terrain):
        return snow_output.baked_frames(terrain) if form == "vertex" else \
            snow_surface.baked_frames()

    full_depth = snow(terrain, range(1, 7))
    full_flakes = _flakes(scene, range(1, 7))
    bpy.ops.snowfall.free()
    assert shown(terrain) == [] and not scene.snowfall.has_bake

    job = BakeJob(bpy.context, vertex_frames=vertex)
    job.advance_frame()
    job.advance_frame()
    job.cancel()
    blend = str(tmp_path / "stopped.blend")
    bpy.ops.wm.save_mainfile(filepath=blend)
    bpy.ops.wm.open_mainfile(filepath=blend)
    scene = bpy.context.scene
    terrain = bpy.data.objects["Terrain"]
    assert scene.snowfall.baked_frame_end == 3
    # the other form asked for: the resumed bake keeps the one in its bake.json
    assert bpy.ops.snowfall.resume(vertex_frames=not vertex) == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == 6
    assert shown(terrain) == list(range(1, 7))
    resumed_depth = snow(terrain, range(1, 7))
    resumed_flakes = _flakes(scene, range(1, 7))
    for frame in range(1, 7):
        np.testing.assert_array_equal(resumed_depth[frame], full_depth[frame])
        np.testing.assert_array_equal(resumed_flakes[frame], full_flakes[frame])
    with pytest.raises(RuntimeError, match="already reaches frame 6"):
        bpy.ops.snowfall.resume()


def test_resume_extends_a_finished_bake_with_animated_wind(addon, tools, tmp_path):
    """Keyframed wind is sampled up to the end frame; a finished bake extended to a later
    end frame resumes and equals a bake of the whole range."""
    scene = addon
    props = tools.small_settings(scene, tmp_path / "cache", frames=5)
    tools.grid_object()
    props.wind_speed = 2.0
    props.keyframe_insert("wind_speed", frame=1)
    props.wind_speed = 12.0
    props.keyframe_insert("wind_speed", frame=5)
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    full_depth = _frames(range(1, 6))
    bpy.ops.snowfall.free()

    scene.frame_end = 3
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    scene.frame_end = 5
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2, 3, 4, 5]
    for frame in range(1, 6):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), full_depth[frame])


def test_resume_refuses_changed_settings(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    job = BakeJob(bpy.context)
    job.advance_frame()
    job.cancel()
    scene.snowfall.wind_speed = 9.0
    with pytest.raises(RuntimeError, match="changed since the bake"):
        bpy.ops.snowfall.resume()
    assert scene.snowfall.baked_frame_end == 2


def test_free_removes_the_bake(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=2)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    bpy.ops.snowfall.bake()
    assert os.listdir(tmp_path)
    assert bpy.ops.snowfall.free() == {"FINISHED"}
    assert snow_surface.baked_frames() == [] and snow_output.baked_frames(terrain) == []
    assert bpy.data.objects.get(snow_surface.OBJECT_NAME) is None
    assert bpy.data.images.get(snow_surface.IMAGE_NAME) is None
    assert terrain.modifiers.get(snow_output.SNOW_MODIFIER_NAME) is None
    assert scene.snowfall.flake_emitter is None and not scene.snowfall.has_bake
    assert os.listdir(tmp_path) == []


def _bake_snapshot(terrain):
    scene = bpy.context.scene
    return (sorted(o.name for o in bpy.data.objects), [m.name for m in terrain.modifiers],
            snow_output.baked_frames(terrain), snow_surface.baked_frames(),
            scene.snowfall.has_bake,
            scene.snowfall.baked_frame_end)


@pytest.mark.parametrize("case, message", [
    ("unsaved file with a disk cache", "not saved yet"),
    ("cache folder that cannot be written", "cannot write"),
    ("cache folder under a file", "is a file, not a folder"),
    ("no terrain", "no terrain is set"),
    ("deleted terrain mesh faces", "has no faces"),
])
def test_bad_bake_input_is_reported_and_changes_nothing(addon, tools, tmp_path, case, message):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=2)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    props = scene.snowfall
    if case == "unsaved file with a disk cache":
        props.cache_folder = "//snowfall_cache"
    elif case == "cache folder that cannot be written":
        props.cache_folder = "/proc/snowfall_cache"
    elif case == "cache folder under a file":
        (tmp_path / "plain.txt").write_text("x")
        props.cache_folder = str(tmp_path / "plain.txt" / "cache")
    elif case == "no terrain":
        props.terrain_objects.clear()
    else:
        terrain.data.clear_geometry()
    before = _bake_snapshot(terrain)
    files_before = sorted(os.listdir(tmp_path))
    with pytest.raises(RuntimeError, match=message):
        bpy.ops.snowfall.bake()
    assert _bake_snapshot(terrain) == before
    assert sorted(os.listdir(tmp_path)) == files_before


def test_camera_only_writes_the_flakes_in_view(addon, tools, tmp_path):
    """With camera_only, a frame file holds exact positions for the flakes in the camera's
    view (plus the margin) and hides the rest (unborn; a Geometry Nodes bake leaves them
    out); every flake is still simulated, so the shown ones equal a full bake's, and the
    files shrink."""
    scene = addon
    tools.small_settings(scene, tmp_path / "full", frames=4)
    terrain = tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(cam)
    cam.data.type = "ORTHO"
    cam.data.ortho_scale = 4.0                       # a 4 x 4 m window of the 10 x 8 terrain
    scene.render.resolution_x = scene.render.resolution_y = 100
    cam.location = (3.0, 3.0, 10.0)
    scene.camera = cam
    bpy.context.view_layer.update()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    full = _flakes(scene, range(1, 5))
    full_sizes = [os.path.getsize(particle_output.frame_path(scene.snowfall.flake_emitter, f))
                  for f in range(1, 5)]
    bpy.ops.snowfall.free()

    scene.snowfall.cache_folder = str(tmp_path / "culled")
    assert bpy.ops.snowfall.bake(camera_only=True, camera_margin=0.0) == {"FINISHED"}
    emitter = scene.snowfall.flake_emitter

    def inside(frame):
        flakes = full[frame]
        return (np.abs(flakes[:, 0] - 3.0) <= 2.0) & (np.abs(flakes[:, 1] - 3.0) <= 2.0)

    if gn_flakes.is_gn_flakes(emitter):
        view = read_meta(scene_cache_folder(str(tmp_path / "culled"), scene))["flakes"][
            "camera_view"]
        for frame in range(1, 5):
            positions, _, _ = particle_output.evaluate_flakes(emitter, frame)
            visible = frame_store.in_camera_view(full[frame], view)
            np.testing.assert_array_equal(positions, full[frame][visible])
            assert (visible == inside(frame)).mean() > 0.99
            assert 0 < len(positions) < 0.5 * len(visible)
            size = os.path.getsize(particle_output.frame_path(emitter, frame))
            assert size == 16 * len(positions) < 0.6 * full_sizes[frame - 1]
        return
    for frame in range(1, 5):
        positions, _, alive = particle_output.evaluate_flakes(emitter, frame)
        np.testing.assert_array_equal(positions[alive], full[frame][alive])
        assert inside(frame)[alive].all()            # nothing outside the view is drawn
        # Flakes in view now and next frame are drawn (a flake leaving the view, or
        # respawning, next frame is hidden from this frame on: no streak).
        staying = inside(frame) & (inside(frame + 1) if frame < 4 else True)
        assert alive[staying].mean() > 0.95, alive[staying].mean()
        assert 0 < alive.sum() < 0.5 * len(alive)
        size = os.path.getsize(particle_output.frame_path(emitter, frame))
        if particle_output.cache_compression():      # 4.2-4.5 files are uncompressed
            assert size < 0.6 * full_sizes[frame - 1]
    with pytest.raises(RuntimeError, match="no camera"):
        scene.camera = None
        bpy.ops.snowfall.bake(camera_only=True)
