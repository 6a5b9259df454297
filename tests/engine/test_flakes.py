"""Snowflakes: terminal speed and drift physics, collision and respawn, wrap, determinism,
resume, and parity of the Numba kernels with the NumPy reference."""
from types import SimpleNamespace

import numpy as np
import pytest

from snowfall.kernels.contract import (FRESH_LIFTS, GRAIN_COUNT_SLOTS, GRAINS_ALOFT, NO_INFLOW,
                                       BlowingSnow, FlakeLaw, FlakeState, Ground, Inflow,
                                       WindField)
from snowfall.kernels.cpu import flakes as cpu_flakes
from snowfall.kernels.reference import flakes as ref_flakes
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.cover import SnowCover
from snowfall.snow_addon.flakes import STATE_NAMES, FlakeSystem
from snowfall.snow_addon.grid import OPEN_HEIGHT, HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings

DT = np.float32(1.0 / 24.0)
G = np.float32(9.81)
GRID = WindGrid(0.0, 0.0, -1.0, 1.0, 8, 6, 12)        # 8 x 6 x 12 m, top at z = 11
HEIGHTMAP = HeightmapGrid(0.0, 0.0, 0.5, 17, 13)      # covers 8 x 6 m


def uniform_wind(grid, wx=0.0, wy=0.0, wz=0.0):
    nz, ny, nx = grid.shape
    return SimpleNamespace(u=np.full((nz, ny, nx + 1), wx, np.float32),
                           v=np.full((nz, ny + 1, nx), wy, np.float32),
                           w=np.full((nz + 1, ny, nx), wz, np.float32))


def noisy_wind(grid, seed=0):
    rng = np.random.default_rng(seed)
    nz, ny, nx = grid.shape
    return SimpleNamespace(u=(2.0 + rng.normal(0, 1, (nz, ny, nx + 1))).astype(np.float32),
                           v=rng.normal(0, 1, (nz, ny + 1, nx)).astype(np.float32),
                           w=rng.normal(0, 0.3, (nz + 1, ny, nx)).astype(np.float32))


def flat_ground(level=0.0):
    return np.full(HEIGHTMAP.shape, level, np.float32), np.zeros(HEIGHTMAP.shape, np.float32)


def rough_ground(seed=0):
    rng = np.random.default_rng(seed)
    height = rng.uniform(0.0, 1.5, HEIGHTMAP.shape).astype(np.float32)
    height[:4, :5] = OPEN_HEIGHT      # a hole: flakes fall through it
    snow = rng.uniform(0.0, 0.2, HEIGHTMAP.shape).astype(np.float32)
    snow[:4, :5] = 0.0
    return height, snow


def state_arrays(n, x, y, z, vx=0.0, vy=0.0, vz=0.0):
    arrays = [np.full(n, value, np.float32) for value in (x, y, z, vx, vy, vz)]
    return arrays + [np.zeros(n, np.float32), np.zeros(n, np.uint32)]


_INFLOW_FIELDS = {"inflow_mode": "mode", "inflow_x": "wind_x", "inflow_y": "wind_y",
                  "margin": "margin"}


def _inflow(keywords):
    """An Inflow from the flat keywords (inflow_mode, inflow_x, ...), NO_INFLOW without."""
    fields = {_INFLOW_FIELDS[k]: keywords.pop(k) for k in list(keywords) if k in _INFLOW_FIELDS}
    return Inflow(**fields) if fields else NO_INFLOW


def step_flat(module, *flat, grain_count=None, **keywords):
    """``module.step_flakes`` called with the flat argument list the tests write out (state,
    wind grid, ground, hits, seed, vt_min, vt_max, spiral radius, gravity, dt), and the
    blowing snow and inflow as keywords, packed into the kernels' records."""
    inflow = _inflow(keywords)
    blowing = BlowingSnow(**keywords) if keywords else None
    module.step_flakes(FlakeState(*flat[:9]), WindField(*flat[9:16]), Ground(*flat[16:21]),
                       FlakeLaw(*flat[22:26], gravity=flat[26]), flat[27], flat[21], blowing,
                       inflow, grain_count)


def initialize_flat(module, *flat, **keywords):
    """``module.initialize_flakes`` with the flat argument list (state, wind grid, ground,
    seed, vt_min, vt_max, spiral radius) and inflow keywords, packed into records."""
    module.initialize_flakes(FlakeState(*flat[:9]), WindField(*flat[9:16]),
                             Ground(*flat[16:21]), FlakeLaw(*flat[21:25]), _inflow(keywords))


def run_kernel(module, flake_id, state, wind, height, snow, hits, seed=1, vt=(1.0, 2.0),
               radius=0.5, grid=GRID, hm=HEIGHTMAP, **lift):
    step_flat(module, flake_id, *state, wind.u, wind.v, wind.w, np.float32(grid.x0),
              np.float32(grid.y0), np.float32(grid.z0), np.float32(grid.cell_size),
              height, snow, np.float32(hm.x0), np.float32(hm.y0), np.float32(hm.spacing),
              hits, seed, np.float32(vt[0]), np.float32(vt[1]), np.float32(radius), G, DT,
              **lift)


def lift_arguments(surface_speed, step_index=0, threshold=0.3, strength=1.0, bubble_top=None,
                   heading=(1.0, 0.0), ustar_per_speed=0.06):
    """Blowing-snow arguments with a uniform surface wind of ``surface_speed`` m/s along x."""
    ny, nx = GRID.shape[1:]
    return {"surface_x": np.full((ny, nx), surface_speed, np.float32),
            "surface_y": np.zeros((ny, nx), np.float32), "ustar_per_speed": ustar_per_speed,
            "threshold": threshold, "heading_x": heading[0], "heading_y": heading[1],
            "lift_strength": strength, "step_index": step_index, "bubble_top": bubble_top}


@pytest.mark.parametrize("vt_range", [(0.5, 1.5), (1.0, 2.0)])
def test_still_air_terminal_speed_monotone(vt_range):
    n = 400
    flake_id = np.arange(n, dtype=np.uint32)
    state = state_arrays(n, 4.0, 3.0, 10.5)          # released at rest high up
    wind = uniform_wind(GRID)
    height, snow = flat_ground(-100.0)                # out of reach
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    vt, _, _ = ref_flakes.flake_constants(1, flake_id, *vt_range, 0.5)
    history = []
    for _ in range(48):                               # two seconds
        run_kernel(cpu_flakes, flake_id, state, wind, height, snow, hits, vt=vt_range)
        history.append(state[5].copy())
    history = np.array(history)
    assert not hits.any() and not state[7].any()
    # no oscillation: speeds grow monotonically and never pass Vt
    assert np.all(np.diff(history, axis=0) <= 1e-6 * vt)
    assert np.all(-history <= vt * (1 + 1e-6))
    # accurate: close to the exact solution from rest, v(t) = Vt tanh(g t / Vt)
    t = DT * np.arange(1, 49)[:, None]
    exact = vt * np.tanh(G * t / vt)
    # (the drag time constant Vt/g is 0.05-0.2 s, about one step: the transient after a
    # release from rest lags by up to 15 % of Vt for Vt = 0.5 m/s and 3 % for Vt >= 1 m/s;
    # flakes spawn in equilibrium with the air, so bakes rarely see such transients)
    error = np.max(np.abs(-history - exact) / vt, axis=0)
    assert np.all(error < 0.15) and np.all(error[vt >= 1.0] < 0.03)
    # within 1 % of Vt after one second, and at Vt (float precision) after two
    assert np.all(np.abs(-history[23] - vt) <= 0.01 * vt)
    np.testing.assert_allclose(-history[-1], vt, rtol=1e-5)
    assert np.all(state[3] == 0.0) and np.all(state[4] == 0.0)   # still air: no sideways drift of v


@pytest.mark.parametrize("snow_type,low,high", [("wet", 0.5, 1.5), ("dry", 1.0, 2.0)])
def test_wet_and_dry_terminal_speeds(snow_type, low, high):
    settings = SnowSettings(flake_count=4000, snow_type=snow_type, seed=5, snowfall_rate=0.0)
    flakes = FlakeSystem(settings, GRID, HEIGHTMAP, select_backend("cpu"))
    wind = uniform_wind(GRID)
    height, snow = flat_ground(0.0)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    flakes.initialize(wind, height, snow)
    for _ in range(30):
        flakes.step(wind, height, snow, hits, 0.0, DT)
    speed = -flakes.velocities()[:, 2]
    assert speed.min() >= low * (1 - 1e-5) and speed.max() <= high * (1 + 1e-5)
    assert abs(speed.mean() - 0.5 * (low + high)) < 0.02
    assert speed.max() - speed.min() > 0.9 * (high - low)     # the whole range is drawn


def test_uniform_wind_drift():
    settings = SnowSettings(flake_count=3000, seed=2, snowfall_rate=0.0)
    flakes = FlakeSystem(settings, GRID, HEIGHTMAP, select_backend("cpu"))
    wind = uniform_wind(GRID, 3.0, -1.0)
    height, snow = flat_ground(0.0)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    flakes.initialize(wind, height, snow)
    flakes.vel_x[:] = 0.0          # start from rest horizontally: the drag must pick up the wind
    flakes.vel_y[:] = 0.0
    for _ in range(48):
        flakes.step(wind, height, snow, hits, 0.0, DT)
    velocity = flakes.velocities()
    np.testing.assert_allclose(velocity[:, 0], 3.0, atol=0.01)
    np.testing.assert_allclose(velocity[:, 1], -1.0, atol=0.01)
    # positions drift with the wind (the spiral averages out over the flakes)
    before = flakes.positions()
    counts = flakes.respawn_counts()
    flakes.step(wind, height, snow, hits, 0.0, DT)
    same = flakes.respawn_counts() == counts
    step = flakes.positions()[same] - before[same]
    lx, ly, _ = GRID.size
    step[:, 0] = (step[:, 0] + lx / 2) % lx - lx / 2          # undo the wrap
    step[:, 1] = (step[:, 1] + ly / 2) % ly - ly / 2
    assert abs(step[:, 0].mean() / DT - 3.0) < 0.05
    assert abs(step[:, 1].mean() / DT + 1.0) < 0.05


def test_sideways_wrap_without_deposit():
    n = 4
    flake_id = np.arange(n, dtype=np.uint32)
    x = np.array([8.3, -0.2, 4.0, 4.0], np.float32)
    y = np.array([3.0, 3.0, 6.25, -0.5], np.float32)
    vt, _, _ = ref_flakes.flake_constants(1, flake_id, 1.0, 2.0, 0.0)
    state = state_arrays(n, 0.0, 0.0, 5.0)
    state[0][:], state[1][:], state[5][:] = x, y, -vt       # in equilibrium with still air
    height, snow = flat_ground(0.0)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(cpu_flakes, flake_id, state, uniform_wind(GRID), height, snow, hits, radius=0.0)
    np.testing.assert_allclose(state[0], [0.3, 7.8, 4.0, 4.0], atol=1e-5)
    np.testing.assert_allclose(state[1], [3.0, 3.0, 0.25, 5.5], atol=1e-5)
    assert not hits.any() and not state[7].any()


@pytest.mark.parametrize("heading", [(1.0, 0.0), (0.0, -1.0)], ids=["along x", "along y"])
def test_with_drift_a_flake_leaving_downwind_reenters_at_a_random_crosswind_place(heading):
    # 400 flakes leave through every side; the wind blows along x (or y): those that leave
    # along it come back at the opposite side at a random crosswind coordinate (an
    # obstacle's wake does not wrap onto the ground upwind of it), those that leave across
    # it wrap as before (a long fence stays long). Reference and Numba agree to the bit.
    n = 400
    flake_id = np.arange(n, dtype=np.uint32)
    rng = np.random.default_rng(2)
    lx, ly, _ = GRID.size
    side = np.arange(n) % 4
    x = np.where(side == 0, lx + 0.05, np.where(side == 1, -0.05, rng.uniform(0.5, lx - 0.5, n)))
    y = np.where(side == 2, ly + 0.05, np.where(side == 3, -0.05, rng.uniform(0.5, ly - 0.5, n)))
    outputs = []
    for module in (ref_flakes, cpu_flakes):
        state = state_arrays(n, 0.0, 0.0, 5.0)
        state[0][:], state[1][:] = x.astype(np.float32), y.astype(np.float32)
        state[5][:] = -ref_flakes.flake_constants(1, flake_id, 1.0, 2.0, 0.0)[0]
        height, snow = flat_ground(0.0)
        hits = np.zeros(HEIGHTMAP.shape, np.int32)
        lift = lift_arguments(0.0, heading=heading, strength=0.0, step_index=5)
        run_kernel(module, flake_id, state, uniform_wind(GRID), height, snow, hits, radius=0.0,
                   **lift)
        outputs.append(state)
    for got, expected in zip(outputs[1], outputs[0]):
        np.testing.assert_array_equal(got, expected)
    new_x, new_y = outputs[0][0], outputs[0][1]
    plain_x = np.where(side == 0, 0.05, np.where(side == 1, lx - 0.05, x))
    plain_y = np.where(side == 2, 0.05, np.where(side == 3, ly - 0.05, y))
    along = (side < 2) if heading[0] else (side >= 2)
    across = ~along
    if heading[0]:
        np.testing.assert_allclose(new_x[along], plain_x[along], atol=1e-5)     # wrapped in x
        assert np.abs(new_y[along] - y[along]).mean() > 0.2 * ly                 # a new y
        assert new_y[along].min() >= 0 and new_y[along].max() < ly
    else:
        np.testing.assert_allclose(new_y[along], plain_y[along], atol=1e-5)
        assert np.abs(new_x[along] - x[along]).mean() > 0.2 * lx
        assert new_x[along].min() >= 0 and new_x[along].max() < lx
    np.testing.assert_allclose(new_x[across], plain_x[across], atol=1e-5)       # plain wrap
    np.testing.assert_allclose(new_y[across], plain_y[across], atol=1e-5)


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_ground_hit_counts_nearest_node_and_respawns_at_top(module):
    n = 6
    flake_id = np.arange(n, dtype=np.uint32)
    x = np.array([0.1, 2.26, 7.9, 5.0, 3.0, 6.1], np.float32)
    y = np.array([0.2, 1.24, 5.9, 3.0, 3.0, 0.9], np.float32)
    state = state_arrays(n, 0.0, 0.0, 0.02, vz=-1.5)
    state[0][:], state[1][:] = x, y
    state[2][4] = 3.0                                   # this one is not near the ground
    height, snow = flat_ground(0.0)
    wind = uniform_wind(GRID, 1.0, 0.5)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(module, flake_id, state, wind, height, snow, hits)
    expected = np.zeros_like(hits)
    for xi, yi, flake in zip(x, y, range(n)):
        if flake != 4:
            expected[int(np.floor(yi / 0.5 + 0.5)), int(np.floor(xi / 0.5 + 0.5))] += 1
    np.testing.assert_array_equal(hits, expected)
    respawned = state[7] == 1
    assert respawned.tolist() == [True, True, True, True, False, True]
    top = GRID.top
    assert np.all((state[2][respawned] >= top - 1.0) & (state[2][respawned] < top))
    vt, _, _ = ref_flakes.flake_constants(1, flake_id, 1.0, 2.0, 0.5)
    np.testing.assert_allclose(state[3][respawned], 1.0, atol=1e-6)    # the local wind
    np.testing.assert_allclose(state[5][respawned], -vt[respawned], atol=1e-6)


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_a_flake_that_strikes_a_wall_lands_at_its_foot_not_on_top(module):
    """A 2 m wall from x = 4.5 m: flakes blown into its face below its top land on the
    ground node in front of it (the snow slides down the face), flakes falling onto it
    from above land on its top."""
    height, snow = flat_ground(0.0)
    height[:, 9:] = 2.0                                 # nodes at x >= 4.5 m
    n = 4
    flake_id = np.arange(n, dtype=np.uint32)
    state = state_arrays(n, 4.1, 3.0, 0.5, vx=8.0)    # one step: x = 4.43, node 9's side
    state[1][:] = [1.0, 2.0, 3.0, 4.0]
    state[0][3], state[2][3], state[3][3], state[5][3] = 5.5, 2.02, 0.0, -1.5    # onto the top
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(module, flake_id, state, uniform_wind(GRID, 8.0), height, snow, hits)
    assert np.all(state[7] == 1)                        # all four landed
    expected = np.zeros_like(hits)
    for yi in (1.0, 2.0, 3.0):
        expected[int(yi / 0.5), 8] += 1                 # the ground node at x = 4 m
    expected[8, 11] += 1                                # the top at x = 5.5 m
    np.testing.assert_array_equal(hits, expected)


def test_open_nodes_are_never_hit():
    n = 500
    flake_id = np.arange(n, dtype=np.uint32)
    rng = np.random.default_rng(3)
    state = state_arrays(n, 0.0, 0.0, -0.98, vz=-1.5)
    state[0][:] = rng.uniform(0, 8, n)
    state[1][:] = rng.uniform(0, 6, n)
    height = np.full(HEIGHTMAP.shape, OPEN_HEIGHT, np.float32)
    snow = np.zeros(HEIGHTMAP.shape, np.float32)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(cpu_flakes, flake_id, state, uniform_wind(GRID), height, snow, hits)
    assert not hits.any()
    assert np.all(state[7] == 1)          # all fell out of the bottom and respawned at the top
    assert np.all(state[2] >= GRID.top - 1.0)


def test_respawn_positions_are_uniform():
    n = 40_000
    flake_id = np.arange(n, dtype=np.uint32)
    state = state_arrays(n, 4.0, 3.0, -1.5)               # below the grid: all respawn
    height, snow = flat_ground(0.0)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(cpu_flakes, flake_id, state, uniform_wind(GRID), height, snow, hits, seed=11)
    lx, ly, _ = GRID.size
    chi2_limit = 43.8          # 99.9th percentile of chi-square, 19 degrees of freedom
    for values, low, high in ((state[0], 0.0, lx), (state[1], 0.0, ly),
                              (state[2], GRID.top - 1.0, GRID.top)):
        assert values.min() >= low and values.max() < high
        counts, _ = np.histogram(values, bins=20, range=(low, high))
        chi2 = ((counts - n / 20) ** 2 / (n / 20)).sum()
        assert chi2 < chi2_limit
    assert abs(np.corrcoef(state[0], state[1])[0, 1]) < 0.02
    # a second respawn of the same flakes lands elsewhere (the counter advances)
    first = state[0].copy()
    state[2][:] = -1.5
    run_kernel(cpu_flakes, flake_id, state, uniform_wind(GRID), height, snow, hits, seed=11)
    assert np.all(state[7] == 2) and np.mean(state[0] == first) < 0.01


def make_system(backend_name="cpu", seed=4, count=2000):
    settings = SnowSettings(flake_count=count, seed=seed, snow_type="wet", upwind_fetch="wrap")
    return FlakeSystem(settings, GRID, HEIGHTMAP, select_backend(backend_name))


def run_system(flakes, wind, height, snow, steps, hits=None):
    hits = np.zeros(HEIGHTMAP.shape, np.int32) if hits is None else hits
    for _ in range(steps):
        flakes.step(wind, height, snow, hits, 0.0, DT)
    return hits


def test_initialize_places_flakes_above_ground_in_the_domain():
    flakes = make_system()
    wind = noisy_wind(GRID)
    height, snow = rough_ground()
    flakes.initialize(wind, height, snow)
    p = flakes.positions()
    lx, ly, _ = GRID.size
    assert np.all((p[:, 0] >= 0) & (p[:, 0] < lx) & (p[:, 1] >= 0) & (p[:, 1] < ly))
    assert np.all(p[:, 2] < GRID.top) and np.all(p[:, 2] > GRID.z0)
    from snowfall.kernels.reference.sampling import sample_bilinear
    ground = sample_bilinear(height + snow, 0.0, 0.0, 0.5, p[:, 0], p[:, 1])
    assert np.all(p[:, 2] > ground)
    assert not flakes.respawn_counts().any()


def test_same_seed_identical_different_seed_differs():
    wind = noisy_wind(GRID)
    height, snow = rough_ground()
    results = []
    for seed in (4, 4, 5):
        flakes = make_system(seed=seed)
        flakes.initialize(wind, height, snow)
        hits = run_system(flakes, wind, height, snow, 60)
        results.append((flakes.positions(), flakes.velocities(), flakes.respawn_counts(), hits))
    for a, b in zip(results[0], results[1]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(results[0][0], results[2][0])
    assert results[0][2].sum() > 0          # flakes did hit and respawn


def test_state_dict_resume_is_bit_identical():
    wind = noisy_wind(GRID)
    height, snow = rough_ground()
    straight = make_system()
    straight.initialize(wind, height, snow)
    hits_straight = run_system(straight, wind, height, snow, 60)
    first = make_system()
    first.initialize(wind, height, snow)
    hits = run_system(first, wind, height, snow, 25)
    state = {k: v.copy() for k, v in first.state_dict().items()}
    resumed = make_system()
    resumed.load_state_dict(state)
    run_system(resumed, wind, height, snow, 35, hits)
    np.testing.assert_array_equal(resumed.positions(), straight.positions())
    np.testing.assert_array_equal(resumed.velocities(), straight.velocities())
    np.testing.assert_array_equal(resumed.respawn_counts(), straight.respawn_counts())
    np.testing.assert_array_equal(hits, hits_straight)
    with pytest.raises(Exception, match="flake_count"):
        make_system(count=10).load_state_dict(state)


def test_sorting_by_cell_changes_storage_not_results():
    wind = noisy_wind(GRID)
    height, snow = rough_ground()
    plain = make_system()
    plain.sort_interval = 0                 # id order throughout
    plain.initialize(wind, height, snow)
    hits_plain = run_system(plain, wind, height, snow, 40)
    sorted_system = make_system()
    sorted_system.initialize(wind, height, snow)
    hits = run_system(sorted_system, wind, height, snow, 20)
    sorted_system.sort_by_cell()
    assert not np.array_equal(sorted_system.flake_id, np.arange(2000))
    keys = np.empty(2000, np.uint32)
    cpu_flakes.cell_keys(sorted_system.pos_x, sorted_system.pos_y, sorted_system.pos_z,
                         0.0, 0.0, -1.0, 1.0, GRID.nx, GRID.ny, GRID.nz, keys)
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)          # stored by cell
    run_system(sorted_system, wind, height, snow, 20, hits)
    np.testing.assert_array_equal(sorted_system.positions(), plain.positions())
    np.testing.assert_array_equal(sorted_system.velocities(), plain.velocities())
    np.testing.assert_array_equal(sorted_system.respawn_counts(), plain.respawn_counts())
    np.testing.assert_array_equal(sorted_system.state_dict()["phase"], plain.state_dict()["phase"])
    np.testing.assert_array_equal(hits, hits_plain)


def random_flake_input(seed, n=3000):
    rng = np.random.default_rng(seed)
    flake_id = rng.permutation(n).astype(np.uint32) * np.uint32(7)
    state = [rng.uniform(-0.5, 8.5, n), rng.uniform(-0.5, 6.5, n), rng.uniform(-1.2, 11.0, n),
             rng.normal(0, 2, n), rng.normal(0, 2, n), rng.normal(-1, 1, n),
             rng.uniform(0, 2 * np.pi, n)]
    state = [a.astype(np.float32) for a in state] + [rng.integers(0, 50, n).astype(np.uint32)]
    return flake_id, state


def on_backend(backend, value):
    """``value`` (an array, a list of them, a dict's values or a SimpleNamespace's) in the
    backend's memory; other values as they are."""
    if isinstance(value, np.ndarray):
        return backend.asarray(value)
    if isinstance(value, list):
        return [on_backend(backend, v) for v in value]
    if isinstance(value, dict):
        return {k: on_backend(backend, v) for k, v in value.items()}
    if isinstance(value, SimpleNamespace):
        return SimpleNamespace(**on_backend(backend, vars(value)))
    return value


def run_both(backend, flake_id, state, wind, height, snow, steps, seed, lift=None):
    """``steps`` steps of the reference and of ``backend``'s build from the same input:
    [(state, hits, grain counts)] (host arrays; the counts a tuple: aloft, settled on the
    terrain, fresh lifts) for the reference, then the build."""
    outputs = []
    for module, where in ((ref_flakes, select_backend("numpy")),
                          (backend.kernel_module("flakes"), backend)):
        s = on_backend(where, [a.copy() for a in state])
        hits = on_backend(where, np.zeros(HEIGHTMAP.shape, np.int32))
        extra = on_backend(where, dict(lift or {}))
        if lift is not None:
            extra["grain_count"] = on_backend(where, np.zeros(GRAIN_COUNT_SLOTS, np.int32))
        for step in range(steps):
            if lift is not None:
                extra["step_index"] = 40 + step
            run_kernel(module, on_backend(where, flake_id), s, on_backend(where, wind),
                       on_backend(where, height), on_backend(where, snow), hits, seed=seed,
                       **extra)
        grains = (tuple(int(c) for c in where.to_host(extra["grain_count"]))
                  if lift is not None else (0, 0, 0))
        outputs.append(([np.asarray(where.to_host(a)) for a in s],
                        np.asarray(where.to_host(hits)), grains))
    return outputs


@pytest.mark.parametrize("seed", [0, 1])
def test_step_matches_reference(backend, seed):
    """The Numba and CUDA builds' step against the reference: the same hits and respawns,
    the state to float32 rounding (the spiral's sin/cos differ in the last bits)."""
    flake_id, state = random_flake_input(seed)
    wind = noisy_wind(GRID, seed)
    height, snow = rough_ground(seed)
    (ref_state, ref_hits, _), (cpu_state, cpu_hits, _) = run_both(
        backend, flake_id, state, wind, height, snow, 5, seed + 9)
    np.testing.assert_array_equal(cpu_state[7], ref_state[7])     # same hits and respawns
    assert ref_state[7].sum() > state[7].sum()
    np.testing.assert_array_equal(cpu_hits, ref_hits)
    for got, expected in zip(cpu_state[:7], ref_state[:7]):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


EDDIES = {"eddy_scale": 0.41, "mixing_height": 2.5, "eddy_steps": 3, "eddy_floor": 0.25}


@pytest.mark.parametrize("grains", [0.0, 0.3], ids=["flakes", "grains"])
@pytest.mark.parametrize("eddies", [False, True], ids=["plain", "eddies"])
@pytest.mark.parametrize("seed", [0, 1])
def test_step_with_blowing_snow_and_shelter_matches_reference(backend, seed, eddies, grains):
    flake_id, state = random_flake_input(seed)
    wind = noisy_wind(GRID, seed)
    height, snow = rough_ground(seed)
    rng = np.random.default_rng(seed)
    ny, nx = GRID.shape[1:]
    lift = lift_arguments(0.0, threshold=0.2, strength=1.5)
    lift["surface_x"] = (8 * rng.standard_normal((ny, nx))).astype(np.float32)
    lift["surface_y"] = (8 * rng.standard_normal((ny, nx))).astype(np.float32)
    lift["bubble_top"] = rng.uniform(-1.0, 2.5, (ny, nx)).astype(np.float32)
    if eddies:
        lift.update(EDDIES)
    lift["grain_speed"] = grains
    (ref_state, ref_hits, ref_grains), (cpu_state, cpu_hits, cpu_grains) = run_both(
        backend, flake_id, state, wind, height, snow, 5, seed + 9, lift)
    assert ref_grains == cpu_grains and (ref_grains[GRAINS_ALOFT] > 0) == (grains > 0)
    assert (ref_grains[FRESH_LIFTS] > 0) == (grains > 0)
    np.testing.assert_array_equal(cpu_state[7], ref_state[7])
    np.testing.assert_array_equal(cpu_hits, ref_hits)
    for got, expected in zip(cpu_state[:7], ref_state[:7]):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)
    # some landings were lifted: fewer hits than without blowing snow
    plain = [a.copy() for a in state]
    plain_hits = np.zeros(HEIGHTMAP.shape, np.int32)
    for _ in range(5):
        run_kernel(ref_flakes, flake_id, plain, wind, height, snow, plain_hits, seed=seed + 9)
    assert ref_hits.sum() < plain_hits.sum()


def eddy_scene(grid, hm, speed, mixing_height):
    """Flat ground, uniform wind ``speed`` m/s along x and the eddies' arguments for it
    (u* = 0.06 * speed, no lift): (height, snow, wind, arguments)."""
    ny, nx = grid.shape[1:]
    arguments = {"surface_x": np.full((ny, nx), speed, np.float32),
                 "surface_y": np.zeros((ny, nx), np.float32), "ustar_per_speed": 0.06,
                 "threshold": 0.3, "lift_strength": 0.0, "eddy_scale": 0.41,
                 "mixing_height": mixing_height, "eddy_steps": 24}
    flat = np.zeros(hm.shape, np.float32)
    return flat, flat.copy(), uniform_wind(grid, speed), arguments


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_eddies_spread_a_puff_as_the_eddy_diffusivity_says(module):
    """A puff of light flakes above the mixing height in uniform wind spreads with
    variance 2 K t along every axis, K = kappa u* mixing_height (the random walk's law),
    and moves with the wind on average; without eddies it does not spread."""
    grid = WindGrid(0.0, 0.0, 0.0, 4.0, 60, 60, 40)                # 240 x 240 x 160 m
    hm = HeightmapGrid(0.0, 0.0, 4.0, 61, 61)
    n, steps, speed = 4000, 240, 10.0
    flake_id = np.arange(n, dtype=np.uint32)
    height, snow, wind, eddies = eddy_scene(grid, hm, speed, 2.0)
    spreads = {}
    for on in (True, False):
        state = state_arrays(n, 20.0, 120.0, 80.0, vx=speed)
        hits = np.zeros(hm.shape, np.int32)
        for step in range(steps):
            arguments = dict(eddies, step_index=step) if on else {}
            run_kernel(module, flake_id, state, wind, height, snow, hits, vt=(0.02, 0.02),
                       radius=0.0, grid=grid, hm=hm, **arguments)
        assert hits.sum() == 0 and np.all(state[7] == 0)
        spreads[on] = [np.var(state[a].astype(np.float64)) for a in range(3)]
        drift = np.mean(state[0]) - 20.0
        assert abs(drift - speed * steps * DT) < 0.5
    diffusivity = 0.41 * 0.06 * speed * 2.0
    t = steps * float(DT)
    for variance in spreads[True]:
        assert variance == pytest.approx(2.0 * diffusivity * t, rel=0.15)
    assert max(spreads[False]) < 1e-6


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_the_eddy_floor_keeps_the_eddies_where_the_surface_wind_is_calm(module):
    """Where the surface wind is calm (a wake) the eddies take u* = eddy_floor: a puff
    there spreads as over open ground with that u* (variance 2 K t), and not at all
    without the floor."""
    grid = WindGrid(0.0, 0.0, 0.0, 4.0, 60, 60, 40)
    hm = HeightmapGrid(0.0, 0.0, 4.0, 61, 61)
    n, steps, speed = 4000, 240, 10.0
    flake_id = np.arange(n, dtype=np.uint32)
    height, snow, wind, eddies = eddy_scene(grid, hm, speed, 2.0)
    eddies["surface_x"] = np.zeros_like(eddies["surface_x"])        # a calm surface
    spreads = {}
    for floor in (0.06 * speed, 0.0):
        state = state_arrays(n, 20.0, 120.0, 80.0, vx=speed)
        hits = np.zeros(hm.shape, np.int32)
        for step in range(steps):
            run_kernel(module, flake_id, state, wind, height, snow, hits, vt=(0.02, 0.02),
                       radius=0.0, grid=grid, hm=hm, step_index=step, eddy_floor=floor,
                       **eddies)
        spreads[floor] = [np.var(state[a].astype(np.float64)) for a in range(3)]
    diffusivity = 0.41 * 0.06 * speed * 2.0
    for variance in spreads[0.06 * speed]:
        assert variance == pytest.approx(2.0 * diffusivity * steps * float(DT), rel=0.15)
    assert max(spreads[0.0]) < 1e-6


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_eddies_keep_a_well_mixed_cloud_well_mixed(module):
    """Thomson's (1987) well-mixed condition: air-like flakes spread evenly between the
    ground and the grid's top stay evenly spread although K = kappa u* l changes with
    height (without the mean velocity dK/dz / 2 they would crowd where K is small)."""
    grid = WindGrid(0.0, 0.0, 0.0, 2.0, 20, 20, 8)                  # 40 x 40 m, top 16 m
    hm = HeightmapGrid(0.0, 0.0, 2.0, 21, 21)
    n, speed, top = 20000, 10.0, 16.0
    rng = np.random.default_rng(5)
    flake_id = np.arange(n, dtype=np.uint32)
    state = state_arrays(n, 0.0, 0.0, 0.0, vx=speed)
    state[0][:] = rng.uniform(0.0, 40.0, n)
    state[1][:] = rng.uniform(0.0, 40.0, n)
    state[2][:] = rng.uniform(0.0, top, n)
    height, snow, wind, eddies = eddy_scene(grid, hm, speed, 10.0)
    hits = np.zeros(hm.shape, np.int32)
    for step in range(720):                                            # 30 s
        run_kernel(module, flake_id, state, wind, height, snow, hits, vt=(0.01, 0.01),
                   radius=0.0, grid=grid, hm=hm, step_index=step, **eddies)
    kept = state[7] == 0
    assert hits.sum() < 0.03 * n and np.all(state[2] <= top)
    counts, _ = np.histogram(state[2][kept], bins=8, range=(0.0, top))
    np.testing.assert_allclose(counts / counts.mean(), 1.0, atol=0.15)


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
@pytest.mark.parametrize("surface_speed", [4.0, 6.0, 10.0])
def test_landing_flakes_are_lifted_in_proportion_to_the_stress_above_threshold(module,
                                                                               surface_speed):
    n = 20000
    flake_id = np.arange(n, dtype=np.uint32)
    rng = np.random.default_rng(3)
    state = state_arrays(n, 0.0, 0.0, 0.01, vz=-1.5)
    state[0][:] = rng.uniform(0.3, 7.7, n).astype(np.float32)
    state[1][:] = rng.uniform(0.3, 5.7, n).astype(np.float32)
    height, snow = flat_ground(0.0)
    wind = uniform_wind(GRID, surface_speed)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    lift = lift_arguments(surface_speed, step_index=7)
    run_kernel(module, flake_id, state, wind, height, snow, hits, **lift)
    ustar = 0.06 * surface_speed
    expected = max(0.0, 1.0 - 0.3**2 / ustar**2)
    lifted = n - hits.sum()
    sigma = np.sqrt(n * expected * (1 - expected)) + 1
    assert abs(lifted - n * expected) < 5 * sigma
    up = state[7] == 0                       # lifted flakes keep their life (no respawn)
    assert up.sum() == lifted
    # lifted within one wind cell above the ground, carried by the wind
    assert np.all((state[2][up] >= 0.0) & (state[2][up] < 1.0))
    np.testing.assert_allclose(state[3][up], surface_speed, rtol=1e-6)
    # against the storm's heading (a lee eddy), below the threshold, or at strength 0: none
    for changes in ({"heading": (-1.0, 0.0)}, {"threshold": ustar * 1.01}, {"strength": 0.0}):
        again = state_arrays(n, 0.0, 0.0, 0.01, vz=-1.5)
        again[0][:], again[1][:] = state[0], state[1]
        hits[...] = 0
        run_kernel(module, flake_id, again, wind, height, snow, hits,
                   **lift_arguments(surface_speed, step_index=7, **changes))
        assert hits.sum() == n


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_lifted_flakes_fall_as_grains_of_blowing_snow_until_they_settle(module):
    n = 4000
    flake_id = np.arange(n, dtype=np.uint32)
    rng = np.random.default_rng(5)
    height, snow = flat_ground(0.0)
    wind = uniform_wind(GRID, 10.0)
    state = state_arrays(n, 0.0, 0.0, 0.01, vz=-1.5)
    state[0][:] = rng.uniform(0.3, 7.7, n).astype(np.float32)
    state[1][:] = rng.uniform(0.3, 5.7, n).astype(np.float32)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(module, flake_id, state, wind, height, snow, hits,
               grain_speed=0.3, **lift_arguments(10.0, step_index=7))
    lifted = (state[7] & ref_flakes.BLOWING) != 0
    assert lifted.sum() == n - hits.sum() > n // 2
    assert np.all(state[7][lifted] & ref_flakes.COUNT_BITS == 0)   # the same life
    assert np.all(state[7][~lifted] == 1)                           # settled and respawned
    # in still air a grain falls at 0.3 m/s, a flake at its own 1-2 m/s
    still = uniform_wind(GRID, 0.0)
    far, _ = flat_ground(-100.0)
    for _ in range(60):
        run_kernel(module, flake_id, state, still, far, snow, hits, grain_speed=0.3)
    np.testing.assert_allclose(state[5][lifted], -0.3, rtol=1e-3)
    assert np.all(state[5][~lifted] < -0.9)
    # landing without a lift ends the grain: it respawns as a flake, its count goes on
    state[2][lifted] = 0.005
    run_kernel(module, flake_id, state, still, height, snow, hits, grain_speed=0.3)
    np.testing.assert_array_equal(state[7][lifted], 1)


@pytest.mark.parametrize("module", [ref_flakes, cpu_flakes], ids=["reference", "cpu"])
def test_flakes_in_the_separation_bubble_feel_still_air_and_settle(module):
    n = 2000
    flake_id = np.arange(n, dtype=np.uint32)
    height, snow = flat_ground(0.0)
    wind = uniform_wind(GRID, 10.0)
    ny, nx = GRID.shape[1:]
    bubble = np.full((ny, nx), -0.5, np.float32)
    bubble[:, 4:] = 3.0                       # still air below 3 m over x >= 4.5 m
    for z, still in ((1.0, True), (6.0, False)):
        state = state_arrays(n, 6.0, 3.0, z, vx=10.0)
        hits = np.zeros(HEIGHTMAP.shape, np.int32)
        lift = lift_arguments(10.0, bubble_top=bubble, step_index=3)
        run_kernel(module, flake_id, state, wind, height, snow, hits, **lift)
        if still:
            assert np.all(state[3] < 10.0 * 0.8)           # drag toward still air
        else:
            np.testing.assert_allclose(state[3], 10.0, rtol=1e-6)
    # landing under the bubble: always deposited, never lifted (u* is far above threshold)
    state = state_arrays(n, 6.0, 3.0, 0.01, vz=-1.5)
    hits = np.zeros(HEIGHTMAP.shape, np.int32)
    run_kernel(module, flake_id, state, wind, height, snow, hits,
               **lift_arguments(10.0, bubble_top=bubble, step_index=3))
    assert hits.sum() == n
    state = state_arrays(n, 1.5, 3.0, 0.01, vz=-1.5)         # outside the bubble: lifted
    hits[...] = 0
    run_kernel(module, flake_id, state, wind, height, snow, hits,
               **lift_arguments(10.0, bubble_top=bubble, step_index=3))
    assert hits.sum() < 0.3 * n


def test_initialize_and_sort_kernels_match_reference(backend):
    """initialize_flakes against the reference; cell_keys exact; sort_permutation a
    permutation that sorts the keys (in the reference's stable order on the CPU; the GPU's
    order inside a cell is arbitrary), with the cells' counts; scatter moves each word to
    its destination."""
    flake_id, _state = random_flake_input(3)
    wind = noisy_wind(GRID, 3)
    height, snow = rough_ground(3)
    outputs = []
    for module, where in ((ref_flakes, select_backend("numpy")),
                          (backend.kernel_module("flakes"), backend)):
        s = on_backend(where, [np.zeros(flake_id.size, np.float32) for _ in range(7)]
                       + [np.ones(flake_id.size, np.uint32)])
        field = on_backend(where, wind)
        ids = on_backend(where, flake_id)
        initialize_flat(module, ids, *s, field.u, field.v, field.w, 0.0, 0.0, -1.0, 1.0,
                        on_backend(where, height), on_backend(where, snow), 0.0, 0.0, 0.5, 6,
                        np.float32(0.5), np.float32(1.5), np.float32(0.5))
        keys = on_backend(where, np.zeros(flake_id.size, np.uint32))
        module.cell_keys(s[0], s[1], s[2], 0.0, 0.0, -1.0, 1.0, GRID.nx, GRID.ny, GRID.nz, keys)
        host_keys = np.asarray(where.to_host(keys)).copy()
        counts = on_backend(where, np.zeros(GRID.cell_count, np.uint32))
        module.sort_permutation(keys, counts, keys)        # in place, as FlakeSystem does
        permuted = on_backend(where, np.zeros(flake_id.size, np.uint32))
        module.scatter(ids, keys, permuted)
        outputs.append([np.asarray(where.to_host(a)) for a in s]
                       + [host_keys, np.asarray(where.to_host(counts)),
                          np.asarray(where.to_host(keys)), np.asarray(where.to_host(permuted))])
    reference, got = outputs
    for a, e in zip(got[:8], reference[:8]):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)
    assert not reference[7].any()
    np.testing.assert_array_equal(got[8], reference[8])                 # keys
    np.testing.assert_array_equal(got[9], np.bincount(reference[8], minlength=GRID.cell_count))
    destination = got[10]
    assert sorted(destination.tolist()) == list(range(flake_id.size))  # a permutation
    sorted_keys = np.empty_like(reference[8])
    sorted_keys[destination] = reference[8]
    assert np.all(np.diff(sorted_keys.astype(np.int64)) >= 0)
    expected = np.empty_like(flake_id)
    expected[destination] = flake_id
    np.testing.assert_array_equal(got[11], expected)
    if not backend.is_gpu:
        np.testing.assert_array_equal(destination, reference[10])        # stable, as the reference


def test_estimate_bytes_is_at_most_48_per_flake():
    assert FlakeSystem.estimate_bytes(SnowSettings(flake_count=1000)) <= 48 * 1000


def run_bake(backend_name, steps, sort_interval=None, resume_at=None):
    """Flakes + cover on a small rough terrain with a noisy wind; returns host results."""
    backend = select_backend(backend_name)
    height, _snow = rough_ground(2)
    heightmap = SimpleNamespace(grid=HEIGHTMAP, height=height, has_surface=height > -1e29)
    settings = SnowSettings(flake_count=6000, seed=7, snowfall_rate=30.0, angle_of_repose=30.0,
                            redistribution_fraction=0.2, redistribution_min_depth=0.001)
    wind = on_backend(backend, noisy_wind(GRID, 2))

    def build():
        cover = SnowCover(settings, heightmap, GRID, backend)
        flakes = FlakeSystem(settings, GRID, HEIGHTMAP, backend)
        if sort_interval is not None:
            flakes.sort_interval = sort_interval
        return cover, flakes

    cover, flakes = build()
    flakes.initialize(wind, cover.height, cover.snow_depth)
    for step in range(steps):
        if step == resume_at:
            flake_state, cover_state = flakes.state_dict(), cover.state_dict()
            cover, flakes = build()
            flakes.load_state_dict(flake_state)
            cover.load_state_dict(cover_state)
        flakes.step(wind, cover.height, cover.snow_depth, cover.hit_counts, step * DT, DT)
        cover.step(DT)
    result = flakes.state_dict()
    result["snow_depth"] = np.asarray(backend.to_host(cover.snow_depth))
    result["snow_volume"], result["deposited"] = cover.snow_volume(), cover.deposited_volume()
    return result


def test_cpu_bake_sorted_by_cell_and_resumed_keeps_every_bit():
    """The CPU build sorts its flakes by wind cell every SORT_INTERVAL steps (for its
    caches): 200 steps of flakes and cover sorted every 3 steps, and resumed halfway from a
    saved state, give the bits of the same bake in id order throughout."""
    assert cpu_flakes.SORT_INTERVAL > 0
    steps = 200
    plain = run_bake("cpu", steps, sort_interval=0)
    for other in (run_bake("cpu", steps, sort_interval=3),
                  run_bake("cpu", steps, sort_interval=3, resume_at=101)):
        for name in STATE_NAMES + ("snow_depth",):
            np.testing.assert_array_equal(other[name], plain[name])
        assert other["deposited"] == plain["deposited"]
    assert plain["respawn_count"].sum() > 1000


@pytest.mark.gpu
def test_gpu_bake_matches_cpu_and_sorting_and_resume_change_nothing(gpu_backend):
    """200 steps of flakes and cover on the GPU against the CPU (docs/flakes_and_cover.md's
    tolerances): respawn counts identical (the same random streams and float32 operation
    order, --fmad=false; only the spiral's sin/cos come from different libraries),
    positions and velocities to 1e-4, phase 1e-5, snow depth 1e-6 m + 1e-5 relative, the
    snow volume the deposited volume to 1e-6; the GPU's sort by cell and a resume change
    no bit."""
    steps = 200
    cpu = run_bake("cpu", steps)
    gpu = run_bake("gpu", steps, sort_interval=0)
    gpu_sorted = run_bake("gpu", steps, sort_interval=3)
    gpu_resumed = run_bake("gpu", steps, sort_interval=3, resume_at=101)
    np.testing.assert_array_equal(gpu["respawn_count"], cpu["respawn_count"])
    assert cpu["respawn_count"].sum() > 1000
    for name in ("pos_x", "pos_y", "pos_z", "vel_x", "vel_y", "vel_z"):
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=0, atol=1e-4)
    np.testing.assert_allclose(gpu["phase"], cpu["phase"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(gpu["snow_depth"], cpu["snow_depth"], rtol=1e-5, atol=1e-6)
    assert gpu["deposited"] == cpu["deposited"]
    for result in (cpu, gpu, gpu_sorted, gpu_resumed):
        np.testing.assert_allclose(result["snow_volume"], result["deposited"], rtol=1e-6)
    # storage order (sorting) and a resume do not change a single bit
    for other in (gpu_sorted, gpu_resumed):
        for name in STATE_NAMES + ("snow_depth",):
            np.testing.assert_array_equal(other[name], gpu[name])
