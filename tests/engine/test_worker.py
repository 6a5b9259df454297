"""The simulation thread (snow_addon/worker.py) and the kernels' compile cache folder
(snow_addon/kernel_cache.py): the pieces that keep Blender's UI thread free during a bake."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from snowfall.snow_addon import kernel_cache
from snowfall.snow_addon.worker import EngineWorker


def test_tasks_run_in_order_on_one_thread_that_is_not_the_callers():
    worker = EngineWorker()
    order, threads = [], set()

    def job(name):
        def run(task):
            threads.add(threading.get_ident())
            order.append(name)
            return name.upper()
        return run

    tasks = [worker.submit(job(name), name) for name in ("a", "b", "c")]
    for task in tasks:
        assert task.wait(10.0)
    assert order == ["a", "b", "c"] and [t.result for t in tasks] == ["A", "B", "C"]
    assert len(threads) == 1 and threading.get_ident() not in threads
    worker.shutdown(timeout=5.0)


def test_a_stop_request_ends_a_task_at_its_next_check_and_messages_reach_the_caller():
    worker = EngineWorker()
    started = threading.Event()

    def loop(task):
        count = 0
        while True:
            started.set()
            task.check_stop()
            task.post(count)
            task.report(progress=min(1.0, count / 100.0), stage="looping")
            count += 1
            time.sleep(0.001)

    task = worker.submit(loop, "loop")
    started.wait(10.0)
    time.sleep(0.05)
    task.request_stop()
    assert task.wait(5.0) and task.stopped and task.error is None
    messages = task.take_messages()
    assert messages == list(range(len(messages))) and messages
    assert task.stage == "looping"
    worker.shutdown(timeout=5.0)


def test_an_error_is_kept_for_the_caller_and_the_next_task_still_runs():
    worker = EngineWorker()

    def broken(_task):
        raise ValueError("bad terrain")

    failed = worker.submit(broken, "broken")
    after = worker.submit(lambda task: 42, "after")
    assert after.wait(10.0) and after.result == 42
    assert isinstance(failed.error, ValueError) and "bad terrain" in failed.error_trace
    with pytest.raises(ValueError, match="bad terrain"):
        failed.raise_error()
    worker.shutdown(timeout=5.0)


def test_tasks_ahead_lists_the_running_and_queued_tasks():
    worker = EngineWorker()
    release = threading.Event()
    first = worker.submit(lambda task: release.wait(10.0), "first")
    second = worker.submit(lambda task: None, "second")
    third = worker.submit(lambda task: None, "third")
    while not first.running:
        time.sleep(0.001)
    assert [t.name for t in worker.tasks_ahead_of(third)] == ["first", "second"]
    assert not worker.idle
    release.set()
    assert third.wait(10.0) and worker.tasks_ahead_of(third) == []
    worker.shutdown(timeout=5.0)
    with pytest.raises(RuntimeError):
        worker.submit(lambda task: None, "late")


def test_kernels_compile_into_the_folder_they_are_pointed_at(tmp_path):
    """In a fresh process: after use_folder, a kernel's compiled code lands in that folder
    (not in the package), and Numba's global setting is left as it was."""
    folder = tmp_path / "kernels"
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)
    # Compile one small kernel through a normal call and look for its cache files.
    code_compile = textwrap.dedent(f"""
        from numba.core import config
        from snowfall.snow_addon import kernel_cache
        before = config.CACHE_DIR
        kernel_cache.use_folder({str(folder)!r})
        assert config.CACHE_DIR == before
        from snowfall.kernels.cpu import rng
        values = [rng.random_uniform(7, i, 0, 1) for i in range(3)]
        assert all(0.0 <= v < 1.0 for v in values)
    """)
    result = subprocess.run([sys.executable, "-c", code_compile], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    cached = [name for _root, _dirs, files in os.walk(folder) for name in files]
    assert any(name.endswith(".nbi") for name in cached), cached
    assert any(name.endswith(".nbc") for name in cached), cached


def test_the_compile_parts_leave_nothing_for_the_bake_to_compile(tmp_path):
    """From an empty folder: the two child processes (the "wind" and "flakes" parts) compile
    every kernel a default bake runs, so that the process that bakes only loads them: in a
    fresh process, a warm-up (a tiny bake with every default feature) then finds each kernel
    it calls in the folder (no Numba cache miss)."""
    folder = str(tmp_path / "kernels")
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)
    code = textwrap.dedent(f"""
        import importlib, json
        from numba.core.registry import CPUDispatcher
        from snowfall.snow_addon import kernel_cache
        kernel_cache.use_folder({folder!r})
        kernel_cache.compile_in_processes({folder!r})
        kernel_cache.warm_up(None)
        misses, hits = [], 0
        for name in kernel_cache.CPU_KERNEL_MODULES:
            module = importlib.import_module("snowfall.kernels.cpu." + name)
            for attribute, value in vars(module).items():
                if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__:
                    hits += sum(value.stats.cache_hits.values())
                    if value.stats.cache_misses:
                        misses.append(name + "." + attribute)
        print(json.dumps({{"misses": sorted(set(misses)), "hits": hits}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["misses"] == [], found
    assert found["hits"] >= 30, found


def test_a_finished_warm_up_is_recorded_for_this_kernel_source_only(tmp_path):
    folder = str(tmp_path)
    assert kernel_cache.prepared(folder) is None
    assert kernel_cache.expected_seconds(folder) == kernel_cache.FIRST_USE_SECONDS
    progress = []
    seconds = kernel_cache.warm_up(folder, report=lambda share, _s: progress.append(share))
    assert seconds > 0.0 and progress[-1] == 1.0 and progress == sorted(progress)
    marker = kernel_cache.prepared(folder)
    assert marker is not None and marker["key"] == kernel_cache.source_key()
    # Another kernel version (a marker with another key) is not taken as prepared, but its
    # measured compile time still sets the expected wait.
    path = os.path.join(folder, kernel_cache.MARKER_NAME)
    with open(path, encoding="utf-8") as stream:
        stale = json.load(stream)
    stale["key"], stale["compile_seconds"] = "older kernels", 77.0
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(stale, stream)
    assert kernel_cache.prepared(folder) is None
    assert kernel_cache.expected_seconds(folder) == 77.0


def test_kernels_at_another_path_do_not_take_the_folder_as_prepared(tmp_path):
    # Numba files a compiled kernel in the folder under its source file's folder; the same
    # kernels loaded from another path compile again, so the folder's marker must not say
    # ready for them (their first Bake would compile on the bake's thread, holding
    # Blender's for seconds at a time); unpacked again (new file times) they are found
    kernels = Path(kernel_cache.__file__).resolve().parents[1] / "kernels"
    copy = tmp_path / "kernels"
    shutil.copytree(kernels, copy, ignore=shutil.ignore_patterns("__pycache__"))
    moved = kernel_cache.source_key(copy / "cpu")
    assert moved != kernel_cache.source_key(kernels / "cpu")
    flakes = copy / "cpu" / "flakes.py"
    status = os.stat(flakes)
    os.utime(flakes, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    assert kernel_cache.source_key(copy / "cpu") == moved
    flakes.write_text(flakes.read_text() + "\n")
    assert kernel_cache.source_key(copy / "cpu") != moved


def test_a_warm_up_stops_when_asked():
    class Stop(Exception):
        pass

    calls = []

    def check_stop():
        calls.append(1)
        raise Stop()

    with pytest.raises(Stop):
        kernel_cache.warm_up(None, check_stop=check_stop)
    assert calls == [1]
