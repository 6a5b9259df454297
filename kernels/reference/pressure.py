"""Pressure Poisson kernels, NumPy reference (the test oracle).

The system on every multigrid level is ``A p = b`` over cells ``(nz, ny, nx)`` with
``(A p)_c = sum over the 6 faces f of c_f * (p_c - p_neighbour)``; face coefficients
``coef_x (nz, ny, nx+1)``, ``coef_y (nz, ny+1, nx)``, ``coef_z (nz+1, ny, nx)`` float32
(the open fraction of the face, 1 = open, 0 = wall/solid/Neumann; a domain face with a
coefficient > 0 is a Dirichlet face with ``p = 0`` outside). Cells whose faces are all 0
(solid) are held at p = 0.

Multigrid transfer (cell-centred, per axis coarsening factor f = 2 or 1): prolongation
is trilinear (weights 3/4 to the parent, 1/4 to the parent's neighbour on the child's
side, clamped at the ends), restriction is its exact transpose, so the V-cycle is a
symmetric preconditioner.
"""
import math
import sys

import numpy as np

F32 = np.float32


# One home for the shared constants (the coefficients' steps, the CG scalar slots):
# kernels.contract.
from ..contract import (BB, COARSE_VCYCLE_CELLS, COEFFICIENT_STEP,  # noqa: F401
                        COEFFICIENT_STEPS, DIVERGENCE_AFTER, DIVERGENCE_BEFORE, DONE, DQ,
                        ITERATIONS, RELATIVE, RR, RZ, RZ_NEXT, SCALAR_SLOTS)


def coefficient_values(a):
    """Face coefficients as float32: uint8 ones are q / 128, float32 ones as they are."""
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return (a.astype(F32) * COEFFICIENT_STEP).astype(F32)
    return a.astype(F32, copy=False)


def encode_coefficients(values, out):
    """out[...] = ``values`` (float32, multiples of 1/128 in [0, 1] for a uint8 ``out``)."""
    values = np.asarray(values, F32)
    if out.dtype == np.uint8:
        out[...] = (values * F32(COEFFICIENT_STEPS)).astype(np.uint8)
    else:
        out[...] = values


def _f32(*arrays):
    """Face coefficients as float32 (see coefficient_values)."""
    return tuple(coefficient_values(a) for a in arrays)


def diagonal(coef_x, coef_y, coef_z):
    """Sum of the 6 face coefficients per cell (nz, ny, nx)."""
    coef_x, coef_y, coef_z = _f32(coef_x, coef_y, coef_z)
    return ((((coef_x[:, :, :-1] + coef_x[:, :, 1:]) + (coef_y[:, :-1, :] + coef_y[:, 1:, :]))
             + (coef_z[:-1] + coef_z[1:]))).astype(F32)


def _neighbour_sum(p, coef_x, coef_y, coef_z):
    coef_x, coef_y, coef_z = _f32(coef_x, coef_y, coef_z)
    q = np.pad(p, 1)
    return ((((coef_x[:, :, :-1] * q[1:-1, 1:-1, :-2] + coef_x[:, :, 1:] * q[1:-1, 1:-1, 2:])
              + (coef_y[:, :-1, :] * q[1:-1, :-2, 1:-1] + coef_y[:, 1:, :] * q[1:-1, 2:, 1:-1]))
             + (coef_z[:-1] * q[:-2, 1:-1, 1:-1] + coef_z[1:] * q[2:, 1:-1, 1:-1]))).astype(F32)


def face_coefficients(fractions, outflow_x_minus, outflow_x_plus, outflow_y_minus,
                      outflow_y_plus, coef_x, coef_y, coef_z):
    """Fine-level face coefficients from the faces' open fractions A_f (``fractions`` =
    (frac_u, frac_v, frac_w), float32 in [0, 1], see kernels.reference.wind): A_f inside
    the domain and on outflow (Dirichlet) sides, 0 on prescribed (inflow) sides, the
    bottom and the lid. The outputs may be float32, or uint8 (encode_coefficients: every
    A_f a multiple of 1/128)."""
    cx, cy, cz = (np.array(f, dtype=F32, copy=True) for f in fractions)
    if not outflow_x_minus:
        cx[:, :, 0] = 0
    if not outflow_x_plus:
        cx[:, :, -1] = 0
    if not outflow_y_minus:
        cy[:, 0, :] = 0
    if not outflow_y_plus:
        cy[:, -1, :] = 0
    cz[0] = 0
    cz[-1] = 0
    for values, out in ((cx, coef_x), (cy, coef_y), (cz, coef_z)):
        encode_coefficients(values, out)


def coarse_shape(shape, factors):
    return tuple((n + f - 1) // f for n, f in zip(shape, factors))


def restrict_coefficients(coef_x, coef_y, coef_z, fx, fy, fz, boundary_x, boundary_y,
                          coarse_coef_x, coarse_coef_y, coarse_coef_z):
    """Coarse face coefficient = sum of the fine face coefficients it covers / the
    coarsening factor along its normal (so an open region keeps the geometric value of
    area / distance on the coarse cells; odd ends cover fewer fine faces). The domain
    side faces of x (y) are further multiplied by ``boundary_x`` (``boundary_y``): the
    caller's correction that keeps a Dirichlet side's p = 0 at the fine ghost centre."""
    coef_x, coef_y, coef_z = _f32(coef_x, coef_y, coef_z)
    nz, ny, nxp = coef_x.shape
    nx = nxp - 1

    def cover(a, axis, f, n_coarse):
        # sum groups of f consecutive entries along ``axis`` (zero-padded at the end)
        pad = [(0, 0)] * 3
        pad[axis] = (0, n_coarse * f - a.shape[axis])
        a = np.pad(a, pad)
        shape = list(a.shape)
        shape[axis:axis + 1] = [n_coarse, f]
        a = a.reshape(shape)
        total = a[(slice(None),) * (axis + 1) + (0,)]
        for m in range(1, f):
            total = total + a[(slice(None),) * (axis + 1) + (m,)]
        return total

    def normal_pick(a, axis, f, n_fine, n_coarse):
        index = np.minimum(np.arange(n_coarse + 1) * f, n_fine)
        return np.take(a, index, axis=axis)

    ncz, ncy, ncx = coarse_shape((nz, ny, nx), (fz, fy, fx))
    cxs = cover(cover(normal_pick(coef_x, 2, fx, nx, ncx), 1, fy, ncy), 0, fz, ncz)
    coarse_coef_x[...] = (cxs / F32(fx)).astype(F32)
    coarse_coef_x[:, :, 0] *= F32(boundary_x)
    coarse_coef_x[:, :, -1] *= F32(boundary_x)
    cys = cover(cover(normal_pick(coef_y, 1, fy, ny, ncy), 2, fx, ncx), 0, fz, ncz)
    coarse_coef_y[...] = (cys / F32(fy)).astype(F32)
    coarse_coef_y[:, 0, :] *= F32(boundary_y)
    coarse_coef_y[:, -1, :] *= F32(boundary_y)
    czs = cover(cover(normal_pick(coef_z, 0, fz, nz, ncz), 2, fx, ncx), 1, fy, ncy)
    coarse_coef_z[...] = (czs / F32(fz)).astype(F32)


def apply_operator(p, coef_x, coef_y, coef_z, out):
    """out = A p (0 in solid cells)."""
    diag = diagonal(coef_x, coef_y, coef_z)
    out[...] = np.where(diag > 0, diag * p - _neighbour_sum(p, coef_x, coef_y, coef_z),
                        F32(0.0)).astype(F32)


def residual(p, b, coef_x, coef_y, coef_z, out):
    """out = b - A p (0 in solid cells)."""
    diag = diagonal(coef_x, coef_y, coef_z)
    out[...] = np.where(diag > 0, b - (diag * p - _neighbour_sum(p, coef_x, coef_y, coef_z)),
                        F32(0.0)).astype(F32)


def jacobi_sweep(p, b, coef_x, coef_y, coef_z, omega, out):
    """One damped Jacobi sweep: out = p + omega * (b - A p) / diag (0 in solid cells)."""
    diag = diagonal(coef_x, coef_y, coef_z)
    nb = _neighbour_sum(p, coef_x, coef_y, coef_z)
    safe = np.where(diag > 0, diag, F32(1.0))
    new = p + F32(omega) * ((b + nb) / safe - p)
    out[...] = np.where(diag > 0, new, F32(0.0)).astype(F32)


def redblack_sweep(p, b, coef_x, coef_y, coef_z, omega, color):
    """Half a red-black SOR sweep in place: cells with (i + j + k) % 2 == color get
    p += omega * ((b + neighbour sum) / diag - p); solid cells are set to 0."""
    nz, ny, nx = p.shape
    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    mine = (i + j + k) % 2 == color
    diag = diagonal(coef_x, coef_y, coef_z)
    nb = _neighbour_sum(p, coef_x, coef_y, coef_z)
    safe = np.where(diag > 0, diag, F32(1.0))
    new = np.where(diag > 0, p + F32(omega) * ((b + nb) / safe - p), F32(0.0)).astype(F32)
    p[mine] = new[mine]


def _axis_weight(fine, coarse, f, n_coarse):
    """Prolongation weight from coarse index ``coarse`` to fine index ``fine`` along one
    axis (arrays of int); 0 where they are not linked."""
    fine = np.asarray(fine)
    coarse = np.asarray(coarse)
    if f == 1:
        return (fine == coarse).astype(F32)
    parent = fine // 2
    partner = np.clip(np.where(fine % 2 == 0, parent - 1, parent + 1), 0, n_coarse - 1)
    return (np.where(parent == coarse, F32(0.75), F32(0.0))
            + np.where(partner == coarse, F32(0.25), F32(0.0))).astype(F32)


def _offsets(f):
    return range(-1, 3) if f == 2 else range(0, 1)


def restrict_residual(r, fx, fy, fz, out):
    """out (coarse) = P^T r: each coarse cell gathers the fine cells linked to it."""
    nz, ny, nx = r.shape
    ncz, ncy, ncx = out.shape
    K, J, I = np.meshgrid(np.arange(ncz), np.arange(ncy), np.arange(ncx), indexing="ij")
    acc = np.zeros(out.shape, F32)
    for dk in _offsets(fz):
        k = fz * K + dk
        wz = np.where((k >= 0) & (k < nz), _axis_weight(k, K, fz, ncz), F32(0.0))
        for dj in _offsets(fy):
            j = fy * J + dj
            wy = np.where((j >= 0) & (j < ny), _axis_weight(j, J, fy, ncy), F32(0.0))
            for di in _offsets(fx):
                i = fx * I + di
                wx = np.where((i >= 0) & (i < nx), _axis_weight(i, I, fx, ncx), F32(0.0))
                value = r[np.clip(k, 0, nz - 1), np.clip(j, 0, ny - 1), np.clip(i, 0, nx - 1)]
                acc = (acc + ((wz * wy) * wx) * value).astype(F32)
    out[...] = acc


def _parents(n_fine, f, n_coarse):
    """Per fine index: the two coarse indices and weights it interpolates from."""
    i = np.arange(n_fine)
    if f == 1:
        return (i, i), (np.ones(n_fine, F32), np.zeros(n_fine, F32))
    parent = i // 2
    partner = np.clip(np.where(i % 2 == 0, parent - 1, parent + 1), 0, n_coarse - 1)
    return (parent, partner), (np.full(n_fine, 0.75, F32), np.full(n_fine, 0.25, F32))


def prolong_add(coarse, coef_x, coef_y, coef_z, fx, fy, fz, p):
    """p (fine) += P coarse (trilinear, cell-centred), in fluid cells only."""
    nz, ny, nx = p.shape
    ncz, ncy, ncx = coarse.shape
    (kz, wz) = _parents(nz, fz, ncz)
    (jy, wy) = _parents(ny, fy, ncy)
    (ix, wx) = _parents(nx, fx, ncx)
    acc = np.zeros(p.shape, F32)
    for a in range(2):
        for b in range(2):
            for c in range(2):
                weight = (wz[a][:, None, None] * wy[b][None, :, None]) * wx[c][None, None, :]
                value = coarse[kz[a][:, None, None], jy[b][None, :, None], ix[c][None, None, :]]
                acc = (acc + weight * value).astype(F32)
    diag = diagonal(coef_x, coef_y, coef_z)
    p[...] = np.where(diag > 0, p + acc, p).astype(F32)


def transfer_scale(coarse_coef_x, coarse_coef_y, coarse_coef_z, coef_x, coef_y, coef_z,
                   fx, fy, fz, out):
    """out (fine, float32) = 1 / (sum of the prolongation weights of the fine cell's active
    coarse parents) in active fine cells, 0 elsewhere or when no parent is active. A cell
    is active when a face coefficient is > 0; inactive (solid) coarse cells are held at 0,
    so without the scale the correction next to a wall is pulled toward 0 as if the wall
    were Dirichlet (coarse-grid correction that degrades with the grid size)."""
    active = (diagonal(coarse_coef_x, coarse_coef_y, coarse_coef_z) > 0).astype(F32)
    weights = np.zeros(out.shape, F32)
    prolong_add(active, coef_x, coef_y, coef_z, fx, fy, fz, weights)
    safe = np.where(weights > 0, weights, F32(1.0))
    out[...] = np.where(weights > 0, F32(1.0) / safe, F32(0.0)).astype(F32)


def restrict_scaled_residual(r, scale, fx, fy, fz, out):
    """out (coarse) = P^T (scale * r): the transpose of prolong_scaled_add."""
    restrict_residual((r * scale).astype(F32), fx, fy, fz, out)


def prolong_scaled_add(coarse, scale, fx, fy, fz, p):
    """p (fine) += scale * (P coarse): trilinear from the active coarse parents only, the
    weights renormalized to sum to 1 (``scale`` from transfer_scale, 0 in inactive cells)."""
    nz, ny, nx = p.shape
    ncz, ncy, ncx = coarse.shape
    (kz, wz) = _parents(nz, fz, ncz)
    (jy, wy) = _parents(ny, fy, ncy)
    (ix, wx) = _parents(nx, fx, ncx)
    acc = np.zeros(p.shape, F32)
    for a in range(2):
        for b in range(2):
            for c in range(2):
                weight = (wz[a][:, None, None] * wy[b][None, :, None]) * wx[c][None, None, :]
                value = coarse[kz[a][:, None, None], jy[b][None, :, None], ix[c][None, None, :]]
                acc = (acc + weight * value).astype(F32)
    p[...] = (p + scale * acc).astype(F32)


def redblack_pairs(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs, sweep=None):
    """``pairs`` red-black SOR sweep pairs in place, colours first, 1 - first, first, ...
    ``sweep``: the backend's ``redblack_sweep`` (this module's by default)."""
    sweep = sweep or redblack_sweep
    for _ in range(int(pairs)):
        sweep(p, b, coef_x, coef_y, coef_z, omega, first_color)
        sweep(p, b, coef_x, coef_y, coef_z, omega, 1 - first_color)


def redblack_pairs_from_zero(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs, sweep=None):
    """p = 0, then ``pairs`` red-black SOR sweep pairs in place (the V-cycle's smoothing
    of a level from a zero guess; the GPU build does the zeroing and the first half-sweep
    in one pass, with the same result)."""
    p.fill(0)
    redblack_pairs(p, b, coef_x, coef_y, coef_z, omega, first_color, pairs, sweep=sweep)


def coarse_vcycle(solutions, rhs, residuals, coefs, factors, smoothing_pairs, coarsest_pairs,
                  kernels=None):
    """The coarse end of a V-cycle over levels l = 0 .. n-1 (fine to coarse; lists of
    float32 arrays (nz, ny, nx) per level, ``coefs`` (coef_x, coef_y, coef_z) per level,
    ``factors`` (fz, fy, fx) from level l to l + 1): solutions[0] = V(rhs[0]) from a zero
    guess. Per level: zero, ``smoothing_pairs`` red-black pairs, residual, restriction
    into rhs[l + 1]; on the last level ``coarsest_pairs`` red-black then black-red pairs;
    back up: prolongation and ``smoothing_pairs`` black-red pairs (omega 1). ``kernels``:
    the backend module whose kernels run the sequence (this module by default)."""
    k = kernels or sys.modules[__name__]
    redblack_pairs, residual, restrict_residual, prolong_add = (
        k.redblack_pairs, k.residual, k.restrict_residual, k.prolong_add)
    last = len(solutions) - 1
    for level in range(last):
        solutions[level][...] = 0
        redblack_pairs(solutions[level], rhs[level], *coefs[level], 1.0, 0, smoothing_pairs)
        residual(solutions[level], rhs[level], *coefs[level], residuals[level])
        fz, fy, fx = factors[level]
        restrict_residual(residuals[level], fx, fy, fz, rhs[level + 1])
    solutions[last][...] = 0
    redblack_pairs(solutions[last], rhs[last], *coefs[last], 1.0, 0, coarsest_pairs)
    redblack_pairs(solutions[last], rhs[last], *coefs[last], 1.0, 1, coarsest_pairs)
    for level in range(last - 1, -1, -1):
        fz, fy, fx = factors[level]
        prolong_add(solutions[level + 1], *coefs[level], fx, fy, fz, solutions[level])
        redblack_pairs(solutions[level], rhs[level], *coefs[level], 1.0, 1, smoothing_pairs)


# --- conjugate-gradient vector kernels: scalars live in a float64 array on the backend --
# the CG scalar slots (RZ ... SCALAR_SLOTS): kernels.contract


def dot(a, b, scalars, slot):
    """scalars[slot] = sum(a * b) accumulated in float64."""
    scalars[slot] = np.dot(a.ravel().astype(np.float64), b.ravel().astype(np.float64))


def max_abs(values, scalars, slot):
    """scalars[slot] = max |values| (0 for no values; NaN if any value is NaN)."""
    scalars[slot] = float(np.max(np.abs(values))) if values.size else 0.0


def extrapolate(pressure, previous):
    """Warm start in time: pressure = 2 pressure - previous, previous = the old pressure
    (float32; the doubling is exact)."""
    old = pressure.copy()
    pressure[...] = (F32(2.0) * old - previous).astype(F32)
    previous[...] = old


def apply_operator_dot(p, coef_x, coef_y, coef_z, out, scalars, slot, kernels=None):
    """out = A p; scalars[slot] = p . out (float64). The GPU build fuses the two;
    ``kernels``: the backend module whose kernels run (this one by default)."""
    k = kernels or sys.modules[__name__]
    k.apply_operator(p, coef_x, coef_y, coef_z, out)
    k.dot(p, out, scalars, slot)


def residual_norm(p, b, coef_x, coef_y, coef_z, out, scalars, slot, kernels=None):
    """out = b - A p; scalars[slot] = b . b (float64). The GPU build fuses the two."""
    k = kernels or sys.modules[__name__]
    k.residual(p, b, coef_x, coef_y, coef_z, out)
    k.dot(b, b, scalars, slot)


def cg_update_norm(x, r, d, q, scalars, kernels=None):
    """cg_update, then scalars[RR] = r . r (float64); nothing once scalars[DONE] is set.
    The GPU build fuses the two."""
    if scalars[DONE] != 0:
        return
    k = kernels or sys.modules[__name__]
    k.cg_update(x, r, d, q, scalars)
    k.dot(r, r, scalars, RR)


def cg_begin(scalars):
    """A new solve: DONE = 0, ITERATIONS = 0."""
    scalars[DONE] = 0.0
    scalars[ITERATIONS] = 0.0


def relative_residual(r_norm2, b_norm2):
    """sqrt(r.r / b.b) (float64; r.r < 0 counts as 0, NaN stays NaN), 0 when b.b == 0: the
    value the CUDA build's cg_check computes, bit for bit (IEEE division and square root)."""
    if b_norm2 == 0.0:
        return 0.0
    return math.sqrt((0.0 if 0.0 > r_norm2 else r_norm2) / b_norm2)


def cg_check(scalars, tolerance, limit):
    """After a CG iteration (cg_update_norm), unless the solve is DONE: count it, store its
    relative residual ||r|| / ||b|| in RELATIVE, and set DONE when that is <= tolerance,
    the count reached ``limit`` or b = 0. Queued iterations after DONE leave the solution
    alone (cg_update_norm skips), so the host may queue several before reading once."""
    if scalars[DONE] != 0:
        return
    count = scalars[ITERATIONS] + 1.0
    scalars[ITERATIONS] = count
    b_norm2 = float(scalars[BB])
    relative = relative_residual(float(scalars[RR]), b_norm2)
    scalars[RELATIVE] = relative
    if b_norm2 == 0.0 or relative <= tolerance or count >= limit:
        scalars[DONE] = 1.0


def cg_update_check(x, r, d, q, scalars, tolerance, limit, kernels=None):
    """cg_update_norm, then cg_check: one CG iteration's update and its convergence check.
    The GPU build does it in two launches."""
    k = kernels or sys.modules[__name__]
    k.cg_update_norm(x, r, d, q, scalars)
    k.cg_check(scalars, tolerance, limit)


def cg_update(x, r, d, q, scalars):
    """alpha = rz / dq (0 unless dq > 0); x += alpha d; r -= alpha q (alpha as float32)."""
    dq = scalars[DQ]
    alpha = F32(scalars[RZ] / dq) if dq > 0 else F32(0.0)
    x += alpha * d
    r -= alpha * q


def cg_direction(d, z, scalars):
    """beta = rz_next / rz (0 unless rz > 0); d = z + beta d; then rz = rz_next."""
    rz = scalars[RZ]
    beta = F32(scalars[RZ_NEXT] / rz) if rz > 0 else F32(0.0)
    d[...] = z + beta * d
    scalars[RZ] = scalars[RZ_NEXT]


def capture(function):
    """A callable that repeats ``function``'s kernel launches (the GPU build records them
    once as a CUDA graph; here it is the function itself)."""
    return function
