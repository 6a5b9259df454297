"""CUDA wind and pressure kernels against the NumPy reference, and the GPU wind solver
against the CPU one (gpu-marked: skipped with the reason where CuPy has no device).

Tolerances: single kernels agree to float32 rounding (rtol/atol 1e-5; the integer-valued
masks and coefficient arrays exactly). Whole solver steps differ only through the order
of the float64 dot-product sums inside CG, so after 5 steps at pressure_tolerance 1e-6
velocities agree to 2e-3 m/s (wind 5 m/s) and iteration counts to +-1.
"""
import numpy as np
import pytest

from snowfall.kernels.reference import pressure as ref_pressure
from snowfall.kernels.reference import wind as ref_wind

pytestmark = pytest.mark.gpu

SHAPE = (5, 7, 9)
# the second shape spans several 3D launch tiles along x and partial tiles along y
SHAPES = [SHAPE, (3, 37, 70)]


@pytest.fixture
def kernels(gpu_backend):
    return gpu_backend.kernel_module("wind"), gpu_backend.kernel_module("pressure"), gpu_backend.xp


def _faces(shape, rng, scale=3.0):
    nz, ny, nx = shape
    return tuple((scale * rng.standard_normal(s)).astype(np.float32)
                 for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])


def _coef(shape, solid, flags):
    nz, ny, nx = shape
    coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
            np.zeros((nz + 1, ny, nx), np.float32))
    ref_pressure.face_coefficients(solid, *flags, *coef)
    return coef


def _close(device, expected, xp, tol=1e-5):
    np.testing.assert_allclose(xp.asnumpy(device), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("inflow", [(2.5, -1.0), (-3.0, 0.0), (0.0, 0.0)])
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_advection_matches_reference(kernels, inflow, shape):
    gw, _gp, xp = kernels
    rng = np.random.default_rng(21)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    expected = tuple(np.zeros_like(a) for a in (u, v, w))
    ref_wind.advect_velocity(u, v, w, solid, *inflow, 0.7, 0.13, *expected)
    out = tuple(xp.full(a.shape, 99.0, xp.float32) for a in (u, v, w))
    gw.advect_velocity(*(xp.asarray(a) for a in (u, v, w)), xp.asarray(solid), *inflow, 0.7, 0.13, *out)
    for a, e in zip(out, expected):
        _close(a, e, xp)


@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_divergence_project_and_solid_match_reference(kernels, shape):
    gw, _gp, xp = kernels
    rng = np.random.default_rng(22)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    expected = np.zeros(shape, np.float32)
    ref_wind.divergence(u, v, w, solid, -2.5, expected)
    out = xp.ones(shape, xp.float32)
    gw.divergence(xp.asarray(u), xp.asarray(v), xp.asarray(w), xp.asarray(solid), -2.5, out)
    _close(out, expected, xp)

    coef = _coef(shape, solid, (1, 0, 1, 1))
    p = rng.standard_normal(shape).astype(np.float32)
    e = tuple(a.copy() for a in (u, v, w))
    ref_wind.project(*e, p, *coef, 0.4)
    for dtype in (np.float32, np.uint8):
        d = tuple(xp.asarray(a) for a in (u, v, w))
        gw.project(*d, xp.asarray(p), *(xp.asarray(c.astype(dtype)) for c in coef), 0.4)
        for a, b in zip(d, e):
            _close(a, b, xp)

    from snowfall.snow_addon.grid import HeightmapGrid
    hm = HeightmapGrid(-1.0, 2.0, 0.37, 13, 11)
    height = (rng.random(hm.shape) * 3.0).astype(np.float32)
    height[0, :3] = -1.0e30
    snow = (rng.random(hm.shape) * 0.5).astype(np.float32)
    args = (hm.x0, hm.y0, hm.spacing, -1.0, 2.0, -0.5, 0.6)
    expected = np.zeros(shape, np.uint8)
    ref_wind.solid_from_heightmap(height, snow, *args, expected)
    out = xp.full(shape, 7, xp.uint8)
    gw.solid_from_heightmap(xp.asarray(height), xp.asarray(snow), *args, out)
    np.testing.assert_array_equal(xp.asnumpy(out), expected)


@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])  # uint8: the finest level
@pytest.mark.parametrize("shape", SHAPES)
def test_cuda_pressure_kernels_match_reference(kernels, coef_dtype, shape):
    _gw, gp, xp = kernels
    rng = np.random.default_rng(23)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    flags = (1, 0, 0, 1)
    coef = _coef(shape, solid, flags)
    dcoef = tuple(xp.zeros(c.shape, coef_dtype) for c in coef)
    gp.face_coefficients(xp.asarray(solid), *flags, *dcoef)
    for a, e in zip(dcoef, coef):
        np.testing.assert_array_equal(xp.asnumpy(a), e)
    p = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    dp, db = xp.asarray(p), xp.asarray(b)

    e, d = np.zeros(shape, np.float32), xp.ones(shape, xp.float32)
    ref_pressure.apply_operator(p, *coef, e)
    gp.apply_operator(dp, *dcoef, d)
    _close(d, e, xp)
    ref_pressure.residual(p, b, *coef, e)
    gp.residual(dp, db, *dcoef, d)
    _close(d, e, xp)
    ref_pressure.jacobi_sweep(p, b, *coef, 0.8, e)
    gp.jacobi_sweep(dp, db, *dcoef, 0.8, d)
    _close(d, e, xp)
    for color in (0, 1):
        e = p.copy()
        d = xp.asarray(p)
        ref_pressure.redblack_sweep(e, b, *coef, 1.7, color)
        gp.redblack_sweep(d, db, *dcoef, 1.7, color)
        _close(d, e, xp)

    for factors in [(2, 2, 2), (1, 2, 2), (2, 2, 1)]:
        fz, fy, fx = factors
        coarse = tuple((n + f - 1) // f for n, f in zip(shape, factors))
        ncz, ncy, ncx = coarse
        shapes = [(ncz, ncy, ncx + 1), (ncz, ncy + 1, ncx), (ncz + 1, ncy, ncx)]
        expected = tuple(np.zeros(s, np.float32) for s in shapes)
        ref_pressure.restrict_coefficients(*coef, fx, fy, fz, 1.25, 1.5, *expected)
        out = tuple(xp.full(s, 9.0, xp.float32) for s in shapes)
        gp.restrict_coefficients(*dcoef, fx, fy, fz, 1.25, 1.5, *out)
        for a, x in zip(out, expected):
            np.testing.assert_array_equal(xp.asnumpy(a), x)
        e = np.zeros(coarse, np.float32)
        d = xp.ones(coarse, xp.float32)
        ref_pressure.restrict_residual(p, fx, fy, fz, e)
        gp.restrict_residual(dp, fx, fy, fz, d)
        _close(d, e, xp)
        ce = rng.standard_normal(coarse).astype(np.float32)
        e = p.copy()
        d = xp.asarray(p)
        ref_pressure.prolong_add(ce, *coef, fx, fy, fz, e)
        gp.prolong_add(xp.asarray(ce), *dcoef, fx, fy, fz, d)
        _close(d, e, xp)


def test_cuda_smoother_and_cg_kernels_match_reference(kernels):
    _gw, gp, xp = kernels
    rng = np.random.default_rng(24)
    for shape in [(2, 6, 5), (9, 21, 30)]:  # one-block kernel, then one launch per sweep
        solid = (rng.random(shape) < 0.2).astype(np.uint8)
        coef = _coef(shape, solid, (0, 1, 1, 0))
        p = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape).astype(np.float32)
        expected = p.copy()
        ref_pressure.redblack_pairs(expected, b, *coef, 1.0, 1, 3)
        for dtype in (np.float32, np.uint8):
            d = xp.asarray(p)
            gp.redblack_pairs(d, xp.asarray(b), *(xp.asarray(c.astype(dtype)) for c in coef), 1.0, 1, 3)
            _close(d, expected, xp)
    a, b, c, e = (rng.standard_normal(100_003).astype(np.float32) for _ in range(4))
    scalars = xp.zeros(gp.SCALAR_SLOTS, xp.float64)
    gp.dot(xp.asarray(a), xp.asarray(b), scalars, gp.RR)
    assert float(scalars[gp.RR]) == pytest.approx(float(np.dot(a.astype(np.float64), b)), rel=1e-10)
    host = np.array([2.0, 3.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0])
    expected = [x.copy() for x in (a, b, c, e)]
    ref_pressure.cg_update(*expected, host.copy())
    dev = [xp.asarray(x) for x in (a, b, c, e)]
    gp.cg_update(*dev, xp.asarray(host))
    for x, y in zip(dev, expected):
        np.testing.assert_array_equal(xp.asnumpy(x), y)
    ds, hs = xp.asarray(host), host.copy()
    dd, hd = xp.asarray(c), c.copy()
    ref_pressure.cg_direction(hd, a, hs)
    gp.cg_direction(dd, xp.asarray(a), ds)
    np.testing.assert_array_equal(xp.asnumpy(dd), hd)
    np.testing.assert_array_equal(xp.asnumpy(ds), hs)


def _box(backend_name, **changes):
    from snowfall.snow_addon.backend import select_backend
    from snowfall.snow_addon.grid import HeightmapGrid, WindGrid
    from snowfall.snow_addon.settings import SnowSettings
    from snowfall.snow_addon.wind import WindSolver
    values = dict(wind_speed=5.0, wind_direction=15.0, gust_strength=0.2, gust_period=0.5,
                  gust_direction_jitter=5.0, seed=3, pressure_tolerance=1e-6)
    values.update(changes)
    n, nz = 20, 12
    grid = WindGrid(0.0, 0.0, -1.0, 1.0, n, n, nz)
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = np.zeros(hm.shape, np.float32)
    height[(abs(x - 0.4 * n) < 0.15 * n) & (abs(y - 0.5 * n) < 0.2 * n)] = 0.45 * nz
    b = select_backend(backend_name)
    solver = WindSolver(SnowSettings(**values), grid, b)
    solver.update_obstacles(b.asarray(height), b.asarray(np.zeros_like(height)), hm)
    return solver


@pytest.mark.parametrize("solver_name", ["mgpcg", "sor5"])
def test_gpu_solver_matches_cpu_solver(gpu_backend, solver_name):
    cpu, gpu = _box("cpu", pressure_solver=solver_name), _box("gpu", pressure_solver=solver_name)
    np.testing.assert_array_equal(gpu.backend.to_host(gpu.solid), cpu.solid)
    dt = 1.0 / 24.0
    for step in range(5):
        a, b = cpu.step(step * dt, dt), gpu.step(step * dt, dt)
        assert abs(a.iterations - b.iterations) <= 1
        assert a.converged == b.converged
        if solver_name == "mgpcg":
            assert b.relative_residual <= 1e-6 and b.divergence_after < 1e-3
    for name in ("u", "v", "w"):
        np.testing.assert_allclose(gpu.backend.to_host(getattr(gpu, name)), getattr(cpu, name),
                                   atol=2e-3)
    p_cpu = cpu.pressure
    np.testing.assert_allclose(gpu.backend.to_host(gpu.pressure), p_cpu,
                               atol=2e-3 * float(np.abs(p_cpu).max()))


def test_gpu_state_round_trip_is_bit_exact(gpu_backend):
    dt = 1.0 / 24.0
    solver = _box("gpu")
    solver.step(0.0, dt)
    state = solver.state_dict()
    reference = [solver.step((1 + s) * dt, dt) for s in range(2)]
    expected = solver.state_dict()
    resumed = _box("gpu")
    resumed.load_state_dict(state)
    assert [resumed.step((1 + s) * dt, dt) for s in range(2)] == reference
    for name, array in resumed.state_dict().items():
        np.testing.assert_array_equal(array, expected[name])
