"""Steps/s of profile-2013 on the GPU: median of 5 timed runs of 1000 steps after 300."""
import statistics
import time
from types import SimpleNamespace

import cupy

from snowfall.snow_addon.presets import build_simulation, get_preset

sim = build_simulation(get_preset("profile-2013"), SimpleNamespace(backend="gpu"), False)
for _ in range(300):
    sim.step()
cupy.cuda.get_current_stream().synchronize()
rates = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(1000):
        sim.step()
    cupy.cuda.get_current_stream().synchronize()
    rates.append(1000 / (time.perf_counter() - t))
print(f"median {statistics.median(rates):.1f} steps/s, runs " + " ".join(f"{r:.0f}" for r in rates))
