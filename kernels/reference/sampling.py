"""Interpolation on the grids (NumPy reference): bilinear on heightmap nodes, trilinear on
the staggered wind faces. Points outside a grid take the value at its edge (clamped)."""
import numpy as np


def _axis(g, n):
    """Lower index and weight for fractional grid coordinate ``g`` on ``n`` samples, clamped."""
    g = np.clip(np.asarray(g, dtype=np.float32), np.float32(0.0), np.float32(n - 1))
    i0 = np.minimum(np.floor(g).astype(np.int64), max(n - 2, 0))
    t = (g - i0.astype(np.float32)).astype(np.float32)
    return i0, np.minimum(i0 + 1, n - 1), t


def sample_bilinear(field, x0, y0, spacing, x, y):
    """Bilinear value of node field ``field[ny, nx]`` at world points (x, y) (float32)."""
    ny, nx = field.shape
    inv = np.float32(1.0) / np.float32(spacing)
    i0, i1, tx = _axis((np.asarray(x, np.float32) - np.float32(x0)) * inv, nx)
    j0, j1, ty = _axis((np.asarray(y, np.float32) - np.float32(y0)) * inv, ny)
    one = np.float32(1.0)
    return ((field[j0, i0] * (one - tx) + field[j0, i1] * tx) * (one - ty)
            + (field[j1, i0] * (one - tx) + field[j1, i1] * tx) * ty).astype(np.float32)


def sample_trilinear(field, gx, gy, gz):
    """Trilinear value of ``field[nk, nj, ni]`` at fractional indices (gx, gy, gz)."""
    nk, nj, ni = field.shape
    i0, i1, tx = _axis(gx, ni)
    j0, j1, ty = _axis(gy, nj)
    k0, k1, tz = _axis(gz, nk)
    one = np.float32(1.0)

    def row(k, j):
        return field[k, j, i0] * (one - tx) + field[k, j, i1] * tx

    lower = row(k0, j0) * (one - ty) + row(k0, j1) * ty
    upper = row(k1, j0) * (one - ty) + row(k1, j1) * ty
    return (lower * (one - tz) + upper * tz).astype(np.float32)


def sample_wind(u, v, w, x0, y0, z0, cell_size, x, y, z):
    """Wind velocity (m/s) at world points from MAC faces u (nz,ny,nx+1), v (nz,ny+1,nx),
    w (nz+1,ny,nx) of a grid with min corner (x0,y0,z0). Returns (vx, vy, vz) float32."""
    inv = np.float32(1.0) / np.float32(cell_size)
    gx = (np.asarray(x, np.float32) - np.float32(x0)) * inv
    gy = (np.asarray(y, np.float32) - np.float32(y0)) * inv
    gz = (np.asarray(z, np.float32) - np.float32(z0)) * inv
    half = np.float32(0.5)
    return (sample_trilinear(u, gx, gy - half, gz - half),
            sample_trilinear(v, gx - half, gy, gz - half),
            sample_trilinear(w, gx - half, gy - half, gz))
