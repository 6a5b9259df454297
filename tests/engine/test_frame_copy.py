"""The bake thread's copy of a frame's flakes (snow_addon.formats.frame_store, no bpy): the respawn
counts the point cache compares carry no engine flag bits, so a flake the wind lifts as a
grain of blowing snow is not taken for a respawned one."""
import numpy as np

from snowfall.kernels.reference.flakes import BLOWING, COUNT_BITS
from snowfall.snow_addon.formats import frame_store
from snowfall.snow_addon import Simulation, SnowSettings
from snowfall.snow_addon.scenes import box_test


def test_copied_respawn_counts_leave_lifted_grains_alone():
    settings = SnowSettings(heightmap_resolution=48, wind_resolution=16, flake_count=3000,
                            snowfall_rate=60.0, wind_speed=12.0, seed=5)
    sim = Simulation(settings, *box_test(), backend="cpu")
    sim.step(60)
    in_id_order = Simulation(settings, *box_test(), backend="cpu")
    in_id_order.flakes.sort_interval = 0        # never sorted: the storage is the id order
    in_id_order.step(60)
    flakes = sim.flakes
    raw = np.asarray(flakes.respawn_count)
    # stored by wind cell (the CPU build's sort), with grains aloft now
    assert not flakes.in_id_order and ((raw & BLOWING) != 0).any()
    copier = frame_store.FlakeCopier(flakes)
    positions, velocities, counts = copier.copy().take()
    np.testing.assert_array_equal(counts, sim.flake_respawn_counts())
    assert not (counts & BLOWING).any()
    np.testing.assert_array_equal(positions, sim.flake_positions())
    np.testing.assert_array_equal(velocities, sim.flake_velocities())
    # in flake-id order: the bits of the same bake whose flakes were never sorted
    assert in_id_order.flakes.in_id_order
    np.testing.assert_array_equal(positions, in_id_order.flake_positions())
    np.testing.assert_array_equal(velocities, in_id_order.flake_velocities())
    np.testing.assert_array_equal(counts, np.asarray(in_id_order.flakes.respawn_count)
                                  & COUNT_BITS)
