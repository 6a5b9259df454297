"""Flakes in Blender: the particle point cache holds exactly the engine's frames, survives a
save and a fresh Blender process, frees cleanly, and a respawned flake draws no motion-blur
streak under Cycles."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from snowfall.blender_compat import node_tree  # noqa: E402
from snowfall.operators import particle_output  # noqa: E402
from snowfall.snow_addon.errors import SnowInputError  # noqa: E402
from snowfall.snow_addon.formats import frame_store  # noqa: E402

pytestmark = pytest.mark.blender


@pytest.fixture
def saved_scene(tmp_path):
    """A factory-empty scene saved as tmp_path/scene.blend (the cache lives beside it)."""
    bpy.ops.wm.read_factory_settings(use_empty=True)
    path = str(tmp_path / "scene.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    yield bpy.context.scene, path
    bpy.ops.wm.read_factory_settings(use_empty=True)


def _random_frames(count, frames, seed=0):
    rng = np.random.default_rng(seed)
    positions = [(rng.standard_normal((count, 3)) * 50).astype(np.float32) for _ in frames]
    velocities = [(rng.standard_normal((count, 3)) * 2).astype(np.float32) for _ in frames]
    return positions, velocities


def _bake(emitter, first, positions, velocities, respawned=None):
    count = len(positions[0])
    for offset, (pos, vel) in enumerate(zip(positions, velocities)):
        flags = np.zeros(count, bool) if respawned is None else respawned[offset]
        particle_output.write_flake_frame(emitter, first + offset, pos, vel, flags)
    particle_output.finish_flake_bake(emitter, first, first + len(positions) - 1)


def test_frames_read_back_exactly(saved_scene):
    scene, _ = saved_scene
    count, frames = 257, range(3, 9)
    positions, velocities = _random_frames(count, frames)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, frames[0], positions, velocities)

    cache = particle_output.flake_particle_system(emitter).point_cache
    assert cache.is_baked and (cache.frame_start, cache.frame_end) == (3, 8)
    for frame, expected in zip(reversed(frames), reversed(positions)):  # any order
        got = particle_output.read_flake_frame(emitter, frame)
        assert got.dtype == np.float32 and got.shape == (count, 3)
        np.testing.assert_array_equal(got, expected)
    # velocities come back in m/s, rounded to the stored step, and every flake is drawn
    got_pos, got_vel, alive = particle_output.evaluate_flakes(emitter, 5)
    step = particle_output.velocity_step(scene)
    assert 0 < step <= 0.0625
    np.testing.assert_allclose(got_vel, velocities[2], rtol=0, atol=step / 2 * 1.0001)
    np.testing.assert_array_equal(got_vel / np.float32(step), np.rint(got_vel / np.float32(step)))
    assert alive.all()


@pytest.mark.skipif(bpy.app.version < (5, 0, 0), reason="Blender 4.2-4.5 read point caches "
                    "only uncompressed or LZO/LZMA; their flakes are a Geometry Nodes bake, "
                    "15 B per flake-frame (tests/addon/test_gn_flakes.py, docs/particles.md)")
def test_frame_files_are_compact(saved_scene):
    """At most 16 bytes per flake-frame for engine-like frames (velocities of a few m/s),
    in the compressed layout this Blender reads."""
    scene, _ = saved_scene
    count, frames = 20_000, range(1, 4)
    positions, velocities = _random_frames(count, frames, seed=2)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, velocities)
    for frame in frames:
        path = particle_output.frame_path(emitter, frame)
        assert os.path.getsize(path) <= 16 * count, os.path.getsize(path) / count
        with open(path, "rb") as handle:
            header = np.frombuffer(handle.read(20)[8:], "<u4")
        assert header[0] & (1 << 16)                        # PTCACHE_TYPEFLAG_COMPRESS
        np.testing.assert_array_equal(particle_output.read_flake_frame(emitter, frame),
                                      positions[frame - 1])


def test_subframe_error_of_the_velocity_step_is_bounded(saved_scene):
    """Between frames Blender interpolates with the stored (rounded) velocities: within
    SUBFRAME_ERROR of the interpolation with the exact ones."""
    scene, _ = saved_scene
    fps = scene.render.fps / scene.render.fps_base
    count = 500
    rng = np.random.default_rng(4)
    start = rng.uniform(-5, 5, (count, 3)).astype(np.float32)
    velocity = rng.uniform(-3, 3, (count, 3)).astype(np.float32)
    positions = [start, start + velocity / np.float32(fps)]
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, [velocity, velocity])
    for sub in (1.25, 1.5, 1.75):
        got, _, _ = particle_output.evaluate_flakes(emitter, sub)
        # Hermite with exact tangents on straight uniform motion is the straight line.
        expected = start + velocity * np.float32((sub - 1) / fps)
        assert np.abs(got - expected).max() <= frame_store.SUBFRAME_ERROR


def test_between_frames_blender_follows_the_velocity(saved_scene):
    """Half-way between two frames of straight, uniform motion Blender's Hermite interpolation
    lands on the straight line: the cached velocity has the right unit for motion blur."""
    scene, _ = saved_scene
    fps = scene.render.fps / scene.render.fps_base
    count = 16
    start = np.random.default_rng(1).uniform(-5, 5, (count, 3)).astype(np.float32)
    velocity = np.tile(np.float32([0.3, -0.2, -1.2]), (count, 1))
    positions = [start + velocity * np.float32(k / fps) for k in range(3)]
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, [velocity] * 3)
    got, _, alive = particle_output.evaluate_flakes(emitter, 1.5)
    np.testing.assert_allclose(got, start + velocity * (1.5 - 1) / fps, atol=1e-5)
    assert alive.all()


def test_reopened_in_fresh_process_reads_back_exactly(saved_scene, tmp_path):
    scene, blend = saved_scene
    count, frames = 100, range(1, 5)
    positions, velocities = _random_frames(count, frames, seed=3)
    positions[1][:10] = np.float32([0.0, 0.0, 0.0]) + np.linspace(-1, 1, 30, dtype=np.float32
                                                                  ).reshape(10, 3)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count, flake_size=0.1)
    _bake(emitter, 1, positions, velocities)
    _tiny_cycles_scene(scene, motion_blur=False)
    here = _render(scene, 2, str(tmp_path / "here.png"))
    assert here.max() > 0.1                                      # the flakes are in view
    bpy.ops.wm.save_mainfile()
    out = tmp_path / "readback.npy"
    # A plain Blender session: the add-on is not imported, as on a render-farm worker.
    script = textwrap.dedent(f"""
        import bpy, numpy as np, json
        bpy.ops.wm.open_mainfile(filepath={blend!r})
        scene = bpy.context.scene
        emitter = bpy.data.objects["Flakes"]
        result = []
        for frame in {list(frames)!r}:
            scene.frame_set(frame)
            particles = emitter.evaluated_get(bpy.context.evaluated_depsgraph_get()) \\
                .particle_systems[0].particles
            loc = np.empty(len(particles) * 3, np.float32)
            particles.foreach_get("location", loc)
            result.append(loc.reshape(-1, 3))
        np.save({str(out)!r}, np.stack(result))
        scene.frame_set(2)
        scene.render.filepath = {str(tmp_path / "fresh.png")!r}
        bpy.ops.render.render(write_still=True)
        cache = emitter.particle_systems[0].point_cache
        print(json.dumps([cache.is_baked, cache.frame_start, cache.frame_end]))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [True, 1, 4]
    np.testing.assert_array_equal(np.load(out), np.stack(positions))
    fresh = _load_image(str(tmp_path / "fresh.png"))
    np.testing.assert_array_equal(fresh, here)                  # the same picture


def test_free_removes_the_cache(saved_scene):
    scene, _ = saved_scene
    count = 10
    positions, velocities = _random_frames(count, range(2))
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, velocities)
    directory = particle_output.cache_directory(emitter)
    assert len(os.listdir(directory)) == 3          # info file + 2 frames
    particle_output.free_flake_bake(emitter)
    assert not os.path.exists(directory)
    assert not particle_output.flake_particle_system(emitter).point_cache.is_baked
    # and a new bake into the same system works
    _bake(emitter, 1, positions, velocities)
    np.testing.assert_array_equal(particle_output.read_flake_frame(emitter, 2), positions[1])


def test_rebake_reuses_the_system_and_drops_stale_frames(saved_scene):
    scene, _ = saved_scene
    count = 8
    positions, velocities = _random_frames(count, range(6), seed=5)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, velocities)
    again = particle_output.ensure_flake_system(scene, emitter, count)
    assert again == emitter and len(emitter.particle_systems) == 1
    _bake(emitter, 1, positions[:3], velocities[:3])
    cache = particle_output.flake_particle_system(emitter).point_cache
    assert (cache.frame_start, cache.frame_end) == (1, 3)


def test_respawned_flake_is_hidden_across_its_jump(saved_scene):
    """Flake 0 respawns between frames 3 and 4 (ground to sky). Blender must not draw it at
    any time in [3, 4) (where interpolation would draw the jump), must draw it at 4 and
    after at its new position, and must keep every stored position exact."""
    scene, _ = saved_scene
    fps = scene.render.fps / scene.render.fps_base
    count, frames = 3, list(range(1, 7))
    velocity = np.tile(np.float32([0.0, 0.0, -1.0]), (count, 1))
    positions, respawned = [], []
    for frame in frames:
        pos = np.zeros((count, 3), np.float32)
        pos[:, 0] = np.arange(count)
        pos[:, 2] = 2.0 - (frame - 1) / fps
        flags = np.zeros(count, bool)
        if frame >= 4:
            pos[0, 2] = 100.0 - (frame - 4) / fps
            flags[0] = frame == 4
        positions.append(pos)
        respawned.append(flags)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    _bake(emitter, 1, positions, [velocity] * len(frames), respawned)

    for time in [2.0, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 5.0]:
        pos, _, alive = particle_output.evaluate_flakes(emitter, time)
        assert alive[1:].all(), time
        assert alive[0] == (time < 3.0 or time >= 4.0), time
        if alive[0] and time >= 4.0:     # drawn only on its new path
            assert abs(pos[0, 2] - (100.0 - (time - 4) / fps)) < 1e-4, time
    for frame, expected in zip(frames, positions):
        np.testing.assert_array_equal(particle_output.read_flake_frame(emitter, frame), expected)


def _load_image(path):
    image = bpy.data.images.load(path)
    width, height = image.size
    pixels = np.empty(width * height * 4, np.float32)
    image.pixels.foreach_get(pixels)
    bpy.data.images.remove(image)
    return pixels.reshape(height, width, 4)[..., :3].max(axis=2)


def _render(scene, frame, path):
    scene.frame_set(frame)
    scene.render.filepath = path
    bpy.ops.render.render(write_still=True)
    return _load_image(path)


def _tiny_cycles_scene(scene, motion_blur):
    """40x40 px orthographic view of x, z in [-2, 2] m (10 px per metre) along +Y, black
    world, a sun shining along +Y; Cycles on the CPU, 16 samples, no denoising."""
    camera_data = bpy.data.cameras.new("Camera")
    camera_data.type = 'ORTHO'
    camera_data.ortho_scale = 4.0
    camera = bpy.data.objects.new("Camera", camera_data)
    camera.location = (0.0, -10.0, 0.0)
    camera.rotation_euler = (np.pi / 2, 0.0, 0.0)
    scene.collection.objects.link(camera)
    scene.camera = camera
    world = bpy.data.worlds.new("World")
    background = next(n for n in node_tree(world).nodes if n.type == 'BACKGROUND')
    background.inputs["Strength"].default_value = 0.0
    scene.world = world
    light_data = bpy.data.lights.new("Sun", 'SUN')
    light_data.energy = 20.0
    light = bpy.data.objects.new("Sun", light_data)
    light.rotation_euler = (np.pi / 2, 0.0, 0.0)
    scene.collection.objects.link(light)
    scene.render.engine = 'CYCLES'
    scene.cycles.device = 'CPU'
    scene.cycles.samples = 16
    scene.cycles.use_denoising = False
    scene.render.resolution_x = scene.render.resolution_y = 40
    scene.render.resolution_percentage = 100
    scene.render.use_motion_blur = motion_blur
    scene.render.motion_blur_shutter = 1.0
    scene.render.image_settings.file_format = 'PNG'


@pytest.mark.parametrize("mark_respawn", [True, False])
def test_cycles_motion_blur_draws_no_respawn_streak(saved_scene, tmp_path, mark_respawn):
    """Tiny Cycles render with motion blur of frame 4 (shutter 1: frames 3.5 to 4.5).
    Flake 0 jumps from z=-1 at frame 3 to z=+1 at frame 4; flake 1 (x=+1) falls steadily and
    must blur. With the respawn marked, no pixel between the jump's ends lights up; unmarked
    (the control), the jump shows as a streak, so the check can fail."""
    scene, _ = saved_scene
    fps = scene.render.fps / scene.render.fps_base
    count = 2
    fall = np.float32(fps)                       # m/s: 1 m per frame
    positions, respawned = [], []
    for frame in range(1, 7):
        pos = np.zeros((count, 3), np.float32)
        pos[1] = (1.0, 0.0, 1.0 - (frame - 4))
        pos[0] = (-1.0, 0.0, -1.0) if frame <= 3 else (-1.0, 0.0, 1.0)
        positions.append(pos)
        respawned.append(np.array([frame == 4 and mark_respawn, False]))
    velocity = np.zeros((count, 3), np.float32)
    velocity[1, 2] = -fall
    velocities = [velocity] * 6
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count, flake_size=0.08)
    _bake(emitter, 1, positions, velocities, respawned)

    _tiny_cycles_scene(scene, motion_blur=True)

    image = _render(scene, 4, str(tmp_path / "frame4.png"))
    # rows bottom-up: z = -2 .. 2 m at 10 pixels per metre; x = -1 is column 10, x = +1 is 30
    between = image[int((-0.5 + 2) * 10):int((0.75 + 2) * 10), 9:12]
    column_steady = 30
    steady = image[:, column_steady - 1:column_steady + 2]
    assert (steady > 0.05).any(axis=1).sum() >= 3               # the steady flake does blur
    if mark_respawn:
        assert between.max() < 0.02, between.max()
    else:
        assert between.max() > 0.02, between.max()


def test_bad_input_is_refused_before_writing(saved_scene):
    scene, _ = saved_scene
    with pytest.raises(SnowInputError):
        particle_output.ensure_flake_system(scene, "Flakes", 0)
    with pytest.raises(SnowInputError):
        particle_output.ensure_flake_system(scene, "Flakes", 10, flake_size=-1.0)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", 4)
    good = np.zeros((4, 3), np.float32)
    with pytest.raises(SnowInputError):
        particle_output.write_flake_frame(emitter, 1, good.astype(np.float64), good,
                                          np.zeros(4, bool))
    with pytest.raises(SnowInputError):
        particle_output.write_flake_frame(emitter, 1, good[:3], good, np.zeros(4, bool))
    with pytest.raises(SnowInputError):
        particle_output.write_flake_frame(emitter, 0, good, good, np.zeros(4, bool))
    assert not os.path.exists(particle_output.cache_directory(emitter))
    with pytest.raises(SnowInputError):
        particle_output.finish_flake_bake(emitter, 1, 2)        # nothing written


def test_unsaved_blend_needs_an_explicit_folder(tmp_path):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    with pytest.raises(SnowInputError):
        particle_output.ensure_flake_system(scene, "Flakes", 4)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", 4,
                                                  cache_dir=str(tmp_path / "flakes"))
    pos = np.arange(12, dtype=np.float32).reshape(4, 3)
    particle_output.write_flake_frame(emitter, 1, pos, pos, np.zeros(4, bool))
    particle_output.finish_flake_bake(emitter, 1, 1)
    np.testing.assert_array_equal(particle_output.read_flake_frame(emitter, 1), pos)
    bpy.ops.wm.read_factory_settings(use_empty=True)
