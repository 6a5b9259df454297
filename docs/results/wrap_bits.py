"""Save the states of the wrap cases of docs/results/bake_digest.py (and an open one) with
the snowfall package found on PYTHONPATH: python wrapbits.py OUT.npz BACKEND"""
import sys
import numpy as np
from snowfall.snow_addon import Simulation, SnowSettings, scenes
CASES = {
    "fence-wrap-drift": (dict(wind_speed=12.0, flake_count=20000, seed=4), lambda: scenes.snow_fence(resolution=121), 48),
    "box-nodrift": (dict(wind_speed=6.0, flake_count=10000, drift_enabled=False, turbulence=0.0, seed=5), lambda: scenes.box_test(), 30),
    "valley-wrap-drift": (dict(wind_speed=12.0, flake_count=50000, seed=2, heightmap_resolution=128, wind_resolution=48), lambda: scenes.mountain_valley(resolution=129), 48),
}
out = {}
for name, (settings, mesh, steps) in CASES.items():
    sim = Simulation(SnowSettings(upwind_fetch="wrap", **settings), *mesh(), backend=sys.argv[2])
    sim.step(steps)
    for key, value in sim.state_dict().items():
        out[f"{name}/{key}"] = np.asarray(value)
np.savez(sys.argv[1], **out)
