"""The whole engine on the GPU (wind solve with its CUDA graphs and device-side
diagnostics, flakes with their spatial sort, cover, obstacle refreshes): the same bake
twice, bit for bit, and against the CPU build (gpu-marked: skipped with the reason where
CuPy has no device).

GPU and CPU winds differ by the order of CG's float64 dot products (solved to 1e-6 here),
so over 60 steps a few flakes near the ground land one step apart: tolerances per flake
are loose, the counts and the snow tight."""
import numpy as np
import pytest

from snowfall.snow_addon import Simulation, SnowSettings
from snowfall.snow_addon.scenes import gaussian_hill

pytestmark = pytest.mark.gpu
STEPS = 60  # two obstacle refreshes (every 24 steps) and a flake sort (every 32 on the GPU)


def _bake(backend):
    settings = SnowSettings(heightmap_resolution=48, wind_resolution=24, flake_count=200_000,
                            snowfall_rate=20.0, wind_speed=6.0, seed=11,
                            pressure_tolerance=1e-6)
    sim = Simulation(settings, *gaussian_hill(40.0, 8.0, 8.0, 33), backend=backend)
    last = sim.step(STEPS)
    return {"positions": sim.flake_positions(), "velocities": sim.flake_velocities(),
            "respawns": sim.flake_respawn_counts(), "snow_depth": sim.snow_depth(),
            "snow_volume": last.snow_volume,
            "deposited": last.deposited_volume,
            "hits": last.hits, "divergence_after": last.wind.divergence_after}


def test_gpu_engine_is_deterministic_and_matches_cpu(gpu_backend):
    first, second = _bake("gpu"), _bake("gpu")
    for name in ("positions", "velocities", "respawns", "snow_depth"):
        np.testing.assert_array_equal(first[name], second[name])
    assert first["deposited"] == second["deposited"] and first["hits"] == second["hits"]

    cpu = _bake("cpu")
    assert cpu["respawns"].sum() > 10_000
    same = first["respawns"] == cpu["respawns"]
    assert same.mean() > 0.999
    close = np.abs(first["positions"][same] - cpu["positions"][same]).max(axis=1) < 1e-2
    assert close.mean() > 0.999
    assert first["deposited"] == pytest.approx(cpu["deposited"], rel=2e-3)
    assert first["snow_volume"] == pytest.approx(first["deposited"], rel=1e-5)
    assert first["divergence_after"] < 1e-2


@pytest.mark.parametrize("mixing", [0.0, 1.0])
def test_gpu_wind_step_begun_ahead_gives_the_same_bake_bit_for_bit(gpu_backend, monkeypatch,
                                                                   mixing):
    """On the GPU each wind solve begins while the flakes of the steps before it are still
    to be queued, its reads of the CG scalars arriving in page-locked memory behind an
    event (Simulation._prefetch_wind): the same bake as with the solve begun at its step."""
    from snowfall.snow_addon import simulation as simulation_module

    settings = SnowSettings(heightmap_resolution=48, wind_resolution=16, flake_count=50_000,
                            snowfall_rate=20.0, wind_speed=6.0, seed=11, time_step=1.0 / 12.0,
                            wind_courant=0.6, obstacle_refresh_steps=8, wind_mixing=mixing)
    states = []
    for on in (False, True):
        monkeypatch.setattr(simulation_module, "PREFETCH_WIND", {"gpu": on})
        sim = Simulation(settings, *gaussian_hill(40.0, 8.0, 8.0, 33), backend="gpu")
        sim.step(13)
        sim.step(11)
        assert sim.wind_interval >= 2 and (sim.wind_prefetches > 0) == on
        states.append(sim.state_dict())
    for key in states[0]:
        np.testing.assert_array_equal(states[1][key], states[0][key], err_msg=key)
