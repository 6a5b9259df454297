"""The 0.25 m strip of slowdown_under_snow.py in variants: along-wind profiles of the snow
depth and surface wind at 37.5, 45, 52.5 and 60 s.
python collapse_variants.py BACKEND [VARIANT,VARIANT,...] with the snowfall package on
PYTHONPATH; the variants that set environment variables (WIND_SNOW, SHELTER_SNOW, NO_LIFT,
NO_TRANSPORT, EXPOSURE) need collapse_variants_wind.patch and collapse_variants_drift.patch
applied to that package (git apply), EXPOSURE=a:r:b also collapse_variants_exposure_hack.py
run in its root, "spread" runs needed collapse_variants_spread_patch.py run there; none of
them is part of the add-on. "chunks=N" prints N lines of 7.5 s after the first 30 s."""
import sys, time
import numpy as np
def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)
from snowfall.snow_addon import SnowSettings, Simulation, scenes
cell = 0.25; speed = 12.0
def run(name, cells_x=80, chunks=4, **extra):
    v, t = scenes.snow_fence(size_x=cells_x*cell, size_y=40*cell, fence_height=1e-4, fence_length=cell, thickness=cell, fence_x=0.0, resolution=2*cells_x+1)
    kw = dict(heightmap_resolution=2*cells_x+1, wind_cell_size=cell, sky_height=12*cell, side_walls=True, wind_speed=speed, gust_strength=0.0,
              gust_direction_jitter=0.0, flake_count=20000, snowfall_rate=6.0, seed=1)
    kw.update(extra)
    sim = Simulation(SnowSettings(**kw), v, t, backend=sys.argv[1] if len(sys.argv) > 1 else "gpu")
    t0 = time.time()
    sim.step(720)
    for k in range(chunks):
        d = sim.step(180)
        sw = np.hypot(host(sim.drift.wind_x), host(sim.drift.wind_y)) if sim.drift is not None else np.zeros((1, 1))
        depth = host(sim.snow_depth())
        solid = host(sim.wind.solid)
        n = depth.shape[1]
        bins = np.array_split(np.arange(n), 10)
        dprof = [round(float(depth[:, b].mean()) * 100, 1) for b in bins]
        wbins = np.array_split(np.arange(sw.shape[1]), 10)
        wprof = [round(float(sw[:, b].mean()), 1) for b in wbins]
        print(f"{name:14s} t {sim.time:5.1f}s depth {depth.mean()*100:5.1f} cm p95 {np.percentile(depth,95)*100:5.1f} | depth by tenth {dprof} | surface wind by tenth {wprof} | lvl1 solid {solid[1].mean():.3f} | susp {d.suspended_volume:.2f} | {time.time()-t0:.0f}s", flush=True)
variants = sys.argv[2].split(",") if len(sys.argv) > 2 else ["base", "long", "voxels", "nowalls", "wrap", "bare", "nosusp", "calm8"]
for name in variants:
    if name == "base": run(name)
    if name == "long": run(name, cells_x=160)
    if name == "voxels": run(name, wind_boundary="voxels")
    if name == "nowalls": run(name, side_walls=False)
    if name == "wrap": run(name, upwind_fetch="wrap")
    if name == "bare": run(name, upwind_fetch="bare_ground")
    if name == "nosusp": run(name, turbulence=0.0)
    if name == "calm8": run(name, wind_speed=8.0)
    if "|" in name:
        # "WIND_SNOW|SHELTER_SNOW|key=val;key=val"
        import os
        ws, ss, kws = name.split("|")
        os.environ["WIND_SNOW"], os.environ["SHELTER_SNOW"] = ws, ss
        extra = {}
        from snowfall.snow_addon import suspension
        suspension.MAX_GRAIN_WEIGHT_EXPONENT = 7
        for item in filter(None, kws.split(";")):
            key, val = item.split("=")
            if key in ("NO_LIFT", "NO_TRANSPORT", "EXPOSURE"):
                os.environ[key] = val
                continue
            if key == "max_exponent":
                suspension.MAX_GRAIN_WEIGHT_EXPONENT = int(val)
                continue
            extra[key] = val if key in ("upwind_fetch", "wind_boundary") else float(val)
            if key in ("flake_count", "chunks"): extra[key] = int(float(val))
        run(name, **extra)
        os.environ["WIND_SNOW"] = os.environ["SHELTER_SNOW"] = os.environ["NO_LIFT"] = os.environ["NO_TRANSPORT"] = os.environ["EXPOSURE"] = ""
        continue
    if name.startswith("shelter:"):
        import os
        os.environ["SHELTER_SNOW"] = "zero"
        os.environ["WIND_SNOW"] = name[8:]
        run(name)
        os.environ["WIND_SNOW"] = os.environ["SHELTER_SNOW"] = ""
    if name.startswith("env:"):
        import os
        os.environ["WIND_SNOW"] = name[4:]
        run(name)
        os.environ["WIND_SNOW"] = ""
