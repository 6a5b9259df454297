"""The surface wind and the saltation flux upwind of the sweep's solid fence, by fence
heights from its windward face, relative to the upwind edge's: how far upwind the fence
slows the wind near the ground. python fence_fetch_wind.py H SPEED DISTANCES (e.g. 1 8
10,40) with the snowfall package on PYTHONPATH; the CPU backend, 96 steps (2 s) of the
sweep's storm (benchmarks/drift_validation.py, COMMON and fence_scene) without gusts,
20,000 flakes, seed 1. Not part of the add-on (cpu-fence-fetch-wind.log)."""
import os, sys, time
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import drift_validation as dv
from snowfall.snow_addon import SnowSettings, Simulation, scenes

H, speed = float(sys.argv[1]), float(sys.argv[2])
for distance in [float(d) for d in sys.argv[3].split(",")]:
    scene = dv.fence_scene(H, distance)
    vertices, triangles = scenes.snow_fence(**scene.terrain)
    values = dict(dv.COMMON, **scene.settings)
    values.update(seed=1, wind_speed=speed, flake_count=20000, gust_strength=0.0)
    sim = Simulation(SnowSettings(**values), vertices, triangles, backend="cpu")
    started = time.time()
    sim.step(int(sys.argv[4]) if len(sys.argv) > 4 else 96)
    g, hm = sim.grid, sim.heightmap.grid
    wind = np.asarray(sim.drift.wind_x).mean(axis=0)          # columns' surface wind along x
    flux = np.asarray(sim.drift.flux_x)[1:-1].mean(axis=0)    # nodes' saltation flux along x
    fence_x = scene.terrain["fence_x"]
    centres = g.x0 + (np.arange(g.nx) + 0.5) * g.cell_size
    nodes = hm.x0 + np.arange(hm.nx) * hm.spacing
    print(f"H {H:g} m at {distance:g} H, {speed:g} m/s, {sim.time:g} s ({time.time() - started:.0f} s): the "
          "surface wind and the flux upwind of the fence, by H upwind of its face")
    edge = None
    for k in [distance - 0.5] + [d for d in (30, 20, 15, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
                                 if d < distance]:
        x = fence_x - k * H
        i, j = int(np.argmin(abs(centres - x))), int(np.argmin(abs(nodes - x)))
        edge = edge or (wind[i], flux[j])
        print(f"   {k:5.1f} H: wind {wind[i]:6.2f} m/s ({wind[i] / edge[0]:.2f} of the edge's), "
              f"flux {flux[j]:.3e} m^2/s ({flux[j] / edge[1]:.2f})")
