"""Where the snow upwind of the sweep's 1 m solid fence 10 H from the upwind edge comes
from: the snow depth over the snowfall so far, per fence height from the edge to the fence
and in its lee, every 10 s of a 60 s storm (the fence_scale.py storm: COMMON, 60 m/h with
gusts, seed 1). python fence_fetch_history.py [SPEED [FETCH [BACKEND]]] with the snowfall
package on PYTHONPATH. Not part of the add-on (cpu-fence-fetch-history.log)."""
import os, sys, time
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import drift_validation as dv
from snowfall.snow_addon import SnowSettings, Simulation, scenes

speed = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
fetch = sys.argv[2] if len(sys.argv) > 2 else "open_snowfield"
backend = sys.argv[3] if len(sys.argv) > 3 else "cpu"
H, distance = 1.0, 10.0
scene = dv.fence_scene(H, distance)
vertices, triangles = scenes.snow_fence(**scene.terrain)
values = dict(dv.COMMON, **scene.settings)
values.update(seed=1, wind_speed=speed, upwind_fetch=fetch)
settings = SnowSettings(**values)
sim = Simulation(settings, vertices, triangles, backend=backend)
hm = sim.heightmap.grid
nodes = hm.x0 + np.arange(hm.nx) * hm.spacing
fence_x = scene.terrain["fence_x"] - 0.15 * H        # the fence's windward face (0.3 H thick)
upwind = (fence_x - nodes) / H                      # H upwind of the face (negative: lee)
bins = [(k, k + 1) for k in range(int(distance) - 1, 0, -1)] + [(-5, -1), (-10, -5)]
print(f"1 m fence {distance:g} H from the edge, {speed:g} m/s, {fetch}, {backend}, "
      f"{settings.flake_count:,} flakes: depth / snowfall so far, by H upwind of the face "
      "(negative: in its lee)")
print("   t (s) | " + " | ".join(f"{a}..{b} H" for a, b in bins))
started = time.time()
for chunk in range(6):
    sim.step(240)
    fallen = float(settings.snowfall_rate) / 3600.0 * sim.time
    depth = sim.snow_depth()[1:-1].mean(axis=0)      # along x, without the side rows
    cells = []
    for a, b in bins:
        inside = (upwind > min(a, b)) & (upwind <= max(a, b))
        cells.append(f"{depth[inside].mean() / fallen:6.2f}")
    print(f"   {sim.time:5.1f} | " + " | ".join(cells) + f"   ({time.time() - started:.0f} s)",
          flush=True)
