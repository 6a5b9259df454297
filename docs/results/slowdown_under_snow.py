"""A flat open strip on 0.25 m wind cells, 12 m/s, 6 m/h, 60 s (CPU): the near-ground wind
and the snow depth every 7.5 s. Run with the snowfall package on PYTHONPATH."""
import numpy as np, time
from snowfall.snow_addon import SnowSettings, Simulation, scenes
cell = 0.25; speed = 12.0
v, t = scenes.snow_fence(size_x=80*cell, size_y=40*cell, fence_height=1e-4, fence_length=cell, thickness=cell, fence_x=0.0, resolution=161)
s = SnowSettings(heightmap_resolution=161, wind_cell_size=cell, sky_height=12*cell, side_walls=True, wind_speed=speed, gust_strength=0.0,
                 gust_direction_jitter=0.0, flake_count=20000, snowfall_rate=6.0, seed=1)
sim = Simulation(s, v, t, backend="cpu")
t0 = time.time()
for k in range(8):
    d = sim.step(180)
    sw = np.hypot(np.asarray(sim.drift.wind_x), np.asarray(sim.drift.wind_y))
    u = np.asarray(sim.wind.u)
    depth = sim.snow_depth()
    fallen = s.snowfall_rate / 3600 * sim.time
    print(f"t {sim.time:5.1f}s depth mean {depth.mean()*100:.1f} cm ({depth.mean()/fallen:.2f} of fallen) surface wind mean {sw.mean():.2f} min {sw.min():.2f} max {sw.max():.2f} | u levels 1-4 (mean) {np.round(u[1:5].mean(axis=(1,2)),2)} | susp {d.suspended_volume:.2f} of {d.snowfall_volume:.2f} | {time.time()-t0:.0f}s", flush=True)
