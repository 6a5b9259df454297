"""The thread governor over a long run (snow_addon/threads.py): cpu-small, 600 steps after 10,
with the snowfall package on PYTHONPATH; SNOWFALL_ADAPTIVE_THREADS=0 for the fixed count.
python cpu_thread_governor_long_run.py LABEL (cpu-thread-governor-long-run-20261207.log)."""
import sys, time, types
from snowfall.snow_addon import presets
sim = presets.build_simulation(presets.get_preset("cpu-small"), types.SimpleNamespace(backend="cpu"), profile=False)
sim.step(10)
t = time.perf_counter(); sim.step(600); s = time.perf_counter() - t
print(f"{sys.argv[1]}: {600 / s:.2f} steps/s over 600 steps", sim.thread_governor.report() if sim.thread_governor else "(no governor)", flush=True)
