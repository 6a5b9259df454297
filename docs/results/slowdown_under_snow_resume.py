"""docs/results/slowdown_under_snow.py's strip (0.25 m cells, 12 m/s, 6 m/h, seed 1, CPU), saved
at 37.5 s and resumed, with the snow's spread and the solid share of the lowest levels.
python slowdown_under_snow_resume.py save   (steps to 37.5 s, pickles the state)
python slowdown_under_snow_resume.py dump   (resumes it to 60 s; saves the fields at 45, 52.5, 60 s)
Run with the snowfall package on PYTHONPATH; files under /tmp/coll (make it first)."""
import sys, time, pickle
import numpy as np
from snowfall.snow_addon import SnowSettings, Simulation, scenes
cell = 0.25; speed = 12.0
mode = sys.argv[1]
v, t = scenes.snow_fence(size_x=80*cell, size_y=40*cell, fence_height=1e-4, fence_length=cell, thickness=cell, fence_x=0.0, resolution=161)
extra = {}
s = SnowSettings(heightmap_resolution=161, wind_cell_size=cell, sky_height=12*cell, side_walls=True, wind_speed=speed, gust_strength=0.0,
                 gust_direction_jitter=0.0, flake_count=20000, snowfall_rate=6.0, seed=1, **extra)
sim = Simulation(s, v, t, backend="cpu")
print("grid z0", sim.wind.grid.z0, "cell", sim.wind.grid.cell_size, "shape", sim.wind.u.shape, flush=True)
t0 = time.time()
if mode == "save":
    sim.step(900)
    pickle.dump(sim.state_dict(), open("/tmp/coll/state375.pkl", "wb"))
    print("saved at", sim.time, time.time() - t0)
    sys.exit()
state = pickle.load(open("/tmp/coll/state375.pkl", "rb"))
try:
    sim.load_state_dict(state)
except Exception as e:
    print("load failed", e); raise
for k in range(3):
    d = sim.step(180)
    sw = np.hypot(np.asarray(sim.drift.wind_x), np.asarray(sim.drift.wind_y))
    u = np.asarray(sim.wind.u)
    depth = sim.snow_depth()
    fallen = s.snowfall_rate / 3600 * sim.time
    print(f"t {sim.time:5.1f}s depth mean {depth.mean()*100:.1f} cm (p5 {np.percentile(depth,5)*100:.1f} p95 {np.percentile(depth,95)*100:.1f}) surface wind mean {sw.mean():.2f} min {sw.min():.2f} max {sw.max():.2f} | u levels 0-4 (mean) {np.round(u[0:5].mean(axis=(1,2)),2)} | solid per level {np.asarray(sim.wind.solid)[0:4].mean(axis=(1,2)).round(3)} | susp {d.suspended_volume:.2f} | {time.time()-t0:.0f}s", flush=True)
    if mode == "dump":
        np.savez(f"/tmp/coll/dump{k}.npz", u=u, depth=depth, solid=np.asarray(sim.wind.solid), fu=np.asarray(sim.wind.fractions[0]), fw=np.asarray(sim.wind.fractions[2]), sw=sw)
