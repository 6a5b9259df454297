"""The default bake of test_default_bake_leaves_visible_snow_and_drifts: the crosswind mean
snow depth along x (|y| < 25 m). python default_wall.py PKGPARENT"""
import sys, tempfile
sys.path.insert(0, sys.argv[1])
import numpy as np, bpy
import snowfall
bpy.ops.wm.read_factory_settings(use_empty=True)
if not hasattr(bpy.types.Scene, "snowfall"):
    snowfall.register()
from snowfall.sample_scenes.build import mesh_object
from snowfall.snow_addon import scenes
from snowfall.operators.bake import BakeJob
from snowfall.operators.set_terrain import set_terrain
v, t = scenes.snow_fence(size_x=100.0, size_y=100.0, fence_height=4.0, fence_length=60.0,
                         thickness=1.0, fence_x=-20.0, resolution=101)
set_terrain(bpy.context, [mesh_object("Terrain", v, t)])
props = bpy.context.scene.snowfall
props.heightmap_resolution = 64; props.wind_resolution = 32; props.flake_count = 4000
props.backend = "cpu"; props.cache_folder = tempfile.mkdtemp()
job = BakeJob(bpy.context)
try:
    while job.advance_frame():
        pass
finally:
    job.finish()
depth = np.asarray(job.sim.snow_depth(), np.float64)
g = job.sim.heightmap.grid
x = g.x0 + np.arange(g.nx) * g.spacing; y = g.y0 + np.arange(g.ny) * g.spacing
X, Y = np.meshgrid(x, y)
ground = np.asarray(job.sim.heightmap.height) < 0.1
across = ground & (np.abs(Y) < 25.0)
for x0 in np.arange(-50, 50, 4.0):
    sel = across & (X >= x0) & (X < x0 + 4)
    if sel.any():
        print(f"x {x0:+5.0f}..{x0+4:+4.0f}: {depth[sel].mean()*100:6.1f} cm")
print("near lee", depth[across & (X > -19.4) & (X < -15.0)].mean(), "upwind", depth[across & (X < -30.0)].mean())
