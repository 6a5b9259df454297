"""Terrain -> heightmap and heightmap -> vertex snow depth (NumPy reference, the test oracle).

Runs once per bake on the host, so there is a reference and a Numba build, no GPU build.

Heightmap arrays are ``(ny, nx)``; node ``[j, i]`` sits at ``(x0 + i*spacing, y0 + j*spacing)``
(metres). Vertices are float64 ``(N, 3)`` world-space metres, triangles int64 ``(M, 3)``.
"""
import math

import numpy as np

from . import sampling

# One home for the tolerances: kernels.contract.
from ..contract import BARYCENTRIC_TOLERANCE, EDGE_ON_TOLERANCE, INDEX_PADDING  # noqa: F401


def rasterize_top_surface(vertices, triangles, x0, y0, spacing, height_out, has_surface_out):
    """Top-most surface height seen from the sky at every heightmap node.

    For each triangle, the nodes inside its XY projection (edges inclusive) get the
    barycentric interpolation of its vertex heights; a node keeps the largest such height.
    ``height_out`` float32 (ny, nx) and ``has_surface_out`` bool (ny, nx) must hold the
    open state (any height, False) on entry; covered nodes are overwritten.
    """
    ny, nx = height_out.shape
    for t in range(triangles.shape[0]):
        a, b, c = triangles[t]
        ax, ay, az = (float(v) for v in vertices[a])
        bx, by, bz = (float(v) for v in vertices[b])
        cx, cy, cz = (float(v) for v in vertices[c])
        e1x, e1y = bx - ax, by - ay
        e2x, e2y = cx - ax, cy - ay
        area2 = e1x * e2y - e1y * e2x
        xmin, xmax = min(ax, bx, cx), max(ax, bx, cx)
        ymin, ymax = min(ay, by, cy), max(ay, by, cy)
        span_x, span_y = xmax - xmin, ymax - ymin
        if not abs(area2) > EDGE_ON_TOLERANCE * (span_x * span_x + span_y * span_y):
            continue
        i_lo = max(int(math.ceil((xmin - x0) / spacing - INDEX_PADDING)), 0)
        i_hi = min(int(math.floor((xmax - x0) / spacing + INDEX_PADDING)), nx - 1)
        j_lo = max(int(math.ceil((ymin - y0) / spacing - INDEX_PADDING)), 0)
        j_hi = min(int(math.floor((ymax - y0) / spacing + INDEX_PADDING)), ny - 1)
        if i_lo > i_hi or j_lo > j_hi:
            continue
        px = x0 + np.arange(i_lo, i_hi + 1, dtype=np.int64) * spacing
        py = y0 + np.arange(j_lo, j_hi + 1, dtype=np.int64) * spacing
        dx = (px - ax)[None, :]
        dy = (py - ay)[:, None]
        weight_b = (dx * e2y - dy * e2x) / area2
        weight_c = (e1x * dy - e1y * dx) / area2
        weight_a = 1.0 - weight_b - weight_c
        inside = ((weight_a >= -BARYCENTRIC_TOLERANCE) & (weight_b >= -BARYCENTRIC_TOLERANCE)
                  & (weight_c >= -BARYCENTRIC_TOLERANCE))
        z = (weight_a * az + weight_b * bz + weight_c * cz).astype(np.float32)
        block = height_out[j_lo:j_hi + 1, i_lo:i_hi + 1]
        covered = has_surface_out[j_lo:j_hi + 1, i_lo:i_hi + 1]
        higher = inside & (~covered | (z > block))
        block[higher] = z[higher]
        covered |= inside


def _cell_index(g, n):
    """Lower node index of the cell holding fractional coordinate ``g`` on ``n`` nodes."""
    g = np.minimum(np.maximum(g, 0.0), float(n - 1))
    return np.minimum(np.floor(g).astype(np.int64), n - 2)


def vertex_snow_depth(height, has_surface, snow_depth, x0, y0, spacing, vertices, tolerance,
                      depth_out):
    """Snow depth (m) at each vertex on the top-most surface, 0 under an overhang.

    ``height`` float32 (ny, nx) m, ``has_surface`` bool (ny, nx), ``snow_depth`` float32
    (ny, nx) m, ``vertices`` float64 (N, 3) m, ``tolerance`` m; ``depth_out`` float32 (N,).

    A vertex is on top when ``z >= lowest surface node of its cell - local relief -
    tolerance``; the local relief is the largest height step between neighbouring surface
    nodes of the 4x4 nodes around the cell, which covers the interpolation error of slopes
    and of mesh detail finer than the heightmap. A vertex whose cell has no surface node
    sees nothing above it and counts as on top. On top it gets ``snow_depth`` sampled
    bilinearly at its XY (clamped at the edges).
    """
    ny, nx = height.shape
    x, y, z = vertices[:, 0], vertices[:, 1], vertices[:, 2]
    i = _cell_index((x - x0) / spacing, nx)
    j = _cell_index((y - y0) / spacing, ny)

    lowest = np.full(x.shape, np.inf)
    found = np.zeros(x.shape, dtype=bool)
    for dj in (0, 1):
        for di in (0, 1):
            node_has = has_surface[j + dj, i + di]
            node_h = height[j + dj, i + di].astype(np.float64)
            lowest = np.where(node_has & (node_h < lowest), node_h, lowest)
            found |= node_has

    relief = np.zeros(x.shape)
    row_lo, row_hi = np.maximum(j - 1, 0), np.minimum(j + 2, ny - 1)
    col_lo, col_hi = np.maximum(i - 1, 0), np.minimum(i + 2, nx - 1)
    for dj in range(-1, 3):
        for di in range(-1, 3):
            jj, ii = j + dj, i + di
            valid = (jj >= row_lo) & (jj <= row_hi) & (ii >= col_lo) & (ii <= col_hi)
            jj_c, ii_c = np.clip(jj, 0, ny - 1), np.clip(ii, 0, nx - 1)
            here = valid & has_surface[jj_c, ii_c]
            h_here = height[jj_c, ii_c].astype(np.float64)
            for sj, si, limit_ok in ((0, 1, ii + 1 <= col_hi), (1, 0, jj + 1 <= row_hi)):
                jn, iN = np.clip(jj + sj, 0, ny - 1), np.clip(ii + si, 0, nx - 1)
                pair = here & limit_ok & has_surface[jn, iN]
                step = np.abs(height[jn, iN].astype(np.float64) - h_here)
                relief = np.where(pair & (step > relief), step, relief)

    on_top = ~found | (z >= lowest - relief - tolerance)
    depth = sampling.sample_bilinear(snow_depth, x0, y0, spacing, x, y)
    depth_out[:] = np.where(on_top, depth, np.float32(0.0))
