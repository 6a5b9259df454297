"""GPU wind timing: copy bandwidth, per-kernel times and bandwidth fractions (the porous
fences' drag among them), whole wind step (default mgpcg, tolerance 1e-4, warm start), MG-PCG from zero vs 25 Jacobi sweeps.

Run from the repository root with the package importable as ``snowfall``:
    python3 benchmarks/wind_gpu.py [--pairs 3,2] [--baseline DIR] [--sizes 256x256x32,128x128x32]
        [--coarse-cells 0,4096] [--warp-cells 0,64] [--extrapolate 1,0] [--no-kernels]
        [--json out.json]
``--baseline DIR`` also times kernel modules loaded from DIR/gpu_wind.py and
DIR/gpu_pressure.py (copies of older kernels/gpu/{wind,pressure}.py) for before/after;
the pressure copy must have transfer_scale, restrict_scaled_residual and
prolong_scaled_add (run 6), which the current WindSolver calls.
Times are CUDA-event medians; a whole step includes its host reads of the CG scalars.
``--warp-cells`` is passed to coarse_vcycle (its ``warp_level_cells``, through a copy of
the pressure module's namespace); ``--coarse-cells`` is the solver option
``SolverOptions.coarse_vcycle_cells`` (0 for a baseline copy without coarse_vcycle).
"""
import argparse
import functools
import importlib.util
import json
import os
import types

import cupy as cp
import numpy as np

from gpu_timing import timed
import snowfall.kernels.gpu.common  # noqa: F401  (parent package of --baseline modules)
from snowfall.snow_addon.options import SolverOptions
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.grid import HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings
from snowfall.snow_addon.wind import WindSolver


def load_modules(directory):
    """(wind, pressure) kernel modules from older copies, importable as siblings of the
    current ones (their relative import of .common resolves)."""
    modules = []
    for name in ("gpu_wind", "gpu_pressure"):
        spec = importlib.util.spec_from_file_location(f"snowfall.kernels.gpu._baseline_{name}",
                                                      os.path.join(directory, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    # older pressure modules have no one-launch coarse V-cycle: the per-level path
    return modules


def with_warp_cells(pressure, warp_cells):
    """The pressure kernels ``pressure`` with coarse_vcycle's ``warp_level_cells`` set: a
    copy of the module's namespace (the module itself is left as it is)."""
    tuned = types.ModuleType(pressure.__name__)
    tuned.__dict__.update(vars(pressure))
    tuned.coarse_vcycle = functools.partial(pressure.coarse_vcycle, warp_level_cells=warp_cells)
    return tuned


def scene(nx, ny, nz, solver="mgpcg", tol=1e-4, modules=None, options=None, warp_cells=None):
    """Hills plus a tall box, wind 8 m/s at 25 degrees, 1 m cells; ``warp_cells``: the
    current kernels' coarse_vcycle with that warp_level_cells (None: its default)."""
    settings = SnowSettings(wind_speed=8.0, wind_direction=25.0, pressure_solver=solver,
                            pressure_tolerance=tol, pressure_max_iterations=100)
    grid = WindGrid(0.0, 0.0, 0.0, 1.0, nx, ny, nz)
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * nx + 1, 2 * ny + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = (0.25 * nz * (0.5 + 0.5 * np.sin(x / nx * 6.0) * np.cos(y / ny * 5.0)) + 1.5).astype(np.float32)
    height[(abs(x - 0.4 * nx) < 0.05 * nx) & (abs(y - 0.5 * ny) < 0.08 * ny)] = 0.6 * nz
    ws = WindSolver(settings, grid, select_backend("gpu"), options)
    if modules is not None:
        ws._wind, ws._pressure = modules
    elif warp_cells is not None:
        ws._pressure = with_warp_cells(ws._pressure, warp_cells)
    ws.update_obstacles(cp.asarray(height), cp.zeros(hm.shape, cp.float32), hm)
    return ws


def measure(shape, copy_bw, modules=None, kernels=True, options=None, warp_cells=None):
    nz, ny, nx = shape
    ws = scene(nx, ny, nz, modules=modules, options=options, warp_cells=warp_cells)
    cells = nx * ny * nz
    faces = nz * ny * (nx + 1) + nz * (ny + 1) * nx + (nz + 1) * ny * nx
    dt = 1.0 / 24.0
    step = [0]
    infos = []

    def one():
        infos.append(ws.step(step[0] * dt, dt))
        step[0] += 1
    for _ in range(20):
        one()
    t_step = timed(one, reps=60, warm=0)
    its = [i.iterations for i in infos[20:]]
    r = {"step_ms": t_step * 1e3, "iterations_median": float(np.median(its)),
         "iterations_max": int(max(its)), "div_after": infos[-1].divergence_after,
         "rel_res": infos[-1].relative_residual, "levels": len(ws.levels)}
    r["vcycle_ms"] = timed(lambda: ws._replay("vcycle", ws._vcycle), reps=20) * 1e3
    tolerance, limit = float(ws.settings.pressure_tolerance), int(ws.settings.pressure_max_iterations)
    r["cg_advance_ms"] = timed(lambda: ws._replay(("advance", tolerance, limit),
                                                  lambda: ws._cg_advance(tolerance, limit)),
                               reps=20) * 1e3
    r["cg_direction_ms"] = timed(lambda: ws._replay("direction", ws._cg_direction), reps=20) * 1e3
    kp = ws._pressure
    first = next((n for n, lv in enumerate(ws.levels)
                  if n > 0 and lv.shape[0] * lv.shape[1] * lv.shape[2]
                  <= ws.options.coarse_vcycle_cells), None)
    if first is not None:
        rest = ws.levels[first:]
        args = ([lv.solution for lv in rest], [lv.rhs for lv in rest], [lv.residual for lv in rest],
                [lv.coef for lv in rest], [lv.factors for lv in rest], ws.options.smoothing_pairs,
                2 * max(ws.levels[-1].shape) + 4)
        r["coarse_vcycle_ms"] = timed(lambda: kp.coarse_vcycle(*args), reps=20) * 1e3
        r["coarse_vcycle_levels"] = len(rest)
    if kernels:
        kw, kp = ws._wind, ws._pressure
        un, vn, wn = ws._next
        vx, vy = ws.inflow(0.0)
        t = timed(lambda: kw.advect_velocity(ws.u, ws.v, ws.w, ws.fractions, vx, vy, ws._last_sides, 1.0, dt,
                                             un, vn, wn, blocks=ws._open_blocks))
        r["advect_ms"], r["advect_frac"] = t * 1e3, (2 * faces * 4 + 2 * cells) / t / copy_bw
        if ws._advected is not None:
            t = timed(lambda: kw.correct_advection(ws.u, ws.v, ws.w, ws.fractions, vx, vy, ws._last_sides,
                                                   1.0, dt, un, vn, wn, *ws._advected,
                                                   blocks=ws._open_blocks))
            r["correct_ms"], r["correct_frac"] = t * 1e3, (3 * faces * 4 + 2 * cells) / t / copy_bw
        cx, cy, cz = ws.levels[0].coef
        t = timed(lambda: kw.project(ws.u, ws.v, ws.w, ws.pressure, cx, cy, cz, 0.0))
        r["project_ms"], r["project_frac"] = t * 1e3, (3 * faces * 4 + cells * 4) / t / copy_bw
        # porous fences' drag with a fence in every column up to 0.3 nz (its cost's upper
        # bound; a scene pays it only when it has fences), on copies of the wind
        fence = (cp.zeros((ny, nx), cp.float32), cp.full((ny, nx), 0.3 * nz, cp.float32),
                 cp.full((3, ny, nx), 2.0, cp.float32))           # drag along x, y and z
        winds = (ws.u.copy(), ws.v.copy(), ws.w.copy())
        t = timed(lambda: kw.porous_drag(*winds, ws.solid, *fence, 0.0, 1.0, dt))
        r["porous_drag_ms"], r["porous_drag_frac"] = t * 1e3, (2 * faces * 4 + cells) / t / copy_bw
        del winds
        t = timed(lambda: kw.divergence(ws.u, ws.v, ws.w, ws.fractions, 1.0, ws._divergence))
        r["divergence_ms"], r["divergence_frac"] = t * 1e3, (faces * 4 + cells * 5) / t / copy_bw
        p, q, b = ws._d, ws._q, ws._rhs
        sweep_bytes = 3 * cells * 4 + faces
        t = timed(lambda: kp.jacobi_sweep(p, b, cx, cy, cz, 0.8, q))
        r["jacobi_ms"], r["jacobi_frac"] = t * 1e3, sweep_bytes / t / copy_bw
        t = timed(lambda: (kp.redblack_sweep(p, b, cx, cy, cz, 1.0, 0),
                           kp.redblack_sweep(p, b, cx, cy, cz, 1.0, 1)))
        r["redblack_pair_ms"], r["redblack_pair_frac"] = t * 1e3, sweep_bytes / t / copy_bw
        t = timed(lambda: kp.residual(p, b, cx, cy, cz, q))
        r["residual_ms"] = t * 1e3
        saved = ws.pressure.copy()

        def cold():
            ws.pressure.fill(0)
            cold.out = ws._solve_mgpcg()
        r["mgpcg_cold_ms"] = timed(cold, reps=10, warm=2) * 1e3
        r["mgpcg_cold_iterations"] = cold.out[0]

        def jacobi25():
            for _ in range(13):
                kp.jacobi_sweep(p, b, cx, cy, cz, 0.8, q)
                kp.jacobi_sweep(q, b, cx, cy, cz, 0.8, p)
        r["jacobi25_ms"] = timed(jacobi25, reps=10) * 1e3 * 25 / 26
        ws.pressure[...] = saved
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=str(SolverOptions().smoothing_pairs))
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--sizes", default="256x256x32,128x128x32")
    parser.add_argument("--coarse-cells", default=None,
                        help="comma list of COARSE_VCYCLE_CELLS values to time (0: per-level launches)")
    parser.add_argument("--warp-cells", default=None,
                        help="comma list of coarse_vcycle warp_level_cells values to time "
                             "(0: no warp-only levels; default WARP_LEVEL_CELLS)")
    parser.add_argument("--no-kernels", action="store_true", help="skip the per-kernel timings")
    parser.add_argument("--extrapolate", default="1",
                        help="comma list of warm starts to time: 1 = 2 p_n - p_(n-1), 0 = p_n")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    src = cp.zeros(64 * 1024 * 1024, cp.float32)
    dst = cp.empty_like(src)
    t = timed(lambda: dst.__setitem__(Ellipsis, src))
    copy_bw = 2 * src.nbytes / t
    results["copy_GBps"] = copy_bw / 1e9
    print(results["device"], f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s", flush=True)
    del src, dst
    default_pairs = SolverOptions().smoothing_pairs
    variants = []
    if args.baseline:
        variants.append(("baseline", default_pairs, load_modules(args.baseline)))
    import snowfall.kernels.gpu.pressure as gpu_pressure
    default_cells = SolverOptions().coarse_vcycle_cells
    cells_list = ([int(c) for c in args.coarse_cells.split(",")] if args.coarse_cells
                  else [default_cells])
    default_warp = gpu_pressure.WARP_LEVEL_CELLS
    warp_list = ([int(c) for c in args.warp_cells.split(",")] if args.warp_cells
                 else [default_warp])
    for pairs in [int(p) for p in args.pairs.split(",")]:
        for cells in cells_list:
            for warp in warp_list:
                variants.append((f"current coarse_cells={cells} warp_cells={warp}", pairs,
                                 (cells, warp)))
    for size in args.sizes.split(","):
        nx, ny, nz = (int(n) for n in size.split("x"))
        for (name, pairs, modules), extrapolate in [(v, int(e)) for v in variants
                                                     for e in args.extrapolate.split(",")]:
            name = f"{name} extrapolate={extrapolate}"
            warp = None
            if isinstance(modules, tuple):
                (cells, warp), modules = modules, None
            else:   # older pressure modules have no one-launch coarse V-cycle: per level
                cells = getattr(modules[1], "COARSE_VCYCLE_CELLS", 0)
            options = SolverOptions(smoothing_pairs=pairs, extrapolate_pressure=bool(extrapolate),
                                    coarse_vcycle_cells=cells)
            key = f"{size} {name} pairs={pairs}"
            r = measure((nz, ny, nx), copy_bw, modules, kernels=not args.no_kernels, options=options,
                        warp_cells=warp)
            results[key] = r
            print(key, json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                   for k, v in r.items()}), flush=True)
            cp.get_default_memory_pool().free_all_blocks()
        ws5 = scene(nx, ny, nz, solver="sor5")
        s5 = [0]

        def one5():
            ws5.step(s5[0] / 24.0, 1 / 24.0)
            s5[0] += 1
        results[f"{size} sor5_step_ms"] = timed(one5, reps=30) * 1e3
        print(size, "sor5 step ms %.3f" % results[f"{size} sor5_step_ms"], flush=True)
        del ws5
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
