"""Digest of a few short bakes' states on the given backends (bit-for-bit checks between trees).
Usage: PYTHONPATH=<dir holding snowfall> python digest.py numpy cpu [gpu]"""
import hashlib
import json
import sys

import numpy as np

from snowfall.snow_addon import Simulation, SnowSettings, scenes

CASES = {
    "fence-open-drift": (dict(wind_speed=10.0, flake_count=20000, upwind_fetch="open_snowfield",
                              seed=3, snowfall_rate=20.0), lambda: scenes.snow_fence(resolution=121), 48),
    "fence-wrap-drift": (dict(wind_speed=12.0, flake_count=20000, seed=4), lambda: scenes.snow_fence(resolution=121), 48),
    "box-nodrift": (dict(wind_speed=6.0, flake_count=10000, drift_enabled=False, turbulence=0.0,
                         seed=5), lambda: scenes.box_test(), 30),
}


def digest(state):
    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if isinstance(value, dict):
            h.update(key.encode()); h.update(digest(value).encode())
        else:
            a = np.ascontiguousarray(np.asarray(value))
            h.update(key.encode()); h.update(a.tobytes())
    return h.hexdigest()


out = {}
for backend in sys.argv[1:]:
    for name, (settings, mesh, steps) in CASES.items():
        vertices, triangles = mesh()
        sim = Simulation(SnowSettings(**settings), vertices, triangles, backend=backend)
        for _ in range(steps):
            sim.step()
        out[f"{backend}:{name}"] = digest(sim.state_dict())
        print(backend, name, out[f"{backend}:{name}"][:16], flush=True)
print(json.dumps(out))
