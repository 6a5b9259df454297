"""One background thread for the simulation's heavy work, beside an application's UI thread.

Blender's add-on hands every piece of engine work that can take longer than a frame (first-use
kernel compilation, building a heightmap, a bake's simulation steps, a wind preview) to an
``EngineWorker``. Its tasks run one at a time, in order, on one thread: the CPU kernels use
Numba's threading layer, which must not be entered from two threads at once, and nothing else
in the engine is shared between threads. The UI thread polls a ``Task`` (``done``, ``progress``,
``stage``, ``messages``) from a timer and asks it to stop with ``request_stop()``; the task's
function checks ``task.stopping`` between its units of work.

No bpy here: the worker is tested, and usable, without Blender.
"""
from __future__ import annotations

import queue
import threading
import time
import traceback
from typing import Any, Callable


class TaskStopped(Exception):
    """Raised inside a task's function (by ``Task.check_stop``) to end it early."""


class Task:
    """A unit of work for the worker thread. ``function(task)`` runs there; what it returns
    becomes ``result``, what it raises ``error`` (``TaskStopped``: ``stopped``)."""

    def __init__(self, function: Callable[["Task"], Any], name: str):
        self.function = function
        self.name = name
        self.result: Any = None
        self.error: BaseException | None = None
        self.error_trace = ""
        self.stopped = False
        #: 0..1, and a short sentence for the status bar; written by the task's function.
        self.progress = 0.0
        self.stage = "waiting for the simulation thread"
        self.queued_at = time.perf_counter()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        #: Messages from the worker to the UI thread (``post`` / ``take_messages``).
        self._messages: queue.SimpleQueue = queue.SimpleQueue()

    # --- the worker's side -------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def check_stop(self) -> None:
        if self._stop.is_set():
            raise TaskStopped(self.name)

    def report(self, progress: float | None = None, stage: str | None = None) -> None:
        if progress is not None:
            self.progress = min(1.0, max(0.0, float(progress)))
        if stage is not None:
            self.stage = stage

    def post(self, message: Any) -> None:
        self._messages.put(message)

    # --- the UI thread's side ----------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def running(self) -> bool:
        return self.started_at is not None and not self.done

    def request_stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def take_messages(self) -> list:
        messages = []
        while True:
            try:
                messages.append(self._messages.get_nowait())
            except queue.Empty:
                return messages

    def raise_error(self) -> None:
        """Re-raise the task's error on the calling thread (nothing when it had none)."""
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        self.started_at = time.perf_counter()
        try:
            if self._stop.is_set():
                raise TaskStopped(self.name)
            self.result = self.function(self)
        except TaskStopped:
            self.stopped = True
        except BaseException as error:  # handed to the UI thread, which reports it
            self.error = error
            self.error_trace = traceback.format_exc()
        finally:
            self.finished_at = time.perf_counter()
            self._done.set()


class EngineWorker:
    """A daemon thread running submitted tasks one at a time, in order."""

    def __init__(self, name: str = "snowfall-engine"):
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending: list[Task] = []
        self.current: Task | None = None
        self._closed = False

    def submit(self, function: Callable[[Task], Any], name: str) -> Task:
        task = Task(function, name)
        with self._lock:
            if self._closed:
                raise RuntimeError("the simulation thread was shut down")
            self._pending.append(task)
            self._queue.put(task)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        return task

    def tasks_ahead_of(self, task: Task) -> list[Task]:
        """The tasks that run before ``task`` (the current one first)."""
        with self._lock:
            ahead = [t for t in self._pending if t is not task]
            if task in self._pending:
                ahead = self._pending[:self._pending.index(task)]
            current = self.current
        return ([current] if current is not None and current is not task else []) + ahead

    def shutdown(self, timeout: float = 0.0) -> None:
        """Stop every task (the running one at its next check) and end the thread."""
        with self._lock:
            self._closed = True
            tasks = list(self._pending) + ([self.current] if self.current else [])
            self._queue.put(None)
            thread = self._thread
        for task in tasks:
            task.request_stop()
        if thread is not None and timeout > 0.0:
            thread.join(timeout)

    @property
    def idle(self) -> bool:
        with self._lock:
            return self.current is None and not self._pending

    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            with self._lock:
                if task in self._pending:
                    self._pending.remove(task)
                self.current = task
            try:
                task._run()
            finally:
                with self._lock:
                    self.current = None
