"""Where a GPU simulation step's time goes: every kernel and copy of a run of steps,
recorded by CUPTI through PyTorch's profiler (it sees CuPy's launches and the kernels
inside CUDA graphs), summed per kernel, and the time the GPU sat idle between them.

    python3 benchmarks/step_timeline.py --preset profile-2013 --warmup 30 --steps 48

Prints per kernel: launches per step, GPU ms per step and its share; then the wall time
per step, the GPU busy time per step and the idle gaps (host work, launches, the pressure
solve's convergence reads). Needs CuPy with a CUDA device and PyTorch (for CUPTI); no
synchronisation is added inside the steps.
"""
import argparse
import collections
import json
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="profile-2013")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=48, help="recorded steps")
    parser.add_argument("--top", type=int, default=25, help="kernels listed")
    parser.add_argument("--json", help="write the per-kernel table here")
    args = parser.parse_args(argv)

    import cupy as cp
    import torch
    from torch.profiler import ProfilerActivity, profile

    from snowfall.snow_addon import presets
    from snowfall.snow_addon.simulation import Simulation

    preset = presets.get_preset(args.preset)
    vertices, triangles = preset.terrain()
    sim = Simulation(preset.settings(), vertices, triangles, backend="gpu")
    torch.cuda.init()
    sim.step(args.warmup)
    cp.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        sim.step(args.steps)
        cp.cuda.Device().synchronize()
        wall = time.perf_counter() - start
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in events)
    per_kernel = collections.defaultdict(lambda: [0, 0.0])
    busy, last_end, gaps = 0.0, None, []
    for begin, end, name in spans:
        per_kernel[name][0] += 1
        per_kernel[name][1] += end - begin
        if last_end is None or begin >= last_end:
            busy += end - begin
            if last_end is not None:
                gaps.append(begin - last_end)
            last_end = end
        elif end > last_end:
            busy += end - last_end
            last_end = end
    steps = args.steps
    total = sum(v[1] for v in per_kernel.values())
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"{args.preset}: {name}, {steps} steps after {args.warmup}; wall "
          f"{wall / steps * 1e3:.3f} ms per step ({steps / wall:.0f} steps/s)")
    print(f"GPU busy {busy / steps / 1e3:.3f} ms per step (kernels and copies, us -> ms), "
          f"idle between them {sum(gaps) / steps / 1e3:.3f} ms per step in {len(gaps) / steps:.1f} "
          f"gaps; gaps over 10 us: {sum(g for g in gaps if g > 10) / steps / 1e3:.3f} ms per step")
    rows = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])
    print(f"{'kernel':60s} {'per step':>8s} {'ms/step':>9s} {'share':>6s}")
    for kernel, (count, micros) in rows[:args.top]:
        print(f"{kernel[:60]:60s} {count / steps:8.1f} {micros / steps / 1e3:9.4f} "
              f"{micros / total:6.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"preset": args.preset, "device": name, "steps": steps,
                       "wall_ms_per_step": wall / steps * 1e3,
                       "busy_ms_per_step": busy / steps / 1e3,
                       "kernels": {k: {"per_step": c / steps, "ms_per_step": m / steps / 1e3}
                                   for k, (c, m) in rows}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
