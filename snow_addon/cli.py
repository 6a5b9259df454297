"""The command line: ``snowfall simulate``, ``snowfall benchmark``, ``snowfall presets``.

    python -m snowfall simulate --preset cpu-small --steps 48 --save out.npz
    python -m snowfall benchmark --scenes cpu-small cpu-2009 --steps 20 --blender
    python -m snowfall benchmark --bake --scenes cpu-small --flakes 100000 --bake-frames 24
    python -m snowfall presets

(``python -m snowfall.snow_addon`` and the ``snowfall`` console script do the same.)
Every argument is checked before any work: a bad one is answered with one line on stderr
naming the argument, what is wrong and what to try, exit status 2, and nothing written
(a scene that does not fit in memory included). ``benchmark`` is a thin command: the
harness is ``benchmarks/harness.py``, imported when the command runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import time

from .errors import SnowInputError
from .presets import (CPU_BENCHMARK_SCENES, GPU_BENCHMARK_SCENES, PRESETS, build_simulation,
                      command_line_overrides, get_preset)
from .settings import WIND_BOUNDARIES

EXIT_USAGE = 2

#: The command-line argument behind each setting the command line overrides.
ARGUMENT_OF_SETTING = {"flake_count": "--flakes", "seed": "--seed",
                       "wind_boundary": "--wind-boundary"}


# --- output helpers ----------------------------------------------------------------------


def _fmt_seconds(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"



def _wind_text(info) -> str:
    if info is None:
        return "wind: -"
    state = "converged" if info.converged else "NOT converged"
    return (f"wind {info.iterations} it, residual {info.relative_residual:.1e} ({state}), "
            f"div {info.divergence_before:.2e} -> {info.divergence_after:.2e} 1/s, "
            f"inflow ({info.inflow[0]:.2f}, {info.inflow[1]:.2f}) m/s")



# --- presets -----------------------------------------------------------------------------


def cmd_presets(args) -> int:
    for group, title in (("paper", "DESIGN.md's benchmark scenes (the theses' set-ups)"),
                         ("sweep", "sweeps, extended beyond the theses' sizes"),
                         ("cpu", "sized for a 2-core CPU")):
        print(f"{title}:")
        for preset in PRESETS.values():
            if preset.group == group:
                print(f"  {preset.summary()}")
                print(f"  {'':<20} {preset.description}")
    return 0


# --- simulate ----------------------------------------------------------------------------


def cmd_simulate(args) -> int:
    preset = get_preset(args.preset)
    start = time.perf_counter()
    sim = build_simulation(preset, args, profile=args.profile)
    setup = time.perf_counter() - start
    grid, hm = sim.grid, sim.heightmap.grid
    flakes = sim.settings.flake_count
    print(f"preset {preset.name}: wind {grid.nx}x{grid.ny}x{grid.nz} ({grid.cell_count:,} cells, "
          f"{grid.cell_size:g} m), {flakes:,} flakes, heightmap {hm.nx}x{hm.ny}, seed "
          f"{sim.settings.seed}, dt {sim.settings.time_step:.4f} s")
    print(f"backend {sim.backend.describe()}; set-up {setup:.2f} s; memory planned "
          f"{sim.memory_plan.total / 1024**2:.1f} MiB")
    step_seconds = []
    every = max(1, args.print_every)
    for index in range(args.steps):
        begin = time.perf_counter()
        sim.step(1)
        sim.backend.synchronize()
        elapsed = time.perf_counter() - begin
        step_seconds.append(elapsed)
        if (index + 1) % every == 0 or index + 1 == args.steps:
            d = sim.diagnostics
            print(f"step {d.step:>6} t {d.time:8.3f} s {_fmt_seconds(elapsed):>10} | "
                  f"{_wind_text(d.wind)} | hits {d.hits:,} | deposited {d.deposited_volume:.4e} m^3, "
                  f"snow {d.snow_volume:.4e} m^3", flush=True)
    if step_seconds:
        # The first steps include kernel compilation (Numba, CUDA): the median step is the
        # figure that stands for the steady state.
        per_step = statistics.median(step_seconds)
        print(f"{len(step_seconds)} steps, median step {_fmt_seconds(per_step)} (first step "
              f"{_fmt_seconds(step_seconds[0])}, mean {_fmt_seconds(sum(step_seconds) / len(step_seconds))}): "
              f"{1.0 / per_step:.2f} steps/s, {per_step / flakes * 1e9:.1f} ns per flake-step, "
              f"{per_step / grid.cell_count * 1e9:.1f} ns per cell-step")
    if args.profile:
        seconds = sim.stage_seconds
        total = sum(seconds.values()) or 1.0
        steps = max(sim.step_index, 1)
        print("per-stage time (all steps, synchronised):")
        for stage, value in sorted(seconds.items(), key=lambda kv: -kv[1]):
            print(f"  {stage:<16} {value / steps * 1e3:9.3f} ms/step {100 * value / total:5.1f}%")
    if args.save:
        path = sim.save_state(args.save)
        print(f"saved state of step {sim.step_index} to {path} "
              f"({os.path.getsize(path) / 1024**2:.2f} MiB)")
    return 0


# --- argument checks (all before any work) -----------------------------------------------


class BadArgument(Exception):
    """A bad command-line argument: one line naming it, what is wrong, what to try."""


class _Parser(argparse.ArgumentParser):
    """argparse, its errors raised as BadArgument (one line) instead of usage + exit."""

    def error(self, message):
        message = " ".join(message.split())
        if "try " not in message and "choose from" not in message:
            message += f"; see '{self.prog} --help'"
        raise BadArgument(f"{self.prog}: error: {message}")


def _whole(minimum: int, example: int):
    """argparse type: a whole number >= ``minimum`` (the message suggests ``example``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number, got {text!r}; try {example}") from None
        if value < minimum:
            bound = "0 or more" if minimum == 0 else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}; try {example}")
        return value
    parse.__name__ = "whole number"
    return parse


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, got {text!r}; try 1") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}; try 1")
    return value


def _preset_name(text: str) -> str:
    if text not in PRESETS:
        raise argparse.ArgumentTypeError(
            f"unknown preset {text!r}; try cpu-small ('snowfall presets' lists them: "
            f"{', '.join(PRESETS)})")
    return text


def _bad(command: str, argument: str, problem: str) -> BadArgument:
    return BadArgument(f"snowfall {command}: error: argument {argument}: {problem}")


def _check_output(command: str, argument: str, path: str, example: str) -> None:
    """A file the command writes at its end: refuse now what would fail then."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise _bad(command, argument, f"{path!r} is a folder, not a file; try "
                   f"{os.path.join(path, example)}")
    if not os.path.isdir(folder):
        raise _bad(command, argument, f"the folder {folder!r} does not exist; create it or "
                   f"try {example}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _bad(command, argument, f"the folder {folder!r} is not writable; try a path in "
                   "a folder you can write, such as " + example)


def _check_settings(command: str, args, scenes) -> None:
    """The overridden settings of every scene the command will run, validated now."""
    overrides = command_line_overrides(args)
    for name in scenes:
        try:
            get_preset(name).settings(**overrides).validate()
        except SnowInputError as exc:
            argument = ARGUMENT_OF_SETTING.get(exc.setting)
            where = f" (scene {name})" if command == "benchmark" else ""
            if argument is None:
                raise BadArgument(f"snowfall {command}: error: {exc}{where}") from None
            raise _bad(command, argument, f"{exc}{where}") from None


def _check_backend(command: str, args) -> None:
    if args.backend == "gpu":
        from .backend import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is not None:
            raise _bad(command, "--backend", f"no GPU: {reason}; try --backend cpu")


def _needs_bpy(command: str, argument: str) -> None:
    if importlib.util.find_spec("bpy") is None:
        raise _bad(command, argument, "needs the bpy module, which is not installed; try "
                   "pip install 'snowfall[blender]', or leave it out")


def check_arguments(args) -> None:
    """Every argument of a parsed command line checked before any work (BadArgument)."""
    if args.command == "simulate":
        _check_output("simulate", "--save", args.save, "state.npz")
        _check_settings("simulate", args, (args.preset,))
        _check_backend("simulate", args)
    elif args.command == "benchmark":
        _check_output("benchmark", "--out", args.out, "results.json")
        bake = args.bake or bool(args.bake_scene)
        if args.blender and bake:
            raise _bad("benchmark", "--blender", "compares steps/s with Blender's particles, "
                       "not bakes; try it without --bake / --bake-scene")
        if args.blender:
            _needs_bpy("benchmark", "--blender")
        if args.bake_scene:
            _needs_bpy("benchmark", "--bake-scene")
        scenes = args.scenes or (("cpu-small",) if args.bake else () if bake
                                 else tuple(dict.fromkeys(GPU_BENCHMARK_SCENES + CPU_BENCHMARK_SCENES)))
        _check_settings("benchmark", args, scenes)
        _check_backend("benchmark", args)


def build_parser() -> argparse.ArgumentParser:
    from .backend import BACKEND_CHOICES

    parser = _Parser(prog="snowfall", description="Snowfall engine: simulate "
                                     "and benchmark snowfall over terrain without Blender.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("presets", help="list the named scenes")

    sim = sub.add_parser("simulate", help="run a preset, print per-step timings and diagnostics")
    sim.add_argument("--preset", required=True, type=_preset_name, help="scene name (see presets)")
    sim.add_argument("--steps", type=_whole(0, 24), default=24, help="steps to run (default 24)")
    sim.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    sim.add_argument("--flakes", type=_whole(1, 100000), default=None, help="override the flake count")
    sim.add_argument("--seed", type=_whole(0, 1), default=None, help="random seed (default: the preset's)")
    sim.add_argument("--wind-boundary", choices=WIND_BOUNDARIES, default=None,
                     help="how the terrain meets the wind (default: the preset's, cut_cells)")
    sim.add_argument("--save", default="", metavar="OUT.npz", help="save the final state (atomic .npz)")
    sim.add_argument("--profile", action="store_true", help="time each stage (synchronised)")
    sim.add_argument("--print-every", type=_whole(1, 10), default=1, metavar="K",
                     help="print diagnostics every K steps (default 1)")

    bench = sub.add_parser("benchmark", help="steps/s, ns per flake-step and cell-step, "
                           "per-stage bandwidth vs a copy")
    bench.add_argument("--scenes", nargs="+", type=_preset_name, default=None, metavar="NAME",
                       help="presets to run (default: the CPU scenes on the CPU, DESIGN.md's "
                       "scenes and sweeps on the GPU)")
    bench.add_argument("--backend", choices=BACKEND_CHOICES, default="auto")
    bench.add_argument("--steps", type=_whole(1, 200), default=None,
                       help="timed steps per scene (default 200 on the GPU, 20 on the CPU)")
    bench.add_argument("--min-seconds", type=_seconds, default=None,
                       help="repeat the timed steps until this much wall time has passed "
                       "(default 1 on the GPU, 0 on the CPU)")
    bench.add_argument("--warmup", type=_whole(1, 30), default=None,
                       help="untimed steps first (default 30 on the GPU, 3 on the CPU)")
    bench.add_argument("--profile-steps", type=_whole(1, 10), default=10,
                       help="steps of the per-stage (synchronised) pass")
    bench.add_argument("--flakes", type=_whole(1, 100000), default=None, help="override every scene's flake count")
    bench.add_argument("--seed", type=_whole(0, 1), default=None)
    bench.add_argument("--wind-boundary", choices=WIND_BOUNDARIES, default=None,
                       help="how the terrain meets the wind (default: cut_cells; voxels: the "
                            "staircase, faster)")
    bench.add_argument("--blender", action="store_true",
                       help="also run Blender's particle system on the same scenes (needs bpy)")
    bench.add_argument("--blender-frames", type=_whole(2, 12), default=12,
                       help="frames of the Blender run (the first, emitting, is not timed)")
    bench.add_argument("--blender-max-particles", type=_whole(1, 2000000), default=2_000_000)
    bench.add_argument("--compete", action="store_true",
                       help="also time each scene while another process keeps one core busy "
                       "(as Blender's own thread does during a bake)")
    bench.add_argument("--bake", action="store_true",
                       help="instead of steps/s: bake --scenes (default cpu-small) without "
                       "Blender through the add-on's output code, and report simulation time, "
                       "output time, bytes per flake-frame and the disk's write limit")
    bench.add_argument("--bake-frames", type=_whole(2, 24), default=24,
                       help="frames per bake (default 24)")
    bench.add_argument("--bake-scene", nargs="+", default=[],
                       choices=("box_test", "mountain_valley"), metavar="SAMPLE",
                       help="also bake these sample scenes in Blender with the add-on (needs bpy)")
    bench.add_argument("--bake-disk-mib", type=_whole(1, 256), default=256,
                       help="MiB written to measure the disk's write speed (default 256)")
    bench.add_argument("--out", default="", metavar="RESULTS.json", help="write all figures as JSON")
    return parser


def cmd_benchmark(args) -> int:
    """``snowfall benchmark``: the harness (benchmarks/harness.py) with these arguments."""
    from ..benchmarks import harness

    return harness.run(args)


def main(argv=None) -> int:
    """Entry point: returns the exit status (0, or 2 for bad arguments or settings)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv
        check_arguments(args)
    except BadArgument as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help printed: its status
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    handler = {"presets": cmd_presets, "simulate": cmd_simulate, "benchmark": cmd_benchmark}
    try:
        return handler[args.command](args)
    except SnowInputError as exc:
        print(f"snowfall {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
