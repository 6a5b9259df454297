"""The public engine API end to end on small scenes: stepping, determinism, checkpoints,
conservation, and bad input that allocates nothing."""
import numpy as np
import pytest

from snowfall.snow_addon import SnowInputError, SnowMemoryError, SnowSettings, Simulation
from snowfall.snow_addon import simulation as simulation_module
from snowfall.snow_addon.options import SolverOptions
from snowfall.snow_addon.scenes import box_test, gaussian_hill
from snowfall.snow_addon.wind import wind_schedule


def small_settings(**changes):
    base = SnowSettings(heightmap_resolution=48, wind_resolution=16, flake_count=3000,
                        snowfall_rate=20.0, wind_speed=4.0, seed=5)
    return base.replace(**changes)


@pytest.fixture(scope="module")
def hill():
    return gaussian_hill(40.0, 8.0, 8.0, 33)


def test_steps_and_reports_diagnostics(hill):
    sim = Simulation(small_settings(), *hill, backend="cpu")
    assert sim.backend.name == "cpu" and sim.backend.reason
    d = sim.step(12)
    assert d.step == 12 and d.time == pytest.approx(12 / 24)
    assert d.wind.iterations >= 1 and d.wind.relative_residual <= sim.settings.pressure_tolerance
    assert d.wind.divergence_after < d.wind.divergence_before
    assert d.deposited_volume > 0.0
    assert d.snow_volume == pytest.approx(d.deposited_volume, rel=1e-5)
    positions = sim.flake_positions()
    assert positions.shape == (3000, 3) and positions.dtype == np.float32
    assert np.isfinite(positions).all()
    g = sim.grid
    # across the wind inside the domain; along it none downwind of the domain (with the
    # open upwind fetch, the default, flakes start upwind of it and blow in)
    assert (positions[:, 1] >= g.y0).all() and (positions[:, 1] < g.y0 + g.ny * g.cell_size).all()
    assert (positions[:, 0] < g.x0 + g.nx * g.cell_size).all()
    assert (positions[:, 2] < g.top + 1e-3).all()
    depth = sim.snow_depth()
    assert depth.shape == sim.heightmap.grid.shape and (depth >= 0).all()


def test_same_seed_same_bake_and_other_seed_differs(hill):
    a = Simulation(small_settings(), *hill, backend="cpu")
    b = Simulation(small_settings(), *hill, backend="cpu")
    c = Simulation(small_settings(seed=6), *hill, backend="cpu")
    for sim in (a, b, c):
        sim.step(10)
    np.testing.assert_array_equal(a.flake_positions(), b.flake_positions())
    np.testing.assert_array_equal(a.snow_depth(), b.snow_depth())
    np.testing.assert_array_equal(a.wind_field().u, b.wind_field().u)
    assert not np.array_equal(a.flake_positions(), c.flake_positions())


def test_checkpoint_resume_equals_uninterrupted(hill, tmp_path):
    settings = small_settings(obstacle_refresh_steps=4)
    straight = Simulation(settings, *hill, backend="cpu")
    straight.step(14)

    first = Simulation(settings, *hill, backend="cpu")
    first.step(6)
    path = first.save_state(tmp_path / "state.npz")
    resumed = Simulation(settings, *hill, backend="cpu")
    resumed.load_state(path)
    assert resumed.step_index == 6
    resumed.step(8)
    np.testing.assert_array_equal(resumed.flake_positions(), straight.flake_positions())
    np.testing.assert_array_equal(resumed.flake_velocities(), straight.flake_velocities())
    np.testing.assert_array_equal(resumed.snow_depth(), straight.snow_depth())
    np.testing.assert_array_equal(resumed.wind_field().w, straight.wind_field().w)
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz"]  # no temporary left behind


def test_snow_volume_conserved_over_long_run_with_redistribution():
    vertices, triangles = box_test()
    settings = small_settings(flake_count=2000, heightmap_resolution=40, wind_resolution=12,
                              snowfall_rate=400.0, angle_of_repose=20.0,
                              redistribution_fraction=0.25, obstacle_refresh_steps=50)
    sim = Simulation(settings, vertices, triangles, backend="cpu")
    d = sim.step(2000)
    assert d.deposited_volume > 0
    assert d.snow_volume == pytest.approx(d.deposited_volume, rel=1e-5)


def test_wind_only_simulation_has_no_flakes(hill):
    sim = Simulation(small_settings(), *hill, backend="cpu", flakes=False)
    d = sim.step(3)
    assert d.wind.iterations >= 1 and d.snow_volume == 0.0
    with pytest.raises(SnowInputError, match="flakes"):
        sim.flake_positions()
    field = sim.wind_field()
    assert field.u.shape == (sim.grid.nz, sim.grid.ny, sim.grid.nx + 1)
    speed = np.linalg.norm(sim.wind_at([[0.0, 0.0, sim.grid.top - 1.0]]), axis=1)
    assert 1.0 < speed[0] < 10.0


@pytest.mark.parametrize("changes, setting", [
    ({"flake_count": 0}, "flake_count"),
    ({"time_step": -1.0}, "time_step"),
    ({"wind_cell_size": 0.0}, "wind_cell_size"),
    ({"heightmap_resolution": 2}, "heightmap_resolution"),
    ({"pressure_solver": "magic"}, "pressure_solver"),
    ({"snow_type": "slush"}, "snow_type"),
    ({"redistribution_fraction": 0.5}, "redistribution_fraction"),
    ({"wind_courant": 0.0}, "wind_courant"),
    ({"wind_courant": float("nan")}, "wind_courant"),
    ({"wind_courant": 5.0}, "wind_courant"),
])
def test_bad_settings_name_the_setting(hill, changes, setting):
    with pytest.raises(SnowInputError) as info:
        Simulation(small_settings(**changes), *hill, backend="cpu")
    assert info.value.setting == setting and info.value.suggestion


def test_too_many_flakes_fails_before_allocating(hill, monkeypatch):
    from snowfall.snow_addon import backend as backend_module

    allocations = []
    original = simulation_module.FlakeSystem.__init__

    def spy(self, *args, **kwargs):
        allocations.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(simulation_module.FlakeSystem, "__init__", spy)
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: 64 * 1024**2)
    with pytest.raises(SnowMemoryError) as info:
        Simulation(small_settings(flake_count=50_000_000), *hill, backend="cpu")
    assert info.value.setting == "flake_count"
    assert "flake_count <=" in info.value.suggestion
    assert allocations == []


def test_rejected_state_leaves_the_simulation_unchanged(hill):
    sim = Simulation(small_settings(), *hill, backend="cpu")
    sim.step(3)
    state = sim.state_dict()
    before = sim.state_dict()
    state["cover.snow_depth"] = state["cover.snow_depth"].astype(np.float64)  # wrong dtype
    state["wind.u"] = state["wind.u"] + np.float32(1.0)                        # loads first
    state["step_index"] = np.int64(99)
    with pytest.raises(SnowInputError):
        sim.load_state_dict(state)
    after = sim.state_dict()
    assert sim.step_index == 3
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    with pytest.raises(SnowInputError, match="step_index"):
        sim.load_state_dict({k: v for k, v in before.items() if k != "step_index"})
    wind_only = Simulation(small_settings(), *hill, backend="cpu", flakes=False)
    with pytest.raises(SnowInputError, match="flakes"):
        wind_only.load_state_dict(before)



def test_wind_schedule_keeps_the_peak_inflow_courant_number_at_most_the_target():
    def schedule(cell_size, time=0.0, **changes):
        return wind_schedule(SnowSettings(**changes), cell_size, time)

    # 4 m cells, 5 m/s with 30% gusts: Courant 0.068 per 1/24 s step -> a solve every 3 steps
    assert schedule(4.0, wind_speed=5.0, gust_strength=0.3) == (3, 1)
    # 2.5 m cells, 10 m/s with 20% gusts: 0.2 per step -> every step
    assert schedule(2.5, wind_speed=10.0, gust_strength=0.2) == (1, 1)
    # 0.5 m cells, 10 m/s with 20% gusts: 1.0 per step -> 4 sub-steps of 0.25
    assert schedule(0.5, wind_speed=10.0, gust_strength=0.2) == (1, 4)
    assert schedule(0.5, wind_speed=10.0, gust_strength=0.2, wind_courant=1.0) == (1, 1)
    # the wind at that time counts (keys: 2 m/s at 0 s, 12 m/s from 5 s); caps on both sides
    keys = ((0.0, 2.0, 0.0), (5.0, 12.0, 0.0))
    assert schedule(0.5, 0.0, wind_keys=keys, gust_strength=0.0) == (1, 1)
    assert schedule(0.5, 5.0, wind_keys=keys, gust_strength=0.0) == (1, 4)
    assert schedule(4.0, wind_speed=0.0) == (4, 1)
    assert schedule(0.05, wind_speed=50.0) == (1, 8)


def test_wind_solved_on_its_schedule_equals_a_wind_stepped_alone(hill):
    """A solve every 3 steps advances the wind by 3 steps' time at steps 0, 3, 6, ... and
    holds it in between; 3 sub-steps per step advance it 3 times by a third of a step.
    Both give a wind stepped with that time step alone (to float32 rounding: the initial
    obstacle projection scales by the frame's time step, which cancels only to rounding;
    the solves to their tolerance carry it to 1.7e-6 m/s with the side walls, under 1e-6
    with open sides, against a 5.2 m/s inflow)."""
    def wind_only(time_step, courant):
        settings = small_settings(time_step=time_step, wind_courant=courant,
                                  obstacle_refresh_steps=1000)
        return Simulation(settings, *hill, backend="cpu", flakes=False)

    # peak inflow 5.2 m/s over 2.5 m cells; target Courant number 0.6
    plain = wind_only(0.25, 0.6)                  # 0.52 per step: every step
    every_third = wind_only(1.0 / 12.0, 0.6)      # 0.17 per step: every third step
    in_thirds = wind_only(0.75, 0.6)              # 1.56 per step: 3 sub-steps
    fields = []
    for _ in range(4):
        every_third.step(1)
        fields.append(every_third.wind_field().u.copy())
    np.testing.assert_array_equal(fields[1], fields[0])
    np.testing.assert_array_equal(fields[2], fields[0])
    assert not np.array_equal(fields[3], fields[0])
    assert every_third.wind_solves == 2
    plain.step(3)                                 # 3 solves of 0.25 s
    in_thirds.step(1)                             # 3 sub-steps of 0.25 s
    assert (every_third.wind_interval, every_third.wind_substeps) == (3, 1)
    assert (plain.wind_interval, plain.wind_substeps, plain.wind_solves) == (1, 1, 3)
    assert (in_thirds.wind_interval, in_thirds.wind_substeps, in_thirds.wind_solves) == (1, 3, 3)
    for name in ("u", "v", "w"):
        np.testing.assert_allclose(getattr(in_thirds.wind_field(), name),
                                   getattr(plain.wind_field(), name), rtol=1e-6, atol=3e-6)
    one_solve = wind_only(0.75, 2.0)              # the same 0.75 s in one solve differs
    one_solve.step(1)
    assert one_solve.wind_solves == 1
    assert not np.allclose(one_solve.wind_field().u, plain.wind_field().u, atol=1e-3)


@pytest.mark.parametrize("mixing", [0.0, 1.0])
def test_a_wind_step_begun_ahead_gives_the_same_bake_bit_for_bit(hill, mixing, backend):
    """The GPU begins each wind solve while the flakes of the steps before it are still to
    be queued, its reads of the CG scalars arriving in page-locked memory behind an event
    (Simulation._prefetch_wind); the same operations on the same data, so the same bake.
    On each backend (the CPU with it forced on) against it off: a solve every 2 steps,
    drift and eddies on, an obstacle refresh inside the run (no solve is begun across
    it), checked after whole calls of ``step`` (none left under way)."""
    settings = small_settings(time_step=1.0 / 12.0, wind_courant=0.6, wind_speed=6.0,
                              obstacle_refresh_steps=8, wind_mixing=mixing)
    states = []
    for on in (False, True):
        sim = Simulation(settings, *hill, backend=backend.name,
                         options=SolverOptions(prefetch_wind=on))
        sim.step(13)
        sim.step(11)
        assert sim.wind_interval >= 2 and sim._pending_wind is None
        assert (sim.wind_prefetches > 0) == on
        states.append(sim.state_dict())
    plain, ahead = states
    assert plain.keys() == ahead.keys()
    for key in plain:
        np.testing.assert_array_equal(ahead[key], plain[key], err_msg=key)


GPU_STEPS = 60  # two obstacle refreshes (every 24 steps) and a flake sort (every 32 on the GPU)


def _hill_bake(backend):
    settings = SnowSettings(heightmap_resolution=48, wind_resolution=24, flake_count=200_000,
                            snowfall_rate=20.0, wind_speed=6.0, seed=11,
                            pressure_tolerance=1e-6)
    sim = Simulation(settings, *gaussian_hill(40.0, 8.0, 8.0, 33), backend=backend)
    last = sim.step(GPU_STEPS)
    return {"positions": sim.flake_positions(), "velocities": sim.flake_velocities(),
            "respawns": sim.flake_respawn_counts(), "snow_depth": sim.snow_depth(),
            "snow_volume": last.snow_volume,
            "deposited": last.deposited_volume,
            "hits": last.hits, "divergence_after": last.wind.divergence_after}


@pytest.mark.gpu
def test_gpu_engine_is_deterministic_and_matches_cpu(gpu_backend):
    """The whole engine on the GPU (wind solve with its CUDA graphs and device-side
    diagnostics, flakes with their spatial sort, cover, obstacle refreshes): the same bake
    twice, bit for bit, and against the CPU build. GPU and CPU winds differ by the order of
    CG's float64 dot products (solved to 1e-6 here), so over 60 steps a few flakes near the
    ground land one step apart: tolerances per flake are loose, the counts and the snow
    tight."""
    first, second = _hill_bake("gpu"), _hill_bake("gpu")
    for name in ("positions", "velocities", "respawns", "snow_depth"):
        np.testing.assert_array_equal(first[name], second[name])
    assert first["deposited"] == second["deposited"] and first["hits"] == second["hits"]

    cpu = _hill_bake("cpu")
    assert cpu["respawns"].sum() > 10_000
    same = first["respawns"] == cpu["respawns"]
    assert same.mean() > 0.999
    close = np.abs(first["positions"][same] - cpu["positions"][same]).max(axis=1) < 1e-2
    assert close.mean() > 0.999
    assert first["deposited"] == pytest.approx(cpu["deposited"], rel=2e-3)
    assert first["snow_volume"] == pytest.approx(first["deposited"], rel=1e-5)
    assert first["divergence_after"] < 1e-2


@pytest.mark.parametrize("change, setting", [
    ({"smoothing_pairs": 0}, "smoothing_pairs"), ({"smoothing_pairs": 2.5}, "smoothing_pairs"),
    ({"smoothing_pairs": True}, "smoothing_pairs"),
    ({"read_ahead_history": 0}, "read_ahead_history"),
    ({"extrapolate_pressure": None}, "extrapolate_pressure"),
    ({"read_ahead": "yes"}, "read_ahead"), ({"prefetch_wind": 1}, "prefetch_wind")])
def test_bad_solver_options_name_the_option_before_anything_is_built(hill, change, setting):
    with pytest.raises(SnowInputError) as error:
        Simulation(small_settings(), *hill, backend="cpu", options=SolverOptions(**change))
    assert error.value.setting == setting and "try" in str(error.value)


def test_solver_options_left_unset_take_the_backends_own_choice():
    from snowfall.snow_addon.backend import select_backend

    cpu = SolverOptions().validate().for_backend(select_backend("cpu"))
    assert cpu.read_ahead is False and cpu.prefetch_wind is False
    forced = SolverOptions(read_ahead=True, prefetch_wind=True).for_backend(select_backend("cpu"))
    assert forced.read_ahead is True and forced.prefetch_wind is True


@pytest.mark.parametrize("spoil, setting, words", [
    ("wind_nan", "wind_speed", "stopped being a number"),
    ("wind_fast", "wind_speed", "unstable"),
    ("snow_nan", "snowfall_rate", "stopped being a number"),
    ("snow_tower", "upwind_fetch", "wind grid's top"),
])
def test_check_health_stops_a_run_that_left_the_models_range(hill, backend, spoil, setting,
                                                              words):
    """A healthy run passes check_health; a wind or snow that is not a number, a wind far
    beyond the storm's, or snow up to the wind grid's top raises SnowSimulationError naming
    what to change (the bake calls it before it writes each frame)."""
    from snowfall.snow_addon.errors import SnowSimulationError

    sim = Simulation(small_settings(gust_strength=0.3), *hill, backend=backend.name)
    sim.step(6)
    sim.check_health()
    xp = sim.backend.xp
    if spoil == "wind_nan":
        sim.wind.v[1, 2, 3] = xp.float32(np.nan)
    elif spoil == "wind_fast":
        # 5 x 4 m/s x 1.3 + 10 m/s = 36 m/s is the limit for this storm
        sim.wind.w[2, 2, 2] = xp.float32(-37.0)
    elif spoil == "snow_nan":
        sim.cover.snow_depth[5, 6] = xp.float32(np.nan)
    else:
        sim.cover.snow_depth[7, 9] = sim.grid.top - sim.cover.height[7, 9]
    with pytest.raises(SnowSimulationError) as raised:
        sim.check_health()
    assert raised.value.setting == setting and words in str(raised.value)
    assert raised.value.suggestion
    if spoil == "snow_tower":    # where the deepest snow is
        hm = sim.heightmap.grid
        assert f"x {hm.x0 + 9 * hm.spacing:.1f} m, y {hm.y0 + 7 * hm.spacing:.1f} m" in str(
            raised.value)
        assert "Wrap Around" in raised.value.suggestion
        # with the terrain already wrapped around, the wind is what to change
        sim.settings = sim.settings.replace(upwind_fetch="wrap")
        with pytest.raises(SnowSimulationError) as raised:
            sim.check_health()
        assert raised.value.setting == "wind_speed" and "Wrap" not in str(raised.value)
