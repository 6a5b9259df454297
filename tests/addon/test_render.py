"""A saved, baked .blend: it reloads with the bake intact in a fresh process without the
add-on, bakes headless from the command line (farms), and renders the snow of the frame
in Cycles without the add-on installed. Both snow forms: the snow surface of new bakes, and
the per-frame terrain attributes of older bakes (which must keep opening and rendering)."""
import json
import math
import os
import sys

import bpy
import numpy as np
import pytest

from snowfall.operators import particle_output, snow_output, snow_surface

RENDER_SIZE = (32, 24)


def _camera_and_light(scene):
    cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(cam)
    cam.location = (5.0, 4.0, 14.0)       # straight down over the 10 x 8 terrain
    scene.camera = cam
    sun = bpy.data.objects.new("Sun", bpy.data.lights.new("Sun", "SUN"))
    sun.data.energy = 3.0
    sun.rotation_euler = (math.radians(20.0), 0.0, 0.0)
    scene.collection.objects.link(sun)
    scene.render.engine = "CYCLES"
    scene.cycles.device = "CPU"
    scene.cycles.samples = 4
    scene.cycles.use_denoising = False
    scene.cycles.seed = 0
    scene.render.resolution_x, scene.render.resolution_y = RENDER_SIZE
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"


RENDER_CODE = """
import bpy, json, numpy as np
bpy.ops.wm.open_mainfile(filepath={blend!r})
assert not hasattr(bpy.types.Scene, "snowfall"), "the add-on must not be registered here"
scene = bpy.context.scene
out = {{}}
for frame, png in {renders!r}:
    scene.frame_set(frame)
    scene.render.filepath = png
    bpy.ops.render.render(write_still=True)
scene.frame_set({read_frame})
if {vertex!r}:       # older bakes: the terrain's per-frame attribute, displaced by a modifier
    terrain = bpy.data.objects["Terrain"]
    stored = np.zeros(len(terrain.data.vertices), np.float32)
    terrain.data.attributes["snow_depth_{read_frame}"].data.foreach_get("value", stored)
else:                # new bakes: the snow surface reads the depth files itself
    terrain = bpy.data.objects["Snowfall Snow Surface"]
    stored = np.zeros(0, np.float32)
mesh = terrain.evaluated_get(bpy.context.evaluated_depsgraph_get()).to_mesh()
depth = np.zeros(len(mesh.vertices), np.float32)
mesh.attributes["snow_depth"].data.foreach_get("value", depth)
depsgraph = bpy.context.evaluated_depsgraph_get()
clouds = [i.object.data for i in depsgraph.object_instances if i.object.type == "POINTCLOUD"]
if clouds:           # Blender 4.2-4.5: a Geometry Nodes bake of a point cloud
    flakes = np.zeros(len(clouds[0].points) * 3, np.float32)
    clouds[0].attributes["position"].data.foreach_get("vector", flakes)
else:                # 5.x: a particle system reading its point cache
    psys = bpy.data.objects["Snowfall Flakes"].evaluated_get(depsgraph).particle_systems[0]
    flakes = np.zeros(len(psys.particles) * 3, np.float32)
    psys.particles.foreach_get("location", flakes)
np.savez({npz!r}, depth=depth, stored=stored, flakes=flakes.reshape(-1, 3))
print("OK")
"""


def _pixels(path):
    image = bpy.data.images.load(path)
    try:
        pixels = np.array(image.pixels[:], dtype=np.float32).reshape(RENDER_SIZE[1],
                                                                    RENDER_SIZE[0], 4)
    finally:
        bpy.data.images.remove(image)
    return pixels[..., :3]


@pytest.mark.parametrize("form", ["surface", "vertex"])
def test_headless_bake_then_render_without_the_addon(addon, tools, tmp_path, form):
    scene = addon
    vertex = form == "vertex"
    tools.small_settings(scene, "//snowfall_cache", frames=4)
    terrain = tools.grid_object()
    tools.dark_material(terrain)        # bare ground dark: the snow shows as brightness
    _camera_and_light(scene)
    bpy.ops.snowfall.set_terrain()
    source = str(tmp_path / "scene.blend")
    baked = str(tmp_path / "baked.blend")
    bpy.ops.wm.save_mainfile(filepath=source)

    # 7. the farm form: bake a saved .blend from the command line.
    extra = ", '--vertex-frames'" if vertex else ""
    out = tools.run_python("import sys; from snowfall.operators.headless import main; "
                           f"sys.exit(main([{source!r}, '--output', {baked!r}{extra}]))")
    assert "baked up to frame 4" in out

    # The baked file reloads with the bake intact (here, with the add-on registered).
    bpy.ops.wm.open_mainfile(filepath=baked)
    scene = bpy.context.scene
    terrain = bpy.data.objects["Terrain"]
    assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == 4
    if vertex:
        assert snow_output.baked_frames(terrain) == [1, 2, 3, 4]
        depth4 = snow_output.read_snow_frame(terrain, 4)
    else:
        assert snow_surface.baked_frames() == [1, 2, 3, 4]
        assert snow_output.baked_frames(terrain) == []
        scene.frame_set(4)
        _, depth4 = snow_surface.evaluated_surface(bpy.context.evaluated_depsgraph_get())
    assert depth4.max() > 0.02
    flakes4 = particle_output.read_flake_frame(scene.snowfall.flake_emitter, 4)

    # 5. render frames 1 (no snow yet) and 4 in a fresh process without the add-on.
    renders = [(1, str(tmp_path / "frame1.png")), (4, str(tmp_path / "frame4.png"))]
    npz = str(tmp_path / "readback.npz")
    out = tools.run_python(RENDER_CODE.format(blend=baked, renders=renders, read_frame=4,
                                              npz=npz, vertex=vertex))
    assert "OK" in out
    readback = np.load(npz)
    if vertex:
        np.testing.assert_array_equal(readback["stored"], depth4)
    np.testing.assert_allclose(readback["depth"], depth4, atol=1e-7)
    np.testing.assert_array_equal(readback["flakes"], flakes4)

    unbaked, snowy = _pixels(renders[0][1]), _pixels(renders[1][1])
    brightness_gain = snowy.mean(axis=2) - unbaked.mean(axis=2)
    # Snow lies all over the terrain at frame 4 (the camera sees only terrain): the snowy
    # frame is brighter nearly everywhere, and clearly so on average.
    assert brightness_gain.mean() > 0.15, brightness_gain.mean()
    assert (brightness_gain > 0.02).mean() > 0.8

    # The same frame rendered here (add-on registered) looks the same.
    scene.frame_set(4)
    scene.render.filepath = str(tmp_path / "frame4_here.png")
    bpy.ops.render.render(write_still=True)
    here = _pixels(scene.render.filepath)
    assert np.abs(here - snowy).mean() < 0.01
