"""The benchmark harness behind ``snowfall benchmark`` (snow_addon/cli.py parses and checks
the arguments, then hands them to ``run``).

    python -m snowfall benchmark --scenes cpu-small cpu-2009 --steps 20 --blender
    python -m snowfall benchmark --bake --scenes cpu-small --flakes 100000 --bake-frames 24

What it prints (docs/benchmarks.md repeats it):

* steps/s: whole simulation steps (wind, flakes, snow cover, obstacle refresh) per second
  of wall time, measured over ``--steps`` steps after warm-up (repeated until
  ``--min-seconds`` of wall time have passed: 1 s on the GPU), with no per-stage
  synchronisation and no diagnostics read inside the timed steps.
* ns per flake-step: wall time of one step divided by the flake count (the whole step,
  wind included: an upper bound on the flakes' own cost). ns per cell-step: the same
  divided by the wind cell count.
* per-stage time: a second, profiled pass (``Simulation.timer``, which synchronises the
  device around each stage), in ms per step, under the names of ``snow_addon.stages``.
* effective bandwidth of a stage: the minimal bytes it must move (``STAGE_BYTES``, keyed
  by those names) divided by its time, and as a percentage of a device-to-device copy
  (bytes read + written per second, median of repeated copies) measured in the same run;
  every stage of ``HOT_STAGES`` is checked against ``BANDWIDTH_TARGET`` of the copy.

The Blender particle and bake comparisons run ``blender_particles`` and ``bake_output`` of
this package in a child process (``python -m``).
"""
from __future__ import annotations

import gc
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from ..snow_addon import stages
from ..snow_addon.errors import SnowInputError, SnowMemoryError
from ..snow_addon.threads import ADAPTIVE_THREADS_VARIABLE
from ..snow_addon.presets import (CPU_BENCHMARK_SCENES, GPU_BENCHMARK_SCENES, build_simulation,
                                  get_preset)

#: The published figures the engine competes with (printed next to the results).
PUBLISHED = (
    "2009 thesis (CUDA, 2008 GPU): real time (25-30 steps/s) with more than 2M flakes and "
    "more than 4M wind cells",
    "2013 thesis (2010 GPU): 4M+ flakes in real time at 128x128x32 wind in CUDA, 1.5M-2.1M "
    "in OpenACC",
    "Blender 5.0.1 particles with Wind + Turbulence fields and terrain collision: about "
    "0.7-0.8 us per particle-frame for 0.1M-1M particles on a 2-core x86 machine (issue "
    "figure); goal: the engine at 10x that rate per flake (<= 75 ns per flake-step) while "
    "also solving real wind",
)

# --- minimal bytes moved per stage -------------------------------------------------------

@dataclass(frozen=True)
class SceneSize:
    """What the byte counts depend on: flakes, wind cells, heightmap nodes, and the mean
    pressure iterations per step of the measured steps."""

    flakes: int
    cells: int
    nodes: int
    pressure_iterations: float = 0.0


#: Minimal bytes per step each stage must read + write, for its data layout (float32
#: struct-of-arrays, uint8 solid mask, uint8 face coefficients on the pressure's finest level):
#:
#: * flake update: position 3, velocity 3 and spiral phase read and written, respawn count
#:   and flake id read (36 + 28 = 64 B/flake), plus the wind faces read once (12 B/cell)
#:   and terrain height + snow depth read once (8 B/node);
#: * advection: u, v, w read and written (24 B/cell) + open-block mask (1 B/cell; the
#:   faces' open fractions are read only next to the terrain);
#: * divergence: u, v, w and their open fractions read, divergence written: 28 B/cell;
#: * pressure sweep (one Jacobi or red-black sweep): pressure and right-hand side read, three
#:   face coefficients read (uint8), pressure written: 15 B/cell; a pressure solve counts one sweep's
#:   bytes per iteration (a lower bound for a multigrid-preconditioned CG iteration);
#: * projection: pressure + u, v, w and three face coefficients read (uint8), u, v, w
#:   written: 31 B/cell;
#: * deposit: hit counts read and cleared, snow depth read and written: 16 B/node;
#: * redistribution: height + snow read, snow written, surface mask read: 13 B/node;
#: * obstacle refresh: height + snow read (8 B/node), solid and open fractions written
#:   (13 B/cell).
#:
#: These are the kernels' own; the timer records stages (snow_addon.stages), sums of them.
KERNEL_BYTES = {
    "flake update": lambda s: 64 * s.flakes + 12 * s.cells + 8 * s.nodes,
    "advection": lambda s: 25 * s.cells,
    "divergence": lambda s: 28 * s.cells,
    "pressure sweep": lambda s: 15 * s.cells,
    "pressure solve": lambda s: 15 * s.cells * max(s.pressure_iterations, 1.0),
    "projection": lambda s: 31 * s.cells,
    "deposit": lambda s: 16 * s.nodes,
    "redistribution": lambda s: 13 * s.nodes,
    "obstacles": lambda s: 8 * s.nodes + 13 * s.cells,
}
#: Minimal bytes per run of each stage the step's timer records (snow_addon.stages).
STAGE_BYTES = {
    stages.FLAKES: KERNEL_BYTES["flake update"],
    stages.WIND: lambda s: sum(KERNEL_BYTES[k](s) for k in ("advection", "divergence",
                                                             "pressure solve", "projection")),
    stages.COVER: lambda s: KERNEL_BYTES["deposit"](s) + KERNEL_BYTES["redistribution"](s),
    stages.DEPOSIT: KERNEL_BYTES["deposit"],
    stages.REDISTRIBUTE: KERNEL_BYTES["redistribution"],
    stages.OBSTACLES: KERNEL_BYTES["obstacles"],
}


def stage_bytes(stage: str, size: SceneSize) -> int | None:
    """Minimal bytes per run of a stage (a snow_addon.stages name), or None when the table
    has no model for it (the drift)."""
    bytes_of = STAGE_BYTES.get(stage)
    return None if bytes_of is None else int(bytes_of(size))


#: The stages with a bandwidth target: the flakes, the wind step (advection, pressure
#: solve and projection, timed as one), the snow cover and its redistribution.
HOT_STAGES = (stages.FLAKES, stages.WIND, stages.COVER, stages.REDISTRIBUTE)
BANDWIDTH_TARGET = 0.70

# --- copy bandwidth ----------------------------------------------------------------------


def copy_bandwidth(backend, nbytes: int = 256 * 1024**2, repeats: int = 15) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second, median of
    ``repeats`` copies of ``nbytes``). On the GPU: CuPy, timed with CUDA events, the faster
    of ``cudaMemcpy`` device-to-device and an element-wise copy kernel. On the CPU: a NumPy
    copy (one thread) in RAM."""
    xp = backend.xp
    count = nbytes // 4
    source = xp.ones(count, dtype=xp.float32)
    target = xp.empty_like(source)
    if backend.is_gpu:
        start, stop = xp.cuda.Event(), xp.cuda.Event()

        def timed(copy):
            for _ in range(3):
                copy()
            seconds = []
            for _ in range(repeats):
                start.record()
                copy()
                stop.record()
                stop.synchronize()
                seconds.append(xp.cuda.get_elapsed_time(start, stop) * 1e-3)
            return statistics.median(seconds)

        def memcpy():
            target.data.copy_from_device_async(source.data, count * 4)

        def kernel():
            xp.copyto(target, source)

        best = min(timed(memcpy), timed(kernel))
    else:
        xp.copyto(target, source)
        seconds = []
        for _ in range(repeats):
            begin = time.perf_counter()
            xp.copyto(target, source)
            seconds.append(time.perf_counter() - begin)
        best = statistics.median(seconds)
    del source, target
    return 2.0 * count * 4 / best


def array_bytes(holder) -> int:
    """Bytes of the arrays an object holds (attributes, and lists/tuples of arrays): what a
    stage really keeps in memory, measured rather than estimated."""
    total = 0
    seen = set()
    for value in vars(holder).values():
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            nbytes = getattr(item, "nbytes", None)
            if isinstance(nbytes, int) and hasattr(item, "shape") and id(item) not in seen:
                seen.add(id(item))
                total += nbytes
    return total



def _gb(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1e9:.1f} GB/s"




def _free_device_memory(backend) -> None:
    gc.collect()  # a simulation can sit in reference cycles (captured CUDA graphs)
    if backend.is_gpu:
        backend.xp.get_default_memory_pool().free_all_blocks()


def _load_average() -> float | None:
    """The 1-minute load average (other processes competing for the CPU skew CPU
    figures: Numba's parallel loops wait for every thread), None where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _device_used_bytes(backend) -> int | None:
    if backend.is_gpu:
        return int(backend.xp.get_default_memory_pool().used_bytes())
    return None


def jacobi_seconds(sim, sweeps: int = 25, repeats: int = 5) -> float | None:
    """Wall time of ``sweeps`` Jacobi sweeps of the simulation's own pressure system (fine
    level) on scratch arrays, best of ``repeats``; replayed as one CUDA graph on the GPU
    (the pressure module's ``capture``, as the solver itself runs) so that Python launch
    overhead does not flatter the solve. None when the solver does not expose what it
    needs."""
    wind = sim.wind
    try:
        pressure = sim.backend.kernel_module("pressure")
        sweep = pressure.jacobi_sweep
        coef_x, coef_y, coef_z = wind.levels[0].coef
    except (AttributeError, IndexError, TypeError, ValueError, ImportError):
        return None
    xp = sim.backend.xp
    p = wind.pressure.copy()
    out = xp.empty_like(p)
    b = xp.zeros_like(p)

    def run_sweeps():
        a, c = p, out
        for _ in range(sweeps):
            sweep(a, b, coef_x, coef_y, coef_z, 1.0, c)
            a, c = c, a

    run_sweeps()  # compile and load the kernel
    replay = getattr(pressure, "capture", lambda function: function)(run_sweeps)
    best = math.inf
    for _ in range(repeats):
        sim.backend.synchronize()
        begin = time.perf_counter()
        replay()
        sim.backend.synchronize()
        best = min(best, time.perf_counter() - begin)
    return best


def _timed_steps(sim, args):
    """(steps, seconds, last StepInfo): at least args.steps steps and args.min_seconds of wall
    time, in chunks of args.steps (a hiccup of the host, 20-30 ms, moved a 0.2 s window by
    10 %)."""
    begin = time.perf_counter()
    timed = 0
    while True:
        last = sim.step(args.steps)
        sim.backend.synchronize()
        timed += args.steps
        elapsed = time.perf_counter() - begin
        if elapsed >= args.min_seconds:
            return timed, elapsed, last


def _competing(sim, args) -> dict:
    """Steps/s of ``sim`` while another process keeps one core busy (a Python loop), as
    Blender's own thread or another program does during a bake: the median of three timed
    runs of args.steps steps (and args.min_seconds), and the three rates."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    before = _thread_steps(sim)
    try:
        time.sleep(0.5)
        rates = []
        for _ in range(3):
            steps, seconds, _last = _timed_steps(sim, args)
            rates.append(steps / seconds)
    finally:
        busy.kill()
        busy.wait()
    counts = _thread_steps(sim, before)
    if getattr(sim, "thread_governor", None) is not None:
        sim.thread_governor.reset()     # the profiled pass after this runs on an idle machine
    return {"steps_per_s_competing": sorted(rates)[1], "steps_per_s_competing_runs": rates,
            "steps_at_threads_competing": counts}


def _thread_steps(sim, before: dict | None = None) -> dict:
    """Steps run at each CPU thread count by the simulation's thread governor
    (snow_addon.threads), minus ``before``; {} without one (GPU, or turned off)."""
    governor = getattr(sim, "thread_governor", None)
    if governor is None:
        return {}
    counts = governor.report()["steps_at_threads"]
    if before:
        counts = {k: v - before.get(k, 0) for k, v in counts.items() if v - before.get(k, 0)}
    return counts


def _cpu_threading(backend) -> dict | None:
    """The CPU's threading layer, thread count and OpenMP wait settings (None on a GPU)."""
    if backend.is_gpu:
        return None
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:   # no parallel region has run yet
        layer = None
    return {"layer": layer, "threads": numba.config.NUMBA_NUM_THREADS,
            "adaptive": os.environ.get(ADAPTIVE_THREADS_VARIABLE, "1") != "0",
            "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}


def benchmark_scene(name: str, args, copy_bytes_per_s: float) -> dict:
    """Measure one preset: steps/s, ns per flake-step and cell-step, per-stage times and
    bandwidths, pressure solve vs 25 Jacobi sweeps, memory per flake."""
    preset = get_preset(name)
    record: dict = {"scene": name, "load_before": _load_average()}
    start = time.perf_counter()
    from ..snow_addon.backend import select_backend

    probe = select_backend(args.backend)
    used_before = _device_used_bytes(probe)
    sim = build_simulation(preset, args, profile=False)
    record["setup_s"] = time.perf_counter() - start
    backend = sim.backend
    used_after = _device_used_bytes(backend)
    grid, hm = sim.grid, sim.heightmap.grid
    flakes = sim.settings.flake_count
    record.update(backend=backend.name, device=backend.device_name or backend.name,
                  wind_cells=[grid.nx, grid.ny, grid.nz], flakes=flakes,
                  heightmap=[hm.nx, hm.ny])
    plan = sim.memory_plan
    record["planned_bytes_per_flake"] = plan.flakes / flakes if flakes else 0.0
    record["planned_bytes"] = plan.total
    if sim.flakes is not None and flakes:
        record["flake_bytes_per_flake"] = array_bytes(sim.flakes) / flakes
    if used_before is not None and used_after is not None:
        record["allocated_bytes"] = used_after - used_before

    # Warm-up: compilation (Numba cache, CUDA modules) and the first pressure solves.
    begin = time.perf_counter()
    sim.step(args.warmup)
    backend.synchronize()
    record["warmup_s"] = time.perf_counter() - begin

    before = _thread_steps(sim)
    timed, elapsed, last = _timed_steps(sim, args)
    per_step = elapsed / timed
    record["steps_at_threads"] = _thread_steps(sim, before)
    if getattr(args, "compete", False):
        record.update(_competing(sim, args), threading=_cpu_threading(backend))
    record.update(steps=timed, seconds=elapsed, steps_per_s=1.0 / per_step,
                  ns_per_flake_step=per_step / flakes * 1e9 if flakes else None,
                  ns_per_cell_step=per_step / grid.cell_count * 1e9,
                  last_wind=_wind_dict(last.wind), snow_volume=last.snow_volume,
                  wind_interval=sim.wind_interval, wind_substeps=sim.wind_substeps,
                  wind_boundary=sim.settings.wind_boundary,
                  deposited_volume=last.deposited_volume)

    # Profiled pass: the same simulation, stages synchronised.
    profile_steps = max(1, args.profile_steps)
    refresh = sim.settings.obstacle_refresh_steps
    first = sim.step_index + 1
    refreshes = sum(1 for k in range(first, first + profile_steps) if k % refresh == 0)
    timer = sim.timer
    timer.seconds.clear()
    timer.enabled = True
    iterations = []
    solves_before = sim.wind_solves
    for _ in range(profile_steps):
        solves = sim.wind_solves
        info = sim.step(1).wind
        if info is not None and sim.wind_solves > solves:
            iterations.append(info.iterations)
    timer.enabled = False
    wind_runs = sim.wind_solves - solves_before
    mean_iterations = sum(iterations) / len(iterations) if iterations else 0.0
    size = SceneSize(flakes, grid.cell_count, hm.nx * hm.ny, mean_iterations)
    timed_stages = {}
    for stage, seconds in timer.seconds.items():
        # The obstacle refresh runs every ``refresh`` steps and the wind on its own schedule
        # (``wind_schedule``): their bandwidth is per run, their time per step the average
        # over the profiled steps.
        runs = {stages.OBSTACLES: refreshes, stages.WIND: wind_runs}.get(stage, profile_steps)
        per_run = seconds / max(runs, 1)
        entry = {"ms_per_step": seconds / profile_steps * 1e3, "ms_per_run": per_run * 1e3}
        nbytes = stage_bytes(stage, size)
        if nbytes is not None and per_run > 0 and runs > 0:
            entry.update(bytes=nbytes, bandwidth=nbytes / per_run,
                         copy_fraction=nbytes / per_run / copy_bytes_per_s)
        if runs != profile_steps:
            entry["note"] = (f"ran {runs}x in {profile_steps} steps; "
                             f"{per_run * 1e3:.3f} ms per run")
        timed_stages[stage] = entry
    record["stages"] = timed_stages
    record["pressure_iterations_mean"] = mean_iterations
    record["load_after"] = _load_average()

    # Pressure solve vs 25 Jacobi sweeps of the same system.
    jacobi = jacobi_seconds(sim)
    if jacobi is not None:
        record["jacobi25_ms"] = jacobi * 1e3
        if stages.WIND in timed_stages:  # the solve is timed inside the wind step: an upper bound
            record["wind_vs_jacobi25"] = timed_stages[stages.WIND]["ms_per_run"] / (jacobi * 1e3)
    del sim
    _free_device_memory(backend)
    return record


def _fmt_thread_steps(counts) -> str:
    """" (adaptive: threads 2 for 50 steps, 1 for 10 steps)" from a steps-at-threads dict."""
    if not counts:
        return ""
    parts = [f"{threads} for {steps} steps" for threads, steps in
             sorted(counts.items(), key=lambda item: -int(item[0]))]
    return " (adaptive: threads " + ", ".join(parts) + ")"


def _fmt_load(load) -> str:
    return "?" if load is None else f"{load:.2f}"


def _wind_dict(info) -> dict | None:
    if info is None:
        return None
    return {"iterations": info.iterations, "relative_residual": info.relative_residual,
            "converged": bool(info.converged), "divergence_before": info.divergence_before,
            "divergence_after": info.divergence_after}


def print_scene(record: dict, copy_bytes_per_s: float) -> None:
    if "error" in record:
        print(f"{record['scene']}: {record['error']}")
        return
    nx, ny, nz = record["wind_cells"]
    print(f"{record['scene']}: {record['device']}, wind {nx}x{ny}x{nz}, {record['flakes']:,} "
          f"flakes, heightmap {record['heightmap'][0]}x{record['heightmap'][1]} "
          f"(set-up {record['setup_s']:.1f} s, warm-up {record['warmup_s']:.1f} s, load average "
          f"{_fmt_load(record.get('load_before'))} -> {_fmt_load(record.get('load_after'))})")
    print(f"  {record['steps_per_s']:.2f} steps/s over {record['steps']} steps (wind: "
          f"{record.get('wind_substeps', 1)} solve(s) every {record.get('wind_interval', 1)} "
          f"step(s), {record.get('wind_boundary', 'cut_cells')}); "
          f"{record['ns_per_flake_step']:.1f} ns per flake-step; "
          f"{record['ns_per_cell_step']:.1f} ns per cell-step"
          f"{_fmt_thread_steps(record.get('steps_at_threads'))}")
    if "steps_per_s_competing" in record:
        threading = record.get("threading") or {}
        print(f"  with another process keeping one core busy: "
              f"{record['steps_per_s_competing']:.2f} steps/s (median of 3: "
              f"{record['steps_per_s_competing'] / record['steps_per_s']:.0%} of the rate "
              f"without it); threading layer {threading.get('layer')}, "
              f"{threading.get('threads')} threads"
              f"{_fmt_thread_steps(record.get('steps_at_threads_competing'))}, GOMP_SPINCOUNT "
              f"{threading.get('GOMP_SPINCOUNT')}, OMP_WAIT_POLICY "
              f"{threading.get('OMP_WAIT_POLICY')}")
    wind = record.get("last_wind")
    if wind:
        print(f"  pressure: {wind['iterations']} it, residual {wind['relative_residual']:.1e} "
              f"({'converged' if wind['converged'] else 'NOT converged'}), max div "
              f"{wind['divergence_before']:.2e} -> {wind['divergence_after']:.2e} 1/s")
    print(f"  memory: planned {record['planned_bytes'] / 1024**2:.1f} MiB, "
          f"{record['planned_bytes_per_flake']:.1f} B per flake planned, "
          f"{record.get('flake_bytes_per_flake', float('nan')):.1f} B per flake held"
          + (f", {record['allocated_bytes'] / 1024**2:.1f} MiB allocated"
             if "allocated_bytes" in record else ""))
    for stage, entry in sorted(record["stages"].items(), key=lambda kv: -kv[1]["ms_per_step"]):
        line = f"    {stage:<16} {entry['ms_per_step']:9.3f} ms/step"
        if "bandwidth" in entry:
            line += (f"  {entry['bytes'] / 1e6:9.1f} MB  {_gb(entry['bandwidth']):>12}  "
                     f"{100 * entry['copy_fraction']:5.1f}% of copy")
        if "note" in entry:
            line += f"  ({entry['note']})"
        print(line)
    if "jacobi25_ms" in record:
        line = f"  25 Jacobi sweeps of the same pressure system: {record['jacobi25_ms']:.3f} ms"
        if "wind_vs_jacobi25" in record:
            line += (f"; the whole wind step (advection, solve to tolerance, projection) takes "
                     f"{record['wind_vs_jacobi25']:.2f}x that")
        print(line)


def check_targets(record: dict, blender_us: float | None) -> list[str]:
    """The issue's targets that apply to this record: met, or missed by how much."""
    lines = []

    def verdict(label, value, goal, higher_is_better=True, unit=""):
        ok = value >= goal if higher_is_better else value <= goal
        if ok:
            lines.append(f"  target {label}: {value:.3g}{unit} (goal {goal:g}{unit}) met")
        else:
            short = (goal / value if higher_is_better else value / goal) if value else math.inf
            lines.append(f"  target {label}: {value:.3g}{unit} (goal {goal:g}{unit}) MISSED, "
                         f"{short:.2f}x off")

    if "error" in record:
        return lines
    gpu = record["backend"] == "gpu"
    if gpu and record["scene"] == "profile-2013":
        verdict("profile-2013 steps/s", record["steps_per_s"], 1000.0)
    if gpu and record["scene"] == "big-100M":
        verdict("big-100M steps/s", record["steps_per_s"], 100.0)
        per_flake = record.get("flake_bytes_per_flake", record["planned_bytes_per_flake"])
        verdict("big-100M flake memory per flake", per_flake, 48.0, False, " B")
    if gpu:
        for stage in HOT_STAGES:
            entry = record["stages"].get(stage)
            if entry is None or "copy_fraction" not in entry:
                lines.append(f"  target {stage} bandwidth: not measured (the stage did not run "
                             "in the profiled steps)")
                continue
            verdict(f"{stage} bandwidth", 100 * entry["copy_fraction"],
                    100 * BANDWIDTH_TARGET, unit="% of copy")
        if "wind_vs_jacobi25" in record:
            verdict("whole wind step time / 25 Jacobi sweeps (upper bound of the solve's)",
                    record["wind_vs_jacobi25"], 1.0, False)
    if blender_us and record.get("ns_per_flake_step"):
        ratio = blender_us * 1e3 / record["ns_per_flake_step"]
        verdict("engine rate per flake vs Blender particles", ratio, 10.0, unit="x")
    return lines


def run_blender_benchmark(scene: str, particles: int, frames: int) -> dict | None:
    """Blender's particle system on the same scene (this package's blender_particles in a
    child process with this Python); None with a printed reason when it cannot run."""
    if importlib.util.find_spec("bpy") is None:
        print("  blender particles: skipped (the bpy module is not installed)")
        return None
    command = [sys.executable, "-m", f"{__package__}.blender_particles", "--preset", scene,
               "--particles", str(particles), "--frames", str(frames)]
    done = subprocess.run(command, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"  blender particles: failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    return None


def _write_results(path: str, results: dict) -> None:
    """``--out``: every figure as JSON (written atomically); nothing without a path."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(results, handle, indent=1, default=float)
    os.replace(tmp, path)
    print(f"results written to {path}")


def run_bake_benchmark(args, scene: str, blender_scene: bool = False) -> dict | None:
    """A bake's output cost (this package's bake_output in a child process with this Python):
    a preset baked without Blender through the add-on's writer-thread code, or, with
    ``blender_scene``, a sample scene baked by the add-on itself (needs bpy). None with a
    printed reason when it cannot run."""
    if blender_scene and importlib.util.find_spec("bpy") is None:
        print(f"  bake {scene}: skipped (the bpy module is not installed)")
        return None
    command = [sys.executable, "-m", f"{__package__}.bake_output",
               "--scene" if blender_scene else "--preset", scene,
               "--frames", str(args.bake_frames), "--backend", args.backend,
               "--disk-mib", str(args.bake_disk_mib)]
    if args.flakes is not None:
        command += ["--flakes", str(args.flakes)]
    done = subprocess.run(command, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"  bake {scene}: failed (exit {done.returncode}): "
          f"{(done.stderr or done.stdout).strip()[-600:]}")
    return None


#: The issue's target for the wall time a bake spends on output (2-core machine).
BAKE_OUTPUT_TARGET_NS = 25.0


def print_bake(record: dict) -> None:
    """What a bake spends on output, against the disk's own write speed in the same run."""
    print(f"bake {record['scene']}: {record['flakes']:,} flakes x {record['frames']} frames on "
          f"{record['backend']}, {record['route']}")
    print(f"  simulation {record['simulation_s']:.2f} s "
          f"({record['simulation_ns_per_flake_frame']:.0f} ns/flake-frame)")
    verdict = "meets" if record["output_ns_per_flake_frame"] <= BAKE_OUTPUT_TARGET_NS else \
        "misses"
    print(f"  output {record['output_s']:.3f} s on the bake thread "
          f"({record['output_ns_per_flake_frame']:.1f} ns/flake-frame, {verdict} the "
          f"{BAKE_OUTPUT_TARGET_NS:.0f} ns target; {record['final_flush_s']:.3f} s of it waiting "
          f"for the writer at the end); writer thread {record['writer_busy_s']:.2f} s in the "
          "background")
    print(f"  flake cache {record['flake_bytes_per_flake_frame']:.2f} B/flake-frame; snow "
          f"{record['snow_bytes_per_frame'] / 1e3:.1f} KB/frame")
    print(f"  disk write limit (same folder, same run, fsync): "
          f"{record['disk_write_bytes_per_s'] / 1e6:.0f} MB/s = "
          f"{record['disk_ns_per_flake_frame']:.1f} ns/flake-frame for these flake bytes")


def cmd_bake_benchmark(args) -> int:
    presets = args.scenes or (("cpu-small",) if args.bake else ())
    scenes = [(name, False) for name in presets]
    scenes += [(name, True) for name in args.bake_scene]
    print(f"snowfall benchmark --bake: {os.cpu_count()} CPUs; {args.bake_frames} frames each")
    results = {"command": " ".join(["snowfall benchmark"] + list(args.argv)), "bakes": []}
    failed = False
    for name, blender_scene in scenes:
        record = run_bake_benchmark(args, name, blender_scene)
        if record is None:
            failed = True
            continue
        print_bake(record)
        results["bakes"].append(record)
        sys.stdout.flush()
    _write_results(args.out, results)
    return 1 if failed and not results["bakes"] else 0


def table_line(record: dict, blender: dict | None) -> str:
    """One docs/benchmarks.md line: scene | device | steps/s | stage bandwidths | ..."""
    if "error" in record:
        return f"{record['scene']} | - | {record['error']}"
    parts = [record["scene"], record["device"], f"{record['steps_per_s']:.2f} steps/s",
             f"{record['ns_per_flake_step']:.1f} ns/flake-step",
             f"{record['ns_per_cell_step']:.1f} ns/cell-step"]
    if "steps_per_s_competing" in record:
        parts.append(f"{record['steps_per_s_competing']:.2f} steps/s with a core busy")
    for stage, entry in sorted(record["stages"].items()):
        text = f"{stage} {entry['ms_per_step']:.2f} ms"
        if "copy_fraction" in entry:
            text += f" ({100 * entry['copy_fraction']:.0f}% of copy)"
        parts.append(text)
    if "wind_vs_jacobi25" in record:
        parts.append(f"wind step = {record['wind_vs_jacobi25']:.2f}x 25 Jacobi")
    parts.append(f"{record.get('flake_bytes_per_flake', record['planned_bytes_per_flake']):.0f} B/flake")
    if blender:
        ratio = blender["us_per_particle_frame"] * 1e3 / record["ns_per_flake_step"]
        parts.append(f"Blender {blender['us_per_particle_frame']:.2f} us/particle-frame, "
                     f"engine {ratio:.1f}x faster per flake")
    return " | ".join(parts)


def run(args) -> int:
    """``snowfall benchmark`` with parsed, checked arguments (snow_addon.cli); the exit
    status."""
    from ..snow_addon.backend import select_backend

    if args.bake or args.bake_scene:
        return cmd_bake_benchmark(args)

    backend = select_backend(args.backend)
    if args.steps is None:
        args.steps = 200 if backend.is_gpu else 20
    if args.min_seconds is None:
        args.min_seconds = 1.0 if backend.is_gpu else 0.0
    if args.warmup is None:
        # on the GPU past the first obstacle refresh (step 24): its kernels compile and its
        # solve is captured on first use (inside the timed steps: 683 against 1041-1048
        # steps/s on profile-2013)
        args.warmup = 30 if backend.is_gpu else 3
    scenes = args.scenes or (GPU_BENCHMARK_SCENES if backend.is_gpu else CPU_BENCHMARK_SCENES)
    print(f"snowfall benchmark: backend {backend.describe()}; {os.cpu_count()} CPUs; "
          f"{args.steps} timed steps (repeated to at least {args.min_seconds:g} s) after "
          f"{args.warmup} warm-up steps, "
          f"{args.profile_steps} profiled steps")
    print("published figures to compare with:")
    for line in PUBLISHED:
        print(f"  - {line}")
    copy_bytes_per_s = copy_bandwidth(backend)
    where = "device-to-device (CuPy, CUDA events)" if backend.is_gpu else "RAM (NumPy, one thread)"
    print(f"copy bandwidth, {where}: {_gb(copy_bytes_per_s)} (bytes read + written per second, "
          "median of 15 copies of 256 MiB)")
    results = {"backend": backend.name, "device": backend.device_name, "cpus": os.cpu_count(),
               "copy_bytes_per_s": copy_bytes_per_s, "steps": args.steps,
               "min_seconds": args.min_seconds,
               "warmup": args.warmup, "profile_steps": args.profile_steps,
               "command": " ".join(["snowfall benchmark"] + list(args.argv)), "scenes": []}
    table = []
    for name in scenes:
        try:
            record = benchmark_scene(name, args, copy_bytes_per_s)
        except SnowMemoryError as exc:
            record = {"scene": name, "error": f"does not fit: {exc}"}
        except SnowInputError as exc:
            record = {"scene": name, "error": f"bad input: {exc}"}
        print_scene(record, copy_bytes_per_s)
        blender = None
        if args.blender and "error" not in record:
            if record["flakes"] > args.blender_max_particles:
                print(f"  blender particles: skipped ({record['flakes']:,} particles is more than "
                      f"--blender-max-particles {args.blender_max_particles:,})")
            else:
                blender = run_blender_benchmark(name, record["flakes"], args.blender_frames)
            if blender:
                record["blender"] = blender
                ratio = blender["us_per_particle_frame"] * 1e3 / record["ns_per_flake_step"]
                print(f"  blender {blender['blender']} particles, same scene and count: "
                      f"{blender['us_per_particle_frame']:.3f} us per particle-frame (median of "
                      f"{blender['frames'] - 1} frames); engine per flake-step "
                      f"{record['ns_per_flake_step'] / 1e3:.3f} us: {ratio:.1f}x Blender's rate")
        for line in check_targets(record, blender["us_per_particle_frame"] if blender else None):
            print(line)
        results["scenes"].append(record)
        table.append(table_line(record, blender))
        sys.stdout.flush()
    print("\nscene | device | steps/s | ns/flake-step | ns/cell-step | per stage | ...")
    for line in table:
        print(line)
    _write_results(args.out, results)
    return 0
