"""Interpolation on the grids (NumPy reference): bilinear on heightmap nodes, trilinear on
the staggered wind faces. Points outside a grid take the value at its edge (clamped)."""
import numpy as np


def _axis(g, n):
    """Lower index and weight for fractional grid coordinate ``g`` on ``n`` samples, clamped."""
    g = np.asarray(g, dtype=np.float32)
    # NaN clamps to the low edge, as CUDA's fmaxf(NaN, 0) does
    g = np.clip(np.where(np.isnan(g), np.float32(0.0), g), np.float32(0.0), np.float32(n - 1))
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


def sample_open(field, is_open, gx, gy, gz, fallback):
    """Trilinear value of ``field`` at fractional indices over its open samples only:
    ``is_open`` (field's shape, float32 in [0, 1]: the faces' open fractions, or a 0/1
    mask) weights the eight corners' trilinear weights, renormalised; with all eight 1 this
    is exactly ``sample_trilinear``, with none open it is ``fallback`` (an array of the
    points' shape). Weighting by the open fraction keeps a nearly closed face, whose
    velocity can be large (the flux squeezing through a small opening), from spreading it
    into the flow. The sums run in one
    fixed order so that every backend gets the same bits."""
    nk, nj, ni = field.shape
    i0, i1, tx = _axis(gx, ni)
    j0, j1, ty = _axis(gy, nj)
    k0, k1, tz = _axis(gz, nk)
    one = np.float32(1.0)
    f32 = np.float32

    def row(k, j):
        w0 = (is_open[k, j, i0] * (one - tx)).astype(f32)
        w1 = (is_open[k, j, i1] * tx).astype(f32)
        return (field[k, j, i0] * w0 + field[k, j, i1] * w1).astype(f32), (w0 + w1).astype(f32)

    def mix(a, b, t):
        return (a * (one - t) + b * t).astype(f32)

    (a, aw), (b, bw) = row(k0, j0), row(k0, j1)
    (c, cw), (d, dw) = row(k1, j0), row(k1, j1)
    value = mix(mix(a, b, ty), mix(c, d, ty), tz)
    weight = mix(mix(aw, bw, ty), mix(cw, dw, ty), tz)
    all_open = ((is_open[k0, j0, i0] + is_open[k0, j0, i1]) + (is_open[k0, j1, i0] + is_open[k0, j1, i1])
                + (is_open[k1, j0, i0] + is_open[k1, j0, i1]) + (is_open[k1, j1, i0] + is_open[k1, j1, i1])) == 8
    safe = np.where(weight > 0, weight, one)
    return np.where(all_open, value,
                    np.where(weight > 0, (value / safe).astype(f32), fallback)).astype(f32)


def open_range(field, is_open, gx, gy, gz, fallback):
    """(low, high): the smallest and largest of the open corner samples that
    ``sample_open`` would interpolate at fractional indices (gx, gy, gz); ``fallback`` for
    both where no corner is open (float32 arrays of the points' shape)."""
    nk, nj, ni = field.shape
    i0, i1, _tx = _axis(gx, ni)
    j0, j1, _ty = _axis(gy, nj)
    k0, k1, _tz = _axis(gz, nk)
    corners = [(k, j, i) for k in (k0, k1) for j in (j0, j1) for i in (i0, i1)]
    values = np.stack([field[c] for c in corners])
    opened = np.stack([is_open[c] > 0 for c in corners])
    low = np.where(opened, values, np.inf).min(axis=0)
    high = np.where(opened, values, -np.inf).max(axis=0)
    none = ~opened.any(axis=0)
    fallback = np.broadcast_to(np.asarray(fallback, np.float32), low.shape)
    return (np.where(none, fallback, low).astype(np.float32),
            np.where(none, fallback, high).astype(np.float32))
