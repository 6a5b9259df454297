"""Pressure Poisson kernels: every Numba kernel matches its NumPy reference on random valid
input, the multigrid transfers are exact transposes, and the MG-PCG solve behaves."""
import dataclasses

import numpy as np
import pytest

from snowfall.kernels import contract
from snowfall.kernels.cpu import pressure as cpu
from snowfall.kernels.reference import pressure as ref
from snowfall.snow_addon.wind import multigrid_levels

SHAPES = [(5, 7, 6), (8, 9, 11), (4, 4, 4)]


def _voxel(solid):
    """Open fractions (0/1) of a solid mask."""
    from snowfall.kernels.reference.wind import voxel_fractions
    nz, ny, nx = solid.shape
    fractions = tuple(np.zeros(s, np.float32)
                      for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])
    voxel_fractions(solid, *fractions)
    return fractions


def _stored(values, dtype):
    """Coefficients as the solver stores them in ``dtype`` (uint8: 128 A_f)."""
    out = np.zeros(np.shape(values), dtype)
    ref.encode_coefficients(values, out)
    return out


def _random_system(shape, seed):
    rng = np.random.default_rng(seed)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    flags = [int(f) for f in rng.integers(0, 2, 4)]
    nz, ny, nx = shape
    coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
            np.zeros((nz + 1, ny, nx), np.float32))
    ref.face_coefficients(_voxel(solid), *flags, *coef)
    p = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    return solid, flags, coef, p, b


def _close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_face_coefficients_match_reference(shape):
    solid, flags, coef, _p, _b = _random_system(shape, 1)
    for dtype in (np.float32, np.uint8):
        out = tuple(np.full(c.shape, 7, dtype) for c in coef)
        cpu.face_coefficients(_voxel(solid), *flags, *out)
        for a, e in zip(out, coef):
            np.testing.assert_array_equal(ref.coefficient_values(a), e)
    # cut faces: the coefficient is the open fraction, inside and on outflow sides
    rng = np.random.default_rng(2)
    fractions = tuple(rng.random(c.shape).astype(np.float32) for c in coef)
    expected = tuple(np.zeros_like(c) for c in coef)
    actual = tuple(np.full_like(c, 7.0) for c in coef)
    ref.face_coefficients(fractions, *flags, *expected)
    cpu.face_coefficients(fractions, *flags, *actual)
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)
    np.testing.assert_array_equal(expected[0][:, :, 1:-1], fractions[0][:, :, 1:-1])
    np.testing.assert_array_equal(expected[0][:, :, 0], fractions[0][:, :, 0] * flags[0])
    np.testing.assert_array_equal(expected[2][1:-1], fractions[2][1:-1])
    # no open face next to a solid cell, no open face on the bottom and lid
    cx, cy, cz = coef
    assert not cx[:, :, :-1][solid == 1].any() and not cx[:, :, 1:][solid == 1].any()
    assert not cz[0].any() and not cz[-1].any()


@pytest.mark.parametrize("shape", SHAPES)
def test_uint8_coefficients_are_the_fractions_bit_for_bit(shape):
    """The finest level stores 128 A_f as uint8 (the open fractions are multiples of
    1/128): the face coefficients, the operator, a residual and a red-black sweep give the
    float32 coefficients' results to the last bit, in the reference and the Numba build."""
    rng = np.random.default_rng(9)
    nz, ny, nx = shape
    fractions = tuple((rng.integers(0, 129, s) / 128.0).astype(np.float32)
                      for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])
    fractions[0][0, 0, 1] = 1.0  # an open face inside: q = 128
    p = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    for kernels in (ref, cpu):
        results = []
        for dtype in (np.float32, np.uint8):
            coef = tuple(np.full(f.shape, 7, dtype) for f in fractions)
            kernels.face_coefficients(fractions, 1, 1, 1, 0, *coef)  # y+ an inflow side
            if dtype == np.uint8:
                assert max(int(c.max()) for c in coef) == 128
            np.testing.assert_array_equal(ref.coefficient_values(coef[1]), fractions[1] * (
                np.arange(ny + 1)[None, :, None] < ny))
            out = [np.zeros_like(p) for _ in range(2)]
            kernels.apply_operator(p, *coef, out[0])
            kernels.residual(p, b, *coef, out[1])
            swept = p.copy()
            kernels.redblack_sweep(swept, b, *coef, 1.0, 1)
            results.append((*out, swept))
        for a, e in zip(*results):
            np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])  # uint8: the finest level
@pytest.mark.parametrize("shape", SHAPES)
def test_operator_kernels_match_reference(shape, coef_dtype):
    _solid, _flags, coef, p, b = _random_system(shape, 2)
    coef = tuple(_stored(c, coef_dtype) for c in coef)
    for name, args in [("apply_operator", (p, *coef)), ("residual", (p, b, *coef))]:
        expected, actual = np.zeros_like(p), np.ones_like(p)
        getattr(ref, name)(*args, expected)
        getattr(cpu, name)(*args, actual)
        _close(actual, expected)
    expected, actual = np.zeros_like(p), np.ones_like(p)
    ref.jacobi_sweep(p, b, *coef, 0.8, expected)
    cpu.jacobi_sweep(p, b, *coef, 0.8, actual)
    _close(actual, expected)
    for color in (0, 1):
        expected, actual = p.copy(), p.copy()
        ref.redblack_sweep(expected, b, *coef, 1.7, color)
        cpu.redblack_sweep(actual, b, *coef, 1.7, color)
        _close(actual, expected)
        # only cells of that colour changed (solid cells are zeroed)
        k, j, i = np.indices(shape)
        other = (i + j + k) % 2 != color
        np.testing.assert_array_equal(actual[other], p[other])


@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])
@pytest.mark.parametrize("shape", SHAPES)
def test_transfer_kernels_match_reference_and_are_transposes(shape, coef_dtype):
    _solid, _flags, coef, _p, _b = _random_system(shape, 3)
    coef = tuple(_stored(c, coef_dtype) for c in coef)
    rng = np.random.default_rng(4)
    for factors in [(2, 2, 2), (1, 2, 2), (2, 1, 2), (2, 2, 1)]:
        fz, fy, fx = factors
        coarse = tuple((n + f - 1) // f for n, f in zip(shape, factors))
        ncz, ncy, ncx = coarse
        expected = (np.zeros((ncz, ncy, ncx + 1), np.float32), np.zeros((ncz, ncy + 1, ncx), np.float32),
                    np.zeros((ncz + 1, ncy, ncx), np.float32))
        actual = tuple(np.full_like(c, 9.0) for c in expected)
        ref.restrict_coefficients(*coef, fx, fy, fz, 1.25, 1.5, *expected)
        cpu.restrict_coefficients(*coef, fx, fy, fz, 1.25, 1.5, *actual)
        for a, e in zip(actual, expected):
            np.testing.assert_array_equal(a, e)
        if coef_dtype == np.float32:  # cut faces: fractions in (0, 1), bit for bit too
            cut = tuple(rng.random(c.shape).astype(np.float32) for c in coef)
            ref.restrict_coefficients(*cut, fx, fy, fz, 1.25, 1.5, *expected)
            cpu.restrict_coefficients(*cut, fx, fy, fz, 1.25, 1.5, *actual)
            for a, e in zip(actual, expected):
                np.testing.assert_array_equal(a, e)
        # an all-open fine region keeps the geometric coefficient area / distance
        ones = tuple(_stored(np.ones(c.shape, np.float32), c.dtype) for c in coef)
        ref.restrict_coefficients(*ones, fx, fy, fz, 1.0, 1.0, *expected)
        assert expected[0][0, 0, 1] == pytest.approx(fy * fz / fx)
        assert expected[2][1, 0, 0] == pytest.approx(fy * fx / fz)

        fine_r = rng.standard_normal(shape).astype(np.float32)
        e_ref, e_cpu = np.zeros(coarse, np.float32), np.ones(coarse, np.float32)
        ref.restrict_residual(fine_r, fx, fy, fz, e_ref)
        cpu.restrict_residual(fine_r, fx, fy, fz, e_cpu)
        _close(e_cpu, e_ref)

        coarse_e = rng.standard_normal(coarse).astype(np.float32)
        start = rng.standard_normal(shape).astype(np.float32)
        p_ref, p_cpu = start.copy(), start.copy()
        ref.prolong_add(coarse_e, *coef, fx, fy, fz, p_ref)
        cpu.prolong_add(coarse_e, *coef, fx, fy, fz, p_cpu)
        _close(p_cpu, p_ref)

        # restriction is the exact transpose of (unmasked) prolongation: <P e, r> = <e, R r>
        open_coef = tuple(_stored(np.ones(c.shape, np.float32), c.dtype) for c in coef)
        prolonged = np.zeros(shape, np.float32)
        ref.prolong_add(coarse_e, *open_coef, fx, fy, fz, prolonged)
        lhs = float(np.dot(prolonged.ravel().astype(np.float64), fine_r.ravel()))
        rhs = float(np.dot(coarse_e.ravel().astype(np.float64), e_ref.ravel()))
        assert lhs == pytest.approx(rhs, rel=1e-5, abs=1e-4)
        # prolongation reproduces constants (interpolation weights sum to 1)
        const = np.zeros(shape, np.float32)
        ref.prolong_add(np.ones(coarse, np.float32), *open_coef, fx, fy, fz, const)
        np.testing.assert_allclose(const, 1.0, rtol=1e-6)


def test_operator_is_symmetric_positive_definite_with_an_outflow_side():
    shape = (4, 5, 6)
    rng = np.random.default_rng(5)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    nz, ny, nx = shape
    coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
            np.zeros((nz + 1, ny, nx), np.float32))
    ref.face_coefficients(_voxel(solid), 0, 1, 0, 0, *coef)
    n = solid.size
    matrix = np.zeros((n, n))
    unit = np.zeros(shape, np.float32)
    column = np.zeros(shape, np.float32)
    for index in range(n):
        unit.flat[:] = 0
        unit.flat[index] = 1
        ref.apply_operator(unit, *coef, column)
        matrix[:, index] = column.ravel()
    np.testing.assert_allclose(matrix, matrix.T)
    fluid = np.flatnonzero(ref.diagonal(*coef).ravel() > 0)
    sub = matrix[np.ix_(fluid, fluid)]
    # every fluid cell here connects to the outflow side or is isolated by solid walls;
    # drop isolated cells (they have no equation) and check definiteness of the rest
    eigenvalues = np.linalg.eigvalsh(sub)
    assert eigenvalues.min() > -1e-9


def test_jacobi_sweeps_reduce_the_residual():
    shape = (6, 8, 8)
    _solid, _flags, coef, _p, b = _random_system(shape, 6)
    ref.face_coefficients(_voxel(np.zeros(shape, np.uint8)), 1, 1, 1, 1, *coef)
    p, q, r = np.zeros(shape, np.float32), np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    ref.residual(p, b, *coef, r)
    start = np.linalg.norm(r)
    for _ in range(25):
        cpu.jacobi_sweep(p, b, *coef, 6.0 / 7.0, q)
        p, q = q, p
    cpu.residual(p, b, *coef, r)
    assert np.linalg.norm(r) < 0.5 * start


def test_multigrid_levels_handle_odd_sizes():
    levels = multigrid_levels((32, 45, 257))
    assert levels[0][0] == (32, 45, 257)
    for (shape, factors), (coarse, _f) in zip(levels[:-1], levels[1:]):
        assert coarse == tuple((n + f - 1) // f for n, f in zip(shape, factors))
        assert factors != (1, 1, 1)
    assert levels[-1][1] == (1, 1, 1) and max(levels[-1][0]) < 4


def test_cg_vector_kernels_match_reference():
    rng = np.random.default_rng(8)
    shape = (6, 7, 9)
    a, b, c, d = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    s_ref, s_cpu = np.zeros(ref.SCALAR_SLOTS), np.zeros(contract.SCALAR_SLOTS)
    ref.dot(a, b, s_ref, ref.DQ)
    cpu.dot(a, b, s_cpu, contract.DQ)
    assert s_cpu[contract.DQ] == pytest.approx(float(np.dot(a.ravel().astype(np.float64), b.ravel())), rel=1e-12)
    assert s_cpu[contract.DQ] == pytest.approx(s_ref[ref.DQ], rel=1e-12)
    scalars = np.zeros(ref.SCALAR_SLOTS)
    scalars[:4] = (2.0, 3.0, 0.0, 5.0)
    e = [x.copy() for x in (a, b, c, d)]
    o = [x.copy() for x in (a, b, c, d)]
    ref.cg_update(*e, scalars.copy())
    cpu.cg_update(*o, scalars.copy())
    for x, y in zip(o, e):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(e[0], a + np.float32(2.0 / 3.0) * c, rtol=1e-6)
    se, so = scalars.copy(), scalars.copy()
    de, do = c.copy(), c.copy()
    ref.cg_direction(de, a, se)
    cpu.cg_direction(do, a, so)
    np.testing.assert_array_equal(do, de)
    np.testing.assert_allclose(de, a + np.float32(2.5) * c, rtol=1e-6)
    assert se[ref.RZ] == so[contract.RZ] == 5.0


def test_max_abs_and_extrapolate_match_reference():
    rng = np.random.default_rng(5)
    values = rng.standard_normal(100_001).astype(np.float32)
    values[54_321] = -7.25
    host, expected = np.zeros(contract.SCALAR_SLOTS), np.zeros(contract.SCALAR_SLOTS)
    cpu.max_abs(values, host, contract.DIVERGENCE_BEFORE)
    ref.max_abs(values, expected, contract.DIVERGENCE_BEFORE)
    assert host[contract.DIVERGENCE_BEFORE] == expected[contract.DIVERGENCE_BEFORE] == 7.25
    cpu.max_abs(np.zeros(0, np.float32), host, contract.DIVERGENCE_AFTER)
    assert host[contract.DIVERGENCE_AFTER] == 0.0
    values[3] = np.nan  # a blown-up field shows as NaN, as numpy's max does
    cpu.max_abs(values, host, contract.DIVERGENCE_AFTER)
    ref.max_abs(values, expected, contract.DIVERGENCE_AFTER)
    assert np.isnan(host[contract.DIVERGENCE_AFTER]) and np.isnan(expected[contract.DIVERGENCE_AFTER])
    pressure = rng.standard_normal((4, 6, 5)).astype(np.float32)
    previous = rng.standard_normal((4, 6, 5)).astype(np.float32)
    old_pressure, old_previous = pressure.copy(), previous.copy()
    p, q = pressure.copy(), previous.copy()
    ref.extrapolate(pressure, previous)
    cpu.extrapolate(p, q)
    np.testing.assert_array_equal(p, pressure)
    np.testing.assert_array_equal(q, previous)
    np.testing.assert_array_equal(previous, old_pressure)
    np.testing.assert_array_equal(pressure, np.float32(2) * old_pressure - old_previous)


def test_redblack_pairs_is_the_sweep_sequence():
    shape = (3, 6, 5)
    _solid, _flags, coef, p, b = _random_system(shape, 9)
    expected = p.copy()
    for _ in range(3):
        ref.redblack_sweep(expected, b, *coef, 1.0, 1)
        ref.redblack_sweep(expected, b, *coef, 1.0, 0)
    actual = p.copy()
    cpu.redblack_pairs(actual, b, *coef, 1.0, 1, 3)
    _close(actual, expected)


def _levels_below(shape, seed):
    """Random fine system on ``shape`` and the solver's coarse levels below it: per level
    solution, rhs, residual, coefficients (float32), factors."""
    from snowfall.snow_addon.wind import boundary_corrections
    _solid, _flags, coef, _p, b = _random_system(shape, seed)
    levels = multigrid_levels(shape)
    coefs, spacing = [coef], (1, 1, 1)
    for (_shape, factors), (cshape, _f) in zip(levels[:-1], levels[1:]):
        fz, fy, fx = factors
        ncz, ncy, ncx = cshape
        coarse = (np.zeros((ncz, ncy, ncx + 1), np.float32), np.zeros((ncz, ncy + 1, ncx), np.float32),
                  np.zeros((ncz + 1, ncy, ncx), np.float32))
        ref.restrict_coefficients(*coefs[-1], fx, fy, fz, *boundary_corrections(spacing, factors),
                                  *coarse)
        coefs.append(coarse)
        spacing = tuple(s * f for s, f in zip(spacing, factors))
    shapes = [s for s, _f in levels]
    rhs = [b] + [np.zeros(s, np.float32) for s in shapes[1:]]
    return ([np.full(s, 7.0, np.float32) for s in shapes], rhs,
            [np.zeros(s, np.float32) for s in shapes], coefs, [f for _s, f in levels])


@pytest.mark.parametrize("shape", [(5, 7, 9), (9, 21, 30)])
def test_coarse_vcycle_matches_reference_and_preconditions(shape):
    sol, rhs, res, coefs, factors = _levels_below(shape, 11)
    coarsest = 2 * max(sol[-1].shape) + 4
    expected = [a.copy() for a in sol], [a.copy() for a in rhs], [a.copy() for a in res]
    ref.coarse_vcycle(*expected, coefs, factors, 3, coarsest)
    cpu.coarse_vcycle(sol, rhs, res, coefs, factors, 3, coarsest)
    scale = float(np.abs(expected[0][0]).max())
    np.testing.assert_allclose(sol[0], expected[0][0], rtol=1e-5, atol=1e-5 * scale)
    # one V-cycle from zero (the 7.0 start is discarded) cuts the residual of A p = b a lot
    r = np.zeros(shape, np.float32)
    ref.residual(sol[0], rhs[0], *coefs[0], r)
    assert np.linalg.norm(r) < 0.2 * np.linalg.norm(rhs[0])



def _blocky_system(shape, seed):
    """Coefficients of a mask with solid blocks (terrain-like steps), so that some coarse
    cells are entirely solid."""
    rng = np.random.default_rng(seed)
    nz, ny, nx = shape
    ground = rng.integers(0, nz, (ny, nx))
    solid = (np.arange(nz)[:, None, None] < ground[None]).astype(np.uint8)
    coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
            np.zeros((nz + 1, ny, nx), np.float32))
    ref.face_coefficients(_voxel(solid), 1, 0, 1, 1, *coef)
    return coef


@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])
@pytest.mark.parametrize("shape", [(5, 7, 6), (8, 9, 11), (6, 4, 13)])
def test_scaled_transfers_match_reference_and_are_transposes(shape, coef_dtype):
    rng = np.random.default_rng(7)
    coef = tuple(_stored(c, coef_dtype) for c in _blocky_system(shape, 8))
    for factors in [(2, 2, 2), (1, 2, 2), (2, 1, 2), (2, 2, 1)]:
        fz, fy, fx = factors
        coarse = tuple((n + f - 1) // f for n, f in zip(shape, factors))
        ncz, ncy, ncx = coarse
        coarse_coef = (np.zeros((ncz, ncy, ncx + 1), np.float32),
                       np.zeros((ncz, ncy + 1, ncx), np.float32), np.zeros((ncz + 1, ncy, ncx), np.float32))
        ref.restrict_coefficients(*coef, fx, fy, fz, 1.0, 1.0, *coarse_coef)
        scale_ref, scale_cpu = np.full(shape, 5.0, np.float32), np.full(shape, 7.0, np.float32)
        ref.transfer_scale(*coarse_coef, *coef, fx, fy, fz, scale_ref)
        cpu.transfer_scale(*coarse_coef, *coef, fx, fy, fz, scale_cpu)
        np.testing.assert_array_equal(scale_cpu, scale_ref)
        fine_active = ref.diagonal(*coef) > 0
        assert not scale_ref[~fine_active].any()
        coarse_active = ref.diagonal(*coarse_coef) > 0
        assert (~coarse_active).any()  # the test really has entirely solid coarse cells

        # prolongation from the active coarse cells reproduces constants in every active
        # fine cell that has an active parent (a wall does not pull the correction to 0)
        const = np.zeros(shape, np.float32)
        ref.prolong_scaled_add(coarse_active.astype(np.float32), scale_ref, fx, fy, fz, const)
        np.testing.assert_allclose(const[scale_ref > 0], 1.0, rtol=1e-6)
        assert not const[scale_ref == 0].any()

        fine_r = rng.standard_normal(shape).astype(np.float32)
        e_ref, e_cpu = np.zeros(coarse, np.float32), np.ones(coarse, np.float32)
        ref.restrict_scaled_residual(fine_r, scale_ref, fx, fy, fz, e_ref)
        cpu.restrict_scaled_residual(fine_r, scale_ref, fx, fy, fz, e_cpu)
        np.testing.assert_array_equal(e_cpu, e_ref)

        coarse_e = rng.standard_normal(coarse).astype(np.float32)
        start = rng.standard_normal(shape).astype(np.float32)
        p_ref, p_cpu = start.copy(), start.copy()
        ref.prolong_scaled_add(coarse_e, scale_ref, fx, fy, fz, p_ref)
        cpu.prolong_scaled_add(coarse_e, scale_ref, fx, fy, fz, p_cpu)
        np.testing.assert_array_equal(p_cpu, p_ref)
        np.testing.assert_array_equal(p_ref[~fine_active], start[~fine_active])

        # the restriction is the exact transpose of the prolongation: <P e, r> = <e, R r>
        prolonged = np.zeros(shape, np.float32)
        ref.prolong_scaled_add(coarse_e, scale_ref, fx, fy, fz, prolonged)
        lhs = float(np.dot(prolonged.ravel().astype(np.float64), fine_r.ravel()))
        rhs = float(np.dot(coarse_e.ravel().astype(np.float64), e_ref.ravel()))
        assert lhs == pytest.approx(rhs, rel=1e-5, abs=1e-4)


def _terrain_solver(n, nz):
    """Wind solver on rolling terrain (steps of whole cells, entirely solid coarse cells)."""
    from snowfall.snow_addon.backend import select_backend
    from snowfall.snow_addon.grid import HeightmapGrid, WindGrid
    from snowfall.snow_addon.settings import SnowSettings
    from snowfall.snow_addon.wind import WindSolver

    settings = SnowSettings(wind_speed=8.0, wind_direction=25.0, pressure_tolerance=1e-6,
                            pressure_max_iterations=100)
    solver = WindSolver(settings, WindGrid(0.0, 0.0, 0.0, 1.0, n, n, nz), select_backend("cpu"))
    hm = HeightmapGrid(0.0, 0.0, 0.5, 2 * n + 1, 2 * n + 1)
    y, x = np.mgrid[0:hm.ny, 0:hm.nx] * hm.spacing
    height = (0.25 * nz * (0.5 + 0.5 * np.sin(x / n * 6.0) * np.cos(y / n * 5.0)) + 1.5)
    solver.update_obstacles(height.astype(np.float32), np.zeros(hm.shape, np.float32), hm)
    solver._ensure_coefficients(solver._last_sides)
    return solver


def test_mgpcg_iterations_on_terrain_do_not_grow_with_the_grid():
    """Random right-hand side, zero start, tolerance 1e-6, 32x32x16 then 64x64x16 cells:
    with plain transfers next to the terrain the count grew with the grid (6, 7, 9, 12 at
    32..256 x 32, 3 smoothing pairs); renormalized transfers keep it flat (2 pairs: 7, 7
    with voxels; 8, 8 with cut cells, whose slivers keep at least FRACTION_MIN open: 12, 15
    without that)."""
    counts = []
    for n in (32, 64):
        solver = _terrain_solver(n, 16)
        rng = np.random.default_rng(5)
        fluid = solver.solid == 0
        solver._rhs[...] = np.where(fluid, rng.standard_normal(fluid.shape), 0).astype(np.float32)
        solver.pressure.fill(0)
        iterations, relative, converged = solver._solve_mgpcg()
        assert converged and relative <= 1e-6
        counts.append(iterations)
    assert counts[1] <= counts[0] <= 8


def _check_cases():
    """(rr, bb, iterations so far, limit) covering converged, not converged, the limit,
    b = 0, r.r < 0 (clamped) and NaN."""
    return [(1e-9, 1.0, 0, 50), (2.5e-7, 3.0, 2, 50), (4.0, 9.0, 3, 4), (0.0, 0.0, 0, 50),
            (-1e-30, 2.0, 1, 50), (float("nan"), 1.0, 0, 50), (1e-8, 1e-4, 5, 50)]


def test_cg_check_is_the_host_check_and_stops_the_updates():
    """cg_check gives the relative residual the host computed (sqrt(max(rr, 0) / bb)) and
    DONE when converged (tolerance 1e-4), at the limit or for b = 0; once DONE, neither
    cg_check nor cg_update_norm / cg_update_check change anything."""
    import math
    for kernels in (ref, cpu):
        for rr, bb, count, limit in _check_cases():
            s = np.zeros(contract.SCALAR_SLOTS)
            kernels.cg_begin(s)
            s[contract.RR], s[contract.BB], s[contract.ITERATIONS] = rr, bb, count
            kernels.cg_check(s, 1e-4, limit)
            host = math.sqrt(max(rr, 0.0) / bb) if bb != 0.0 else 0.0
            assert s[contract.ITERATIONS] == count + 1
            assert (s[contract.RELATIVE] == host) or (math.isnan(host) and math.isnan(s[contract.RELATIVE]))
            assert bool(s[contract.DONE]) == (bb == 0.0 or host <= 1e-4 or count + 1 >= limit)
    rng = np.random.default_rng(3)
    x, r, d, q = (rng.standard_normal((4, 5, 6)).astype(np.float32) for _ in range(4))
    s = np.array([2.0, 3.0, 7.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    s[contract.DONE] = 1.0
    before = [a.copy() for a in (x, r)], s.copy()
    cpu.cg_update_check(x, r, d, q, s, 1e-4, 50)
    ref.cg_update_norm(x, r, d, q, s)
    np.testing.assert_array_equal(x, before[0][0])
    np.testing.assert_array_equal(r, before[0][1])
    np.testing.assert_array_equal(s, before[1])


@pytest.mark.parametrize("limit", [100, 4])
def test_mgpcg_read_ahead_gives_the_same_solve(limit):
    """Queuing several CG iterations before the host reads the scalars (the GPU's read
    ahead, here forced on the CPU) gives the same pressure bits, count and residual as
    reading after each, also when more are queued than the solve needs or than the limit."""
    solver = _terrain_solver(16, 8)
    solver.settings.pressure_max_iterations = limit
    rng = np.random.default_rng(9)
    fluid = solver.solid == 0
    solver._rhs[...] = np.where(fluid, rng.standard_normal(fluid.shape), 0).astype(np.float32)
    assert solver.options.read_ahead is False        # the CPU's own choice
    solver.pressure.fill(0)
    expected = solver._solve_mgpcg()
    expected_p = solver.pressure.copy()
    assert expected[0] == min(limit, expected[0]) and expected[0] > 2
    solver.options = dataclasses.replace(solver.options, read_ahead=True)
    for ahead in (1, 2, expected[0], expected[0] + 3, 200):
        solver._solved["step"].clear()
        solver._solved["step"].append(ahead)  # queued before the first read
        solver.pressure.fill(0)
        assert solver._solve_mgpcg() == expected
        np.testing.assert_array_equal(solver.pressure, expected_p)
    solver._rhs.fill(0)  # b = 0: no iterations, pressure 0
    solver._solved["step"].append(3)
    assert solver._solve_mgpcg() == (0, 0.0, True)
    assert not solver.pressure.any()


def test_fused_cg_and_from_zero_kernels_are_their_compositions():
    """The wind solver calls redblack_pairs_from_zero, apply_operator_dot, residual_norm
    and cg_update_norm; on the CPU they are fill/sweeps and kernel + dot."""
    shape = (5, 9, 8)
    _solid, _flags, coef, p, b = _random_system(shape, 31)
    expected = np.zeros(shape, np.float32)
    ref.redblack_pairs(expected, b, *coef, 1.0, 0, 2)
    actual = p.copy()
    cpu.redblack_pairs_from_zero(actual, b, *coef, 1.0, 0, 2)
    np.testing.assert_array_equal(actual, expected)
    again = p.copy()
    ref.redblack_pairs_from_zero(again, b, *coef, 1.0, 0, 2)
    np.testing.assert_array_equal(again, expected)
    out, s = np.zeros(shape, np.float32), np.zeros(contract.SCALAR_SLOTS)
    cpu.apply_operator_dot(p, *coef, out, s, contract.DQ)
    plain = np.zeros(shape, np.float32)
    cpu.apply_operator(p, *coef, plain)
    np.testing.assert_array_equal(out, plain)
    assert s[contract.DQ] == pytest.approx(float(np.dot(p.ravel().astype(np.float64), plain.ravel())), rel=1e-12)
    cpu.residual_norm(p, b, *coef, out, s, contract.BB)
    cpu.residual(p, b, *coef, plain)
    np.testing.assert_array_equal(out, plain)
    assert s[contract.BB] == pytest.approx(float(np.dot(b.ravel().astype(np.float64), b.ravel())), rel=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])
@pytest.mark.parametrize("shape", [(9, 21, 30), (4, 33, 70)])
def test_cuda_fused_cg_and_from_zero_kernels_match_reference(gpu_backend, shape, coef_dtype):
    """GPU: the fused zeroing + first half-sweep gives the bits of fill(0) + the sweeps (b
    with signed zeros too); the fused CG kernels write the same arrays as the plain ones
    and their dot products agree with float64 sums to 1e-10."""
    gp, xp = gpu_backend.kernel_module("pressure"), gpu_backend.xp
    _solid, _flags, coef, p, b = _random_system(shape, 41)
    b[0, 0, :4] = np.float32(-0.0)
    coef = tuple(_stored(c, coef_dtype) for c in coef)
    dcoef = tuple(xp.asarray(c) for c in coef)
    for first, pairs in ((0, 2), (1, 1), (0, 3)):
        expected = np.zeros(shape, np.float32)
        ref.redblack_pairs(expected, b, *(ref.coefficient_values(c) for c in coef), 1.0, first, pairs)
        d = xp.asarray(p)
        gp.redblack_pairs_from_zero(d, xp.asarray(b), *dcoef, 1.0, first, pairs)
        got = xp.asnumpy(d)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    rng = np.random.default_rng(5)
    d_host = rng.standard_normal(shape).astype(np.float32)
    scalars = xp.zeros(contract.SCALAR_SLOTS, xp.float64)
    out = xp.zeros(shape, xp.float32)
    gp.apply_operator_dot(xp.asarray(d_host), *dcoef, out, scalars, contract.DQ)
    plain = xp.zeros(shape, xp.float32)
    gp.apply_operator(xp.asarray(d_host), *dcoef, plain)
    np.testing.assert_array_equal(xp.asnumpy(out), xp.asnumpy(plain))
    q = xp.asnumpy(out)
    assert float(scalars[contract.DQ]) == pytest.approx(
        float(np.dot(d_host.ravel().astype(np.float64), q.ravel())), rel=1e-10)
    gp.residual_norm(xp.asarray(p), xp.asarray(b), *dcoef, out, scalars, contract.BB)
    gp.residual(xp.asarray(p), xp.asarray(b), *dcoef, plain)
    np.testing.assert_array_equal(xp.asnumpy(out), xp.asnumpy(plain))
    assert float(scalars[contract.BB]) == pytest.approx(
        float(np.dot(b.ravel().astype(np.float64), b.ravel())), rel=1e-10)
    host = np.array([2.0, 3.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0])
    x, r = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    ex, er = x.copy(), r.copy()
    ref.cg_update(ex, er, d_host, q, host.copy())
    dx, dr, ds = xp.asarray(x), xp.asarray(r), xp.asarray(host)
    gp.cg_update_norm(dx, dr, xp.asarray(d_host), xp.asarray(q), ds)
    np.testing.assert_array_equal(xp.asnumpy(dx), ex)
    np.testing.assert_array_equal(xp.asnumpy(dr), er)
    assert float(ds[contract.RR]) == pytest.approx(float(np.dot(er.ravel().astype(np.float64), er.ravel())),
                                             rel=1e-10)
    assert float(ds[contract.RZ]) == 2.0 and float(ds[contract.DQ]) == 3.0


@pytest.mark.gpu
def test_cuda_cg_check_matches_reference(gpu_backend):
    """GPU cg_check / cg_update_check: the reference's count, relative residual (bit for
    bit: IEEE double division and square root) and DONE; nothing changes once DONE."""
    gp, xp = gpu_backend.kernel_module("pressure"), gpu_backend.xp
    for rr, bb, count, limit in _check_cases():
        host = np.zeros(ref.SCALAR_SLOTS)
        host[ref.RR], host[ref.BB], host[ref.ITERATIONS], host[ref.DONE] = rr, bb, count, 1.0
        dev = xp.asarray(host)
        gp.cg_begin(dev)
        ref.cg_begin(host)
        dev[contract.ITERATIONS] = count
        host[ref.ITERATIONS] = count
        gp.cg_check(dev, 1e-4, limit)
        ref.cg_check(host, 1e-4, limit)
        np.testing.assert_array_equal(xp.asnumpy(dev), host)
        again = xp.asnumpy(dev)
        gp.cg_check(dev, 1e-4, limit)
        if again[contract.DONE]:
            np.testing.assert_array_equal(xp.asnumpy(dev), again)
    rng = np.random.default_rng(12)
    shape = (6, 40, 50)
    x, r, d, q = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    for tolerance, done in ((1e-4, False), (1e3, True)):
        host = np.zeros(ref.SCALAR_SLOTS)
        host[:5] = (2.0, 3.0, 0.0, 5.0, 40.0)
        ex, er = x.copy(), r.copy()
        ref.cg_update_check(ex, er, d, q, host, tolerance, 50)
        dev = xp.asarray(np.concatenate([host[:5], np.zeros(ref.SCALAR_SLOTS - 5)]))
        dx, dr = xp.asarray(x), xp.asarray(r)
        gp.cg_update_check(dx, dr, xp.asarray(d), xp.asarray(q), dev, tolerance, 50)
        np.testing.assert_array_equal(xp.asnumpy(dx), ex)
        np.testing.assert_array_equal(xp.asnumpy(dr), er)
        got = xp.asnumpy(dev)
        assert got[contract.RR] == pytest.approx(host[ref.RR], rel=1e-10)
        assert got[contract.ITERATIONS] == 1.0 and bool(got[contract.DONE]) == done
        if done:  # queued after DONE: x, r and the scalars stay
            gp.cg_update_check(dx, dr, xp.asarray(d), xp.asarray(q), dev, tolerance, 50)
            np.testing.assert_array_equal(xp.asnumpy(dx), ex)
            np.testing.assert_array_equal(xp.asnumpy(dev), got)


# --- the same bits as the code before the kernels were deduplicated (issue 38) ------------
#: SHA-256 of every output of saved_case, per backend, computed with the pressure kernels
#: as they were before pressure.cu and the shared Numba helpers (commit edee6e2): a change
#: of any bit of any kernel's result shows here.
SAVED_DIGESTS = __import__("pathlib").Path(__file__).with_name("pressure_saved_digests.json")


def saved_case(kp, xp):
    """Every pressure kernel of build ``kp`` (arrays of ``xp``) on a fixed system: uint8 fine
    coefficients with cut faces on 5x30x33 cells (above the GPU's single-block size), the
    solver's coarse levels below, and the CG kernels. Returns {name: host array}."""
    from snowfall.snow_addon.wind import boundary_corrections

    rng = np.random.default_rng(2026)
    shape = (5, 30, 33)
    nz, ny, nx = shape
    fractions = []
    for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)]:
        f = rng.integers(0, 129, s).astype(np.float32) / np.float32(128)
        f[rng.random(s) < 0.25] = 0
        fractions.append(xp.asarray(f))
    out = {}

    def keep(name, array):
        out[name] = np.array(xp.asnumpy(array) if hasattr(xp, "asnumpy") else array, copy=True)

    levels = multigrid_levels(shape)
    coefs, spacing = [], (1, 1, 1)
    fine = tuple(xp.zeros(f.shape, np.uint8) for f in fractions)
    kp.face_coefficients(tuple(fractions), 1, 0, 1, 1, *fine)
    coefs.append(fine)
    fine32 = tuple(xp.zeros(f.shape, np.float32) for f in fractions)
    kp.face_coefficients(tuple(fractions), 0, 1, 1, 0, *fine32)
    for name, c in zip("xyz", fine + fine32):
        keep(f"coef_{name}_{c.dtype}", c)
    scales = []
    for (lshape, factors), (cshape, _f) in zip(levels[:-1], levels[1:]):
        fz, fy, fx = factors
        ncz, ncy, ncx = cshape
        coarse = (xp.zeros((ncz, ncy, ncx + 1), np.float32), xp.zeros((ncz, ncy + 1, ncx), np.float32),
                  xp.zeros((ncz + 1, ncy, ncx), np.float32))
        kp.restrict_coefficients(*coefs[-1], fx, fy, fz, *boundary_corrections(spacing, factors),
                                 *coarse)
        scale = xp.zeros(lshape, np.float32)
        kp.transfer_scale(*coarse, *coefs[-1], fx, fy, fz, scale)
        scales.append(scale)
        coefs.append(coarse)
        spacing = tuple(s * f for s, f in zip(spacing, factors))
        keep(f"coarse_coef_{len(coefs) - 1}", xp.concatenate([c.ravel() for c in coarse]))
        keep(f"transfer_scale_{len(coefs) - 2}", scale)
    p = xp.asarray(rng.standard_normal(shape).astype(np.float32))
    b = xp.asarray(rng.standard_normal(shape).astype(np.float32))
    for c in (coefs[0], fine32):
        tag = str(c[0].dtype)
        sol = p.copy()
        kp.redblack_pairs_from_zero(sol, b, *c, 1.0, 0, 3)
        keep(f"from_zero_{tag}", sol)
        kp.redblack_pairs(sol, b, *c, 1.0, 1, 3)
        keep(f"pairs_{tag}", sol)
        for color in (0, 1):
            kp.redblack_sweep(sol, b, *c, 1.7, color)
        keep(f"sor_{tag}", sol)
        jac = xp.zeros(shape, np.float32)
        kp.jacobi_sweep(sol, b, *c, 0.8, jac)
        keep(f"jacobi_{tag}", jac)
        res = xp.zeros(shape, np.float32)
        kp.residual(sol, b, *c, res)
        keep(f"residual_{tag}", res)
        kp.apply_operator(sol, *c, res)
        keep(f"operator_{tag}", res)
    fz, fy, fx = levels[0][1]
    cshape = levels[1][0]
    r = xp.asarray(rng.standard_normal(shape).astype(np.float32))
    for name, scaled in (("restrict", False), ("restrict_scaled", True)):
        e = xp.zeros(cshape, np.float32)
        if scaled:
            kp.restrict_scaled_residual(r, scales[0], fx, fy, fz, e)
        else:
            kp.restrict_residual(r, fx, fy, fz, e)
        keep(name, e)
    ce = xp.asarray(rng.standard_normal(cshape).astype(np.float32))
    q = p.copy()
    kp.prolong_add(ce, *coefs[0], fx, fy, fz, q)
    keep("prolong", q)
    kp.prolong_scaled_add(ce, scales[0], fx, fy, fz, q)
    keep("prolong_scaled", q)
    # the coarse end of a V-cycle, per level (the GPU: one block) and in one call
    shapes = [s for s, _f in levels][1:]
    sol = [xp.full(s, 7.0, np.float32) for s in shapes]
    rhs = [xp.asarray(rng.standard_normal(s).astype(np.float32)) for s in shapes[:1]] + [
        xp.zeros(s, np.float32) for s in shapes[1:]]
    res = [xp.zeros(s, np.float32) for s in shapes]
    kp.coarse_vcycle(sol, rhs, res, coefs[1:], [f for _s, f in levels][1:], 3, 20)
    for level, (a, c, d) in enumerate(zip(sol, rhs, res)):
        keep(f"vcycle_solution_{level}", a)
        keep(f"vcycle_rhs_{level}", c)
        keep(f"vcycle_residual_{level}", d)
    # the CG kernels (scalars on the device)
    scalars = xp.zeros(contract.SCALAR_SLOTS, np.float64)
    x, rr, d, qq = (xp.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in range(4))
    kp.cg_begin(scalars)
    kp.residual_norm(x, b, *coefs[0], rr, scalars, contract.BB)
    kp.dot(rr, d, scalars, contract.RZ)
    kp.apply_operator_dot(d, *coefs[0], qq, scalars, contract.DQ)
    kp.cg_update_check(x, rr, d, qq, scalars, 1e-6, 50)
    kp.dot(rr, rr, scalars, contract.RZ_NEXT)
    kp.cg_direction(d, rr, scalars)
    kp.max_abs(rr, scalars, contract.DIVERGENCE_BEFORE)
    kp.extrapolate(x, d)
    for name, array in (("cg_x", x), ("cg_r", rr), ("cg_d", d), ("cg_q", qq), ("cg_scalars", scalars)):
        keep(name, array)
    return out


def digests(arrays) -> dict:
    import hashlib
    return {name: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
            for name, a in sorted(arrays.items())}


@pytest.mark.parametrize("build", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_pressure_kernels_give_the_bits_they_gave_before(build, request):
    """Every output of saved_case is the bits the kernels gave before they were deduplicated
    (one smoother, restriction and prolongation; pressure.cu): SHA-256 per array."""
    import json
    from snowfall.snow_addon.backend import select_backend
    if build == "gpu":
        request.getfixturevalue("gpu_backend")
    backend = select_backend(build)
    saved = json.loads(SAVED_DIGESTS.read_text())[build]
    got = digests(saved_case(backend.kernel_module("pressure"), backend.xp))
    assert sorted(got) == sorted(saved)
    changed = [name for name in saved if got[name] != saved[name]]
    assert not changed, f"{build}: these outputs changed: {changed}"
