"""Where the obstacle refresh's time goes on the GPU (big-100M by default): each part of
WindSolver.update_obstacles and SnowDrift.update_shelter timed with a synchronise around
it, over the refreshes of a run of steps."""
import collections, sys, time
import cupy as cp
from snowfall.snow_addon import presets
from snowfall.snow_addon.simulation import Simulation

preset = presets.get_preset(sys.argv[1] if len(sys.argv) > 1 else "big-100M")
vertices, triangles = preset.terrain()
sim = Simulation(preset.settings(), vertices, triangles, backend="gpu")
sim.step(20)
cp.cuda.Device().synchronize()
times = collections.defaultdict(list)
results = []

def wrap(owner, name, label=None, keep=False):
    original = getattr(owner, name)
    def timed(*a, **k):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        r = original(*a, **k)
        cp.cuda.Device().synchronize()
        times[label or name].append(time.perf_counter() - t)
        if keep:
            results.append(r)
        return r
    setattr(owner, name, timed)

w = sim.wind
wrap(w, "update_obstacles")
wrap(w, "project_obstacles", keep=True)
wrap(w, "_ensure_coefficients")
for kname in ("solid_from_heightmap", "block_tops", "face_fractions", "open_blocks"):
    wrap(w._wind, kname)
if sim.drift is not None:
    wrap(sim.drift, "update_shelter")
    wrap(sim.drift.kernels, "column_surface")
steps = 60
cp.cuda.Device().synchronize()
t = time.perf_counter()
sim.step(steps)
cp.cuda.Device().synchronize()
wall = time.perf_counter() - t
print(f"{preset.name}: {steps} steps in {wall:.3f} s with synchronised parts; obstacle_refresh_steps "
      f"{sim.settings.obstacle_refresh_steps}")
for name, values in sorted(times.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:24s} calls {len(values):3d}  total {1e3*sum(values):8.2f} ms  mean {1e3*sum(values)/len(values):7.3f} ms")
print("project_obstacles results (iterations, residual, converged):", results)
