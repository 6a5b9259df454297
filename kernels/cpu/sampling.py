"""Grid interpolation, Numba build: per-point device-style functions called from kernels."""
import numba
import numpy as np

from .rounding import floor_int
from .shares import njit_uncounted
from ..contract import SAMPLE_WEIGHT_SCALE  # one home


@numba.njit(inline="always", cache=True)
def _axis(g, n):
    # written so that NaN clamps to the low edge, as CUDA's fmaxf does: min/max would keep
    # it, and int(floor(NaN)) would index outside the array (a crash, not an error)
    if not g > np.float32(0.0):
        g = np.float32(0.0)
    elif g > np.float32(n - 1):
        g = np.float32(n - 1)
    i0 = min(floor_int(g), max(n - 2, 0))
    return i0, min(i0 + 1, n - 1), np.float32(g - np.float32(i0))


@numba.njit(inline="always", cache=True)
def _bilinear_weights(ny, nx, x0, y0, spacing, x, y):
    """(i0, i1, tx, j0, j1, ty): the corners and weights of world (x, y) on a (ny, nx) grid."""
    inv = np.float32(1.0) / np.float32(spacing)
    i0, i1, tx = _axis(np.float32((np.float32(x) - np.float32(x0)) * inv), nx)
    j0, j1, ty = _axis(np.float32((np.float32(y) - np.float32(y0)) * inv), ny)
    return i0, i1, tx, j0, j1, ty


@numba.njit(inline="always", cache=True)
def _bilinear(field, i0, i1, tx, j0, j1, ty):
    one = np.float32(1.0)
    return np.float32((field[j0, i0] * (one - tx) + field[j0, i1] * tx) * (one - ty)
                      + (field[j1, i0] * (one - tx) + field[j1, i1] * tx) * ty)


@numba.njit(inline="always", cache=True)
def sample_bilinear(field, x0, y0, spacing, x, y):
    """Bilinear value of ``field[ny, nx]`` at world (x, y), clamped at the edges."""
    ny, nx = field.shape
    i0, i1, tx, j0, j1, ty = _bilinear_weights(ny, nx, x0, y0, spacing, x, y)
    return _bilinear(field, i0, i1, tx, j0, j1, ty)


@numba.njit(inline="always", cache=True)
def sample_bilinear_sum(first, second, x0, y0, spacing, x, y):
    """sample_bilinear(first) + sample_bilinear(second) (float32) for two fields of the same
    shape (the terrain and the snow on it), the corners and weights found once: the same
    bits as the two samples (docs/benchmarks.md has what it saves)."""
    ny, nx = first.shape
    i0, i1, tx, j0, j1, ty = _bilinear_weights(ny, nx, x0, y0, spacing, x, y)
    return np.float32(_bilinear(first, i0, i1, tx, j0, j1, ty)
                      + _bilinear(second, i0, i1, tx, j0, j1, ty))


@numba.njit(inline="always", cache=True)
def sample_trilinear(field, gx, gy, gz):
    """Trilinear value of ``field[nk, nj, ni]`` at fractional indices, clamped."""
    nk, nj, ni = field.shape
    i0, i1, tx = _axis(gx, ni)
    j0, j1, ty = _axis(gy, nj)
    k0, k1, tz = _axis(gz, nk)
    one = np.float32(1.0)
    a = field[k0, j0, i0] * (one - tx) + field[k0, j0, i1] * tx
    b = field[k0, j1, i0] * (one - tx) + field[k0, j1, i1] * tx
    c = field[k1, j0, i0] * (one - tx) + field[k1, j0, i1] * tx
    d = field[k1, j1, i0] * (one - tx) + field[k1, j1, i1] * tx
    return np.float32((a * (one - ty) + b * ty) * (one - tz) + (c * (one - ty) + d * ty) * tz)


@numba.njit(inline="always", cache=True)
def sample_wind(u, v, w, x0, y0, z0, cell_size, x, y, z):
    """Wind velocity (m/s) at one world point from the MAC faces; returns (vx, vy, vz)."""
    inv = np.float32(1.0) / np.float32(cell_size)
    gx = np.float32((np.float32(x) - np.float32(x0)) * inv)
    gy = np.float32((np.float32(y) - np.float32(y0)) * inv)
    gz = np.float32((np.float32(z) - np.float32(z0)) * inv)
    half = np.float32(0.5)
    return (sample_trilinear(u, gx, gy - half, gz - half),
            sample_trilinear(v, gx - half, gy, gz - half),
            sample_trilinear(w, gx - half, gy - half, gz))


@numba.njit(inline="always", cache=True)
def sample_weight(fraction, k, j, i):
    """Face (k, j, i)'s weight in sample_open: min(1, SAMPLE_WEIGHT_SCALE * fraction)."""
    return min(np.float32(fraction[k, j, i] * SAMPLE_WEIGHT_SCALE), np.float32(1.0))


@numba.njit(inline="always", cache=True)
def _open_row(field, fraction, k, j, i0, i1, tx):
    one = np.float32(1.0)
    w0 = np.float32(sample_weight(fraction, k, j, i0) * (one - tx))
    w1 = np.float32(sample_weight(fraction, k, j, i1) * tx)
    return np.float32(field[k, j, i0] * w0 + field[k, j, i1] * w1), np.float32(w0 + w1)


@numba.njit(inline="always", cache=True)
def _mix(a, b, t):
    return np.float32(a * (np.float32(1.0) - t) + b * t)


@numba.njit(inline="always", cache=True)
def block_open(blocks, component, k0, j0, i0):
    """Bit ``component`` of ``blocks[k0, j0, i0]`` (kernels.reference.wind.open_blocks): all
    faces of the 2 x 2 x 2 block from (k0, j0, i0) are open, no mask needed."""
    return (blocks[k0, j0, i0] >> component) & 1 != 0


@njit_uncounted
def _sample_masked(field, fraction, i0, i1, tx, j0, j1, ty, k0, k1, tz, fallback):
    """sample_open's path where some corner may be closed. A call, not inlined: only samples
    next to the terrain take it, and inlined at every sampling site too it made the
    advection's compile 23.0 s instead of 15.0 s (8.7 s before either was inlined)."""
    a, aw = _open_row(field, fraction, k0, j0, i0, i1, tx)
    b, bw = _open_row(field, fraction, k0, j1, i0, i1, tx)
    c, cw = _open_row(field, fraction, k1, j0, i0, i1, tx)
    d, dw = _open_row(field, fraction, k1, j1, i0, i1, tx)
    value = _mix(_mix(a, b, ty), _mix(c, d, ty), tz)
    count = ((sample_weight(fraction, k0, j0, i0) + sample_weight(fraction, k0, j0, i1))
             + (sample_weight(fraction, k0, j1, i0) + sample_weight(fraction, k0, j1, i1))
             + (sample_weight(fraction, k1, j0, i0) + sample_weight(fraction, k1, j0, i1))
             + (sample_weight(fraction, k1, j1, i0) + sample_weight(fraction, k1, j1, i1)))
    if count == np.float32(8.0):
        return value
    weight = _mix(_mix(aw, bw, ty), _mix(cw, dw, ty), tz)
    if weight > 0:
        return np.float32(value / weight)
    return np.float32(fallback)


@numba.njit(inline="always", cache=True)
def sample_open(field, fraction, blocks, component, gx, gy, gz, fallback):
    """Trilinear value over the open faces (``fraction`` > 0, the open fractions of
    ``field``'s faces; ``component`` 0 u, 1 v, 2 w) only (the reference's sample_open):
    the corners' weights times their sample weights (min(1, SAMPLE_WEIGHT_SCALE * A_f)),
    renormalised, ``fallback`` when none is open. Where ``blocks`` says the eight corners'
    weights are 1, the plain trilinear value (the same operations with every weight 1: the
    same bits) without reading the fractions. Inlined, as open_range: called per face, the
    calls cost the advection a fifth of its time (cpu-small: the MacCormack correction 8.3
    -> 6.1-6.4 ms, the advection 4.7 -> 3.8-3.9 ms per step)."""
    nk, nj, ni = field.shape
    i0, i1, tx = _axis(gx, ni)
    j0, j1, ty = _axis(gy, nj)
    k0, k1, tz = _axis(gz, nk)
    if block_open(blocks, component, k0, j0, i0):
        one = np.float32(1.0)
        a = np.float32(field[k0, j0, i0] * np.float32(one - tx) + field[k0, j0, i1] * tx)
        b = np.float32(field[k0, j1, i0] * np.float32(one - tx) + field[k0, j1, i1] * tx)
        c = np.float32(field[k1, j0, i0] * np.float32(one - tx) + field[k1, j0, i1] * tx)
        d = np.float32(field[k1, j1, i0] * np.float32(one - tx) + field[k1, j1, i1] * tx)
        return _mix(_mix(a, b, ty), _mix(c, d, ty), tz)
    return _sample_masked(field, fraction, i0, i1, tx, j0, j1, ty, k0, k1, tz, fallback)


@numba.njit(inline="always", cache=True)
def open_range(field, fraction, blocks, component, gx, gy, gz, fallback):
    """(low, high) of the open corner samples around fractional indices; fallback twice
    when none is open (all eight, without the mask, where ``blocks`` says so)."""
    nk, nj, ni = field.shape
    i0, i1, _tx = _axis(gx, ni)
    j0, j1, _ty = _axis(gy, nj)
    k0, k1, _tz = _axis(gz, nk)
    low = np.float32(np.inf)
    high = np.float32(-np.inf)
    every = block_open(blocks, component, k0, j0, i0)
    found = False
    for k in (k0, k1):
        for j in (j0, j1):
            for i in (i0, i1):
                if every or fraction[k, j, i] > 0:
                    value = field[k, j, i]
                    low = min(low, value)
                    high = max(high, value)
                    found = True
    if not found:
        return np.float32(fallback), np.float32(fallback)
    return np.float32(low), np.float32(high)
