"""Wind solver: Numba kernels match the NumPy reference; projection really removes the
divergence around obstacles; boundary conditions, gusts, solver reports and resume."""
import math

import numpy as np
import pytest

from snowfall.kernels.cpu import wind as cpu
from snowfall.kernels.reference import pressure as ref_pressure
from snowfall.kernels.reference import drift as ref_drift
from snowfall.kernels.reference import wind as ref
from snowfall.snow_addon import Simulation
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.grid import HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings
from snowfall.snow_addon.wind import WindSolver, inflow_at, inflow_sides, inflow_turned


def _faces(shape, rng, scale=3.0):
    nz, ny, nx = shape
    return tuple((scale * rng.standard_normal(s)).astype(np.float32)
                 for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])


# --- kernels vs reference ------------------------------------------------------------

# (inflow (vx, vy), inflow sides): the sides the signs give, and sides that differ from
# them (gusts: the solver keeps the sides of the wind before gusts)
ADVECTION_CASES = [((2.5, -1.0), None), ((-3.0, 0.0), None), ((0.0, 4.0), None),
                   ((0.0, 0.0), None), ((1.0, 1.0), None),
                   ((2.5, -1.0), ref.INFLOW_X_MINUS),
                   ((-0.5, 0.3), ref.INFLOW_X_MINUS | ref.INFLOW_Y_PLUS),
                   ((1.0, 2.0), ref.INFLOW_X_PLUS | ref.INFLOW_Y_MINUS | ref.INFLOW_Y_PLUS)]


@pytest.mark.parametrize("inflow, sides", ADVECTION_CASES)
def test_advect_velocity_matches_reference(inflow, sides, fractions_of):
    shape = (5, 6, 7)
    rng = np.random.default_rng(11)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    sides = ref.inflow_sides_of(*inflow) if sides is None else sides
    for fractions in (fractions_of(solid), fractions_of(solid, rng)):
        expected = tuple(np.zeros_like(a) for a in (u, v, w))
        actual = tuple(np.full_like(a, 99.0) for a in (u, v, w))
        ref.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected)
        cpu.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *actual)
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
        # closed faces carry no flow; ground and lid are closed
        for out, fraction in zip(expected, fractions):
            assert not out[fraction == 0].any()
        assert not expected[2][0].any() and not expected[2][-1].any()
    uo, vo, wo = expected
    # with voxel fractions: faces touching solid cells carry no flow
    expected = tuple(np.zeros_like(a) for a in (u, v, w))
    ref.advect_velocity(u, v, w, fractions_of(solid), *inflow, sides, 0.7, 0.13, *expected)
    uo, vo, wo = expected
    assert not uo[:, :, :-1][solid == 1].any() and not uo[:, :, 1:][solid == 1].any()
    assert not vo[:, :-1, :][solid == 1].any() and not wo[1:][solid == 1].any()


def _terrain_solid(shape, rng, density=0.02):
    """Ground, a block and a few loose solid cells: samples far from them take the open
    blocks' plain path, those near them the masked one."""
    solid = (rng.random(shape) < density).astype(np.uint8)
    nz, ny, nx = shape
    solid[0] = 1
    solid[1:3, ny // 3:ny // 3 + 2, nx // 3:nx // 3 + 3] = 1
    return solid


@pytest.mark.parametrize("shape", [(6, 9, 11), (2, 2, 2), (3, 2, 5), (4, 7, 2)])
def test_open_blocks_match_reference_and_definition(shape, fractions_of):
    rng = np.random.default_rng(31)
    for fractions in (fractions_of(_terrain_solid(shape, rng)), fractions_of(np.zeros(shape, np.uint8)),
                      fractions_of((rng.random(shape) < 0.15).astype(np.uint8), rng)):
        expected, actual = np.zeros(shape, np.uint8), np.full(shape, 99, np.uint8)
        ref.open_blocks(fractions, expected)
        cpu.open_blocks(fractions, actual)
        np.testing.assert_array_equal(actual, expected)
        # bit C: every existing face of the 2x2x2 block of component C from (k, j, i) is at
        # least half open (its sample weight is 1)
        nz, ny, nx = shape
        for bit, is_open in zip((1, 2, 4), (f >= 0.5 for f in fractions)):
            fk, fj, fi = is_open.shape
            for k, j, i in np.ndindex(shape):
                block = is_open[k:min(k + 2, fk), j:min(j + 2, fj), i:min(i + 2, fi)]
                assert bool(expected[k, j, i] & bit) == bool(block.all())


@pytest.mark.parametrize("inflow, sides", ADVECTION_CASES[:3] + ADVECTION_CASES[5:7])
def test_advection_near_terrain_is_bitwise_the_reference(inflow, sides, fractions_of):
    """Open blocks (plain trilinear, no mask) and masked samples in one field: the Numba
    semi-Lagrangian step and its MacCormack correction equal the reference bit for bit,
    with the blocks passed in or computed by the kernel."""
    shape = (6, 9, 11)
    rng = np.random.default_rng(32)
    u, v, w = _faces(shape, rng)
    solid = _terrain_solid(shape, rng)
    sides = ref.inflow_sides_of(*inflow) if sides is None else sides
    # voxel fractions, and cut faces where the terrain is (a share of the faces near it)
    near = np.zeros(shape, bool)
    near[:4] = True
    for fractions in (fractions_of(solid), fractions_of(solid * near, rng, 0.1)):
        blocks = np.zeros(shape, np.uint8)
        cpu.open_blocks(fractions, blocks)
        assert 0 < np.count_nonzero(blocks == 7) < blocks.size  # both paths are taken
        expected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected)
        corrected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref.correct_advection(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected,
                              *corrected)
        for given in (blocks, None):
            actual = tuple(np.full_like(a, 99.0) for a in (u, v, w))
            cpu.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *actual,
                                blocks=given)
            for a, e in zip(actual, expected):
                np.testing.assert_array_equal(a, e)
            actual = tuple(np.full_like(a, 99.0) for a in (u, v, w))
            cpu.correct_advection(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected,
                                  *actual, blocks=given)
            for a, e in zip(actual, corrected):
                np.testing.assert_array_equal(a, e)


def test_face_velocity_is_the_trilinear_wind_at_the_face():
    from snowfall.kernels.reference.sampling import sample_wind
    shape = (4, 5, 6)
    rng = np.random.default_rng(14)
    u, v, w = _faces(shape, rng)
    h = 0.5
    for face, (ox, oy, oz), field in [(ref.face_velocity_u, (0.0, 0.5, 0.5), u),
                                      (ref.face_velocity_v, (0.5, 0.0, 0.5), v),
                                      (ref.face_velocity_w, (0.5, 0.5, 0.0), w)]:
        k, j, i = np.indices(field.shape).astype(np.float32)
        expected = sample_wind(u, v, w, 0.0, 0.0, 0.0, h, (i + ox) * h, (j + oy) * h, (k + oz) * h)
        for a, e in zip(face(u, v, w), expected):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_advection_of_a_uniform_field_is_exact_and_of_a_shear_moves_it(fractions_of):
    shape = (4, 5, 6)
    u = np.full((4, 5, 7), 2.0, np.float32)
    v = np.full((4, 6, 6), -1.0, np.float32)
    w = np.zeros((5, 5, 6), np.float32)
    solid = fractions_of(np.zeros(shape, np.uint8))
    out = tuple(np.zeros_like(a) for a in (u, v, w))
    cpu.advect_velocity(u, v, w, solid, 2.0, -1.0, ref.inflow_sides_of(2.0, -1.0), 1.0, 0.3, *out)
    np.testing.assert_allclose(out[0], 2.0, rtol=1e-6)
    np.testing.assert_allclose(out[1], -1.0, rtol=1e-6)
    np.testing.assert_array_equal(out[2], 0.0)
    # a shear u(z) = z carried by w = 0.5 m/s upward: each face takes the value from
    # dt * 0.5 m below it (interior faces, away from the clamped bottom)
    k = np.arange(4, dtype=np.float32)[:, None, None]
    u = np.broadcast_to((k + 0.5), (4, 5, 7)).astype(np.float32).copy()
    v = np.zeros((4, 6, 6), np.float32)
    w = np.full((5, 5, 6), 0.5, np.float32)
    cpu.advect_velocity(u, v, w, solid, 0.0, 0.0, 0, 1.0, 0.4, *out)
    np.testing.assert_allclose(out[0][1:, 1:-1, 1:-1], u[1:, 1:-1, 1:-1] - 0.2, rtol=1e-5)


def test_solid_from_heightmap_matches_reference_and_definition():
    rng = np.random.default_rng(12)
    hm = HeightmapGrid(-1.0, 2.0, 0.37, 13, 11)
    height = (rng.random(hm.shape) * 3.0).astype(np.float32)
    height[0, :3] = -1.0e30  # open nodes
    snow = (rng.random(hm.shape) * 0.5).astype(np.float32)
    shape = (6, 5, 7)
    expected, actual = np.zeros(shape, np.uint8), np.full(shape, 7, np.uint8)
    args = (height, snow, hm.x0, hm.y0, hm.spacing, -1.0, 2.0, -0.5, 0.6)
    ref.solid_from_heightmap(*args, expected)
    cpu.solid_from_heightmap(*args, actual)
    np.testing.assert_array_equal(actual, expected)
    assert 0 < expected.sum() < expected.size
    # spot check the definition: centre below bilinear height + snow
    from snowfall.kernels.reference.sampling import sample_bilinear
    k, j, i = 2, 3, 4
    x, y, z = -1.0 + (i + .5) * .6, 2.0 + (j + .5) * .6, -0.5 + (k + .5) * .6
    ground = sample_bilinear(height, hm.x0, hm.y0, hm.spacing, x, y) + \
        sample_bilinear(snow, hm.x0, hm.y0, hm.spacing, x, y)
    assert expected[k, j, i] == (z < ground)


def test_a_fence_thinner_than_a_wind_cell_is_solid_to_its_top():
    from snowfall.kernels.cpu import drift as cpu_drift
    from snowfall.snow_addon.scenes import snow_fence

    # the 0.4 m fence at x = -10 m lies between the centres of 1 m cells (-10.5, -9.5)
    settings = SnowSettings(wind_cell_size=1.0, heightmap_resolution=241, drift_enabled=False)
    sim = Simulation(settings, *snow_fence(), backend="cpu", flakes=False)
    g = sim.grid
    solid = sim.solid_mask()
    column = int(np.floor((-10.0 - g.x0) / g.cell_size))
    ground = int(np.floor((0.0 - g.z0) / g.cell_size))       # the plane's cells
    fence_rows = np.abs(g.y0 + (np.arange(g.ny) + 0.5) * g.cell_size) < 9.0
    top = g.z0 + (solid[:, fence_rows, column].sum(axis=0) * g.cell_size)
    np.testing.assert_allclose(top, g.z0 + (ground + 2) * g.cell_size)   # z0 + cells to 2 m
    others = np.delete(np.arange(g.nx), column)
    assert not solid[ground + 1:, :, others].any()             # flat ground stays flat
    # the columns' tops and the mask agree with the reference, thin obstacle included
    height = sim.backend.to_host(sim.cover.height)
    snow = np.zeros_like(height)
    hm = sim.heightmap.grid
    tops = [np.zeros((g.ny, g.nx), np.float32) for _ in range(2)]
    args = (height, snow, height > -1e29, hm.x0, hm.y0, hm.spacing, g.x0, g.y0, g.cell_size)
    ref_drift.column_surface(*args, tops[0])
    cpu_drift.column_surface(*args, tops[1])
    np.testing.assert_array_equal(tops[0], tops[1])
    masks = [np.zeros(g.shape, np.uint8) for _ in range(2)]
    mask_args = (height, snow, hm.x0, hm.y0, hm.spacing, g.x0, g.y0, g.z0, g.cell_size)
    ref.solid_from_heightmap(*mask_args, masks[0], tops[0])
    cpu.solid_from_heightmap(*mask_args, masks[1], tops[0])
    np.testing.assert_array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(masks[0], solid)
    plain = np.zeros(g.shape, np.uint8)
    ref.solid_from_heightmap(*mask_args, plain)
    assert not plain[ground + 1:, :, column].any()            # what the centres alone see


def test_divergence_and_project_match_reference(fractions_of):
    shape = (5, 6, 7)
    rng = np.random.default_rng(13)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    for fractions in (fractions_of(solid), fractions_of(solid, rng)):
        expected, actual = np.zeros(shape, np.float32), np.ones(shape, np.float32)
        ref.divergence(u, v, w, fractions, -2.5, expected)
        cpu.divergence(u, v, w, fractions, -2.5, actual)
        np.testing.assert_array_equal(actual, expected)
        # the net outflow of the faces' open parts
        fu, fv, fw = (f.astype(np.float64) for f in fractions)
        flux = ((fu[:, :, 1:] * u[:, :, 1:] - fu[:, :, :-1] * u[:, :, :-1])
                + (fv[:, 1:] * v[:, 1:] - fv[:, :-1] * v[:, :-1]) + (fw[1:] * w[1:] - fw[:-1] * w[:-1]))
        np.testing.assert_allclose(expected, -2.5 * flux, rtol=1e-5, atol=1e-5)
    voxel = np.zeros(shape, np.float32)
    ref.divergence(u, v, w, fractions_of(solid), 1.0, voxel)
    assert not voxel[solid == 1].any()     # a cell with no open face has no divergence

    nz, ny, nx = shape
    for fractions, dtypes in ((fractions_of(solid), (np.float32, np.uint8)),
                              (fractions_of(solid, rng), (np.float32,))):
        coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
                np.zeros((nz + 1, ny, nx), np.float32))
        ref_pressure.face_coefficients(fractions, 1, 0, 1, 1, *coef)
        p = rng.standard_normal(shape).astype(np.float32)
        e = tuple(a.copy() for a in (u, v, w))
        ref.project(*e, p, *coef, 0.4)
        for dtype in dtypes:  # the solver stores its finest level as uint8
            a = tuple(x.copy() for x in (u, v, w))
            cpu.project(*a, p, *(_stored(c, dtype) for c in coef), 0.4)
            for x, y in zip(a, e):
                np.testing.assert_array_equal(x, y)
        # faces with coefficient 0 (walls, solids, inflow sides) are untouched; the others
        # get the full gradient, whatever their open fraction
        q = np.pad(p, 1)
        gradients = (q[1:-1, 1:-1, 1:] - q[1:-1, 1:-1, :-1], q[1:-1, 1:, 1:-1] - q[1:-1, :-1, 1:-1],
                     q[1:, 1:-1, 1:-1] - q[:-1, 1:-1, 1:-1])
        for x, orig, c, g in zip(e, (u, v, w), coef, gradients):
            np.testing.assert_array_equal(x[c == 0], orig[c == 0])
            np.testing.assert_allclose(x[c != 0], (orig - 0.4 * g)[c != 0], rtol=1e-5, atol=1e-5)


# --- the solver ------------------------------------------------------------------------

def _stored(values, dtype):
    """Face coefficients as the solver stores them in ``dtype`` (uint8: 128 A_f)."""
    out = np.zeros(np.shape(values), dtype)
    ref_pressure.encode_coefficients(values, out)
    return out


def _box_scene(n=16, nz=12, backend="cpu", options=None, **changes):
    """A box on a plane, wind from one side (toward +X, a little toward +Y)."""
    values = dict(wind_speed=5.0, wind_direction=15.0, gust_strength=0.2, gust_period=0.5,
                  gust_direction_jitter=5.0, seed=3)
    values.update(changes)
    settings = SnowSettings(**values)
    h = 1.0
    grid = WindGrid(0.0, 0.0, -1.0, h, n, n, nz)
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = np.zeros(hm.shape, np.float32)
    height[(abs(x - 0.4 * n) < 0.15 * n) & (abs(y - 0.5 * n) < 0.2 * n)] = 0.45 * nz
    b = select_backend(backend)
    solver = WindSolver(settings, grid, b, options)
    solver.update_obstacles(b.asarray(height), b.asarray(np.zeros_like(height)), hm)
    return solver


def _closed_faces(solver):
    """The velocities of the faces with no open fraction (host array)."""
    host = solver.backend.to_host
    return np.concatenate([np.asarray(host(a))[np.asarray(host(f)) <= 0]
                           for a, f in zip((solver.u, solver.v, solver.w), solver.fractions)])


def test_projection_removes_divergence_around_obstacles():
    solver = _box_scene(pressure_tolerance=1e-5)
    assert solver.solid.sum() > 0
    for step in range(4):
        info = solver.step(step / 24.0, 1.0 / 24.0)
        assert info.converged and info.relative_residual <= 1e-5
        assert 0 < info.iterations <= 30
        # a box in a 5 m/s wind: O(1) 1/s divergence after advection, cut by orders of magnitude
        assert info.divergence_before > 0.1
        assert info.divergence_after < 1e-3 * info.divergence_before
        assert info.divergence_after < 1e-3
    assert not _closed_faces(solver).any()
    # the flow goes around and over the box: some vertical and sideways motion appears
    assert np.abs(solver.w).max() > 0.5


def test_iteration_cap_reports_how_far_it_got():
    solver = _box_scene(pressure_tolerance=1e-8, pressure_max_iterations=2)
    info = solver.step(0.0, 1.0 / 24.0)
    assert info.iterations == 2 and not info.converged
    assert 1e-8 < info.relative_residual < 1.0
    # the reported residual is the system's true residual
    kp = solver._pressure
    r = np.zeros_like(solver.pressure)
    kp.residual(solver.pressure, solver._rhs, *solver.levels[0].coef, r)
    true = np.linalg.norm(r) / np.linalg.norm(solver._rhs)
    assert info.relative_residual == pytest.approx(true, rel=1e-2)
    assert info.divergence_after < info.divergence_before


def test_sor5_runs_five_sweeps_and_reports_what_it_reached():
    solver = _box_scene(pressure_solver="sor5", pressure_tolerance=1e-6)
    info = solver.step(0.0, 1.0 / 24.0)
    assert info.iterations == 5
    assert 0.0 < info.relative_residual < 1.0 and not info.converged
    assert info.divergence_after < info.divergence_before
    # the MG-PCG solve of the same step goes far further
    better = _box_scene(pressure_tolerance=1e-6).step(0.0, 1.0 / 24.0)
    assert better.divergence_after < 1e-2 * info.divergence_after


def test_mgpcg_iterations_do_not_grow_with_grid_size():
    counts = []
    for n in (16, 32):
        solver = _box_scene(n=n, nz=n, pressure_tolerance=1e-6, gust_strength=0.0,
                            gust_direction_jitter=0.0)
        solver.pressure[...] = 0
        counts.append(solver.step(0.0, 1.0 / 24.0).iterations)
    assert counts[0] >= 3
    assert abs(counts[1] - counts[0]) <= 2, counts


def test_uniform_inflow_over_flat_ground_stays_uniform():
    settings = SnowSettings(wind_speed=4.0, wind_direction=30.0, gust_strength=0.0,
                            gust_direction_jitter=0.0)
    grid = WindGrid(0.0, 0.0, 0.0, 1.0, 12, 10, 8)
    hm = HeightmapGrid(0.0, 0.0, 1.0, 13, 11)
    b = select_backend("cpu")
    solver = WindSolver(settings, grid, b)
    ground = np.full(hm.shape, 1.2, np.float32)  # the bottom layer of cells is solid
    solver.update_obstacles(ground, np.zeros_like(ground), hm)
    assert solver.solid[0].all() and not solver.solid[1:].any()
    vx, vy = 4.0 * math.cos(math.radians(30)), 4.0 * math.sin(math.radians(30))
    for step in range(5):
        info = solver.step(step / 24.0, 1.0 / 24.0)
        assert info.inflow == pytest.approx((vx, vy))
    np.testing.assert_allclose(solver.u[1:], vx, rtol=1e-4)
    np.testing.assert_allclose(solver.v[1:], vy, rtol=1e-4)
    np.testing.assert_allclose(solver.w[2:], 0.0, atol=1e-4)
    assert info.divergence_after < 1e-4


def test_zero_wind_stays_still():
    solver = _box_scene(wind_speed=0.0)
    info = solver.step(0.0, 1.0 / 24.0)
    assert info.inflow == (0.0, 0.0) and info.converged
    assert not np.abs(solver.u).any() and not np.abs(solver.v).any() and not np.abs(solver.w).any()


def test_gusts_are_deterministic_and_bounded():
    settings = SnowSettings(wind_speed=6.0, wind_direction=40.0, gust_strength=0.3, gust_period=1.5,
                            gust_direction_jitter=12.0, seed=9)
    times = np.linspace(0.0, 60.0, 481)
    first = np.array([inflow_at(settings, t) for t in times])
    again = np.array([inflow_at(settings, t) for t in times])
    np.testing.assert_array_equal(first, again)
    speed = np.hypot(first[:, 0], first[:, 1])
    heading = np.degrees(np.arctan2(first[:, 1], first[:, 0]))
    assert speed.min() >= 6.0 * 0.7 - 1e-9 and speed.max() <= 6.0 * 1.3 + 1e-9
    assert np.all(np.abs(heading - 40.0) <= 12.0 + 1e-9)
    assert speed.std() > 0.05 * 6.0  # gusts really vary the speed
    # continuous in time (linear between keys), and a different seed gives other gusts
    assert np.abs(np.diff(speed)).max() < 6.0 * 0.6 * (times[1] / 1.5) + 1e-6
    other = np.array([inflow_at(settings.replace(seed=10), t) for t in times])
    assert not np.allclose(first, other)


def test_wind_keys_replace_speed_and_direction():
    settings = SnowSettings(wind_keys=((0.0, 2.0, 0.0), (10.0, 6.0, 90.0)), gust_strength=0.0,
                            gust_direction_jitter=0.0)
    assert inflow_at(settings, 5.0) == pytest.approx((4.0 * math.cos(math.radians(45)),
                                                      4.0 * math.sin(math.radians(45))))
    assert inflow_at(settings, 50.0) == pytest.approx((0.0, 6.0), abs=1e-12)


def test_state_dict_round_trip_reproduces_later_steps_bit_for_bit():
    dt = 1.0 / 24.0
    solver = _box_scene()
    for step in range(2):
        solver.step(step * dt, dt)
    state = solver.state_dict()
    assert set(state) >= {"u", "v", "w", "pressure", "pressure_previous", "solid"}
    assert all(isinstance(a, np.ndarray) for a in state.values())
    reference = [solver.step((2 + s) * dt, dt) for s in range(3)]
    expected = solver.state_dict()

    resumed = _box_scene()
    resumed.step(5.0, dt)  # a different history, overwritten by the state
    resumed.load_state_dict(state)
    replay = [resumed.step((2 + s) * dt, dt) for s in range(3)]
    for a, b in zip(replay, reference):
        assert a == b
    for name, array in resumed.state_dict().items():
        np.testing.assert_array_equal(array, expected[name])


def test_extrapolated_warm_start_needs_fewer_iterations():
    """2 p_n - p_(n-1) as the CG start: same tolerance reached, fewer iterations over a
    run whose pressure changes smoothly (steady inflow, the flow settling round the box)."""
    from snowfall.snow_addon.options import SolverOptions

    dt = 1.0 / 24.0
    counts = {}
    for extrapolate in (False, True):
        solver = _box_scene(n=24, nz=12, gust_strength=0.0, gust_direction_jitter=0.0,
                            pressure_tolerance=1e-5,
                            options=SolverOptions(extrapolate_pressure=extrapolate))
        infos = [solver.step(step * dt, dt) for step in range(16)]
        assert all(info.converged for info in infos)
        counts[extrapolate] = sum(info.iterations for info in infos[4:])
    assert counts[True] < counts[False]


def test_inflow_turns_only_where_a_gust_key_bends_it():
    """Solves 1/8 s apart, gust keys every 2 s: the inflow's rate jumps at the key, so only
    the solve whose three predecessors straddle it (t - 2 dt on the key) starts from p_n;
    keys at either end of the three leave them on one line. No gusts: never."""
    dt = 0.125
    gusty = SnowSettings(gust_strength=0.3, gust_period=2.0, gust_direction_jitter=8.0, seed=5)
    turned = [t for t in np.arange(0.5, 6.01, dt) if inflow_turned(gusty, float(t), dt)]
    assert turned == [2.25, 4.25]
    steady = SnowSettings(gust_strength=0.0, gust_direction_jitter=0.0)
    assert not any(inflow_turned(steady, float(t), dt) for t in np.arange(0.0, 6.01, dt))
    keyed = SnowSettings(gust_strength=0.0, gust_direction_jitter=0.0,
                         wind_keys=((0.0, 4.0, 0.0), (1.0, 8.0, 0.0), (3.0, 8.0, 30.0)))
    assert [t for t in np.arange(0.5, 4.01, dt) if inflow_turned(keyed, float(t), dt)] \
        == [1.25, 3.25]


def test_warm_start_after_a_gust_key_needs_fewer_iterations(monkeypatch):
    """After a gust key the extrapolation repeats the key's miss one solve later; the
    solve whose predecessors straddle the key starts from p_n instead: the run across
    three keys needs fewer CG iterations to the same tolerance."""
    import snowfall.snow_addon.wind as wind_module

    dt = 1.0 / 24.0
    counts = {}
    for rule in (False, True):
        if not rule:
            monkeypatch.setattr(wind_module, "inflow_turned", lambda *args: False)
        else:
            monkeypatch.undo()
        solver = _box_scene(n=24, nz=12, gust_strength=0.3, gust_period=0.5,
                            gust_direction_jitter=10.0, pressure_tolerance=1e-5)
        infos = [solver.step(step * dt, dt) for step in range(40)]
        assert all(info.converged for info in infos)
        counts[rule] = sum(info.iterations for info in infos[6:])
    assert counts[True] < counts[False]


def test_obstacle_projection_solves_to_the_accuracy_of_the_step_before():
    """The blocked flux of new obstacles is local and small: the projection stops where
    the step before stopped (its residual within that step's tolerance times that step's
    right-hand side), in fewer iterations than its own relative tolerance needs."""
    dt = 1.0 / 24.0
    n, nz = 16, 12
    results = {}
    for floor in (True, False):
        solver = _box_scene(n=n, nz=nz, gust_strength=0.0, gust_direction_jitter=0.0)
        for step in range(12):
            solver.step(step * dt, dt)
        step_norm2, step_dt = solver._step_rhs
        assert step_norm2 > 0 and step_dt == dt
        if not floor:
            solver._step_rhs = (0.0, dt)
        hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
        y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
        height = np.zeros(hm.shape, np.float32)
        height[(abs(x - 0.4 * n) < 0.15 * n) & (abs(y - 0.5 * n) < 0.2 * n)] = 0.45 * nz
        height[(abs(x - 12.5) < 0.6) & (abs(y - 4.5) < 0.6)] = 0.7  # a small bump: two cells turn solid
        solver.update_obstacles(height, np.zeros_like(height), hm)
        iterations, _relative, converged = solver.obstacle_projection
        assert converged
        rhs = np.zeros(solver.solid.shape, np.float32)
        ref.divergence(solver.u, solver.v, solver.w, solver.fractions, -1.0 / dt, rhs)
        left = float(np.sqrt(np.sum(rhs.astype(np.float64) ** 2)))
        assert left <= 1.5 * solver.settings.pressure_tolerance * math.sqrt(step_norm2)
        results[floor] = iterations
    assert results[True] < results[False]


def _buried(solver):
    """Cells with no open face (host bool array)."""
    fu, fv, fw = (np.asarray(solver.backend.to_host(f)) for f in solver.fractions)
    return (((fu[:, :, :-1] + fu[:, :, 1:]) + (fv[:, :-1] + fv[:, 1:])) + (fw[:-1] + fw[1:])) == 0


def test_pressure_of_cells_that_turn_solid_does_not_drift():
    """The extrapolated warm start leaves cells that got buried (no open face) where they
    are (the solve never touches them, so 2 p_n - p_(n-1) would move them every step)."""
    dt = 1.0 / 24.0
    n, nz = 16, 12
    solver = _box_scene(n=n, nz=nz)
    for step in range(3):
        solver.step(step * dt, dt)
    before = _buried(solver)
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = np.zeros(hm.shape, np.float32)
    height[(abs(x - 0.4 * n) < 0.25 * n) & (abs(y - 0.5 * n) < 0.3 * n)] = 0.7 * nz
    solver.update_obstacles(height, np.zeros_like(height), hm)
    turned = _buried(solver) & ~before
    assert turned.any()
    values = []
    for step in range(3, 7):
        solver.step(step * dt, dt)
        values.append(solver.pressure[turned].copy())
    assert np.abs(values[0]).max() > 0  # the cells kept a pressure from before
    for later in values[1:]:
        np.testing.assert_array_equal(later, values[0])


def test_new_obstacles_are_projected_at_once_and_leave_the_pressure_alone():
    """A drift (2 x 2 cells, one high) appears under a running wind: update_obstacles zeroes
    the flow through the new solid cells' faces and projects the wind divergence free at
    once, leaving the pressure history as it was. The next step then sees only the
    divergence its own advection makes, not the blocked flux (about 3x more here)."""
    dt = 1.0 / 24.0
    n, nz = 16, 12
    solver = _box_scene(n=n, nz=nz, gust_strength=0.0, gust_direction_jitter=0.0)
    infos = [solver.step(step * dt, dt) for step in range(12)]
    pressure, previous = solver.pressure.copy(), solver.pressure_previous.copy()
    before = solver.solid.copy()
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = np.zeros(hm.shape, np.float32)
    height[(abs(x - 0.4 * n) < 0.15 * n) & (abs(y - 0.5 * n) < 0.2 * n)] = 0.45 * nz
    height[(abs(x - 0.75 * n) < 1.2) & (abs(y - 0.3 * n) < 1.2)] = 1.2
    solver.update_obstacles(height, np.zeros_like(height), hm)
    assert int((solver.solid != before).sum()) == 4
    iterations, relative, converged = solver.obstacle_projection
    assert converged and relative <= solver.settings.pressure_tolerance and iterations >= 1
    assert not _closed_faces(solver).any()
    div = np.zeros(solver.solid.shape, np.float32)
    ref.divergence(solver.u, solver.v, solver.w, solver.fractions, 1.0, div)
    assert np.abs(div).max() < 1e-3  # 1/s, cells of 1 m: the flux into the drift is gone
    np.testing.assert_array_equal(solver.pressure, pressure)
    # the history too, except that buried cells keep their pressure (see the test above)
    solid = _buried(solver)
    np.testing.assert_array_equal(solver.pressure_previous[~solid], previous[~solid])
    np.testing.assert_array_equal(solver.pressure_previous[solid], pressure[solid])
    after = solver.step(12 * dt, dt)
    assert after.converged
    assert after.divergence_before < 1.1 * infos[-1].divergence_before
    # the same mask again: nothing to project
    solver.update_obstacles(height, np.zeros_like(height), hm)
    assert solver.obstacle_projection is None


def test_gusts_do_not_switch_inflow_sides():
    """The inflow sides follow the wind before gusts: a gusty wind along +X keeps x- as its
    only inflow side (and, with side walls, the y sides as a closed pair) although its
    gusted cross component changes sign (switching a side between inflow and outflow would
    reshape the whole pressure field in one step)."""
    settings = SnowSettings(wind_speed=5.0, wind_direction=0.0, gust_strength=0.3,
                            gust_period=1.0, gust_direction_jitter=12.0, seed=4,
                            side_walls=False)
    times = np.linspace(0.0, 40.0, 961)
    gusted_vy = np.array([inflow_at(settings, t)[1] for t in times])
    assert gusted_vy.min() < 0 < gusted_vy.max()
    closed_y = ref.INFLOW_Y_MINUS | ref.INFLOW_Y_PLUS
    assert {inflow_sides(settings, t) for t in times} == {ref.INFLOW_X_MINUS}
    walled = settings.replace(side_walls=True)
    assert {inflow_sides(walled, t) for t in times} == {ref.INFLOW_X_MINUS | closed_y}
    turned = settings.replace(wind_direction=150.0)
    assert inflow_sides(turned, 3.0) == ref.INFLOW_X_PLUS | ref.INFLOW_Y_MINUS
    keyed = SnowSettings(wind_keys=((0.0, 2.0, 0.0), (10.0, 6.0, 90.0)), side_walls=False)
    assert inflow_sides(keyed, 0.0) == ref.INFLOW_X_MINUS
    assert inflow_sides(keyed, 5.0) == ref.INFLOW_X_MINUS | ref.INFLOW_Y_MINUS
    assert inflow_sides(keyed, 50.0) == ref.INFLOW_Y_MINUS
    keyed = keyed.replace(side_walls=True)
    assert inflow_sides(keyed, 5.0) == ref.INFLOW_X_MINUS | ref.INFLOW_Y_MINUS
    assert inflow_sides(keyed, 50.0) == ref.INFLOW_Y_MINUS | ref.INFLOW_X_MINUS | ref.INFLOW_X_PLUS
    calm = SnowSettings(wind_speed=0.0, side_walls=True)
    assert inflow_sides(calm, 0.0) == 0  # calm: no side is closed
    # the solver builds its coefficients once for the whole gusty run
    solver = _box_scene(n=12, nz=8, wind_direction=0.0, gust_strength=0.3, gust_period=0.25,
                        gust_direction_jitter=12.0)
    builds = []
    original = solver._pressure.face_coefficients

    def counting(*args):
        builds.append(args[1:5])
        return original(*args)

    solver._pressure.face_coefficients = counting
    try:
        for step in range(30):
            solver.step(step / 24.0, 1.0 / 24.0)
    finally:
        solver._pressure.face_coefficients = original
    assert builds == [] or set(builds) == {(0, 1, 1, 1)}


def test_bad_input_is_rejected():
    solver = _box_scene()
    with pytest.raises(SnowInputError):
        solver.step(0.0, 0.0)
    hm = HeightmapGrid(0.0, 0.0, 0.5, 5, 5)
    with pytest.raises(SnowInputError):
        solver.update_obstacles(np.zeros((4, 4), np.float32), np.zeros((5, 5), np.float32), hm)
    with pytest.raises(SnowInputError):
        solver.load_state_dict({"u": np.zeros(3)})


@pytest.mark.parametrize("boundary", ["cut_cells", "voxels"])
def test_estimate_bytes_covers_the_allocation(boundary):
    settings = SnowSettings(wind_boundary=boundary)
    grid = WindGrid(0.0, 0.0, 0.0, 1.0, 20, 14, 9)
    solver = WindSolver(settings, grid, select_backend("cpu"))
    arrays = [solver.u, solver.v, solver.w, solver.pressure, solver.pressure_previous,
              solver.solid, solver._open_blocks, solver._rhs,
              solver._divergence, solver._r, solver._z, solver._d, solver._q, *solver._next,
              *(solver._advected or ()), *(solver._third or ()), solver._scalars,
              solver._column_top,
              *solver.fractions, solver._block_tops, solver.eddy_viscosity]
    for level in solver.levels:
        arrays += [*level.coef, level.residual]
        if level.transfer_scale is not None:
            arrays.append(level.transfer_scale)
        if level is not solver.levels[0]:
            arrays += [level.rhs, level.solution]
    allocated = sum(a.nbytes for a in {id(a): a for a in arrays}.values())
    assert WindSolver.estimate_bytes(settings, grid) == allocated


def test_keyed_heading_turns_the_short_way_through_zero():
    from snowfall.snow_addon.wind import base_wind

    settings = SnowSettings(wind_keys=((0.0, 5.0, 350.0), (10.0, 5.0, 10.0)))
    speed, heading = base_wind(settings, 5.0)
    assert speed == pytest.approx(5.0)
    assert math.cos(math.radians(heading)) == pytest.approx(1.0)   # blowing toward +X


@pytest.mark.parametrize("keys", [((0, "a", 0),), 5, ((0.0, 1.0),), ((0.0, float("nan"), 0.0),)])
def test_malformed_wind_keys_name_the_setting(keys):
    with pytest.raises(SnowInputError) as info:
        SnowSettings(wind_keys=keys).validate()
    assert info.value.setting == "wind_keys" and info.value.suggestion
    with pytest.raises(SnowInputError):
        SnowSettings.from_dict({"wind_keys": keys}).validate()
