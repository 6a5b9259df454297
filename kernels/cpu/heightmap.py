"""Terrain -> heightmap and heightmap -> vertex snow depth, Numba build (parallel, race-free).

Same names, signatures and arithmetic as ``kernels.reference.heightmap`` (see there for the
array layouts and the rules). The rasterizer bins triangles by the node rows they span and
runs one thread per row, so every node is written by exactly one thread.
"""
import math

import numba
import numpy as np

from ..contract import BARYCENTRIC_TOLERANCE, EDGE_ON_TOLERANCE, INDEX_PADDING
from . import sampling


@numba.njit(parallel=True, cache=True, nogil=True)
def _triangle_rows(vertices, triangles, y0, spacing, ny, row_lo, row_hi):
    """First and last node row each triangle may cover; an empty span for edge-on ones."""
    for t in numba.prange(triangles.shape[0]):
        a, b, c = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        ax, ay = vertices[a, 0], vertices[a, 1]
        bx, by = vertices[b, 0], vertices[b, 1]
        cx, cy = vertices[c, 0], vertices[c, 1]
        area2 = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)
        span_x = max(ax, bx, cx) - min(ax, bx, cx)
        ymin, ymax = min(ay, by, cy), max(ay, by, cy)
        span_y = ymax - ymin
        if not abs(area2) > EDGE_ON_TOLERANCE * (span_x * span_x + span_y * span_y):
            row_lo[t] = 1
            row_hi[t] = 0
            continue
        row_lo[t] = max(int(math.ceil((ymin - y0) / spacing - INDEX_PADDING)), 0)
        row_hi[t] = min(int(math.floor((ymax - y0) / spacing + INDEX_PADDING)), ny - 1)


@numba.njit(cache=True, nogil=True)
def _bin_by_row(row_lo, row_hi, ny):
    """CSR lists of the triangles touching each node row, in triangle order."""
    offsets = np.zeros(ny + 1, dtype=np.int64)
    for t in range(row_lo.shape[0]):
        for j in range(row_lo[t], row_hi[t] + 1):
            offsets[j + 1] += 1
    for j in range(ny):
        offsets[j + 1] += offsets[j]
    fill = offsets[:-1].copy()
    entries = np.empty(offsets[ny], dtype=np.int64)
    for t in range(row_lo.shape[0]):
        for j in range(row_lo[t], row_hi[t] + 1):
            entries[fill[j]] = t
            fill[j] += 1
    return offsets, entries


@numba.njit(parallel=True, cache=True, nogil=True)
def _rasterize_rows(vertices, triangles, offsets, entries, x0, y0, spacing, height_out,
                    has_surface_out):
    nx = height_out.shape[1]
    tol = BARYCENTRIC_TOLERANCE
    for j in numba.prange(height_out.shape[0]):
        py = y0 + j * spacing
        for k in range(offsets[j], offsets[j + 1]):
            t = entries[k]
            a, b, c = triangles[t, 0], triangles[t, 1], triangles[t, 2]
            ax, ay, az = vertices[a, 0], vertices[a, 1], vertices[a, 2]
            bx, by, bz = vertices[b, 0], vertices[b, 1], vertices[b, 2]
            cx, cy, cz = vertices[c, 0], vertices[c, 1], vertices[c, 2]
            e1x, e1y = bx - ax, by - ay
            e2x, e2y = cx - ax, cy - ay
            area2 = e1x * e2y - e1y * e2x
            xmin, xmax = min(ax, bx, cx), max(ax, bx, cx)
            i_lo = max(int(math.ceil((xmin - x0) / spacing - INDEX_PADDING)), 0)
            i_hi = min(int(math.floor((xmax - x0) / spacing + INDEX_PADDING)), nx - 1)
            dy = py - ay
            for i in range(i_lo, i_hi + 1):
                dx = (x0 + i * spacing) - ax
                weight_b = (dx * e2y - dy * e2x) / area2
                weight_c = (e1x * dy - e1y * dx) / area2
                weight_a = 1.0 - weight_b - weight_c
                if weight_a >= -tol and weight_b >= -tol and weight_c >= -tol:
                    z = np.float32(weight_a * az + weight_b * bz + weight_c * cz)
                    if not has_surface_out[j, i] or z > height_out[j, i]:
                        height_out[j, i] = z
                    has_surface_out[j, i] = True


def rasterize_top_surface(vertices, triangles, x0, y0, spacing, height_out, has_surface_out):
    """Top-most surface height seen from the sky at every heightmap node (see the reference).

    Scratch memory: two int64 per triangle plus one int64 per (triangle, node row) pair.
    """
    ny = height_out.shape[0]
    row_lo = np.empty(triangles.shape[0], dtype=np.int64)
    row_hi = np.empty(triangles.shape[0], dtype=np.int64)
    _triangle_rows(vertices, triangles, float(y0), float(spacing), ny, row_lo, row_hi)
    offsets, entries = _bin_by_row(row_lo, row_hi, ny)
    del row_lo, row_hi
    _rasterize_rows(vertices, triangles, offsets, entries, float(x0), float(y0), float(spacing),
                    height_out, has_surface_out)


@numba.njit(parallel=True, cache=True, nogil=True)
def vertex_snow_depth(height, has_surface, snow_depth, x0, y0, spacing, vertices, tolerance,
                      depth_out):
    """Snow depth (m) at each vertex on the top-most surface, 0 under an overhang (see the
    reference for the rule)."""
    ny, nx = height.shape
    for n in numba.prange(vertices.shape[0]):
        x, y, z = vertices[n, 0], vertices[n, 1], vertices[n, 2]
        gx = min(max((x - x0) / spacing, 0.0), float(nx - 1))
        gy = min(max((y - y0) / spacing, 0.0), float(ny - 1))
        i = min(int(math.floor(gx)), nx - 2)
        j = min(int(math.floor(gy)), ny - 2)
        lowest = np.inf
        found = False
        for dj in range(2):
            for di in range(2):
                if has_surface[j + dj, i + di]:
                    found = True
                    lowest = min(lowest, np.float64(height[j + dj, i + di]))
        on_top = True
        if found:
            relief = 0.0
            row_lo, row_hi = max(j - 1, 0), min(j + 2, ny - 1)
            col_lo, col_hi = max(i - 1, 0), min(i + 2, nx - 1)
            for jj in range(row_lo, row_hi + 1):
                for ii in range(col_lo, col_hi + 1):
                    if not has_surface[jj, ii]:
                        continue
                    h_here = np.float64(height[jj, ii])
                    if ii + 1 <= col_hi and has_surface[jj, ii + 1]:
                        relief = max(relief, abs(np.float64(height[jj, ii + 1]) - h_here))
                    if jj + 1 <= row_hi and has_surface[jj + 1, ii]:
                        relief = max(relief, abs(np.float64(height[jj + 1, ii]) - h_here))
            on_top = z >= lowest - relief - tolerance
        if on_top:
            depth_out[n] = sampling.sample_bilinear(snow_depth, x0, y0, spacing, x, y)
        else:
            depth_out[n] = np.float32(0.0)
