"""The same settings and seed give the same bake whatever the number of CPU threads:
no result depends on how the parallel loops are split."""
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import sys
import numpy as np
from snowfall.snow_addon import SnowSettings, Simulation
from snowfall.snow_addon.scenes import box_test
settings = SnowSettings(heightmap_resolution=40, wind_resolution=12, flake_count=3000,
                        snowfall_rate=200.0, wind_speed=6.0, seed=11, obstacle_refresh_steps=5)
sim = Simulation(settings, *box_test(), backend="cpu")
sim.step(30)
field = sim.wind_field()
np.savez(sys.argv[1], positions=sim.flake_positions(), velocities=sim.flake_velocities(),
         depth=sim.snow_depth(), u=field.u, v=field.v, w=field.w, pressure=field.pressure)
"""


def _run(threads, path):
    # a fixed count: the thread governor (tested in test_threads.py) would step a busy
    # machine's two-thread run partly at one
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), SNOWFALL_ADAPTIVE_THREADS="0")
    subprocess.run([sys.executable, "-c", SCRIPT, str(path)], check=True, env=env, timeout=600)
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def test_one_thread_and_two_threads_bake_the_same(tmp_path):
    one = _run(1, tmp_path / "one.npz")
    two = _run(2, tmp_path / "two.npz")
    assert one["depth"].max() > 0.0
    for key in one:
        np.testing.assert_array_equal(one[key], two[key], err_msg=key)
