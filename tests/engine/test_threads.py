"""The CPU kernels' thread governor (snow_addon.threads): it keeps every thread while they
step fastest, gives one up when a busy core makes fewer faster, takes it back when the
core is free again, and switching between steps changes no bit of the bake."""
import numba
import numpy as np
import pytest

from snowfall.snow_addon import Simulation, SnowSettings
from snowfall.snow_addon.scenes import box_test
from snowfall.snow_addon.threads import ThreadGovernor, cpu_thread_governor
from snowfall.snow_addon.backend import select_backend


def _drive(governor, step_seconds, steps):
    """Feed ``steps`` steps whose wall time is ``step_seconds(threads)``; the thread count
    of each step, in order."""
    used = []
    for _ in range(steps):
        used.append(governor.threads)
        governor.step_done(step_seconds(governor.threads))
    return used


def _governor(max_threads=2):
    applied = []
    governor = ThreadGovernor(max_threads, applied.append)
    return governor, applied


IDLE = {2: 0.010, 1: 0.018}          # s per step: two threads step fastest
BUSY = {2: 0.035, 1: 0.019}          # one core taken by another process


def test_an_idle_machine_keeps_every_thread():
    governor, applied = _governor()
    used = _drive(governor, IDLE.__getitem__, 4000)
    assert governor.threads == 2 and governor.changes == 0
    # trials come less and less often: after 16, 32, 64 ... windows of 25 steps (160 here)
    assert governor.trials == 3
    assert used.count(1) / len(used) < 0.05
    assert applied[-1] == 2


def test_a_busy_core_makes_it_give_a_thread_up_at_once():
    governor, _ = _governor()
    _drive(governor, IDLE.__getitem__, 1000)
    used = _drive(governor, BUSY.__getitem__, 1000)
    # the second slow window in a row (10 steps of 35 ms each) asks for a trial: within
    # three windows the steps run at one thread
    assert 1 in used[:30]
    assert used[30:].count(1) / len(used[30:]) > 0.95
    assert used.count(1) / len(used) > 0.9
    assert governor.threads == 1


def test_it_takes_the_thread_back_when_the_core_is_free():
    governor, _ = _governor()
    _drive(governor, BUSY.__getitem__, 2000)
    assert governor.threads == 1
    used = _drive(governor, IDLE.__getitem__, 3000)
    assert governor.threads == 2
    # at most the longest gap (64 windows of 14 steps at 1 thread) before the trial
    assert used.index(2) <= 64 * 14 + 14


def test_a_middle_count_is_found_among_several():
    """With 8 threads and a machine where 6 step fastest, the governor walks down to 6."""
    cost = {n: 0.010 * (8 / n if n <= 6 else 8 / 6 * (1 + 0.5 * (n - 6))) for n in range(1, 9)}
    governor, _ = _governor(8)
    _drive(governor, cost.__getitem__, 20000)
    assert governor.threads == 6


def test_no_governor_for_the_gpu_the_reference_or_when_turned_off(monkeypatch):
    assert cpu_thread_governor(select_backend("numpy")) is None
    monkeypatch.setenv("SNOWFALL_ADAPTIVE_THREADS", "0")
    assert cpu_thread_governor(select_backend("cpu")) is None
    with pytest.raises(ValueError):
        ThreadGovernor(0, print)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two Numba threads")
def test_switching_threads_between_steps_keeps_the_bake():
    settings = SnowSettings(heightmap_resolution=40, wind_resolution=12, flake_count=3000,
                            snowfall_rate=200.0, wind_speed=12.0, seed=5,
                            obstacle_refresh_steps=5)
    fixed = Simulation(settings, *box_test(), backend="cpu")
    fixed.thread_governor = None
    fixed.step(24)
    switching = Simulation(settings, *box_test(), backend="cpu")
    # every window one step, every trial "wins" whatever the times (a busy machine too):
    # the count flips every other step
    switching.thread_governor = ThreadGovernor(2, numba.set_num_threads,
                                               numba.get_num_threads, window_steps=1,
                                               window_seconds=0.0, first_gap=1, margin=-1e12)
    before = numba.get_num_threads()
    switching.step(24)
    # the count in force before stepping is back afterwards
    assert numba.get_num_threads() == before
    assert switching.thread_governor.changes >= 8
    assert set(switching.thread_governor.steps_at) == {1, 2}
    a, b = fixed.state_dict(), switching.state_dict()

    def leaves(prefix, d):
        for key, value in d.items():
            if isinstance(value, dict):
                yield from leaves(f"{prefix}.{key}", value)
            else:
                yield f"{prefix}.{key}", value

    left, right = dict(leaves("", a)), dict(leaves("", b))
    assert left.keys() == right.keys()
    assert float(np.asarray(fixed.snow_depth()).max()) > 0.0
    for key in left:
        np.testing.assert_array_equal(np.asarray(left[key]), np.asarray(right[key]), err_msg=key)


def test_reset_starts_over_at_every_thread():
    governor, applied = _governor()
    _drive(governor, BUSY.__getitem__, 500)
    assert governor.threads == 1
    governor.reset()
    assert governor.threads == 2 and applied[-1] == 2
    # and it finds the busy core again as at the start
    _drive(governor, BUSY.__getitem__, 500)
    assert governor.threads == 1


def test_apply_returns_the_count_in_force_and_restore_sets_it_back():
    counts = [3]
    governor = ThreadGovernor(4, counts.append, lambda: counts[-1])
    assert governor.apply() == 3 and counts[-1] == 4
    governor.restore(3)
    assert counts[-1] == 3
    governor.restore(None)             # no getter: nothing to set back
    assert counts[-1] == 3
