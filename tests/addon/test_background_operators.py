"""Set Terrain, Measure and Preview Wind invoked from the UI: their heavy part runs on the
simulation thread while Blender's thread only polls it from a timer (driven here with a
stand-in window manager, as background Blender runs no timers); Esc stops with nothing
changed."""
import threading
import time
from types import MethodType, SimpleNamespace

import bpy

from snowfall.operators import set_terrain as set_terrain_module
from snowfall.operators.estimates import SNOWFALL_OT_measure
from snowfall.operators.set_terrain import PREVIEW_NAME, SNOWFALL_OT_set_terrain
from snowfall.operators.wind_preview import SNOWFALL_OT_preview_wind
from snowfall.operators.shown_wind import ShownWind


class FakeWindowManager:
    def __init__(self):
        self.timers = 0
        self.ended = False

    def event_timer_add(self, _step, window=None):
        self.timers += 1
        return object()

    def event_timer_remove(self, _timer):
        self.timers -= 1

    def modal_handler_add(self, _operator):
        pass

    def progress_begin(self, _low, _high):
        pass

    def progress_update(self, _value):
        pass

    def progress_end(self):
        self.ended = True


def _operator(cls, scene, **properties):
    status, reports = [], []
    wm = FakeWindowManager()
    context = SimpleNamespace(
        scene=scene, view_layer=bpy.context.view_layer, window=None, window_manager=wm,
        workspace=SimpleNamespace(status_text_set=status.append), screen=None, area=None,
        selected_objects=list(bpy.context.selected_objects),
        evaluated_depsgraph_get=bpy.context.evaluated_depsgraph_get,
        preferences=bpy.context.preferences, blend_data=bpy.data)
    operator = SimpleNamespace(bl_label=cls.bl_label, poll_seconds=cls.poll_seconds,
                               report=lambda kind, text: reports.append((kind, text)),
                               **properties)
    for name in ("prepare", "on_message", "on_stopped", "invoke", "modal", "_end"):
        if hasattr(cls, name):
            setattr(operator, name, MethodType(getattr(cls, name), operator))
    for name in ("PUBLISH_SECONDS",):
        if hasattr(cls, name):
            setattr(operator, name, getattr(cls, name))
    return operator, context, wm, status, reports


def _tick(operator, context, timeout=1800.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = operator.modal(context, SimpleNamespace(type="TIMER", value="NOTHING"))
        if result != {"RUNNING_MODAL"}:
            return result
        time.sleep(0.005)
    raise AssertionError("the operator did not end in time")


def test_set_terrain_builds_the_heightmap_off_blenders_thread(addon, tools, tmp_path,
                                                              monkeypatch):
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    built_on = []
    original = set_terrain_module.build_heightmap

    def recording(*args, **kwargs):
        built_on.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(set_terrain_module, "build_heightmap", recording)
    operator, context, wm, _status, reports = _operator(SNOWFALL_OT_set_terrain, scene)
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert _tick(operator, context) == {"FINISHED"}, reports
    assert built_on and built_on[0] != threading.main_thread().ident
    assert scene.snowfall.heightmap_object is not None
    assert scene.snowfall.heightmap_object.name.startswith(PREVIEW_NAME)
    assert len(scene.snowfall.terrain_objects) == 1 and wm.ended and wm.timers == 0


def test_escape_stops_set_terrain_with_nothing_changed(addon, tools, tmp_path, monkeypatch):
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    release = threading.Event()
    original = set_terrain_module.build_heightmap

    def slow(*args, **kwargs):
        release.wait(30.0)
        return original(*args, **kwargs)

    monkeypatch.setattr(set_terrain_module, "build_heightmap", slow)
    operator, context, wm, _status, reports = _operator(SNOWFALL_OT_set_terrain, scene)
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert operator.modal(context, SimpleNamespace(type="TIMER", value="NOTHING")) \
        == {"RUNNING_MODAL"}
    started = time.perf_counter()
    assert operator.modal(context, SimpleNamespace(type="ESC", value="PRESS")) == {"CANCELLED"}
    assert time.perf_counter() - started < 0.5
    release.set()
    operator._task.wait(30.0)
    assert scene.snowfall.heightmap_object is None and len(scene.snowfall.terrain_objects) == 0
    assert reports[-1][0] == {"WARNING"} and wm.ended


def test_preview_wind_shows_the_wind_as_it_develops(addon, tools, tmp_path, monkeypatch):
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    published = []
    original = ShownWind.publish

    def recording(field, step, seconds, source=""):
        published.append((step, threading.get_ident()))
        return original(field, step, seconds, source=source)

    monkeypatch.setattr(ShownWind, "publish", staticmethod(recording))
    operator, context, wm, _status, reports = _operator(SNOWFALL_OT_preview_wind, scene,
                                                        steps=12)
    operator.PUBLISH_SECONDS = 0.0        # every step: shown as it develops
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert _tick(operator, context) == {"FINISHED"}, reports
    steps = [step for step, _thread in published]
    assert steps[-1] == 12 and len(steps) >= 2 and steps == sorted(steps)
    assert {thread for _step, thread in published} == {threading.main_thread().ident}
    assert "Wind preview: 12 steps" in reports[-1][1]


def test_measure_times_a_frame_off_blenders_thread(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    scene.snowfall.seconds_per_frame = 0.0
    operator, context, _wm, _status, reports = _operator(SNOWFALL_OT_measure, scene)
    assert operator.invoke(context, None) == {"RUNNING_MODAL"}
    assert _tick(operator, context) == {"FINISHED"}, reports
    assert scene.snowfall.seconds_per_frame > 0.0 and "s per frame" in reports[-1][1]
