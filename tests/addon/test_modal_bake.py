"""The modal Bake path (invoke, timer events, Esc) driven with a stand-in window manager:
background Blender runs no timers, so the operator's own invoke/modal methods are called
here with the events a window would send. The simulation runs on the add-on's simulation
thread (operators/engine.py); Blender's thread only polls it."""
import threading
import time
from types import MethodType, SimpleNamespace

import bpy
import numpy as np
import pytest

from snowfall.operators import engine, snow_surface
from snowfall.operators.bake import BakeJob, SNOWFALL_OT_bake, running_job
from snowfall.snow_addon.simulation import Simulation


class FakeWindowManager:
    """Records what the operator asks of Blender's window manager."""

    def __init__(self):
        self.progress = []
        self.timers_added = self.timers_removed = 0
        self.handlers = []
        self.ended = False
        self.confirms = []

    def event_timer_add(self, _step, window=None):
        self.timers_added += 1
        return object()

    def event_timer_remove(self, _timer):
        self.timers_removed += 1

    def modal_handler_add(self, operator):
        self.handlers.append(operator)

    def progress_begin(self, _low, _high):
        pass

    def progress_update(self, value):
        self.progress.append(value)

    def progress_end(self):
        self.ended = True

    def invoke_confirm(self, operator, event, **texts):
        self.confirms.append(texts)
        return {"RUNNING_MODAL"}


def _modal_operator(scene):
    """An object that runs SNOWFALL_OT_bake's invoke/modal code, and a context that forwards
    to Blender's real context except for the window manager and status bar."""
    status = []
    wm = FakeWindowManager()
    context = SimpleNamespace(
        scene=scene, view_layer=bpy.context.view_layer, window=None, window_manager=wm,
        workspace=SimpleNamespace(status_text_set=status.append), screen=None,
        evaluated_depsgraph_get=bpy.context.evaluated_depsgraph_get,
        preferences=bpy.context.preferences, blend_data=bpy.data)
    reports = []
    operator = SimpleNamespace(resume=False, interactive=False, camera_only=False,
                               camera_margin=0.1, timer_seconds=SNOWFALL_OT_bake.timer_seconds,
                               report=lambda kind, text: reports.append((kind, text)))
    for name in ("_start", "execute", "invoke", "_start_modal", "modal", "_keep_going",
                 "_show_status", "_close", "_end"):
        setattr(operator, name, MethodType(getattr(SNOWFALL_OT_bake, name), operator))
    return operator, context, wm, status, reports


def _event(kind, value="NOTHING"):
    return SimpleNamespace(type=kind, value=value, ctrl=False, oskey=False)


def _tick_until_done(operator, context, timeout=1800.0, until=None):
    """Send timer events (as a window does, every few ms) until the operator ends or
    ``until()`` is true; returns the results in order."""
    results = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        results.append(operator.modal(context, _event("TIMER")))
        if results[-1] != {"RUNNING_MODAL"} or (until is not None and until()):
            return results
        time.sleep(0.005)
    raise AssertionError("the modal bake did not end in time")


def test_modal_bake_simulates_off_blenders_thread(addon, tools, tmp_path, monkeypatch):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    step_threads = set()
    original_step = Simulation.step

    def recording_step(self, count=1):
        step_threads.add(threading.get_ident())
        return original_step(self, count)

    monkeypatch.setattr(Simulation, "step", recording_step)
    operator, context, wm, status, reports = _modal_operator(scene)
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert wm.timers_added == 1 and wm.handlers == [operator]
    assert running_job(scene) is not None
    # Other events pass through to Blender: the UI stays responsive during a bake; undo
    # (which would reload the scene under the bake) waits.
    assert operator.modal(context, _event("MOUSEMOVE")) == {"PASS_THROUGH"}
    undo = SimpleNamespace(type="Z", value="PRESS", ctrl=True, oskey=False)
    assert operator.modal(context, undo) == {"RUNNING_MODAL"}
    assert "undo" in reports[-1][1]
    results = _tick_until_done(operator, context)
    assert results[-1] == {"FINISHED"}, reports
    assert step_threads and threading.main_thread().ident not in step_threads
    assert wm.progress == sorted(wm.progress) and wm.progress[-1] == 1000
    assert any("Snowfall: frame" in text for text in status if text) and status[-1] is None
    assert wm.timers_removed == 1 and wm.ended and running_job(scene) is None
    assert snow_surface.baked_frames() == [1, 2, 3, 4]
    assert scene.snowfall.seconds_per_frame > 0.0

    # The same frames as the synchronous (EXEC) bake, bit for bit.
    modal_depth = {f: snow_surface.read_depth_frame(f) for f in (2, 4)}
    bpy.ops.snowfall.free()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    for frame, depth in modal_depth.items():
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), depth)


def test_escape_stops_the_modal_bake_and_keeps_finished_frames(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=12)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    uninterrupted = {f: snow_surface.read_depth_frame(f) for f in (3, 12)}
    bpy.ops.snowfall.free()

    operator, context, wm, _status, reports = _modal_operator(scene)
    operator.invoke(context, None)
    job = running_job(scene)
    _tick_until_done(operator, context, until=lambda: job.stage == "baking"
                     and job.frame >= 3)
    pressed = time.perf_counter()
    result = operator.modal(context, _event("ESC", "PRESS"))
    results = [result] + ([] if result == {"CANCELLED"} else _tick_until_done(operator, context))
    stopped_after = time.perf_counter() - pressed
    assert results[-1] == {"CANCELLED"}
    assert stopped_after < 5.0     # one substep of this tiny scene, plus the last writes
    assert running_job(scene) is None and wm.timers_removed == 1 and wm.ended
    kept = snow_surface.baked_frames()
    assert kept == list(range(1, len(kept) + 1)) and 3 <= len(kept) < 12
    assert scene.snowfall.baked_frame_end == kept[-1]
    assert reports and reports[-1][0] == {"WARNING"} and "Resume" in reports[-1][1]
    np.testing.assert_array_equal(snow_surface.read_depth_frame(3), uninterrupted[3])
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert snow_surface.baked_frames() == list(range(1, 13))
    np.testing.assert_array_equal(snow_surface.read_depth_frame(12), uninterrupted[12])


def test_the_bar_never_steps_back_at_a_frames_end(addon, tools, tmp_path, monkeypatch):
    """Blender's thread reads the bake's progress while the simulation thread ends a frame
    (its substep back to 0, its files handed to the writer, then the frame counted): read
    in that window the progress is the whole frame's, never the frame before's (the bar
    stepped back there, now and then, in a CI run)."""
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    scene.snowfall.substeps = 2
    inside = []
    original = BakeJob._write_frame_files

    def reading_in_the_window(self, frame, first=False):
        if not first:
            inside.append((frame, self.progress))
        return original(self, frame, first)

    monkeypatch.setattr(BakeJob, "_write_frame_files", reading_in_the_window)
    operator, context, wm, _status, reports = _modal_operator(scene)
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert _tick_until_done(operator, context)[-1] == {"FINISHED"}, reports
    assert [frame for frame, _ in inside] == [2, 3, 4]
    assert [progress for _, progress in inside] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert wm.progress == sorted(wm.progress) and wm.progress[-1] == 1000


def test_a_bake_pressed_while_kernels_compile_waits_with_its_own_progress(addon, tools,
                                                                          tmp_path):
    """The first-use compile (engine.WARM_UP_TASK) runs ahead on the simulation thread; a
    Bake pressed meanwhile says so, with the compile's progress, and Esc ends it at once
    with nothing changed."""
    scene = addon
    tools.small_settings(scene, tmp_path, frames=3)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    release = threading.Event()

    def slow_compile(task):
        task.report(0.4)
        release.wait(30.0)

    blocker = engine.worker().submit(slow_compile, engine.WARM_UP_TASK)
    while blocker.progress < 0.4:
        time.sleep(0.01)
    try:
        operator, context, wm, status, reports = _modal_operator(scene)
        assert operator.invoke(context, None) == {"RUNNING_MODAL"}
        for _ in range(3):
            assert operator.modal(context, _event("TIMER")) == {"RUNNING_MODAL"}
        assert "preparing the simulation for first use" in status[-1]
        assert "40%" in status[-1]
        assert running_job(scene).progress == 0.4       # the panel's bar shows the compile
        started = time.perf_counter()
        assert operator.modal(context, _event("ESC", "PRESS")) == {"CANCELLED"}
        assert time.perf_counter() - started < 0.5
        assert running_job(scene) is None and wm.ended
        assert not scene.snowfall.has_bake and scene.snowfall.flake_emitter is None
        assert "nothing was changed" in reports[-1][1]
    finally:
        release.set()
        blocker.wait(30.0)
    # The next Bake runs normally.
    operator, context, wm, status, reports = _modal_operator(scene)
    operator.invoke(context, None)
    assert _tick_until_done(operator, context)[-1] == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2, 3]


def test_bake_asks_before_replacing_an_existing_bake(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=2)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    operator, context, wm, _status, _reports = _modal_operator(scene)
    operator.invoke(context, None)
    assert wm.confirms and "Replace" in wm.confirms[0]["title"]
    assert wm.timers_added == 0 and running_job(scene) is None    # nothing started yet
    assert snow_surface.baked_frames() == [1, 2]
    # Confirmed: Blender runs execute, which bakes beside the UI.
    assert operator.execute(context) == {"RUNNING_MODAL"}
    assert _tick_until_done(operator, context)[-1] == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2]


def test_a_failing_bake_reports_and_leaves_no_running_job(addon, tools, tmp_path, monkeypatch):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=3)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()

    def broken_build(self):
        raise MemoryError("simulated: no memory for the wind grid")

    monkeypatch.setattr("snowfall.operators.bake.BakeJob.build_simulation", broken_build)
    operator, context, wm, _status, reports = _modal_operator(scene)
    operator.invoke(context, None)
    assert _tick_until_done(operator, context)[-1] == {"CANCELLED"}
    assert running_job(scene) is None and wm.ended
    assert not scene.snowfall.has_bake
    assert reports[-1][0] == {"ERROR"} and "no memory for the wind grid" in reports[-1][1]


def test_a_run_that_leaves_the_models_range_is_reported_with_the_frames_kept(addon, tools,
                                                                            tmp_path,
                                                                            monkeypatch):
    """check_health fails at the end of frame 4 (on the simulation thread): the modal bake
    ends with an ERROR report that names the setting and the frames kept, frames 1-3 stay
    baked, and no job is left running."""
    from snowfall.snow_addon import simulation
    from snowfall.snow_addon.errors import SnowSimulationError

    scene = addon
    tools.small_settings(scene, tmp_path, frames=8)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    checks = []

    def check_health(self):
        checks.append(self.step_index)
        if len(checks) == 3:           # the end of frame 4 (frame 1 is the start)
            raise SnowSimulationError("upwind_fetch", "simulated: the snow piled up to the "
                                      "wind grid's top", "Upwind Fetch 'Wrap'")

    monkeypatch.setattr(simulation.Simulation, "check_health", check_health)
    operator, context, wm, _status, reports = _modal_operator(scene)
    operator.invoke(context, None)
    assert _tick_until_done(operator, context)[-1] == {"CANCELLED"}
    assert running_job(scene) is None and wm.ended
    assert snow_surface.baked_frames() == [1, 2, 3]
    assert scene.snowfall.baked_frame_end == 3
    kind, text = reports[-1]
    assert kind == {"ERROR"} and "frames 1-3 are kept" in text and "upwind_fetch" in text
    assert "Wrap" in text
