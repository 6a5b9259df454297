"""GPU flake and snow-cover timing: device-to-device copy bandwidth, the flake step at 2M and
100M flakes (768x768 heightmap) for several block sizes / occupancy hints, the sort and the
per-step cost with a sort every SORT_INTERVAL steps, and the cover step (deposit, which
also clears the next hit buffer, and redistribution) on 768x768 and 4096x4096.

Run from the repository root with the package importable as ``snowfall``:
    python3 benchmarks/flakes_gpu.py [--variants 256,128,128x10,128f,128p,128g,128w] [--counts 2097152,100000000]
        [--baseline DIR] [--flakes-baseline FILE] [--json out.json]
A variant is BLOCK or BLOCKxMIN_BLOCKS_PER_SM (``__launch_bounds__`` of step_flakes),
optionally followed by one measurement-only change of step_flakes: ``f`` float ``sincosf``
instead of the double ``sincos`` (last bits differ from the CPU), ``p`` the float32
polynomial of ``_POLYNOMIAL_SINCOS`` (the same operations could run on every backend),
and an ablation whose results are wrong, to see what the wind's gathers cost: ``w`` no wind
sample (still air everywhere). (The ground sample's ablation, ``g``, went when step_flakes
began to take the nearest node's height from the ground sample's corners: without the
sample there is no height at all.)
``--baseline DIR`` also times DIR/gpu_cover.py (a copy of the older kernels/gpu/cover.py:
deposit_hits without the next buffer, hit_counts.fill(0), redistribution_fluxes +
apply_fluxes) for before/after. ``--flakes-baseline FILE`` also times FILE (a copy of an
older kernels/gpu/flakes.py with the same kernel arguments) on the same scenes, before and
after the variants. Times are CUDA-event medians.
Fractions of copy: bytes the kernel must move (flakes: 60 per flake, flake_id and 7 floats
read, 7 floats written; cover: listed below) over time, divided by the copy's bytes/s.
"""
import argparse
import importlib.util
import json
import os
from types import SimpleNamespace

import cupy as cp
import numpy as np

from gpu_timing import timed as _timed
import snowfall.kernels.gpu.common  # noqa: F401  (parent package of --baseline modules)
from snowfall.kernels.gpu import flakes as gpu_flakes
from snowfall.snow_addon.backend import select_backend
from snowfall.benchmarks.harness import copy_bandwidth as cli_copy_bandwidth
from snowfall.snow_addon.cover import SnowCover
from snowfall.snow_addon.flakes import FlakeSystem
from snowfall.snow_addon.grid import HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings

FLAKE_BYTES = 60
DEFAULT_BLOCK, DEFAULT_MIN_BLOCKS = gpu_flakes.BLOCK, gpu_flakes.MIN_BLOCKS_PER_SM
DEPOSIT_BYTES = 4 + 4 + 1 + 4 + 4 + 4      # hits, scale, mask, depth read; depth, next hits written
REDISTRIBUTE_BYTES = 4 + 4 + 1 + 4         # height, depth, mask read; spare depth written
OLD_FLUX_BYTES = 4 + 4 + 1 + 8 + 8 + 4 + 4  # fluxes: h, s, mask read, 2 fluxes written; apply: 2 fluxes read, depth rw


def timed(fn, reps=20, warm=3):
    """Median seconds of fn() (CUDA events; benchmarks/gpu_timing.py)."""
    return _timed(fn, reps, warm)


def copy_bandwidth(nbytes):
    """(bytes/s read + written, seconds) of a device-to-device copy of ``nbytes``: the
    command line's measurement (benchmarks.harness.copy_bandwidth), one home for it."""
    bandwidth = cli_copy_bandwidth(select_backend("gpu"), nbytes=nbytes, repeats=20)
    return bandwidth, 2 * nbytes / bandwidth


def scene(count, nx, ny, nz, backend, nodes=768):
    h = 1.0
    hm = HeightmapGrid(0.0, 0.0, nx * h / (nodes - 1), nodes, nodes)
    grid = WindGrid(0.0, 0.0, 0.0, h, nx, ny, nz)
    rng = np.random.default_rng(0)
    X, Y = np.meshgrid(np.arange(nodes) * hm.spacing, np.arange(nodes) * hm.spacing)
    height = (2.0 + 1.5 * np.sin(X / 20) * np.cos(Y / 27)).astype(np.float32)
    heightmap = SimpleNamespace(grid=hm, height=height, has_surface=np.ones(height.shape, bool))
    wind = SimpleNamespace(u=cp.asarray((3.0 + rng.normal(0, 0.5, (nz, ny, nx + 1))).astype(np.float32)),
                           v=cp.asarray(rng.normal(0, 0.5, (nz, ny + 1, nx)).astype(np.float32)),
                           w=cp.asarray(rng.normal(0, 0.2, (nz + 1, ny, nx)).astype(np.float32)))
    settings = SnowSettings(flake_count=count, seed=1, angle_of_repose=30.0,
                            redistribution_fraction=0.2, redistribution_min_depth=0.001)
    return settings, heightmap, grid, wind


_DOUBLE_SINCOS = "double s, c;\n    sincos((double)th, &s, &c);"
_FLOAT_SINCOS = "float s, c;\n    sincosf(th, &s, &c);"
# th in [0, 2 pi): quadrant reduction, then Cephes' sinf/cosf polynomials on [-pi/4, pi/4]
_POLYNOMIAL_SINCOS = """float s, c;
    {
        int q = (int)floorf(th * 0.636619772f + 0.5f);
        float r = (th - (float)q * 1.57079637f) - (float)q * -4.37113883e-8f;
        float r2 = r * r;
        float sr = r + r * r2 * (-1.66666546e-1f + r2 * (8.33216087e-3f + r2 * -1.95152959e-4f));
        float cr = (1.0f - 0.5f * r2) + r2 * r2 * (4.16666456e-2f + r2 * (-1.38873163e-3f + r2 * 2.44331571e-5f));
        switch (q & 3) {
            case 0: s = sr; c = cr; break;
            case 1: s = cr; c = -sr; break;
            case 2: s = -sr; c = -cr; break;
            default: s = -cr; c = sr; break;
        }
    }"""


_WIND_SAMPLE = "float3 wind = sample_wind(u, v, w, nx, ny, nz, wx0, wy0, wz0, h, x, y, z);"
_CHANGES = {"f": (_DOUBLE_SINCOS, _FLOAT_SINCOS), "p": (_DOUBLE_SINCOS, _POLYNOMIAL_SINCOS),
            "w": (_WIND_SAMPLE, "float3 wind = make_float3(0.0f, 0.0f, 0.0f);")}


def set_variant(block, min_blocks, change=""):
    gpu_flakes.BLOCK = block
    source = gpu_flakes.kernel_source(block, min_blocks)
    if change:
        old, new = _CHANGES[change]
        step = source.index("step_flakes(")
        assert old in source[step:], f"step_flakes no longer contains {old!r}"
        source = source[:step] + source[step:].replace(old, new, 1)
    gpu_flakes.SOURCE = source


def load_flakes_baseline(path):
    spec = importlib.util.spec_from_file_location("snowfall.kernels.gpu._baseline_gpu_flakes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BaselineFlakeKernels:
    """The current flake kernels with step_flakes (same arguments) of an older build."""

    def __init__(self, module):
        self.step_flakes = module.step_flakes

    def __getattr__(self, name):
        return getattr(gpu_flakes, name)


def time_flakes(count, dims, backend, variants, copy_bw, flakes_baseline=None):
    settings, heightmap, grid, wind = scene(count, *dims, backend)
    cover = SnowCover(settings, heightmap, grid, backend)
    flakes = FlakeSystem(settings, grid, heightmap.grid, backend)
    dt = np.float32(1 / 24)
    out = {}
    current_kernels = flakes.kernels
    runs = list(variants)
    if flakes_baseline is not None:
        runs = [("before",)] + runs + [("before (again)",)]
    for variant in runs:
        if variant[0] in ("before", "before (again)"):
            flakes.kernels = BaselineFlakeKernels(flakes_baseline)
            label = variant[0]
        else:
            block, min_blocks, change = variant
            flakes.kernels = current_kernels
            set_variant(block, min_blocks, change)
            label = f"block{block}" + (f"x{min_blocks}" if min_blocks else "") + change
        flakes.initialize(wind, cover.height, cover.snow_depth)
        interval = gpu_flakes.SORT_INTERVAL

        def step():
            flakes.step(wind, cover.height, cover.snow_depth, cover.hit_counts, 0.0, dt)

        flakes.sort_interval = 0
        for _ in range(3):
            step()
        r = {"unsorted_step_ms": timed(step, 5, 1) * 1e3}
        r["sort_ms"] = timed(flakes.sort_by_cell, 5, 1) * 1e3
        flakes.sort_by_cell()
        steps = [timed(step, 1, 0) for _ in range(interval)]
        r["sorted_first_step_ms"] = steps[0] * 1e3
        r["sorted_median_step_ms"] = float(np.median(steps)) * 1e3
        flakes.sort_interval, flakes.steps_since_sort = interval, interval
        r[f"per_step_incl_sort{interval}_ms"] = timed(lambda: [step() for _ in range(interval)], 3, 1) / interval * 1e3
        for key in ("unsorted_step_ms", "sorted_first_step_ms", "sorted_median_step_ms",
                    f"per_step_incl_sort{interval}_ms"):
            r[key.replace("_ms", "_frac_copy")] = count * FLAKE_BYTES / (r[key] * 1e-3) / copy_bw
        print(f"  {label}: " + ", ".join(f"{k} {v:.4g}" for k, v in r.items()), flush=True)
        out[label] = r
    cover.hit_counts[...] = 0
    del flakes, cover, wind
    cp.get_default_memory_pool().free_all_blocks()
    return out


def time_cover(nodes, backend, copy_bw, baseline):
    settings, heightmap, grid, wind = scene(1000, 256, 256, 32, backend, nodes)
    cover = SnowCover(settings, heightmap, grid, backend)
    rng = np.random.default_rng(1)
    hits = cp.asarray(rng.integers(0, 3, heightmap.grid.shape).astype(np.int32))
    cover.snow_depth[...] = cp.asarray(rng.uniform(0, 0.5, heightmap.grid.shape).astype(np.float32))
    dt = np.float32(1 / 24)

    def full_step():
        cover.hit_counts[...] = hits
        cover.step(dt)

    n = nodes * nodes
    k = cover.kernels
    r = {"refill_hits_ms": timed(lambda: cover.hit_counts.__setitem__(Ellipsis, hits)) * 1e3}
    r["step_ms"] = timed(full_step) * 1e3 - r["refill_hits_ms"]
    r["deposit_ms"] = timed(lambda: k.deposit_hits(hits, cover.deposit_scale, cover.has_surface,
                                                   cover.snow_depth, cover.hit_total,
                                                   cover.spare_hit_counts)) * 1e3
    r["fill_ms_old_extra_launch"] = timed(lambda: cover.hit_counts.fill(0)) * 1e3
    r["redistribute_ms"] = timed(cover.redistribute) * 1e3
    r["deposit_frac_copy"] = n * DEPOSIT_BYTES / (r["deposit_ms"] * 1e-3) / copy_bw
    r["redistribute_frac_copy"] = n * REDISTRIBUTE_BYTES / (r["redistribute_ms"] * 1e-3) / copy_bw
    r["step_frac_copy"] = (n * (DEPOSIT_BYTES + REDISTRIBUTE_BYTES)
                           / (r["step_ms"] * 1e-3) / copy_bw)
    _bw, small_copy = copy_bandwidth(n * 4)
    r["copy_of_one_depth_array_ms"] = small_copy * 1e3
    if baseline is not None:
        fx = cp.zeros((nodes, nodes - 1), cp.float32)
        fy = cp.zeros((nodes - 1, nodes), cp.float32)
        s = settings

        def old_redistribute():
            baseline.redistribution_fluxes(cover.height, cover.has_surface, cover.snow_depth,
                                           cover.threshold, np.float32(s.redistribution_min_depth),
                                           np.float32(s.redistribution_fraction), fx, fy)
            baseline.apply_fluxes(fx, fy, cover.snow_depth)

        def old_step():
            cover.hit_counts[...] = hits
            baseline.deposit_hits(cover.hit_counts, cover.deposit_scale, cover.has_surface,
                                  cover.snow_depth, cover.hit_total)
            cover.hit_counts.fill(0)
            old_redistribute()

        r["baseline_step_ms"] = timed(old_step) * 1e3 - r["refill_hits_ms"]
        r["baseline_redistribute_ms"] = timed(old_redistribute) * 1e3
        r["baseline_deposit_ms"] = timed(lambda: baseline.deposit_hits(
            hits, cover.deposit_scale, cover.has_surface, cover.snow_depth, cover.hit_total)) * 1e3
        r["baseline_deposit_frac_copy"] = n * (DEPOSIT_BYTES - 4) / (r["baseline_deposit_ms"] * 1e-3) / copy_bw
        r["baseline_step_frac_copy"] = (n * (DEPOSIT_BYTES + OLD_FLUX_BYTES) / (r["baseline_step_ms"] * 1e-3)
                                        / copy_bw)
        r["baseline_redistribute_frac_copy"] = (n * OLD_FLUX_BYTES / (r["baseline_redistribute_ms"] * 1e-3)
                                                / copy_bw)
    print(f"  cover {nodes}x{nodes}: " + ", ".join(f"{k} {v:.4g}" for k, v in r.items()), flush=True)
    del cover
    cp.get_default_memory_pool().free_all_blocks()
    return r


def load_baseline(directory):
    spec = importlib.util.spec_from_file_location("snowfall.kernels.gpu._baseline_gpu_cover",
                                                  os.path.join(directory, "gpu_cover.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default=f"{gpu_flakes.BLOCK}"
                        + (f"x{gpu_flakes.MIN_BLOCKS_PER_SM}" if gpu_flakes.MIN_BLOCKS_PER_SM else ""))
    parser.add_argument("--counts", default="2097152,100000000")
    parser.add_argument("--cover-nodes", default="768,4096")
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--flakes-baseline", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    backend = select_backend("gpu")
    print(backend.describe(), flush=True)
    print("device:", cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    copy_bw, _t = copy_bandwidth(1 << 30)
    print(f"device-to-device copy (1 GiB): {copy_bw / 1e9:.0f} GB/s read+write", flush=True)
    results = {"copy_GBps": copy_bw / 1e9}
    variants = []
    for item in args.variants.split(","):
        change = item[-1] if item[-1] in _CHANGES else ""
        block, _, min_blocks = item.rstrip("".join(_CHANGES)).partition("x")
        variants.append((int(block), int(min_blocks or 0), change))
    flakes_baseline = load_flakes_baseline(args.flakes_baseline) if args.flakes_baseline else None
    dims = {2_097_152: (256, 256, 32)}
    for count in (int(c) for c in args.counts.split(",")):
        nx, ny, nz = dims.get(count, (512, 512, 64))
        print(f"flakes {count:,}, wind {nx}x{ny}x{nz}, heightmap 768x768", flush=True)
        results[f"flakes_{count}"] = time_flakes(count, (nx, ny, nz), backend, variants, copy_bw,
                                                 flakes_baseline)
    set_variant(DEFAULT_BLOCK, DEFAULT_MIN_BLOCKS)
    baseline = load_baseline(args.baseline) if args.baseline else None
    for nodes in (int(n) for n in args.cover_nodes.split(",") if n):
        results[f"cover_{nodes}"] = time_cover(nodes, backend, copy_bw, baseline)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
