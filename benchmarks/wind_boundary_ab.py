"""profile-2013 with each wind boundary and pressure tolerance, alternating, on one device:
steps/s over 240 steps after 30, the last solve's CG iterations and the divergence before
and after it (docs/benchmarks.md, docs/results/gpu-h100-cut-cells-tolerance.log).

    python benchmarks/wind_boundary_ab.py [--backend gpu] [--runs 2]
        [--cases voxels:1e-4 cut_cells:1e-4 cut_cells:3e-4 cut_cells:1e-3]
"""
import argparse
import time

from snowfall.snow_addon import Simulation
from snowfall.snow_addon.presets import PRESETS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="gpu", choices=("gpu", "cpu", "auto"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cases", nargs="+", metavar="BOUNDARY:TOLERANCE",
                        default=["voxels:1e-4", "cut_cells:1e-4", "cut_cells:3e-4",
                                 "cut_cells:1e-3"])
    args = parser.parse_args(argv)
    preset = PRESETS["profile-2013"]
    vertices, triangles = preset.terrain()
    for run in range(args.runs):
        for case in args.cases:
            boundary, tolerance = case.split(":")
            settings = preset.settings(wind_boundary=boundary,
                                       pressure_tolerance=float(tolerance))
            sim = Simulation(settings, vertices, triangles, backend=args.backend)
            sim.step(30)
            sim.backend.synchronize()
            start = time.perf_counter()
            diagnostics = sim.step(240)
            sim.backend.synchronize()
            seconds = time.perf_counter() - start
            info = diagnostics.wind
            print(f"run {run} {boundary} tol {float(tolerance):g}: {240 / seconds:.1f} steps/s; "
                  f"last solve {info.iterations} it, div before {info.divergence_before:.3g} "
                  f"after {info.divergence_after:.3g} 1/s", flush=True)
            del sim
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
