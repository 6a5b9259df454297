"""profile-2013 with each wind boundary, pressure tolerance and number of smoothing pairs,
alternating, on one device: steps/s over 240 steps after 30 (one call each), the CG
iterations of the timed solves, the last solve's divergence before and after it
(docs/benchmarks.md; docs/results/gpu-h100-cut-cells-tolerance.log, gpu-h100-pairs3.log).

    python benchmarks/wind_boundary_ab.py [--backend gpu] [--runs 2]
        [--cases voxels:1e-4 cut_cells:1e-4 cut_cells:3e-4 cut_cells:1e-3:2]

A case is BOUNDARY:TOLERANCE[:PAIRS]; PAIRS sets SolverOptions.smoothing_pairs for that case
(the engine's value otherwise).
"""
import argparse
import time

from snowfall.snow_addon import Simulation
from snowfall.snow_addon import wind as wind_module
from snowfall.snow_addon.options import SolverOptions
from snowfall.snow_addon.presets import PRESETS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="gpu", choices=("gpu", "cpu", "auto"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cases", nargs="+", metavar="BOUNDARY:TOLERANCE[:PAIRS]",
                        default=["voxels:1e-4", "cut_cells:1e-4", "cut_cells:3e-4",
                                 "cut_cells:1e-3"])
    args = parser.parse_args(argv)
    preset = PRESETS["profile-2013"]
    vertices, triangles = preset.terrain()
    default_pairs = SolverOptions().smoothing_pairs
    iterations = []
    solver_step = wind_module.WindSolver.step

    def counted_step(self, time, dt):
        info = solver_step(self, time, dt)
        iterations.append(info.iterations)
        return info

    wind_module.WindSolver.step = counted_step
    try:
        for run in range(args.runs):
            for case in args.cases:
                boundary, tolerance, *pairs = case.split(":")
                options = SolverOptions(smoothing_pairs=int(pairs[0]) if pairs else default_pairs)
                settings = preset.settings(wind_boundary=boundary,
                                           pressure_tolerance=float(tolerance))
                sim = Simulation(settings, vertices, triangles, backend=args.backend,
                                 options=options)
                sim.step(30)
                sim.backend.synchronize()
                iterations.clear()
                start = time.perf_counter()
                diagnostics = sim.step(240)
                sim.backend.synchronize()
                seconds = time.perf_counter() - start
                info = diagnostics.wind
                print(f"run {run} {boundary} tol {float(tolerance):g} pairs "
                      f"{options.smoothing_pairs}: {240 / seconds:.1f} steps/s; "
                      f"{len(iterations)} solves, {sum(iterations)} CG iterations; last solve "
                      f"{info.iterations} it, div before {info.divergence_before:.3g} "
                      f"after {info.divergence_after:.3g} 1/s", flush=True)
                del sim
    finally:
        wind_module.WindSolver.step = solver_step
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
