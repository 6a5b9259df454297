"""Operators whose heavy part runs on the simulation thread (operators/engine.py).

An operator using ``BackgroundOperator`` defines ``prepare(context)``: on Blender's thread it
validates and reads what it needs (raising SnowInputError with nothing changed) and returns
``(work, apply)``. ``work(task)`` runs on the simulation thread (no Blender data; it may call
``task.report``, ``task.check_stop`` and ``task.post``), ``apply(context, result)`` back on
Blender's thread changes the file and returns the operator's result. ``on_message(context,
message)`` receives what ``work`` posted, as it arrives (a preview showing its progress).

Invoked from the UI the operator polls the task from a timer: the window keeps redrawing and
Esc stops it (``apply`` then never runs, nothing changes). Run as a script (EXEC) it runs the
same two halves at once, on the calling thread.
"""
from __future__ import annotations

import time

from ..snow_addon.errors import SnowInputError
from ..snow_addon.worker import Task
from . import engine


def status_of(task, label: str) -> str:
    """The status bar's line for a task waiting for or running on the simulation thread."""
    ahead = engine.worker().tasks_ahead_of(task)
    warm_up = next((t for t in ahead if t.name == engine.WARM_UP_TASK), None)
    if warm_up is not None:
        return (f"{label}: preparing the simulation for first use (compiling the CPU "
                f"kernels, {100.0 * warm_up.progress:.0f}%)  (Esc to stop)")
    if ahead:
        return f"{label}: waiting for {ahead[0].name}  (Esc to stop)"
    return f"{label}: {task.stage} ({100.0 * task.progress:.0f}%)  (Esc to stop)"


class BackgroundOperator:
    """Mixin for bpy operators: see the module's docstring."""

    #: Seconds between two polls of the simulation thread.
    poll_seconds = 0.05

    def prepare(self, context):
        raise NotImplementedError

    def on_message(self, context, message) -> None:
        pass

    def on_stopped(self, context) -> None:
        """Esc: the task was asked to stop (its result is dropped)."""

    def execute(self, context):
        try:
            work, apply = self.prepare(context)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        task = Task(work, self.bl_label)
        task._run()                                   # on this thread
        for message in task.take_messages():
            self.on_message(context, message)
        if task.error is not None:
            if isinstance(task.error, SnowInputError):
                self.report({"ERROR"}, str(task.error))
                return {"CANCELLED"}
            task.raise_error()
        return apply(context, task.result)

    def invoke(self, context, _event):
        try:
            work, self._apply = self.prepare(context)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        self._task = engine.worker().submit(work, self.bl_label)
        self._started = time.perf_counter()
        wm = context.window_manager
        self._timer = wm.event_timer_add(self.poll_seconds, window=context.window)
        wm.modal_handler_add(self)
        wm.progress_begin(0, 1000)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        task = self._task
        if event.type in {"ESC", "RIGHTMOUSE"} and event.value == "PRESS":
            task.request_stop()
            for message in task.take_messages():
                self.on_message(context, message)
            self._end(context)
            self.on_stopped(context)
            self.report({"WARNING"}, f"{self.bl_label}: stopped; nothing was changed")
            return {"CANCELLED"}
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        for message in task.take_messages():
            self.on_message(context, message)
        if not task.done:
            context.window_manager.progress_update(int(1000 * task.progress))
            if context.workspace is not None:
                context.workspace.status_text_set(status_of(task, self.bl_label))
            return {"RUNNING_MODAL"}
        self._end(context)
        if task.error is not None:
            if isinstance(task.error, SnowInputError):
                self.report({"ERROR"}, str(task.error))
            else:
                print(task.error_trace)
                self.report({"ERROR"}, f"{self.bl_label} failed ({type(task.error).__name__}: "
                            f"{task.error}); the console has the details")
            return {"CANCELLED"}
        try:
            return self._apply(context, task.result)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}

    def _end(self, context):
        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        if context.workspace is not None:
            context.workspace.status_text_set(None)
