"""Grid interpolation, Numba build: per-point device-style functions called from kernels."""
import math

import numba
import numpy as np


@numba.njit(inline="always", cache=True)
def _axis(g, n):
    g = min(max(g, np.float32(0.0)), np.float32(n - 1))
    i0 = min(int(math.floor(g)), max(n - 2, 0))
    return i0, min(i0 + 1, n - 1), np.float32(g - np.float32(i0))


@numba.njit(inline="always", cache=True)
def sample_bilinear(field, x0, y0, spacing, x, y):
    """Bilinear value of ``field[ny, nx]`` at world (x, y), clamped at the edges."""
    ny, nx = field.shape
    inv = np.float32(1.0) / np.float32(spacing)
    i0, i1, tx = _axis(np.float32((np.float32(x) - np.float32(x0)) * inv), nx)
    j0, j1, ty = _axis(np.float32((np.float32(y) - np.float32(y0)) * inv), ny)
    one = np.float32(1.0)
    return np.float32((field[j0, i0] * (one - tx) + field[j0, i1] * tx) * (one - ty)
                      + (field[j1, i0] * (one - tx) + field[j1, i1] * tx) * ty)


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
