"""The wind and pressure kernels of every compiled build (Numba on the CPU, CUDA on the GPU
where CuPy has a device: skipped with the reason elsewhere) against the NumPy reference,
and the wind solver's GPU-specific paths. One suite over the backends (the ``backend``
fixture of tests/conftest.py), as NVIDIA warp's tests run over devices.

Tolerances: single kernels agree to float32 rounding (rtol/atol 1e-5; the integer-valued
masks and coefficient arrays exactly). Whole solver steps differ only through the order
of the float64 dot-product sums inside CG, so after 5 steps at pressure_tolerance 1e-6
GPU velocities agree with the CPU's to 2e-3 m/s (wind 5 m/s) and iteration counts to +-1.
"""
import numpy as np
import pytest

from snowfall.kernels import contract

from snowfall.kernels.reference import pressure as ref_pressure
from snowfall.kernels.reference import wind as ref_wind
from snowfall.snow_addon.backend import select_backend

SHAPE = (5, 7, 9)
# the second shape spans several 3D launch tiles along x and partial tiles along y
SHAPES = [SHAPE, (3, 37, 70)]


class _NumPy:
    """NumPy with CuPy's ``asnumpy``, and an ``asarray`` that copies as CuPy's does from host
    memory: one test body serves host and device arrays."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def asarray(a, dtype=None):
        return np.array(a, dtype=dtype)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


def _kernels_of(backend):
    xp = _NumPy() if backend.xp is np else backend.xp
    return backend.kernel_module("wind"), backend.kernel_module("pressure"), xp


@pytest.fixture
def kernels(backend):
    """(wind kernels, pressure kernels, array module) of the Numba and the CUDA build."""
    return _kernels_of(backend)


def _faces(shape, rng, scale=3.0):
    nz, ny, nx = shape
    return tuple((scale * rng.standard_normal(s)).astype(np.float32)
                 for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])


def _coef(shape, fractions, flags):
    """Fine face coefficients of open ``fractions``, or of a solid mask's 0/1 fractions."""
    nz, ny, nx = shape
    coef = (np.zeros((nz, ny, nx + 1), np.float32), np.zeros((nz, ny + 1, nx), np.float32),
            np.zeros((nz + 1, ny, nx), np.float32))
    if not isinstance(fractions, tuple):
        solid, fractions = fractions, tuple(np.zeros_like(c) for c in coef)
        ref_wind.voxel_fractions(solid, *fractions)
    ref_pressure.face_coefficients(fractions, *flags, *coef)
    return coef


def _stored(values, dtype):
    """Face coefficients as the solver stores them in ``dtype`` (uint8: 128 A_f)."""
    out = np.zeros(np.shape(values), dtype)
    ref_pressure.encode_coefficients(values, out)
    return out


def _device(xp, arrays):
    return tuple(xp.asarray(a) for a in arrays)


def _close(device, expected, xp, tol=1e-5):
    np.testing.assert_allclose(xp.asnumpy(device), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("inflow, sides", [((2.5, -1.0), None), ((-3.0, 0.0), None),
                                           ((0.0, 0.0), None), ((2.5, -1.0), 1), ((-0.5, 0.3), 9),
                                           ((3.0, 0.2), 1 | 4 | 8)])
@pytest.mark.parametrize("shape", SHAPES)
def test_advection_matches_reference(kernels, inflow, sides, shape, fractions_of):
    gw, _gp, xp = kernels
    rng = np.random.default_rng(21)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    sides = ref_wind.inflow_sides_of(*inflow) if sides is None else sides  # bits: x-, x+, y-, y+
    for fractions in (fractions_of(solid), fractions_of(solid, rng)):
        expected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref_wind.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected)
        out = tuple(xp.full(a.shape, 99.0, xp.float32) for a in (u, v, w))
        gw.advect_velocity(*_device(xp, (u, v, w)), _device(xp, fractions), *inflow, sides,
                           0.7, 0.13, *out)
        for a, e in zip(out, expected):
            _close(a, e, xp)
        # the MacCormack correction of that result, bit for bit
        corrected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref_wind.correct_advection(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected,
                                   *corrected)
        device = tuple(xp.full(a.shape, 99.0, xp.float32) for a in (u, v, w))
        gw.correct_advection(*_device(xp, (u, v, w)), _device(xp, fractions), *inflow, sides,
                             0.7, 0.13, *_device(xp, expected), *device)
        for a, e in zip(device, corrected):
            np.testing.assert_array_equal(xp.asnumpy(a), e)


def _terrain_solid(shape, rng, density=0.02):
    """Ground, a block and a few loose solid cells (both advection paths are taken)."""
    solid = (rng.random(shape) < density).astype(np.uint8)
    nz, ny, nx = shape
    solid[0] = 1
    solid[1:3, ny // 3:ny // 3 + 2, nx // 3:nx // 3 + 3] = 1
    return solid


@pytest.mark.parametrize("inflow, sides", [((2.5, -1.0), None), ((0.0, 4.0), None),
                                           ((-0.5, 0.3), 9)])
@pytest.mark.parametrize("shape", SHAPES + [(2, 2, 2), (4, 7, 2)])
def test_open_blocks_and_advection_near_terrain_are_bitwise(kernels, inflow, sides, shape,
                                                              fractions_of):
    """open_blocks equals the reference; with open blocks (plain trilinear, no mask) and
    masked samples in one field, both advection launches equal the reference bit for bit,
    with the blocks passed in or computed by the launcher, for voxel fractions and for cut
    faces near the terrain."""
    gw, _gp, xp = kernels
    rng = np.random.default_rng(24)
    u, v, w = _faces(shape, rng)
    solid = _terrain_solid(shape, rng)
    for s in (fractions_of(solid), fractions_of(np.zeros(shape, np.uint8)),
              fractions_of((rng.random(shape) < 0.15).astype(np.uint8), rng)):
        expected = np.zeros(shape, np.uint8)
        ref_wind.open_blocks(s, expected)
        out = xp.full(shape, 99, xp.uint8)
        gw.open_blocks(_device(xp, s), out)
        np.testing.assert_array_equal(xp.asnumpy(out), expected)
    sides = ref_wind.inflow_sides_of(*inflow) if sides is None else sides
    near = np.zeros(shape, np.uint8)
    near[:2] = 1
    for fractions in (fractions_of(solid), fractions_of(solid * near, rng, 0.1)):
        blocks = xp.zeros(shape, xp.uint8)
        gw.open_blocks(_device(xp, fractions), blocks)
        expected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref_wind.advect_velocity(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected)
        corrected = tuple(np.zeros_like(a) for a in (u, v, w))
        ref_wind.correct_advection(u, v, w, fractions, *inflow, sides, 0.7, 0.13, *expected,
                                   *corrected)
        d = _device(xp, (u, v, w))
        for given in (blocks, None):
            out = tuple(xp.full(a.shape, 99.0, xp.float32) for a in (u, v, w))
            gw.advect_velocity(*d, _device(xp, fractions), *inflow, sides, 0.7, 0.13, *out,
                               blocks=given)
            for a, e in zip(out, expected):
                np.testing.assert_array_equal(xp.asnumpy(a), e)
            out = tuple(xp.full(a.shape, 99.0, xp.float32) for a in (u, v, w))
            gw.correct_advection(*d, _device(xp, fractions), *inflow, sides, 0.7, 0.13,
                                 *_device(xp, expected), *out, blocks=given)
            for a, e in zip(out, corrected):
                np.testing.assert_array_equal(xp.asnumpy(a), e)


@pytest.mark.parametrize("shape", SHAPES)
def test_divergence_project_and_solid_match_reference(kernels, shape, fractions_of):
    gw, _gp, xp = kernels
    rng = np.random.default_rng(22)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.15).astype(np.uint8)
    for fractions, dtypes in ((fractions_of(solid), (np.float32, np.uint8)),
                              (fractions_of(solid, rng), (np.float32,))):
        expected = np.zeros(shape, np.float32)
        ref_wind.divergence(u, v, w, fractions, -2.5, expected)
        out = xp.ones(shape, xp.float32)
        gw.divergence(*_device(xp, (u, v, w)), _device(xp, fractions), -2.5, out)
        np.testing.assert_array_equal(xp.asnumpy(out), expected)

        coef = _coef(shape, fractions, (1, 0, 1, 1))
        p = rng.standard_normal(shape).astype(np.float32)
        e = tuple(a.copy() for a in (u, v, w))
        ref_wind.project(*e, p, *coef, 0.4)
        for dtype in dtypes:
            d = _device(xp, (u, v, w))
            gw.project(*d, xp.asarray(p), *(xp.asarray(_stored(c, dtype)) for c in coef), 0.4)
            for a, b in zip(d, e):
                np.testing.assert_array_equal(xp.asnumpy(a), b)

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
    # with the columns' highest surface: thin obstacles the centres miss
    column_top = (rng.random(shape[1:]) * 4.0).astype(np.float32)
    column_top[0, 0] = -1.0e30
    ref_wind.solid_from_heightmap(height, snow, *args, expected, column_top)
    gw.solid_from_heightmap(xp.asarray(height), xp.asarray(snow), *args, out,
                            xp.asarray(column_top))
    np.testing.assert_array_equal(xp.asnumpy(out), expected)
    plain = np.zeros(shape, np.uint8)
    ref_wind.solid_from_heightmap(height, snow, *args, plain)
    assert expected.sum() > plain.sum()
    # the open fractions: voxel ones of that mask, and the cut faces with the thin
    # obstacles' block tops, bit for bit
    for v_expected, v_out in zip(fractions_of(expected), _voxel_device(gw, xp, out)):
        np.testing.assert_array_equal(xp.asnumpy(v_out), v_expected)
    x0, y0, z0, cell = -1.0, 2.0, -0.5, 0.6
    blocks = np.zeros(shape[1:], np.float32)
    ref_wind.block_tops(height, snow, hm.x0, hm.y0, hm.spacing, x0, y0, cell, column_top, blocks)
    d_blocks = xp.zeros(shape[1:], xp.float32)
    gw.block_tops(xp.asarray(height), xp.asarray(snow), hm.x0, hm.y0, hm.spacing, x0, y0, cell,
                  xp.asarray(column_top), d_blocks)
    np.testing.assert_array_equal(xp.asnumpy(d_blocks), blocks)
    assert (blocks > ref_wind.NO_BLOCK).any()
    cut = fractions_of(plain)
    ref_wind.face_fractions(height, snow, hm.x0, hm.y0, hm.spacing, x0, y0, z0, cell, blocks,
                            *cut)
    d_cut = tuple(xp.full(f.shape, 7.0, xp.float32) for f in cut)
    gw.face_fractions(xp.asarray(height), xp.asarray(snow), hm.x0, hm.y0, hm.spacing, x0, y0,
                      z0, cell, d_blocks, *d_cut)
    for a, e in zip(d_cut, cut):
        np.testing.assert_array_equal(xp.asnumpy(a), e)
        assert ((e > 0) & (e < 1)).any()


def _voxel_device(gw, xp, solid):
    nz, ny, nx = solid.shape
    out = tuple(xp.full(s, 7.0, xp.float32)
                for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])
    gw.voxel_fractions(solid, *out)
    return out


@pytest.mark.parametrize("coef_dtype", [np.float32, np.uint8])  # uint8: the finest level
@pytest.mark.parametrize("shape", SHAPES)
def test_pressure_kernels_match_reference(kernels, coef_dtype, shape):
    gw, gp, xp = kernels
    rng = np.random.default_rng(23)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    flags = (1, 0, 0, 1)
    coef = _coef(shape, solid, flags)
    dcoef = tuple(xp.zeros(c.shape, coef_dtype) for c in coef)
    fractions = tuple(xp.zeros(c.shape, xp.float32) for c in coef)
    gw.voxel_fractions(xp.asarray(solid), *fractions)
    gp.face_coefficients(fractions, *flags, *dcoef)
    for a, e in zip(dcoef, coef):
        np.testing.assert_array_equal(ref_pressure.coefficient_values(xp.asnumpy(a)), e)
    # cut faces: open fractions (multiples of 1/128, as face_fractions gives) as coefficients
    cut = tuple((rng.integers(0, 129, c.shape) / 128.0).astype(np.float32) for c in coef)
    coef = _coef(shape, cut, flags)
    gp.face_coefficients(_device(xp, cut), *flags, *dcoef)
    for a, e in zip(dcoef, coef):
        np.testing.assert_array_equal(ref_pressure.coefficient_values(xp.asnumpy(a)), e)
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
        # renormalized transfers: the scale exactly, the transfers to float32 rounding
        scale = np.zeros(shape, np.float32)
        ref_pressure.transfer_scale(*expected, *coef, fx, fy, fz, scale)
        dscale = xp.full(shape, 3.0, xp.float32)
        gp.transfer_scale(*out, *dcoef, fx, fy, fz, dscale)
        np.testing.assert_array_equal(xp.asnumpy(dscale), scale)
        e = np.zeros(coarse, np.float32)
        d = xp.ones(coarse, xp.float32)
        ref_pressure.restrict_scaled_residual(p, scale, fx, fy, fz, e)
        gp.restrict_scaled_residual(dp, dscale, fx, fy, fz, d)
        _close(d, e, xp)
        e = p.copy()
        d = xp.asarray(p)
        ref_pressure.prolong_scaled_add(ce, scale, fx, fy, fz, e)
        gp.prolong_scaled_add(xp.asarray(ce), dscale, fx, fy, fz, d)
        _close(d, e, xp)


def test_smoother_and_cg_kernels_match_reference(kernels):
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
            gp.redblack_pairs(d, xp.asarray(b), *(xp.asarray(_stored(c, dtype)) for c in coef), 1.0, 1, 3)
            _close(d, expected, xp)
    a, b, c, e = (rng.standard_normal(100_003).astype(np.float32) for _ in range(4))
    scalars = xp.zeros(contract.SCALAR_SLOTS, xp.float64)
    gp.dot(xp.asarray(a), xp.asarray(b), scalars, contract.RR)
    assert float(scalars[contract.RR]) == pytest.approx(float(np.dot(a.astype(np.float64), b)), rel=1e-10)
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


def _level_stack(xp, shape, rng, coef_dtype=np.float32):
    """Random multigrid levels below ``shape`` (as the wind solver builds them): lists of
    solution, rhs, residual arrays, coefficients and factors on the device."""
    from snowfall.snow_addon.wind import boundary_corrections, multigrid_levels
    levels = multigrid_levels(shape)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    coefs = [_coef(shape, solid, (1, 0, 0, 1))]
    spacing = (1, 1, 1)
    for (lshape, factors), (cshape, _f) in zip(levels[:-1], levels[1:]):
        fz, fy, fx = factors
        ncz, ncy, ncx = cshape
        coarse = (np.zeros((ncz, ncy, ncx + 1), np.float32), np.zeros((ncz, ncy + 1, ncx), np.float32),
                  np.zeros((ncz + 1, ncy, ncx), np.float32))
        ref_pressure.restrict_coefficients(*coefs[-1], fx, fy, fz,
                                           *boundary_corrections(spacing, factors), *coarse)
        coefs.append(coarse)
        spacing = tuple(a * f for a, f in zip(spacing, factors))
    host = dict(sol=[rng.standard_normal(s).astype(np.float32) for s, _f in levels],
                rhs=[rng.standard_normal(s).astype(np.float32) for s, _f in levels],
                res=[rng.standard_normal(s).astype(np.float32) for s, _f in levels],
                coef=coefs, factors=[f for _s, f in levels])
    return host


def _device_stack(xp, host):
    return dict(sol=[xp.asarray(a) for a in host["sol"]], rhs=[xp.asarray(a) for a in host["rhs"]],
                res=[xp.asarray(a) for a in host["res"]],
                coef=[tuple(xp.asarray(c) for c in cs) for cs in host["coef"]],
                factors=host["factors"])


def _kernel_sequence(kp, st, start, smoothing, coarsest):
    """The V-cycle's coarse end as the per-level kernels that coarse_vcycle replaces."""
    last = len(st["sol"]) - 1
    for level in range(start, last):
        st["sol"][level].fill(0)
        kp.redblack_pairs(st["sol"][level], st["rhs"][level], *st["coef"][level], 1.0, 0, smoothing)
        kp.residual(st["sol"][level], st["rhs"][level], *st["coef"][level], st["res"][level])
        fz, fy, fx = st["factors"][level]
        kp.restrict_residual(st["res"][level], fx, fy, fz, st["rhs"][level + 1])
    st["sol"][last].fill(0)
    kp.redblack_pairs(st["sol"][last], st["rhs"][last], *st["coef"][last], 1.0, 0, coarsest)
    kp.redblack_pairs(st["sol"][last], st["rhs"][last], *st["coef"][last], 1.0, 1, coarsest)
    for level in range(last - 1, start - 1, -1):
        fz, fy, fx = st["factors"][level]
        kp.prolong_add(st["sol"][level + 1], *st["coef"][level], fx, fy, fz, st["sol"][level])
        kp.redblack_pairs(st["sol"][level], st["rhs"][level], *st["coef"][level], 1.0, 1, smoothing)


# odd sizes, one axis that stops coarsening early, a level above the one-block smoother's
# size (the fused kernel must do what the multi-launch sweeps do there too)
# warp_cells: levels worked on by one warp (none, the tiny ones, all of them)
# threads: the block's size (the default, and 3 warps: nothing assumes a power of two)
# The CPU runs the reference's sequence with its own kernels (one case); the GPU's one-block
# kernel in each variant: staged (levels copied to shared memory or not), warp_cells (levels
# worked on by one warp: none, the tiny ones, all of them), threads (the block's size: the
# default, and 3 warps: nothing assumes a power of two).
_VCYCLE_BUILDS = [pytest.param("cpu", None, None, None, id="cpu")] + [
    pytest.param("gpu", staged, warp_cells, threads, marks=pytest.mark.gpu,
                 id=f"gpu-{'staged' if staged else 'global'}-warp{warp_cells}-{threads}")
    for staged in (True, False) for warp_cells in (0, 64, 10 ** 6) for threads in (1024, 96)]


@pytest.mark.parametrize("build, staged, warp_cells, threads", _VCYCLE_BUILDS)
# (9, 12, 90): the porous fence strip's levels, staged in 45 KB of dynamic shared memory,
# which with the kernel's static part passes the 48 KB a launch gets without opting in
@pytest.mark.parametrize("shape", [(5, 7, 9), (3, 37, 70), (9, 21, 30), (24, 40, 38), (9, 12, 90)])
def test_coarse_vcycle_is_the_kernel_sequence(build, shape, staged, warp_cells, threads):
    """coarse_vcycle gives the bits of the per-level kernel sequence it replaces."""
    _gw, gp, xp = _kernels_of(select_backend(build))
    # the GPU build's keyword-only tuning knobs (the CPU's takes the reference's arguments)
    tuning = ({} if build != "gpu" else
              dict(warp_level_cells=warp_cells, threads=threads, staged=staged))
    rng = np.random.default_rng(25)
    host = _level_stack(xp, shape, rng)
    start = 1 if len(host["sol"]) > 1 else 0
    smoothing, coarsest = 3, 2 * max(host["sol"][-1].shape) + 4
    sequence = _device_stack(xp, host)
    _kernel_sequence(gp, sequence, start, smoothing, coarsest)
    fused = _device_stack(xp, host)
    pick = slice(start, None)
    gp.coarse_vcycle(fused["sol"][pick], fused["rhs"][pick], fused["res"][pick], fused["coef"][pick],
                     fused["factors"][pick], smoothing, coarsest, **tuning)
    for name in ("sol", "rhs", "res"):
        for a, b in zip(fused[name][pick], sequence[name][pick]):
            np.testing.assert_array_equal(xp.asnumpy(a), xp.asnumpy(b))
    expected = {k: [a.copy() for a in v] if k in ("sol", "rhs", "res") else v for k, v in host.items()}
    ref_pressure.coarse_vcycle(expected["sol"][pick], expected["rhs"][pick], expected["res"][pick],
                               expected["coef"][pick], expected["factors"][pick], smoothing, coarsest)
    scale = max(float(np.abs(expected["sol"][start]).max()), 1.0)
    _close(fused["sol"][start], expected["sol"][start], xp, tol=1e-5 * scale)
    # a second call on the same arrays (the cached level table) gives the same bits
    again = xp.asnumpy(fused["sol"][start]).copy()
    gp.coarse_vcycle(fused["sol"][pick], fused["rhs"][pick], fused["res"][pick], fused["coef"][pick],
                     fused["factors"][pick], smoothing, coarsest, **tuning)
    np.testing.assert_array_equal(xp.asnumpy(fused["sol"][start]), again)


@pytest.mark.gpu
def test_gpu_coarse_vcycle_refuses_a_fine_level(gpu_backend):
    """The GPU's one-block kernel: its index arithmetic is exact below 2^16 cells a level,
    a bigger one is refused with a message, before anything runs."""
    _gw, gp, xp = _kernels_of(gpu_backend)
    shape = (4, 128, 128)
    arrays = [xp.zeros(shape, np.float32) for _ in range(3)]
    coefs = (xp.ones((4, 128, 129), np.float32), xp.ones((4, 129, 128), np.float32),
             xp.ones((5, 128, 128), np.float32))
    with pytest.raises(ValueError, match="fewer than 65536 cells"):
        gp.coarse_vcycle([arrays[0]], [arrays[1]], [arrays[2]], [coefs], [(1, 1, 1)], 3, 8)
    assert float(xp.abs(arrays[0]).max()) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("tuning, message", [
    (dict(threads=100), "multiple of 32"), (dict(threads=2048), "multiple of 32"),
    (dict(threads=0), "multiple of 32"), (dict(warp_level_cells=-1), "warp_level_cells"),
    (dict(warp_level_cells=True), "warp_level_cells")])
def test_gpu_coarse_vcycle_refuses_tuning_it_cannot_run(gpu_backend, tuning, message):
    """The GPU build's tuning knobs are checked before anything runs: a block of whole
    warps, at most 1024 threads; a cell count for the one-warp levels."""
    _gw, gp, xp = _kernels_of(gpu_backend)
    shape = (3, 4, 5)
    arrays = [xp.zeros(shape, np.float32) for _ in range(3)]
    coefs = (xp.ones((3, 4, 6), np.float32), xp.ones((3, 5, 5), np.float32),
             xp.ones((4, 4, 5), np.float32))
    with pytest.raises(ValueError, match=message):
        gp.coarse_vcycle([arrays[0]], [arrays[1]], [arrays[2]], [coefs], [(1, 1, 1)], 3, 8,
                         **tuning)
    assert float(xp.abs(arrays[0]).max()) == 0.0


def _box(backend_name, options=None, **changes):
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
    solver = WindSolver(SnowSettings(**values), grid, b, options)
    solver.update_obstacles(b.asarray(height), b.asarray(np.zeros_like(height)), hm)
    return solver


@pytest.mark.gpu
@pytest.mark.parametrize("solver_name", ["mgpcg", "sor5"])
def test_gpu_solver_matches_cpu_solver(gpu_backend, solver_name):
    cpu, gpu = _box("cpu", pressure_solver=solver_name), _box("gpu", pressure_solver=solver_name)
    np.testing.assert_array_equal(gpu.backend.to_host(gpu.solid), cpu.solid)
    for g, c in zip(gpu.fractions, cpu.fractions):
        np.testing.assert_array_equal(gpu.backend.to_host(g), c)
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


def test_read_ahead_gives_the_same_steps(backend):
    """The GPU queues the previous solve's CG count before its first read of the scalars
    (the check on the device stops the updates once converged): the same steps bit for
    bit as reading after every iteration, also when it queues more than a step needs (the
    CPU reads after each by default: the same forced on)."""
    from snowfall.snow_addon.options import SolverOptions

    dt = 1.0 / 24.0
    runs = {}
    for ahead in (False, True):
        solver = _box(backend.name, SolverOptions(read_ahead=ahead))
        infos = []
        for step in range(6):
            if ahead and step == 3:  # queue more than the step needs
                solver._solved["step"].clear()
                solver._solved["step"].append(9)
            infos.append(solver.step(step * dt, dt))
        runs[ahead] = infos, solver.state_dict()
    assert runs[True][0] == runs[False][0]
    for name, array in runs[True][1].items():
        np.testing.assert_array_equal(array, runs[False][1][name])


def test_state_round_trip_is_bit_exact(backend):
    dt = 1.0 / 24.0
    solver = _box(backend.name)
    solver.step(0.0, dt)
    solver.step(dt, dt)  # so the extrapolated warm start uses two different pressures
    state = solver.state_dict()
    reference = [solver.step((2 + s) * dt, dt) for s in range(2)]
    expected = solver.state_dict()
    resumed = _box(backend.name)
    resumed.load_state_dict(state)
    assert [resumed.step((2 + s) * dt, dt) for s in range(2)] == reference
    for name, array in resumed.state_dict().items():
        np.testing.assert_array_equal(array, expected[name])


def test_max_abs_and_extrapolate_match_reference(kernels):
    _gw, gp, xp = kernels
    rng = np.random.default_rng(31)
    values = rng.standard_normal(1_000_003).astype(np.float32)
    values[777_777] = -9.5
    scalars = xp.zeros(contract.SCALAR_SLOTS, xp.float64)
    host = np.zeros(contract.SCALAR_SLOTS)
    gp.max_abs(xp.asarray(values), scalars, contract.DIVERGENCE_AFTER)
    ref_pressure.max_abs(values, host, contract.DIVERGENCE_AFTER)
    assert float(scalars[contract.DIVERGENCE_AFTER]) == host[contract.DIVERGENCE_AFTER] == 9.5
    values[12] = np.nan
    gp.max_abs(xp.asarray(values), scalars, contract.DIVERGENCE_BEFORE)
    assert np.isnan(float(scalars[contract.DIVERGENCE_BEFORE]))
    pressure = rng.standard_normal((5, 7, 9)).astype(np.float32)
    previous = rng.standard_normal((5, 7, 9)).astype(np.float32)
    dp, dq = xp.asarray(pressure), xp.asarray(previous)
    ref_pressure.extrapolate(pressure, previous)
    gp.extrapolate(dp, dq)
    np.testing.assert_array_equal(xp.asnumpy(dp), pressure)
    np.testing.assert_array_equal(xp.asnumpy(dq), previous)


@pytest.mark.parametrize("shape", SHAPES + [(2, 2, 2), (6, 1, 4)])
def test_mixing_kernels_are_the_reference_bit_for_bit(kernels, shape, fractions_of):
    wk, _kp, xp = kernels
    rng = np.random.default_rng(11)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    fractions = fractions_of(solid, rng)
    column_top = rng.uniform(-1.0, 2.0, shape[1:]).astype(np.float32)
    nu = np.zeros(shape, np.float32)
    ref_wind.eddy_viscosity(u, v, w, solid, column_top, -0.5, 0.5, 0.41, 2.0, 1.5, nu)
    out = [np.zeros_like(a) for a in (u, v, w)]
    ref_wind.diffuse_velocity(u, v, w, fractions, nu, 0.08, *out)
    d_u, d_v, d_w = _device(xp, (u, v, w))
    d_nu = xp.full(shape, np.nan, np.float32)
    wk.eddy_viscosity(d_u, d_v, d_w, xp.asarray(solid), xp.asarray(column_top), -0.5, 0.5, 0.41,
                      2.0, 1.5, d_nu)
    assert np.array_equal(xp.asnumpy(d_nu), nu)
    d_out = [xp.full(a.shape, np.nan, np.float32) for a in (u, v, w)]
    wk.diffuse_velocity(d_u, d_v, d_w, _device(xp, fractions), d_nu, 0.08, *d_out)
    for device, expected in zip(d_out, out):
        assert np.array_equal(xp.asnumpy(device), expected)
