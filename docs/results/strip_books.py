"""Flat open strip (docs/results/strip_gusts.py's), no gusts: the books and the surface wind
every 10 s. python strip_books.py SPEED SEED SECONDS (snowfall on PYTHONPATH)."""
import sys, time
import numpy as np
from snowfall.snow_addon import SnowSettings, Simulation, scenes
speed, seed, seconds = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
cell = 0.5
size_x, size_y = 80 * cell, 40 * cell
res = int(round(size_x / (cell / 2))) + 1
v, t = scenes.snow_fence(size_x=size_x, size_y=size_y, fence_height=1e-4, fence_length=cell,
                         thickness=cell, fence_x=0.0, resolution=res)
s = SnowSettings(heightmap_resolution=res, wind_cell_size=cell, sky_height=12 * cell,
                 side_walls=True, wind_speed=speed, gust_strength=0.0, gust_direction_jitter=0.0,
                 flake_count=30000, snowfall_rate=6.0, upwind_fetch="open_snowfield", seed=seed)
sim = Simulation(s, v, t, backend="cpu")
d0 = sim.drift
started = time.time()
for c in range(int(round(seconds / 10))):
    d = sim.step(240)
    depth = sim.snow_depth().astype(np.float64)
    fallen = s.snowfall_rate / 3600 * sim.time
    surface = np.hypot(np.asarray(d0.wind_x), np.asarray(d0.wind_y))[:, 2:-2]
    ustar = float(d0.ustar_per_speed) * surface
    p = np.where(ustar > float(d0.threshold), 1 - float(d0.threshold) ** 2 / np.maximum(ustar, 1e-6) ** 2, 0)
    p_in = 1 - float(d0.threshold) ** 2 / (float(d0.ustar_per_speed) * speed) ** 2
    print(f"{speed:g} m/s seed {seed} t {sim.time:5.1f}: mean {depth.mean()/fallen:.3f} cv {depth.std()/depth.mean():.2f} "
          f"snowfall {d.snowfall_volume:.3f} suspended {d.suspended_volume:+.3f} in {d.inflow_volume:.3f} out {d.outflow_volume:.3f} "
          f"snow {d.snow_volume:.3f} m3 | surface wind {surface.mean():.2f} (p5 {np.percentile(surface,5):.2f} p95 {np.percentile(surface,95):.2f}) "
          f"lift p {p.mean():.3f} vs inflow's {p_in:.3f} | grains aloft {d.grains_aloft} ({time.time()-started:.0f} s)", flush=True)
