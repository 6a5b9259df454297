"""A/B of the CUDA flake step on the big-100M scene in one process (issue 39 item 1).

    python3 docs/results/flakes_ab_big100m.py OLD_FLAKES_PY [--variants 128,256,128x10,128nc,128-eddy]

OLD_FLAKES_PY: a copy of an older kernels/gpu/flakes.py. Builds big-100M once, warms up,
then (1) checks bit for bit that one flake step of the current kernels equals the old
one's from the same state (positions, velocities, phase, respawn counts, hit counts, grain
count), at several steps, with compact indexing and without; (2) alternates old and current (and launch variants of the
current) over whole simulation steps: steps/s without per-stage synchronisation, and the
flakes stage with it (Simulation.timer, as `snowfall benchmark` profiles), 64 steps each,
so every figure includes two of the sorts every SORT_INTERVAL steps.

A variant is BLOCK or BLOCKxMIN_BLOCKS_PER_SM of the current kernel, optionally followed by
``nc`` (no compact indexing: kernels.gpu.flakes.COMPACT_INDEXING False) or by ablations whose
results differ (to see what a feature costs): ``-eddy`` (eddy_scale 0), ``-shelter`` (no
bubble top), ``-eddy-shelter`` (both).
"""
import argparse
import importlib.util
import statistics
import sys
import time
from types import SimpleNamespace

import cupy as cp
import numpy as np

from snowfall.kernels.gpu import flakes as new
from snowfall.snow_addon import stages
from snowfall.snow_addon.flakes import STATE_NAMES
from snowfall.snow_addon.presets import build_simulation, get_preset
from snowfall.benchmarks.harness import copy_bandwidth, KERNEL_BYTES, SceneSize


def load_old(path):
    spec = importlib.util.spec_from_file_location("snowfall.kernels.gpu._old_flakes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def attributes(module, name):
    kernel = module._kernel(module.SOURCE, name)
    return {k: kernel.attributes[k] for k in ("num_regs", "local_size_bytes", "max_threads_per_block")}


def flake_step(sim):
    lift = sim.drift.lift_arguments(sim.step_index)
    lift["grain_count"] = sim.cover.grain_count
    sim.flakes.step(sim.wind, sim.cover.height, sim.cover.snow_depth, sim.cover.hit_counts,
                    sim.time, sim.settings.time_step, lift)


def snapshot(sim):
    f = sim.flakes
    return ({n: getattr(f, n).copy() for n in STATE_NAMES + ("flake_id",)},
            sim.cover.hit_counts.copy(), sim.cover.grain_count.copy())


def restore(sim, snap):
    state, hits, grains = snap
    for n, a in state.items():
        getattr(sim.flakes, n)[...] = a
    sim.cover.hit_counts[...] = hits
    sim.cover.grain_count[...] = grains


def same_bits(a, b):
    return bool((a.view(cp.uint32) == b.view(cp.uint32)).all()) if a.dtype.itemsize == 4 \
        else bool((a == b).all())


def check_bits(sim, old, label):
    f = sim.flakes
    f.steps_since_sort = 0  # no sort inside the compared step
    snap = snapshot(sim)
    f.kernels = old
    flake_step(sim)
    after_old = snapshot(sim)
    restore(sim, snap)
    f.steps_since_sort = 0
    f.kernels = new
    flake_step(sim)
    after_new = snapshot(sim)
    bad = [n for n in after_old[0] if not same_bits(after_old[0][n], after_new[0][n])]
    if not same_bits(after_old[1], after_new[1]):
        bad.append("hit_counts")
    if not same_bits(after_old[2], after_new[2]):
        bad.append("grain_count")
    hits = int(after_new[1].sum() - snap[1].sum())
    print(f"bits {label}: {'IDENTICAL' if not bad else 'DIFFER in ' + ', '.join(bad)} "
          f"(step {sim.step_index}, {hits} hits in the step)", flush=True)
    restore(sim, snap)
    return not bad


class Ablated:
    """The current kernels with some step_flakes arguments overridden (an ablation)."""

    def __init__(self, **overrides):
        self.overrides = overrides

    def step_flakes(self, *args, **kwargs):
        return new.step_flakes(*args, **{**kwargs, **self.overrides})

    def __getattr__(self, name):
        return getattr(new, name)


def measure(sim, module, steps, copy_bw, size):
    sim.flakes.kernels = module
    sim.step(8)
    cp.cuda.Device().synchronize()
    begin = time.perf_counter()
    sim.step(steps)
    cp.cuda.Device().synchronize()
    steps_per_s = steps / (time.perf_counter() - begin)
    timer = sim.timer
    timer.seconds.clear()
    timer.enabled = True
    sim.step(steps)
    timer.enabled = False
    flakes_ms = timer.seconds[stages.FLAKES] / steps * 1e3
    fraction = KERNEL_BYTES["flake update"](size) / (flakes_ms * 1e-3) / copy_bw
    return steps_per_s, flakes_ms, fraction


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("--variants", default="128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--sort-intervals", default="32")
    args = parser.parse_args()
    old = load_old(args.old)
    print("device:", cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    copy_bw = copy_bandwidth(SimpleNamespace(xp=cp, is_gpu=True))
    print(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s (read + written)")
    sim = build_simulation(get_preset("big-100M"), SimpleNamespace(backend="gpu", flakes=None,
                                                                    seed=None, wind_boundary=None),
                           profile=False)
    grid, hm = sim.grid, sim.heightmap.grid
    size = SceneSize(sim.settings.flake_count, grid.cell_count, hm.nx * hm.ny)
    sim.step(40)
    print("old step_flakes attributes:", attributes(old, "step_flakes"))
    for name in ("step_flakes<true, true, true>", "step_flakes<true, true, false>"):
        print(f"new {name} attributes:", attributes(new, name))
    ok = True
    for k in range(3):
        ok &= check_bits(sim, old, f"check {k}")
        sim.step(13)
    new.COMPACT_INDEXING = False
    ok &= check_bits(sim, old, "general indexing")
    new.COMPACT_INDEXING = True
    print("ALL BITS IDENTICAL" if ok else "BITS DIFFER", flush=True)

    base_block, base_min = new.BLOCK, new.MIN_BLOCKS_PER_SM
    variants = []
    for text in args.variants.split(","):
        text, _, ablation = text.partition("-")
        compact = not text.endswith("nc")
        block, _, minb = text.removesuffix("nc").partition("x")
        overrides = {}
        if "eddy" in ablation:
            overrides["eddy_scale"] = 0.0
        if "shelter" in ablation:
            overrides["bubble_top"] = None
        variants.append((int(block), int(minb or 0), compact, ablation, overrides))
    intervals = [int(i) for i in args.sort_intervals.split(",")]
    results = {}
    for r in range(args.rounds):
        runs = [("old", old, None, 32)]
        for (b, m, compact, ablation, overrides) in variants:
            for i in intervals:
                label = (f"new {b}" + (f"x{m}" if m else "") + ("" if compact else "nc")
                         + (f" -{ablation}" if ablation else "") + f" sort{i}")
                runs.append((label, Ablated(**overrides) if overrides else new, (b, m, compact), i))
        for label, module, config, interval in runs:
            if config is not None:
                new.BLOCK = config[0]
                new.SOURCE = new.kernel_source(config[0], config[1])
                new.COMPACT_INDEXING = config[2]
            sim.flakes.sort_interval = interval
            sps, ms, frac = measure(sim, module, args.steps, copy_bw, size)
            results.setdefault(label, []).append((sps, ms, frac))
            print(f"round {r} {label}: {sps:.2f} steps/s, flakes {ms:.3f} ms/step "
                  f"({100 * frac:.1f}% of copy)", flush=True)
        new.BLOCK, new.SOURCE = base_block, new.kernel_source(base_block, base_min)
        new.COMPACT_INDEXING = True
        sim.flakes.sort_interval = 32
    print("\nmedians over rounds (big-100M, 64 steps each, two sorts included):")
    for label, values in results.items():
        sps = statistics.median(v[0] for v in values)
        ms = statistics.median(v[1] for v in values)
        frac = statistics.median(v[2] for v in values)
        print(f"  {label:<22} {sps:7.2f} steps/s  flakes {ms:6.3f} ms  {100 * frac:5.1f}% of copy  "
              f"(runs: {', '.join(f'{v[0]:.1f}/{v[1]:.3f}' for v in values)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
