"""Porous snow fences: the drag kernel is the NumPy reference bit for bit on the Numba
build; a screen across a closed duct takes exactly the pressure 0.5 k U^2 its loss
coefficient says; a half-open fence slows the air behind it without the solid fence's
reversed flow; and bad fences are refused with a message that names them."""
import math

import numpy as np
import pytest

from snowfall.kernels.cpu import wind as cpu
from snowfall.kernels.reference import wind as ref
from snowfall.snow_addon import Simulation
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.fences import (MAX_TRIANGLE_SAMPLES, NO_FENCE, PorousFence, _pieces,
                                        _triangle_samples, check_porosity, fence_columns,
                                        resistance_coefficient)
from snowfall.snow_addon.grid import WindGrid
from snowfall.snow_addon.scenes import porous_fence, snow_fence
from snowfall.snow_addon.settings import SnowSettings
from snowfall.snow_addon.wind import WindSolver

F32 = np.float32


def drag_case(shape, seed):
    """Random faces, a solid mask, fence bottoms and tops cutting through the cells at
    every height and a drag coefficient that is 0 in some columns (host float32 / uint8
    arrays)."""
    rng = np.random.default_rng(seed)
    nz, ny, nx = shape
    faces = tuple((3.0 * rng.standard_normal(s)).astype(F32)
                  for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    bottom = rng.uniform(-1.0, 0.25 * nz, (ny, nx)).astype(F32)
    top = (bottom + rng.uniform(0.0, 0.5 * nz, (ny, nx))).astype(F32)
    none = rng.random((ny, nx)) < 0.2
    bottom[none], top[none] = -NO_FENCE, NO_FENCE
    resistance = rng.uniform(0.0, 9.0, (3, ny, nx)).astype(F32)   # some faces clamp at 0
    resistance[rng.random((3, ny, nx)) < 0.3] = 0.0                # along x, y, z
    return faces, solid, bottom, top, resistance


@pytest.mark.parametrize("shape", [(7, 9, 11), (2, 2, 2), (3, 5, 2), (6, 1, 4)])
def test_drag_kernel_is_the_reference_bit_for_bit(shape):
    faces, solid, bottom, top, resistance = drag_case(shape, 5)
    results = []
    for kernels in (ref, cpu):
        u, v, w = (a.copy() for a in faces)
        kernels.porous_drag(u, v, w, solid, bottom, top, resistance, -0.5, 0.5, 0.2)
        results.append((u, v, w))
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    u, v, w = results[0]
    assert not np.array_equal(u, faces[0])              # the drag acted
    for before, after in zip(faces, results[0]):        # never turns a face round or speeds it
        assert (np.abs(after) <= np.abs(before)).all() and (after * before >= 0).all()
    assert np.array_equal(u[:, :, [0, -1]], faces[0][:, :, [0, -1]])   # sides keep
    assert np.array_equal(v[:, [0, -1], :], faces[1][:, [0, -1], :])
    assert np.array_equal(w[[0, -1]], faces[2][[0, -1]])


def test_loss_coefficient_of_a_half_open_fence_is_four():
    assert resistance_coefficient(0.5) == pytest.approx(4.0, abs=1e-3)
    values = [resistance_coefficient(p) for p in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert values == sorted(values, reverse=True) and values[-1] < 0.2


@pytest.mark.parametrize("porosity", [0.0, 1.0, -0.2, float("nan"), "half", None])
def test_bad_porosity_names_the_setting_and_a_value_that_works(porosity):
    with pytest.raises(SnowInputError) as error:
        check_porosity(porosity)
    assert "fence_porosity" in str(error.value) and "0.5" in str(error.value)


def test_bad_fences_are_refused_before_anything_runs():
    ground, (fv, ft) = porous_fence(size_x=20.0, size_y=8.0, fence_length=8.0, fence_x=0.0,
                                    resolution=41)
    settings = SnowSettings(flake_count=10, wind_cell_size=1.0)
    with pytest.raises(SnowInputError, match="fences"):
        Simulation(settings, *ground, backend="numpy", fences=[(fv, ft)])
    with pytest.raises(SnowInputError, match="fences"):
        PorousFence(fv, np.array([[0, 1, 9]]))                    # index out of range
    with pytest.raises(SnowInputError, match="fence_porosity"):
        PorousFence(fv, ft, porosity=1.5)
    with pytest.raises(SnowInputError, match="bottom_gap"):
        porous_fence(fence_height=2.0, bottom_gap=2.0)


def test_fences_outside_the_domain_or_bad_columns_are_refused():
    grid = WindGrid(-10.0, -4.0, -1.0, 0.5, 40, 16, 12)
    _, (fv, ft) = porous_fence(size_x=20.0, size_y=8.0, fence_height=2.0, fence_length=4.0,
                               fence_x=-2.25, resolution=41)
    with pytest.raises(SnowInputError, match="outside the wind domain"):
        fence_columns([PorousFence(fv + np.array([100.0, 0.0, 0.0]), ft)], grid)
    with pytest.raises(SnowInputError, match="outside the wind domain"):
        fence_columns([PorousFence(fv + np.array([0.0, 0.0, 50.0]), ft)], grid)   # above it
    solver = WindSolver(SnowSettings(), grid, select_backend("numpy"))
    bottom, top, resistance = fence_columns([PorousFence(fv, ft)], grid)
    for bad in (np.where(resistance.max(axis=0) > 0, np.nan, top).astype(F32), top - F32(5.0)):
        with pytest.raises(SnowInputError):
            solver.set_fences(bottom, bad, resistance)
    with pytest.raises(SnowInputError):
        solver.set_fences(bottom, top, -resistance)
    assert solver.fence_resistance is None                   # nothing was set


def test_a_fence_far_longer_than_the_domain_is_sampled_in_bounded_pieces():
    """A 20 km fence (two triangles) across a 20 m domain: only the part inside is
    sampled, in pieces of at most MAX_TRIANGLE_SAMPLES points."""
    grid = WindGrid(-10.0, -4.0, -1.0, 0.5, 40, 16, 12)
    vertices = np.array([(-2.25, -1e4, 0.0), (-2.25, 1e4, 0.0), (-2.25, 1e4, 2.0),
                         (-2.25, -1e4, 2.0)])
    fence = PorousFence(vertices, np.array([(0, 1, 2), (0, 2, 3)]))
    pieces = list(_pieces(*vertices[[0, 1, 2]], 0.125, (-10.0, -4.0, 10.0, 4.0)))
    assert 0 < len(pieces) < 200
    for piece in pieces:
        assert len(_triangle_samples(*piece, 0.125)) <= MAX_TRIANGLE_SAMPLES
    bottom, top, resistance = fence_columns([fence], grid)
    fenced = resistance.max(axis=0) > 0
    assert set(np.nonzero(fenced)[0].tolist()) == set(range(16))   # the whole row
    assert set(np.nonzero(fenced)[1].tolist()) == {15}
    assert np.allclose(top[fenced], 2.0) and np.allclose(bottom[fenced], 0.0)


def test_a_checkpoint_with_fences_resumes_as_an_uninterrupted_run():
    ground, fence = porous_fence(size_x=20.0, size_y=6.0, fence_height=2.0, fence_length=6.0,
                                 fence_x=-4.25, resolution=81)
    settings = SnowSettings(wind_speed=8.0, wind_cell_size=0.5, sky_height=4.0,
                            heightmap_resolution=81, flake_count=2000, seed=3)
    fences = [PorousFence(*fence, porosity=0.5)]
    straight = Simulation(settings, *ground, backend="cpu", fences=fences)
    grains = straight.step(30).grains_aloft
    state = straight.state_dict()
    straight.step(20)
    resumed = Simulation(settings, *ground, backend="cpu", fences=fences)
    resumed.load_state_dict(state)
    assert resumed.diagnostics.grains_aloft == grains      # the last step's count comes back
    resumed.step(20)
    for name in ("u", "v", "w"):
        assert np.array_equal(getattr(straight.wind, name), getattr(resumed.wind, name))
    assert np.array_equal(straight.snow_depth(), resumed.snow_depth())
    unfenced = Simulation(settings, *ground, backend="cpu")
    unfenced.load_state_dict(state)
    unfenced.step(20)
    assert not np.array_equal(straight.wind.u, unfenced.wind.u)


def test_a_vertical_plane_fence_lands_in_one_column_at_its_height():
    grid = WindGrid(-10.0, -4.0, -1.0, 0.5, 40, 16, 12)
    _, (fv, ft) = porous_fence(size_x=20.0, size_y=8.0, fence_height=2.0, fence_length=4.0,
                               fence_x=-2.25, resolution=41)
    bottom, top, resistance = fence_columns([PorousFence(fv, ft, 0.5)], grid)
    fenced = resistance.max(axis=0) > 0
    columns = np.nonzero(fenced)
    assert set(columns[1].tolist()) == {15}                # x = -2.25 lies in column 15
    assert set(columns[0].tolist()) == set(range(4, 12))   # y = -2 .. 2 m
    assert np.allclose(top[fenced], 2.0) and np.allclose(bottom[fenced], 0.0, atol=1e-5)
    # across x: all of 0.5 k / h along x, none along the fence (y) or up it (z)
    assert np.allclose(resistance[0][fenced], 0.5 * resistance_coefficient(0.5) / 0.5)
    assert (resistance[1:] == 0).all()
    assert (top[~fenced] == NO_FENCE).all()


@pytest.mark.parametrize("degrees", [0.0, 20.0, 45.0, 70.0, 90.0])
def test_an_oblique_fence_takes_the_x_momentum_of_a_screen_at_its_angle(degrees):
    """A plane fence at an angle to x: along each grid row its columns' x coefficients sum
    to 0.5 k cos^2 / h (the x part of the normal force 0.5 k (u cos)^2 of a screen at that
    angle, per unit of the row's width), however many columns of the staircase it crosses,
    to 8 % (the sampling misses a few columns whose corner the fence clips: 3-7 % fewer
    than a line crosses); none along z."""
    grid = WindGrid(-20.0, -20.0, -1.0, 0.5, 80, 80, 8)
    angle = math.radians(degrees)                # of the fence's normal to x
    along = np.array([-math.sin(angle), math.cos(angle), 0.0]) * 12.0
    vertices = np.array([-along, along, along + [0, 0, 2.0], -along + [0, 0, 2.0]])
    vertices[:, :2] += 0.13                      # off the column boundaries
    fence = PorousFence(vertices, np.array([(0, 1, 2), (0, 2, 3)]), 0.5)
    bottom, top, resistance = fence_columns([fence], grid)
    full = 0.5 * fence.resistance / 0.5
    fenced = resistance.max(axis=0) > 0
    inner = np.flatnonzero(fenced.any(axis=1))[2:-2]     # rows the fence crosses end to end
    crossing_x = resistance[0].sum(axis=1)[inner] * 0.5
    crossing_y = resistance[1].sum(axis=0)
    assert (resistance[2] == 0).all()
    if degrees < 90.0:
        assert crossing_x.mean() == pytest.approx(0.5 * fence.resistance * math.cos(angle) ** 2,
                                                  rel=0.08)
    else:
        assert resistance[0].max() < 1e-6 * full
    if degrees == 0.0:
        assert (resistance[1] == 0).all()
    else:
        cols = crossing_y[crossing_y > 0][2:-2]
        assert cols.mean() * 0.5 == pytest.approx(0.5 * fence.resistance * math.sin(angle) ** 2,
                                                  rel=0.08)


def _box(x0, x1, y0, y1, height):
    """A closed box mesh (8 corners, 12 triangles) standing on z = 0."""
    corners = np.array([(x, y, z) for z in (0.0, height) for y in (y0, y1) for x in (x0, x1)])
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    return corners, np.array([t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))])


def test_fence_corners_and_thick_fences_resist_across_their_faces():
    grid = WindGrid(-10.0, -10.0, -1.0, 0.5, 40, 40, 8)
    full = 0.5 * resistance_coefficient(0.5) / 0.5
    # an L: a fence across x along y = 0.1..5 at x = 0.1, one across y along x = 0.1..5 at
    # y = 0.1; their shared corner column resists along both axes, each arm along one
    wall_x = np.array([(0.1, 0.1, 0.0), (0.1, 5.0, 0.0), (0.1, 5.0, 2.0), (0.1, 0.1, 2.0)])
    wall_y = np.array([(0.1, 0.1, 0.0), (5.0, 0.1, 0.0), (5.0, 0.1, 2.0), (0.1, 0.1, 2.0)])
    quad = np.array([(0, 1, 2), (0, 2, 3)])
    _, _, coefficients = fence_columns([PorousFence(wall_x, quad), PorousFence(wall_y, quad)], grid)
    corner = (20, 20)                                     # the column holding (0.1, 0.1)
    assert coefficients[0][corner] == pytest.approx(full) and coefficients[1][corner] == pytest.approx(full)
    assert coefficients[0][28, 20] == pytest.approx(full) and coefficients[1][28, 20] == 0.0
    assert coefficients[1][20, 28] == pytest.approx(full) and coefficients[0][20, 28] == 0.0
    assert (coefficients[2] == 0).all()
    # a box fence 1.2 m thick (more than two cells) and 10 m long across x: its inner
    # columns see only its top and bottom faces and take the fence's mean shares, almost
    # all across it
    vertices, triangles = _box(-0.6, 0.6, -5.0, 5.0, 2.0)
    _, _, coefficients = fence_columns([PorousFence(vertices, triangles)], grid)
    inner = coefficients[:, 14:26, 19]                   # y = -3..3 m, x = -0.5..0 m
    assert np.allclose(inner[0], full * 0.88, rtol=0.1)  # long faces: 2 x 10 m of 2 x 11.2
    assert (inner[1] < 0.15 * full).all() and (inner[2] == 0).all()


def test_a_fence_along_the_wind_leaves_it_alone():
    """A screen with the wind blowing along it (a fence parallel to the storm) takes no
    momentum: the duct's wind stays uniform. (Before the drag knew the fence's
    orientation, it slowed the air in the fence's columns like a wall of still air.)"""
    settings = SnowSettings(wind_speed=5.0, gust_strength=0.0, gust_direction_jitter=0.0,
                            side_walls=True, wind_mixing=0.0, pressure_tolerance=1e-6)
    grid = WindGrid(0.0, 0.0, 0.0, 0.5, 48, 8, 4)
    solver = WindSolver(settings, grid, select_backend("cpu"))
    fence = PorousFence(np.array([(4.0, 2.15, -1.0), (20.0, 2.15, -1.0), (20.0, 2.15, 3.0),
                                  (4.0, 2.15, 3.0)]), np.array([(0, 1, 2), (0, 2, 3)]), 0.3)
    solver.set_fences(*fence_columns([fence], grid))
    for step in range(40):
        solver.step(step * 0.025, 0.025)
    assert np.allclose(np.asarray(solver.u), 5.0, atol=1e-3)
    assert np.abs(np.asarray(solver.v)).max() < 1e-3 and np.abs(np.asarray(solver.w)).max() < 1e-3


def _duct(porosity, backend="cpu"):
    """A closed 24 x 2 x 2 m duct (ground, lid and free-slip side walls), 5 m/s along +x,
    with a screen of ``porosity`` across all of it in one wind column."""
    settings = SnowSettings(wind_speed=5.0, gust_strength=0.0, gust_direction_jitter=0.0,
                            side_walls=True, wind_mixing=0.0, pressure_tolerance=1e-6)
    grid = WindGrid(0.0, 0.0, 0.0, 0.5, 48, 4, 4)
    solver = WindSolver(settings, grid, select_backend(backend))
    fence = PorousFence(np.array([(12.25, -1.0, -1.0), (12.25, 3.0, -1.0), (12.25, 3.0, 3.0),
                                  (12.25, -1.0, 3.0)]), np.array([(0, 1, 2), (0, 2, 3)]),
                        porosity)
    solver.set_fences(*fence_columns([fence], grid))
    return solver, fence


@pytest.mark.parametrize("porosity", [0.3, 0.4, 0.5, 0.8])
def test_a_screen_across_a_duct_takes_half_k_u_squared(porosity):
    """All the air must cross the screen, so the wind stays 5 m/s everywhere and the
    projection turns the momentum the drag takes into a pressure jump across the screen's
    column: 0.5 k U^2 of kinematic pressure (m^2/s^2), Idelchik's loss, as long as a step
    takes less than a face's whole velocity (dt c_f U < 1); beyond, at porosity 0.3 here
    (k = 18.5), the clamp caps it at the jump that stops the face in one step, 2 h U / dt."""
    solver, fence = _duct(porosity)
    dt = 0.025                                       # Courant 0.25
    for step in range(40):
        solver.step(step * dt, dt)
    u = np.asarray(solver.u)
    assert np.allclose(u, 5.0, atol=1e-3)
    p = np.asarray(solver.pressure).mean(axis=(0, 1))
    jump = float(p[23] - p[25])                      # the cells on either side of column 24
    face_rate = dt * 0.5 * (0.5 * fence.resistance / 0.5) * 5.0
    expected = 0.5 * fence.resistance * 25.0 if face_rate <= 1 else 2 * 0.5 * 5.0 / dt
    assert (face_rate > 1) == (porosity == 0.3)
    assert jump == pytest.approx(expected, rel=1e-3)
    assert np.allclose(p[:24], p[0], atol=1e-3 * jump) and np.allclose(p[25:], p[-1], atol=1e-3 * jump)


def _strip(fence_kind, bottom_gap=0.0):
    """The 2D set-up of a long fence: a 2 m fence across an 80 x 3 m strip with free-slip
    side walls, 10 m/s along +x, 0.5 m wind cells; the fence's column is the same for the
    solid fence (0.6 m thick, centred on it) and the porous plane."""
    settings = SnowSettings(wind_speed=10.0, gust_strength=0.0, gust_direction_jitter=0.0,
                            side_walls=True, heightmap_resolution=321, wind_cell_size=0.5,
                            sky_height=8.0, flake_count=500, drift_enabled=False)
    if fence_kind == "solid":
        terrain = snow_fence(size_x=80.0, size_y=3.0, fence_height=2.0, fence_length=3.0,
                             thickness=0.6, fence_x=-29.75, resolution=321)
        return Simulation(settings, *terrain, backend="cpu")
    ground, fence = porous_fence(size_x=80.0, size_y=3.0, fence_height=2.0, fence_length=3.0,
                                 fence_x=-29.75, bottom_gap=bottom_gap, resolution=321)
    return Simulation(settings, *ground, backend="cpu",
                      fences=[PorousFence(*fence, porosity=fence_kind)])


def _near_ground(sim):
    """(x of the u faces from the fence in fence heights, u (m/s) of the open layer
    0-0.5 m, averaged across the strip)."""
    g = sim.grid
    k = int(round((0.25 - g.z0) / g.cell_size - 0.5))
    x = g.x0 + np.arange(g.nx + 1) * g.cell_size
    return (x + 29.75) / 2.0, np.asarray(sim.wind.u)[k].mean(axis=0)


def test_a_half_open_fence_slows_its_lee_without_reversing_the_flow():
    """Behind a solid fence the air turns back (a separation bubble); behind a half-open
    one it keeps blowing forward near the ground, at 0.4-0.5 of the wind over the first
    5 H (measured: 0.41-0.49 at 1-5 H after 6 and 12 s), and recovers downwind."""
    sim = _strip(0.5)
    sim.step(288)                                    # 12 s: 1.5 flow-throughs
    behind, u = _near_ground(sim)
    near = (behind > 0.5) & (behind < 5)
    assert (u[near] > 0).all() and 0.35 < float(u[near].mean()) / 10.0 < 0.55, u[near]
    assert float(u[(behind > 28) & (behind < 35)].mean()) > float(u[near].mean()) + 2.0
    assert float(u[(behind > -8) & (behind < -4)].mean()) > 9.5      # upwind: the wind
    sim = _strip("solid")
    sim.step(144)
    behind, u = _near_ground(sim)
    assert (u[(behind > 0.5) & (behind < 10)] < 0).any()              # the solid fence's bubble


def test_a_bottom_gap_lets_the_air_through_under_the_fence():
    """A fence standing 0.5 m (a wind cell) above the ground lets the air under it pass
    unslowed: at the fence the lowest layer blows faster than the wind upwind (the flow
    the fence holds back squeezes through the gap), where a fence down to the ground
    slows it to about half; a 0.25 m gap (half the cell) lies between the two, 2-12 H
    behind the fence."""
    at_fence, lee = {}, {}
    for gap in (0.0, 0.25, 0.5):
        sim = _strip(0.5, bottom_gap=gap)
        sim.step(96)
        behind, u = _near_ground(sim)
        at_fence[gap] = (float(u[np.argmin(np.abs(behind))]),
                         float(u[(behind > -8) & (behind < -4)].mean()))
        lee[gap] = float(u[(behind > 2) & (behind < 12)].mean())
    (closed, upwind_closed), (gap, upwind_gap) = at_fence[0.0], at_fence[0.5]
    assert closed < 0.8 * upwind_closed, at_fence
    assert gap > upwind_gap, at_fence
    assert lee[0.0] + 1.0 < lee[0.25] < lee[0.5] - 1.0, lee


def test_the_fence_is_the_same_on_every_host_backend():
    """The Numba build steps a fenced wind as the NumPy reference does, bit for bit."""
    results = []
    for backend in ("numpy", "cpu"):
        solver, fence = _duct(0.5, backend)
        bottom, top, resistance = fence_columns([fence], solver.grid)
        solver.set_fences(bottom, np.where(resistance.max(axis=0) > 0, F32(1.2), NO_FENCE),
                          resistance)
        for step in range(5):
            solver.step(step * 0.025, 0.025)
        results.append([np.array(a) for a in (solver.u, solver.v, solver.w)])
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    assert math.isfinite(float(np.abs(results[0][2]).max())) and np.abs(results[0][2]).max() > 0


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(5, 7, 9), (3, 37, 70), (2, 2, 2), (6, 1, 4)])
def test_cuda_drag_kernel_is_the_reference_bit_for_bit(gpu_backend, shape):
    xp, kernels = gpu_backend.xp, gpu_backend.kernel_module("wind")
    faces, solid, bottom, top, resistance = drag_case(shape, 7)
    expected = [a.copy() for a in faces]
    ref.porous_drag(*expected, solid, bottom, top, resistance, -0.5, 0.5, 0.2)
    device = [xp.asarray(a) for a in faces]
    kernels.porous_drag(*device, *(xp.asarray(a) for a in (solid, bottom, top, resistance)),
                        -0.5, 0.5, 0.2)
    for got, want in zip(device, expected):
        assert np.array_equal(xp.asnumpy(got), want)


@pytest.mark.gpu
def test_gpu_screen_across_a_duct_takes_half_k_u_squared(gpu_backend):
    solver, fence = _duct(0.5, "gpu")
    for step in range(40):
        solver.step(step * 0.025, 0.025)
    p = gpu_backend.xp.asnumpy(solver.pressure).mean(axis=(0, 1))
    assert float(p[23] - p[25]) == pytest.approx(0.5 * fence.resistance * 25.0, rel=1e-3)
