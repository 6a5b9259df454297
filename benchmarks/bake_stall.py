"""How long Blender's main thread is held during a Bake pressed in the UI.

Background Blender (the bpy module) runs no window and no timers, so this drives the Bake
operator's own invoke/modal methods the way Blender's window manager does: an event loop on
the main thread that sends a timer event every ``--tick`` seconds and, between events, does
a little Python work standing in for the UI's redraws. Every iteration of that loop is timed;
a stall is an iteration that took longer than its sleep plus its own work, that is, the time
the main thread could not run the UI. The longest stall, the 99th and 95th percentiles and
the number of iterations over 100 ms are printed for the phase before the first frame
(building the simulation: a first-use kernel compile when the cache is cold) and for the
phase of baking frames, next to the goal (under 100 ms).

    python -m snowfall.benchmarks.bake_stall --scene box_test --frames 24 [--cold]
        [--out results.json] [--dump-stalls stacks.txt]

The add-on is enabled as in an interactive Blender (its kernels start being prepared on the
simulation thread at once) and Bake is pressed right after the scene is built, so the first
phase includes that preparation. ``--cold`` compiles the CPU kernels into a new, empty
folder (SNOWFALL_KERNEL_CACHE), as the first Bake on a machine does; without it, they come
from the add-on's compile cache folder.
The Esc latency (from Esc to the operator returning) is measured at the end of a second,
interrupted bake. ``--dump-stalls`` writes every thread's Python stack whenever Blender's
thread is held over 200 ms: the call that held it. Needs the bpy module (tools/setup.sh).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time


def _percentile(values, share):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * (len(ordered) - 1) + 0.5))]


def _ui_work():
    """About 0.3 ms of Python, standing in for the redraw of a panel."""
    total = 0
    for index in range(3000):
        total += index * index
    return total


def _fake_operator(scene):
    from types import MethodType, SimpleNamespace

    import bpy

    from ..operators.bake import SNOWFALL_OT_bake

    status = []

    class WindowManager:
        def event_timer_add(self, *_a, **_k):
            return object()

        def event_timer_remove(self, _t):
            pass

        def modal_handler_add(self, _op):
            pass

        def progress_begin(self, *_a):
            pass

        def progress_update(self, _v):
            pass

        def progress_end(self):
            pass

    context = SimpleNamespace(
        scene=scene, view_layer=bpy.context.view_layer, window=None,
        window_manager=WindowManager(), workspace=SimpleNamespace(
            status_text_set=status.append), screen=None,
        evaluated_depsgraph_get=bpy.context.evaluated_depsgraph_get,
        preferences=bpy.context.preferences, blend_data=bpy.data)
    reports = []
    operator = SimpleNamespace(resume=False, interactive=False, camera_only=False,
                               camera_margin=0.1, timer_seconds=SNOWFALL_OT_bake.timer_seconds,
                               report=lambda kind, text: reports.append((kind, text)))
    for name in ("_start", "execute", "invoke", "_start_modal", "modal", "_keep_going",
                 "_show_status", "_close", "_end"):
        setattr(operator, name, MethodType(getattr(SNOWFALL_OT_bake, name), operator))
    return operator, context, status, reports


def drive(scene, tick: float, stop_after_frame: int | None = None, dump=None,
          dump_after: float = 0.2) -> dict:
    """Run one modal bake through an emulated event loop; the main thread's stalls.

    ``dump``: an open file; when an iteration of the loop runs ``dump_after`` seconds past
    its sleep, every thread's Python stack is written there (by faulthandler's own thread,
    which needs no GIL), so the call that held Blender's thread shows.
    """
    import faulthandler
    from types import SimpleNamespace

    from ..operators.bake import running_job

    timer = SimpleNamespace(type="TIMER", value="NOTHING")
    operator, context, status, reports = _fake_operator(scene)
    started = time.perf_counter()
    result = operator.invoke(context, None)
    invoke_seconds = time.perf_counter() - started
    job = running_job(scene)
    phases = {"preparing": [], "baking": []}
    esc_seconds = None
    prepared_at = None
    while result == {"RUNNING_MODAL"}:
        before = time.perf_counter()
        if dump is not None:
            faulthandler.dump_traceback_later(tick + dump_after, file=dump)
        time.sleep(tick)
        work_started = time.perf_counter()
        _ui_work()
        work = time.perf_counter() - work_started
        phase = "preparing" if job.stage == "preparing" else "baking"
        if phase == "baking" and prepared_at is None:
            prepared_at = time.perf_counter() - started
        if stop_after_frame is not None and job.stage == "baking" \
                and job.frame >= stop_after_frame:
            pressed = time.perf_counter()
            result = operator.modal(context, SimpleNamespace(type="ESC", value="PRESS"))
            while result == {"RUNNING_MODAL"}:
                time.sleep(tick)
                result = operator.modal(context, timer)
            esc_seconds = time.perf_counter() - pressed
            break
        result = operator.modal(context, timer)
        if dump is not None:
            faulthandler.cancel_dump_traceback_later()
        iteration = time.perf_counter() - before
        # What held the main thread: the iteration's time beyond its sleep and its own UI
        # work (waiting for the GIL after the sleep, and the operator's modal call).
        phases[phase].append(max(0.0, iteration - tick - work))
    total = time.perf_counter() - started
    summary = {"invoke_s": invoke_seconds, "result": sorted(result), "seconds": total,
               "prepared_after_s": prepared_at, "esc_to_stopped_s": esc_seconds,
               "frames": getattr(job, "frame", None),
               "reports": [[sorted(kind), text] for kind, text in reports[-1:]]}
    for phase, stalls in phases.items():
        summary[phase] = {"iterations": len(stalls),
                          "longest_ms": 1e3 * max(stalls, default=0.0),
                          "p99_ms": 1e3 * _percentile(stalls, 0.99),
                          "p95_ms": 1e3 * _percentile(stalls, 0.95),
                          "over_100ms": sum(1 for s in stalls if s > 0.1)}
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m snowfall.benchmarks.bake_stall",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", default="box_test")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--flakes", type=int, default=20000)
    parser.add_argument("--tick", type=float, default=0.01,
                        help="seconds between timer events of the emulated window")
    parser.add_argument("--cold", action="store_true",
                        help="compile the kernels into a new, empty folder first")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--dump-stalls", metavar="FILE",
                        help="write every thread's Python stack here whenever Blender's "
                        "thread is held for over 200 ms (to find the call that holds it)")
    args = parser.parse_args(argv)
    if args.frames < 2 or args.flakes < 1 or args.tick <= 0.0:
        parser.error("--frames must be >= 2, --flakes >= 1 and --tick > 0")
    if args.cold:
        os.environ["SNOWFALL_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="snowfall-kernels-")
    # As in an interactive Blender: enabling the add-on starts preparing the kernels on the
    # simulation thread (compiling them in child processes when the folder is cold), and
    # the Bake below is pressed right after, so it waits for that.
    os.environ["SNOWFALL_PREPARE_KERNELS"] = "1"
    import bpy

    from ..sample_scenes.build import build

    work = tempfile.mkdtemp(prefix="snowfall-stall-")
    build(args.scene, frames=args.frames, flakes=args.flakes)
    scene = bpy.context.scene
    scene.snowfall.backend = "cpu"
    bpy.ops.wm.save_mainfile(filepath=os.path.join(work, "stall.blend"))
    print(f"bake_stall: {args.scene}, {args.frames} frames, {args.flakes:,} flakes, CPU "
          f"({os.cpu_count()} cores, {platform.processor() or platform.machine()}), kernels "
          f"{'cold (empty compile cache)' if args.cold else 'from the compile cache'}",
          flush=True)
    dump = open(args.dump_stalls, "w", encoding="utf-8") if args.dump_stalls else None
    try:
        full = drive(scene, args.tick, dump=dump)
        bpy.ops.snowfall.free()
        interrupted = drive(scene, args.tick, stop_after_frame=max(2, args.frames // 3),
                            dump=dump)
    finally:
        if dump is not None:
            dump.close()
    figures = {"scene": args.scene, "frames": args.frames, "flakes": args.flakes,
               "cold": args.cold, "tick_s": args.tick, "cores": os.cpu_count(),
               "python": sys.version.split()[0], "blender": ".".join(map(str, bpy.app.version)),
               "bake": full, "interrupted": interrupted, "goal_ms": 100.0}
    for name, run in (("bake", full), ("interrupted bake", interrupted)):
        for phase in ("preparing", "baking"):
            p = run[phase]
            print(f"{name:17s} {phase:9s}: {p['iterations']:5d} UI iterations, longest stall "
                  f"{p['longest_ms']:7.1f} ms, p99 {p['p99_ms']:6.1f} ms, p95 "
                  f"{p['p95_ms']:6.1f} ms, {p['over_100ms']} over 100 ms (goal: none over "
                  "100 ms)")
    print(f"invoke {1e3 * full['invoke_s']:.1f} ms; simulation ready after "
          f"{full['prepared_after_s'] or 0:.1f} s; whole bake {full['seconds']:.1f} s; Esc to "
          f"stopped {1e3 * (interrupted['esc_to_stopped_s'] or 0):.0f} ms")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as stream:
            json.dump(figures, stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
