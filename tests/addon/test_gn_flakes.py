"""The flake cache of Blender 4.2 to 4.5: a Geometry Nodes bake on disk (operators/
snow_addon/formats/gn_bake.py writes it, operators/gn_flakes.py shows it). Format round trip (exact
positions, velocities within the stated rounding, at most 16 B per flake-frame), corrupt or
foreign files named, a bake read back bit-exactly by plain Blender in a fresh process, and
Cycles' motion blur from the ``velocity`` attribute (no respawn streak). The bakes here force
the Geometry Nodes route, so they run on every Blender the suite runs on (5.x reads the form
too); what a plain Bake picks per version is checked on its own."""
import json
import os

import bpy
import numpy as np
import pytest

from snowfall import blender_compat
from snowfall.operators import gn_flakes, particle_output
from snowfall.operators.bake import BakeJob, scene_cache_folder
from snowfall.operators.flake_material import FLAKE_MATERIAL_NAME
from snowfall.properties import flake_radius
from snowfall.snow_addon import bake_cache
from snowfall.snow_addon.formats import gn_bake


def _flakes(count, seed=0, speed=3.0):
    rng = np.random.default_rng(seed)
    positions = rng.uniform(-50.0, 50.0, (count, 3)).astype(np.float32)
    velocities = rng.normal(0.0, speed, (count, 3)).astype(np.float32)
    velocities[:, 2] -= 1.0
    return positions, velocities


def test_format_round_trip_is_exact_and_small(tmp_path):
    count = 20_000
    positions, velocities = _flakes(count)
    velocities[0] = (40.0, -0.5, 0.25)          # an outlier: only its axis coarsens
    entry = gn_bake.write_frame(str(tmp_path), 3, positions, velocities)
    blob, meta = gn_bake.blob_path(str(tmp_path), 3), gn_bake.meta_path(
        str(tmp_path), 3)
    assert os.path.basename(meta) == "00003_00000.json"          # Blender's frame name
    assert entry[:3] == [os.path.getsize(blob), entry[1], "blobs/00003_00000.blob"]
    assert entry[3] == os.path.getsize(meta)
    assert os.path.getsize(blob) == 15 * count
    assert (os.path.getsize(blob) + os.path.getsize(meta)) / count <= 15.1
    assert gn_bake.cached_frames(str(tmp_path)) == [3.0]
    assert sorted(os.listdir(tmp_path / "meta")) == ["00003_00000.json"]   # no temporaries

    frame = gn_bake.read_frame(str(tmp_path), 3)
    np.testing.assert_array_equal(frame.positions, positions)           # bit-exact
    largest = np.abs(velocities).max(axis=0)
    np.testing.assert_allclose(frame.scales, largest / 127.0, rtol=1e-6)
    error = np.abs(frame.velocities - velocities)
    assert (error <= frame.scales / 2 * (1 + 1e-5) + 1e-7).all(), error.max(axis=0)
    assert error[:, 1].max() < 0.1 and frame.seeds is None

    # A camera-culled frame carries a seed byte per flake: 16 B.
    seeds = np.arange(count).astype(np.uint8).view(np.int8)
    gn_bake.write_frame(str(tmp_path), 4, positions, velocities, seeds)
    assert os.path.getsize(gn_bake.blob_path(str(tmp_path), 4)) == 16 * count
    np.testing.assert_array_equal(gn_bake.read_frame(str(tmp_path), 4).seeds, seeds)

    # Still air (a zero component) and no flakes at all both round-trip.
    still = np.zeros((5, 3), np.float32)
    gn_bake.write_frame(str(tmp_path), 5, positions[:5], still)
    np.testing.assert_array_equal(gn_bake.read_frame(str(tmp_path), 5).velocities, still)
    gn_bake.write_frame(str(tmp_path), 6, positions[:0], still[:0])
    assert gn_bake.read_frame(str(tmp_path), 6).positions.shape == (0, 3)
    # A kill mid-write leaves a temporary file, which Blender never lists; Resume drops it.
    temporary = tmp_path / "blobs" / ".00007_00000.blob.123.tmp"
    temporary.write_bytes(b"half")
    assert gn_bake.cached_frames(str(tmp_path)) == [3.0, 4.0, 5.0, 6.0]
    gn_bake.remove_temporaries(str(tmp_path))
    assert not temporary.exists()
    gn_bake.free(str(tmp_path))
    assert not os.path.exists(tmp_path / "meta") and not os.path.exists(tmp_path / "blobs")


@pytest.mark.parametrize("damage, message", [
    ("truncated blob", "has .* bytes, .* needs"),
    ("missing blob", "is missing"),
    ("garbage json", "is not a Snowfall flake frame"),
    ("other version", "bake file version 4"),
    ("foreign json", "is not a Snowfall flake frame"),
    ("blob outside the folder", "names the blob"),
    ("wrong size", "bytes at 0 for 10 points"),
])
def test_corrupt_or_foreign_frames_are_named(tmp_path, damage, message):
    root = str(tmp_path)
    positions, velocities = _flakes(10)
    gn_bake.write_frame(root, 1, positions, velocities)
    meta, blob = gn_bake.meta_path(root, 1), gn_bake.blob_path(root, 1)
    data = json.loads(open(meta).read())
    named = meta
    if damage == "truncated blob":
        with open(blob, "r+b") as handle:
            handle.truncate(100)
        named = blob
    elif damage == "missing blob":
        os.unlink(blob)
        named = blob
    elif damage == "garbage json":
        open(meta, "wb").write(b"\x00garbage\xff")
    elif damage == "other version":
        data["version"] = 4
    elif damage == "foreign json":
        data = {"version": 3, "items": {"0": {"name": "Mesh", "type": "GEOMETRY",
                                              "data": {"mesh": {}}}}}
    elif damage == "blob outside the folder":
        data["items"]["0"]["data"]["pointcloud"]["attributes"][0]["data"]["name"] = \
            "../../x.blob"
    elif damage == "wrong size":
        data["items"]["0"]["data"]["pointcloud"]["attributes"][0]["data"]["size"] = 100
    if damage in ("other version", "foreign json", "blob outside the folder", "wrong size"):
        open(meta, "w").write(json.dumps(data))
    for read in (gn_bake.check_frame, gn_bake.read_frame):
        with pytest.raises(gn_bake.GnBakeError, match=message) as error:
            read(root, 1)
        assert named in str(error.value) and "Traceback" not in str(error.value)
        assert isinstance(error.value, bake_cache.BakeCacheError)


def test_the_route_follows_the_blender_version():
    expected = "gn_bake" if bpy.app.version < (5, 0, 0) else "ptcache"
    assert blender_compat.FLAKE_CACHE == expected


READ_BACK = """
import bpy, numpy as np
bpy.ops.wm.open_mainfile(filepath={blend!r})
assert not hasattr(bpy.types.Scene, "snowfall"), "the add-on must not be registered here"
scene = bpy.context.scene
out = {{}}
for frame in {frames!r}:
    scene.frame_set(frame)
    clouds = [i.object.data for i in bpy.context.evaluated_depsgraph_get().object_instances
              if i.object.type == "POINTCLOUD"]
    assert len(clouds) == 1, len(clouds)
    cloud = clouds[0]
    n = len(cloud.points)
    for name in ("position", "velocity", "radius"):
        data = np.zeros(n * (1 if name == "radius" else 3), np.float32)
        cloud.attributes[name].data.foreach_get("value" if name == "radius" else "vector", data)
        out[f"{{name}}{{frame}}"] = data
    out[f"names{{frame}}"] = np.array(sorted(a.name for a in cloud.attributes))
np.savez({npz!r}, **out)
print("OK")
"""


def test_bake_reads_back_exactly_in_plain_blender(addon, tools, tmp_path):
    """A bake saved and opened by a fresh Blender without the add-on (a render farm): every
    frame's points are the engine's positions bit for bit, ``velocity`` is the decoded
    velocity, the radius is random per flake within the flake size, and no helper attribute
    is left."""
    scene = addon
    tools.small_settings(scene, "//cache", frames=4)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    blend = str(tmp_path / "baked.blend")
    bpy.ops.wm.save_as_mainfile(filepath=blend)
    # the flakes as a Geometry Nodes bake, whatever the Blender
    job = BakeJob(bpy.context, flake_format=blender_compat.FLAKE_CACHE_GN_BAKE)
    while job.advance_frame():
        pass
    job.finish()
    emitter = scene.snowfall.flake_emitter
    assert gn_flakes.is_gn_flakes(emitter)
    assert particle_output.baked_range(emitter) == (1, 4)
    root = particle_output.cache_directory(emitter)
    assert root == os.path.join(scene_cache_folder(str(tmp_path / "cache"), scene), "flakes")
    meta = json.loads(open(os.path.join(scene_cache_folder(str(tmp_path / "cache"), scene),
                                        "bake.json")).read())
    assert meta["flakes"]["format"] == "gn_bake"
    stored = {f: gn_bake.read_frame(root, f) for f in range(1, 5)}
    count = scene.snowfall.flake_count
    for frame in range(1, 5):        # here, with the add-on: Blender's evaluation
        positions, velocities, alive = particle_output.evaluate_flakes(emitter, frame)
        np.testing.assert_array_equal(positions, stored[frame].positions)
        np.testing.assert_array_equal(velocities, stored[frame].velocities)
        assert alive.all() and len(positions) == count
    bpy.ops.wm.save_mainfile()

    npz = str(tmp_path / "readback.npz")
    assert "OK" in tools.run_python(READ_BACK.format(blend=blend, frames=[1, 2, 3, 4], npz=npz))
    got = np.load(npz)
    size = flake_radius(scene.snowfall, scene)     # the flakes' radius: automatic here
    for frame in range(1, 5):
        np.testing.assert_array_equal(got[f"position{frame}"].reshape(-1, 3),
                                      stored[frame].positions)
        np.testing.assert_array_equal(got[f"velocity{frame}"].reshape(-1, 3),
                                      stored[frame].velocities)
        radius = got[f"radius{frame}"]
        assert 0.33 * size * (1 - 1e-6) <= radius.min() and radius.max() <= size * (1 + 1e-6)
        assert radius.std() > 0.05 * size
        np.testing.assert_array_equal(radius, got["radius1"])    # a flake keeps its size
        assert {"vx", "vy", "vz", "seed"}.isdisjoint(got[f"names{frame}"].tolist())
    # Respawned flakes in the bake jump between frames; their velocity stays their own.
    moved = np.linalg.norm(stored[4].positions - stored[3].positions, axis=1)
    assert moved.max() > 0.5, "no flake respawned in this bake: the check below is empty"

    # Free removes the files and the object.
    bpy.ops.snowfall.free()
    assert not os.path.exists(root) and scene.snowfall.flake_emitter is None


RENDER = """
import bpy, numpy as np
bpy.ops.wm.open_mainfile(filepath={blend!r})
scene = bpy.context.scene
scene.render.use_motion_blur = {blur!r}
scene.render.filepath = {png!r}
scene.frame_set(4)
bpy.ops.render.render(write_still=True)
print("OK")
"""


def _streak_scene(tmp_path, velocity_name):
    """Two flakes, Cycles, an orthographic camera 4 m wide (20 px per m): A respawns between
    frames 3 and 4 (z = -0.9 -> +1), B falls at 12 m/s (0.5 m a frame at 24 fps)."""
    scene = bpy.context.scene
    scene.render.fps, scene.frame_start, scene.frame_end = 24, 1, 6
    root = str(tmp_path / "flakes")
    for frame in range(1, 7):
        za = -1.0 + 0.1 * (3 - frame) if frame <= 3 else 1.0 - 0.1 * (frame - 4)
        positions = np.array([[-1.0, 0.0, za], [1.0, 0.0, 0.5 - 0.1 * (frame - 1)]],
                             np.float32)
        velocities = np.array([[0.0, 0.0, -2.4], [0.0, 0.0, -12.0]], np.float32)
        gn_bake.write_frame(root, frame, positions, velocities)
    obj = gn_flakes.ensure_flakes(scene, "Flakes", root, flake_size=0.06, size_random=0.0)
    gn_flakes.finish(obj, 1, 6)
    for node in obj.modifiers[gn_flakes.MODIFIER_NAME].node_group.nodes:
        if node.bl_idname == "GeometryNodeStoreNamedAttribute":
            node.inputs["Name"].default_value = velocity_name
    material = bpy.data.materials[FLAKE_MATERIAL_NAME]
    tree = material.node_tree
    tree.nodes.clear()
    emission = tree.nodes.new("ShaderNodeEmission")
    emission.inputs["Strength"].default_value = 5.0
    tree.links.new(emission.outputs[0], tree.nodes.new("ShaderNodeOutputMaterial").inputs[0])
    camera = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(camera)
    camera.data.type, camera.data.ortho_scale = "ORTHO", 4.0
    camera.location, camera.rotation_euler = (0.0, -10.0, 0.0), (np.pi / 2, 0.0, 0.0)
    scene.camera = camera
    scene.world = bpy.data.worlds.new("Black")
    scene.world.color = (0.0, 0.0, 0.0)
    if scene.world.node_tree is not None:
        for node in scene.world.node_tree.nodes:
            if node.bl_idname == "ShaderNodeBackground":
                node.inputs["Strength"].default_value = 0.0
    render = scene.render
    render.engine, render.resolution_x, render.resolution_y = "CYCLES", 80, 80
    render.resolution_percentage, render.motion_blur_shutter = 100, 1.0
    render.image_settings.file_format = "PNG"
    scene.cycles.device, scene.cycles.samples, scene.cycles.use_denoising = "CPU", 16, False
    return obj


def _columns(path):
    image = bpy.data.images.load(path)
    try:
        red = np.array(image.pixels[:], np.float32).reshape(80, 80, 4)[..., 0]
    finally:
        bpy.data.images.remove(image)
    # Rows from the bottom (z = -2 m) up, 20 per metre; A at x = -1 m, B at x = +1 m.
    return red[:, 18:23].max(axis=1), red[:, 58:63].max(axis=1)


def test_motion_blur_follows_the_velocity_without_respawn_streaks(addon, tools, tmp_path):
    """Cycles renders frame 4 (shutter one frame) in a fresh process: the respawned flake
    is drawn only at its new place (nothing lit along its jump), the falling one is blurred
    along its 12 m/s. The control, without the ``velocity`` attribute, streaks."""
    rows = {}
    for velocity_name in ("velocity", "not_velocity"):
        bpy.ops.wm.read_factory_settings(use_empty=True)
        folder = tmp_path / velocity_name
        obj = _streak_scene(folder, velocity_name)
        blend = str(folder / "streak.blend")
        bpy.ops.wm.save_as_mainfile(filepath=blend)
        if velocity_name == "velocity":    # the attribute Cycles reads is the decoded one
            _, velocities, _ = gn_flakes.evaluate(obj, 4)
            np.testing.assert_allclose(velocities, [[0, 0, -2.4], [0, 0, -12.0]], atol=0.05)
        png = str(folder / "frame4.png")
        assert "OK" in tools.run_python(RENDER.format(blend=blend, blur=True, png=png))
        rows[velocity_name] = _columns(png)
    (a, b), (a_control, b_control) = rows["velocity"], rows["not_velocity"]
    lit = lambda column: np.flatnonzero(column > 0.02)   # noqa: E731
    # A at z = +1 m is rows 58-62; its jump from z = -0.8 passes rows 24-55.
    assert lit(a).size and lit(a).min() >= 54, lit(a)
    assert a[24:54].max() < 0.02
    assert a_control[24:54].max() > 0.02             # the control streaks along the jump
    # B moves 0.5 m (10 rows) during the shutter: blurred over about that many rows.
    assert lit(b).size >= 8 and lit(b).size > 2 * lit(b_control).size, (lit(b), lit(b_control))


def test_an_unknown_flake_format_is_refused_before_anything_changes(addon, tools, tmp_path):
    from snowfall.snow_addon.errors import SnowInputError

    scene = addon
    tools.small_settings(scene, tmp_path, frames=2)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    objects_before = sorted(obj.name for obj in bpy.data.objects)
    with pytest.raises(SnowInputError) as error:
        BakeJob(bpy.context, flake_format="vdb")
    assert error.value.setting == "flake_format"
    assert sorted(obj.name for obj in bpy.data.objects) == objects_before
    assert not scene.snowfall.has_bake and not os.listdir(tmp_path)
