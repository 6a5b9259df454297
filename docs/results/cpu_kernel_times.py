"""python cpu_kernel_times.py PKGPARENT [PRESET]: per-kernel CPU wall times (ms per step) on a preset (cpu-small), 20 steps after 5 warm-up steps, every callable of the CPU kernel modules wrapped with a timer."""
import sys, time, types, collections
sys.path.insert(0, sys.argv[1])
from snowfall.snow_addon import backend as be, presets
times = collections.defaultdict(float); calls = collections.Counter()
orig = be.build_module
wrapped = {}
def build_module(name, stage):
    mod = orig(name, stage)
    if name != "cpu":
        return mod
    if id(mod) in wrapped:
        return wrapped[id(mod)]
    ns = types.SimpleNamespace()
    for attr in dir(mod):
        f = getattr(mod, attr)
        if callable(f) and not attr.startswith("__") and not isinstance(f, type):
            def w(*a, _f=f, _n=f"{stage}.{attr}", **k):
                t = time.perf_counter(); r = _f(*a, **k); times[_n] += time.perf_counter() - t; calls[_n] += 1; return r
            setattr(ns, attr, w)
        else:
            setattr(ns, attr, f)
    wrapped[id(mod)] = ns
    return ns
be.build_module = build_module
sim = presets.build_simulation(presets.get_preset(sys.argv[2] if len(sys.argv) > 2 else "cpu-small"), types.SimpleNamespace(backend="cpu"), profile=False)
sim.step(5)
times.clear(); calls.clear()
n = 20
t = time.perf_counter(); sim.step(n); total = time.perf_counter() - t
print(f"total {total/n*1e3:.2f} ms/step")
for k, v in sorted(times.items(), key=lambda kv: -kv[1])[:25]:
    print(f"{k:45s} {v/n*1e3:7.2f} ms  {calls[k]/n:5.1f} calls")
