"""The modal Bake path (invoke, timer events, Esc) driven with a stand-in window manager:
background Blender runs no timers, so the operator's own invoke/modal methods are called
here with the events a window would send."""
from types import MethodType, SimpleNamespace

import bpy
import numpy as np

from snowfall.operators import snow_surface
from snowfall.operators.bake import SNOWFALL_OT_bake, running_job


class FakeWindowManager:
    """Records what the operator asks of Blender's window manager."""

    def __init__(self):
        self.progress = []
        self.timers_added = self.timers_removed = 0
        self.handlers = []
        self.ended = False

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


def _modal_operator(scene):
    """An object that runs SNOWFALL_OT_bake's invoke/modal/_end code, and a context that
    forwards to Blender's real context except for the window manager and status bar."""
    status = []
    wm = FakeWindowManager()
    context = SimpleNamespace(
        scene=scene, view_layer=bpy.context.view_layer, window=None, window_manager=wm,
        workspace=SimpleNamespace(status_text_set=status.append), screen=None,
        evaluated_depsgraph_get=bpy.context.evaluated_depsgraph_get,
        preferences=bpy.context.preferences, blend_data=bpy.data)
    reports = []
    operator = SimpleNamespace(resume=False, budget_seconds=SNOWFALL_OT_bake.budget_seconds,
                               report=lambda kind, text: reports.append((kind, text)))
    for name in ("_start", "invoke", "modal", "_end"):
        setattr(operator, name, MethodType(getattr(SNOWFALL_OT_bake, name), operator))
    return operator, context, wm, status, reports


def _event(kind, value="NOTHING"):
    return SimpleNamespace(type=kind, value=value)


def test_modal_bake_steps_on_timer_events_and_reports_progress(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=4)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    operator, context, wm, status, reports = _modal_operator(scene)
    operator.budget_seconds = 0.0          # one substep per timer event: many events
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert wm.timers_added == 1 and wm.handlers == [operator]
    assert running_job(scene) is not None
    # Other events pass through to Blender: the UI stays responsive during a bake.
    assert operator.modal(context, _event("MOUSEMOVE")) == {"PASS_THROUGH"}
    results = []
    for _ in range(100):
        results.append(operator.modal(context, _event("TIMER")))
        if results[-1] == {"FINISHED"}:
            break
    assert results[-1] == {"FINISHED"} and results.count({"RUNNING_MODAL"}) >= 3
    assert wm.progress == sorted(wm.progress) and wm.progress[-1] == 1000
    assert any("Snowfall: frame" in text for text in status if text) and status[-1] is None
    assert wm.timers_removed == 1 and wm.ended and running_job(scene) is None
    assert snow_surface.baked_frames() == [1, 2, 3, 4]

    # The same frames as the synchronous (EXEC) bake.
    modal_depth = {f: snow_surface.read_depth_frame(f) for f in (2, 4)}
    bpy.ops.snowfall.free()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    for frame, depth in modal_depth.items():
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), depth)


def test_escape_stops_the_modal_bake_and_keeps_finished_frames(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path, frames=6)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    operator, context, wm, _status, reports = _modal_operator(scene)
    operator.budget_seconds = 0.0
    operator.invoke(context, None)
    for _ in range(5):                     # 5 substeps of 2 per frame: frame 3 done, 4 half
        assert operator.modal(context, _event("TIMER")) == {"RUNNING_MODAL"}
    assert operator.modal(context, _event("ESC", "PRESS")) == {"CANCELLED"}
    assert running_job(scene) is None and wm.timers_removed == 1 and wm.ended
    assert snow_surface.baked_frames() == [1, 2, 3]
    assert scene.snowfall.baked_frame_end == 3
    assert reports and reports[-1][0] == {"WARNING"} and "Resume" in reports[-1][1]
    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert snow_surface.baked_frames() == [1, 2, 3, 4, 5, 6]
