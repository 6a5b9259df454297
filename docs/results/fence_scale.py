"""The sweep's solid fence at H = 1 m against H = 2 m: does the 1 m fence's scoured lee come
from its finer wind cells (H/4 = 0.25 m), from the snowfall burying it (60 m/h for 60 s is 1 m
of snow), or from the wind seeing the snow? python fence_scale.py BACKEND [CASES] with the
snowfall package on PYTHONPATH; the "blind" case and NO_TRANSPORT=1 need
collapse_variants_wind.patch and collapse_variants_drift.patch applied to it (git apply);
SPEEDS=8,12 picks the wind speeds, FETCH=wrap (or bare_ground) the upwind fetch. Not part
of the add-on (gpu-h100-fence-scale.log)."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import drift_validation as dv
backend = sys.argv[1] if len(sys.argv) > 1 else "gpu"
keys = dv.SWEEP_FIGURES["fence"]
cases = {
    "H1 cells0.25 60mh": (1.0, {}, False),
    "H1 cells0.25 15mh": (1.0, {"snowfall_rate": 15.0}, False),
    "H1 cells0.5 60mh": (1.0, {"wind_cell_size": 0.5}, False),
    "H1 cells0.25 60mh blind": (1.0, {}, True),
    "H2 cells0.5 60mh": (2.0, {}, False),
    "H2 cells0.5 15mh": (2.0, {"snowfall_rate": 15.0}, False),
    "H1 cells0.25 60mh at20H": (1.0, {}, False),
}
chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else list(cases)
for name in chosen:
    H, extra, blind = cases[name]
    os.environ["WIND_SNOW"] = os.environ["SHELTER_SNOW"] = "zero" if blind else ""
    scene = dv.fence_scene(H, 20.0 if name.endswith("at20H") else 10.0)
    speeds = [float(v) for v in os.environ.get("SPEEDS", "8,12,16").split(",")]
    if name.endswith("at20H"):
        speeds = [8.0]
    for speed in speeds:
        t0 = time.time()
        values = dict(extra, seed=1, wind_speed=speed)
        if os.environ.get("FETCH"):
            values["upwind_fetch"] = os.environ["FETCH"]
        result = dv.run_scene(scene, backend, None, None, values)
        d = result["derived"]
        print(f"FENCE {name} | {speed:g} m/s | " + ", ".join(
            f"{k} {d.get(k):.3g}" if isinstance(d.get(k), float) else f"{k} {d.get(k)}" for k in keys)
            + f" | {time.time() - t0:.0f} s", flush=True)
