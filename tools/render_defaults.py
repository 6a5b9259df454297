"""The add-on's defaults on a plain 100 m terrain with a 4 m wall, rendered (the picture
docs/defaults_plain_terrain.jpg; docs/addon.md): a new scene (frames 1-250 at 24 fps, every
Snowfall setting at its default), with only the terrain, a camera and a sun added, Camera
Only on (Full Density Distance half the camera's distance) and Set Up Render for Snow;
baked on the CPU and rendered at frame 250, 960 x 540, 16 samples.

    .venv/bin/python tools/render_defaults.py out/defaults.png
"""
import os
import sys
import time

import bpy
import numpy as np

import snowfall
from snowfall.snow_addon import scenes
from snowfall.sample_scenes import build as b
from snowfall.operators.bake import BakeJob
from snowfall.operators.set_terrain import set_terrain
from snowfall.operators.render_setup import setup_render
out = os.path.abspath(sys.argv[1])
os.makedirs(os.path.dirname(out), exist_ok=True)
bpy.ops.wm.read_factory_settings(use_empty=True)
snowfall.register()
scene = bpy.context.scene
v, t = scenes.snow_fence(size_x=100.0, size_y=100.0, fence_height=4.0, fence_length=60.0, thickness=1.0, fence_x=-20.0, resolution=201)
terrain = b.mesh_object("Terrain", v, t)
b.dress_terrain(terrain, b.EARTH, raised=b.CONCRETE)
distance = b._camera_and_light((-10.0, 0.0, 0.0), 70.0, 35.0, -60.0, lens=35.0)
scene.render.engine = "CYCLES"; scene.cycles.device = "CPU"; scene.cycles.use_denoising = False
set_terrain(bpy.context, [terrain])
p = scene.snowfall
p.backend = "cpu"
p.camera_only = True
p.camera_falloff_distance = 0.5 * distance
blend = os.path.splitext(out)[0] + ".blend"
bpy.ops.wm.save_mainfile(filepath=blend)
t0 = time.time()
job = BakeJob(bpy.context, camera_only=True, camera_margin=0.1)
print("grid", job.sim.grid.nx, job.sim.grid.ny, job.sim.grid.nz, "flakes", job.settings.flake_count, "rate", job.settings.snowfall_rate, flush=True)
try:
    while job.advance_frame():
        if job.frames_done % 25 == 0: print(job.status_text(), flush=True)
finally:
    job.finish()
depth = np.asarray(job.sim.snow_depth())
print("bake", time.time() - t0, "s; mean depth", float(depth.mean()), "m", flush=True)
setup_render(scene)
bpy.ops.wm.save_mainfile(filepath=blend)
scene.frame_set(250)
scene.render.resolution_x, scene.render.resolution_y = 960, 540
scene.cycles.samples = 16
scene.render.filepath = out
t0 = time.time()
bpy.ops.render.render(write_still=True)
print("render", time.time() - t0)
from snowfall.blender_compat import exit_process
exit_process(0)
