"""How many CPU threads the Numba kernels use, chosen while the simulation steps.

A bake rarely has the cores to itself: Blender's own thread, the compositor or a browser
take one. With every core's thread, the kernels' parallel loops then wait at each barrier
for the thread whose core is taken (a CPU step runs about 300 parallel loops): on this
project's 2-core machine cpu-small ran 28-31 steps/s idle with 2 threads and 8.3-8.9 with
another process keeping one core busy, while 1 thread ran 17.1 idle and 16.4 beside the
same process (docs/benchmarks.md, "A busy machine"; with the governor 15.8). No fixed count
is right for both, so ``ThreadGovernor`` measures: it times the steps in windows, and now
and then runs one window with one thread fewer (or more) and keeps whichever count stepped
faster. Two windows in a row much slower than the recent ones at the same count (another
program started) ask for such a trial at once; trials that lose come less and less often
(after 16, 32, 64 ... windows; at most 64 apart below the most threads, so a core that is
free again is taken back, and 1024 at the most), so an idle machine loses few windows to
them.

The results do not depend on the thread count (every kernel's work is cut into shares
independent of it and the reductions sum per share; the flakes' step counts its landings
in chunks per thread, integer sums in any order: tests/engine/test_determinism.py), so
changing it between steps changes no bit of the bake. ``SNOWFALL_ADAPTIVE_THREADS=0``
keeps Numba's own count (for measurements at a fixed count).
"""
from __future__ import annotations

import collections
import os

#: Environment variable that turns the governor off ("0").
ADAPTIVE_THREADS_VARIABLE = "SNOWFALL_ADAPTIVE_THREADS"


class ThreadGovernor:
    """Chooses the thread count of the CPU kernels from the measured step times.

    ``max_threads``: the most threads (Numba's pool); ``set_threads(n)``: applies a count
    (numba.set_num_threads, which holds for the calling thread); ``get_threads()``: the
    count in force (numba.get_num_threads; optional). Call ``apply()`` before stepping in
    a thread, ``step_done(seconds)`` after each step with its wall time, and
    ``restore(previous)`` with what ``apply()`` returned when the stepping stops."""

    def __init__(self, max_threads: int, set_threads, get_threads=None, window_steps: int = 10,
                 window_seconds: float = 0.25, first_gap: int = 16, longest_gap: int = 64,
                 longest_gap_at_max: int = 1024, margin: float = 0.05,
                 slow_factor: float = 1.3, recent_windows: int = 8):
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads}")
        self.max_threads = int(max_threads)
        self._set_threads, self._get_threads = set_threads, get_threads
        #: a window: at least this many steps and this many seconds (the obstacles' refresh
        #: every 10 steps and a wind solve every 1-3 steps average out in it)
        self.window_steps, self.window_seconds = int(window_steps), float(window_seconds)
        #: windows between trials: ``first_gap`` after a change, doubled after each trial
        #: that lost, up to ``longest_gap`` below the most threads (a core that is free
        #: again is found within it) and ``longest_gap_at_max`` at the most (a core that
        #: gets busy is mostly found by the slow window, not by the trials)
        self.first_gap, self.longest_gap = int(first_gap), int(longest_gap)
        self.longest_gap_at_max = int(longest_gap_at_max)
        #: a trial count wins when its window is this much faster (s per step, relative)
        #: than the mean of the last two windows before it
        self.margin = float(margin)
        #: two windows in a row this many times slower than the fastest of the last
        #: ``recent_windows`` windows at the same count start a trial at once
        self.slow_factor = float(slow_factor)
        self.threads = self.max_threads
        #: steps run at each thread count (for reports)
        self.steps_at: collections.Counter = collections.Counter()
        #: trials run and trials won (the count changed)
        self.trials, self.changes = 0, 0
        self._recent = collections.deque(maxlen=max(2, int(recent_windows)))
        self._clear()

    def _clear(self) -> None:
        """The choice's state as at the start: no trial, no windows seen."""
        self._trial: tuple[int, float] | None = None   # (count before it, its s per step)
        self._next_trial_fewer = True    # between 1 and the most: the direction alternates
        self._recent.clear()
        self._gap, self._since_trial, self._slow_windows = self.first_gap, 0, 0
        self._window_time, self._window_count = 0.0, 0

    def reset(self) -> None:
        """Start over at every thread, as at the start of a bake (the step, trial and change
        counts stay)."""
        self._clear()
        self._use(self.max_threads)

    def apply(self) -> int | None:
        """Set the chosen count for the calling thread (Numba's count is per thread);
        returns the count in force before (None without ``get_threads``)."""
        previous = None if self._get_threads is None else int(self._get_threads())
        self._set_threads(self.threads)
        return previous

    def restore(self, previous: int | None) -> None:
        """Set back the count ``apply()`` found (nothing for None)."""
        if previous is not None:
            self._set_threads(previous)

    def step_done(self, seconds: float) -> None:
        """Record one step's wall time (s) at the current count."""
        self.steps_at[self.threads] += 1
        self._window_time += float(seconds)
        self._window_count += 1
        if self._window_count < self.window_steps or self._window_time < self.window_seconds:
            return
        per_step = self._window_time / self._window_count
        self._window_time, self._window_count = 0.0, 0
        self._end_window(per_step)

    def _use(self, threads: int) -> None:
        self.threads = threads
        self._set_threads(threads)

    def _end_window(self, per_step: float) -> None:
        if self._trial is not None:
            before, before_per_step = self._trial
            self._trial = None
            self._since_trial = 0
            self._recent.clear()
            if per_step < before_per_step * (1.0 - self.margin):
                self.changes += 1
                self._gap = self.first_gap
                self._recent.append(per_step)
            else:
                self._use(before)
                at_max = before == self.max_threads
                self._gap = min(2 * self._gap,
                                self.longest_gap_at_max if at_max else self.longest_gap)
                self._recent.append(before_per_step)
            return
        self._since_trial += 1
        # two slow windows in a row: one alone is as often the machine's noise
        if self._recent and per_step > self.slow_factor * min(self._recent):
            self._slow_windows += 1
        else:
            self._slow_windows = 0
        slower = self._slow_windows >= 2
        self._recent.append(per_step)
        if self.max_threads > 1 and (slower or self._since_trial >= self._gap):
            self._slow_windows = 0
            last_two = list(self._recent)[-2:]
            self._start_trial(sum(last_two) / len(last_two), slower)

    def _start_trial(self, per_step: float, slower: bool) -> None:
        """Run the next window at a neighbouring count; ``per_step`` (s) is what it must
        beat."""
        if self.threads == self.max_threads:
            candidate = self.threads - 1
        elif self.threads == 1:
            candidate = 2
        else:
            # a machine that got busier wants fewer threads; otherwise alternate
            fewer = slower or self._next_trial_fewer
            candidate = self.threads - 1 if fewer else self.threads + 1
            self._next_trial_fewer = not self._next_trial_fewer
        if slower:
            self._gap = self.first_gap
        self.trials += 1
        self._trial = (self.threads, per_step)
        self._use(candidate)

    def report(self) -> dict:
        """Steps per thread count, trials and changes so far (JSON-ready)."""
        return {"steps_at_threads": {str(k): v for k, v in sorted(self.steps_at.items())},
                "trials": self.trials, "changes": self.changes, "threads_now": self.threads,
                "max_threads": self.max_threads}


def cpu_thread_governor(backend) -> ThreadGovernor | None:
    """A governor for a CPU backend with more than one Numba thread (None for the GPU and
    the NumPy reference, or when ``SNOWFALL_ADAPTIVE_THREADS`` is "0")."""
    if backend.name != "cpu" or os.environ.get(ADAPTIVE_THREADS_VARIABLE, "1") == "0":
        return None
    import numba

    threads = int(numba.config.NUMBA_NUM_THREADS)
    if threads < 2:
        return None
    return ThreadGovernor(threads, numba.set_num_threads, numba.get_num_threads)
