"""Wind-driven snow transport, Numba build (same names, signatures and rules as
kernels.reference.drift)."""
import math

import numba
import numpy as np
from numba import prange

from .rounding import floor_int
from .sampling import sample_bilinear
# One home for the constants: the reference build defines them.
from ..contract import (BARE_GROUND, GRID_STEP_FROM, NO_SURFACE, OPEN_SNOWFIELD,
                        WAKE_SAMPLES, WRAP_THREADS)

F32 = np.float32


@numba.njit(inline="always", cache=True)
def _weighted(a, weight_a, b, weight_b):
    total = np.float32(np.float32(a * weight_a) + np.float32(b * weight_b))
    count = np.float32(weight_a + weight_b)
    if count > 0:
        return np.float32(total / count)
    return np.float32(0.0)


def surface_wind(u, v, w, fractions, wind_x, wind_y, scour=None, approach_speed=0.0,
                 heading_x=1.0, heading_y=0.0):
    """Wind (m/s) along the surface at each column's lowest open cell, scaled by the
    horseshoe vortex's ``scour`` from the approach flow when given (see the reference)."""
    fu, fv, fw = fractions
    _surface_wind(u, v, w, fu, fv, fw, wind_x, wind_y, scour is not None,
                  wind_x if scour is None else scour, np.float32(approach_speed),
                  np.float32(heading_x), np.float32(heading_y))


@numba.njit(parallel=True, cache=True, nogil=True)
def _surface_wind(u, v, w, fu, fv, fw, wind_x, wind_y, scoured, scour, approach_speed,
                  heading_x, heading_y):
    nz, ny, nx = fw.shape[0] - 1, fw.shape[1], fw.shape[2]
    for j in prange(ny):
        for i in range(nx):
            k = 0
            while k < nz and not (np.float32(np.float32(np.float32(fu[k, j, i] + fu[k, j, i + 1])
                                                        + np.float32(fv[k, j, i] + fv[k, j + 1, i]))
                                             + np.float32(fw[k, j, i] + fw[k + 1, j, i])) > 0):
                k += 1
            if k == nz:
                wind_x[j, i] = 0.0
                wind_y[j, i] = 0.0
                continue
            wx = _weighted(u[k, j, i], fu[k, j, i], u[k, j, i + 1], fu[k, j, i + 1])
            wy = _weighted(v[k, j, i], fv[k, j, i], v[k, j + 1, i], fv[k, j + 1, i])
            wz = np.float32(0.0)
            if fw[k + 1, j, i] > 0:
                wz = w[k + 1, j, i]
            horizontal = np.float32(np.float32(wx * wx) + np.float32(wy * wy))
            if horizontal > 0:
                factor = np.float32(math.sqrt(np.float32(
                    np.float32(horizontal + np.float32(wz * wz)) / horizontal)))
                wx = np.float32(wx * factor)
                wy = np.float32(wy * factor)
            if scoured:
                factor = scour[j, i]
                if factor > np.float32(1.0):
                    speed = np.float32(math.sqrt(np.float32(np.float32(wx * wx)
                                                            + np.float32(wy * wy))))
                    deficit = max(np.float32(approach_speed - speed), np.float32(0.0))
                    vx = np.float32(wx + np.float32(deficit * heading_x))
                    vy = np.float32(wy + np.float32(deficit * heading_y))
                    length = np.float32(math.sqrt(np.float32(np.float32(vx * vx)
                                                             + np.float32(vy * vy))))
                    along = np.float32(np.float32(vx * heading_x) + np.float32(vy * heading_y))
                    dx, dy = heading_x, heading_y
                    if length > 0 and along > 0:
                        dx = np.float32(vx / length)
                        dy = np.float32(vy / length)
                    magnitude = np.float32(factor * max(speed, approach_speed))
                    wx = np.float32(dx * magnitude)
                    wy = np.float32(dy * magnitude)
                else:
                    wx = np.float32(wx * factor)
                    wy = np.float32(wy * factor)
            wind_x[j, i] = wx
            wind_y[j, i] = wy


def saltation_flux(wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                   has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                   flux_x, flux_y, height=None, snow_depth=None, bubble_top=None):
    """Saltation volume flux (m^2/s) per heightmap node along the surface wind, none where
    the surface lies below ``bubble_top`` (see the reference)."""
    shelter = bubble_top is not None
    if not shelter:
        height = snow_depth = flux_x
        bubble_top = wind_x
    _saltation_flux(wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                    has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                    flux_x, flux_y, shelter, height, snow_depth, bubble_top)


@numba.njit(parallel=True, cache=True, nogil=True)
def _saltation_flux(wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                    has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                    flux_x, flux_y, shelter, height, snow_depth, bubble_top):
    ny, nx = has_surface.shape
    half = np.float32(np.float32(0.5) * np.float32(cell_size))
    ox = np.float32(np.float32(column_x0) + half)
    oy = np.float32(np.float32(column_y0) + half)
    t = np.float32(threshold)
    for j in prange(ny):
        y = np.float32(np.float32(hy0) + np.float32(j) * np.float32(spacing))
        for i in range(nx):
            x = np.float32(np.float32(hx0) + np.float32(i) * np.float32(spacing))
            fx = np.float32(0.0)
            fy = np.float32(0.0)
            if has_surface[j, i]:
                sx = sample_bilinear(wind_x, ox, oy, cell_size, x, y)
                sy = sample_bilinear(wind_y, ox, oy, cell_size, x, y)
                speed = np.float32(math.sqrt(np.float32(sx * sx + sy * sy)))
                ustar = np.float32(np.float32(ustar_per_speed) * speed)
                along = np.float32(np.float32(sx * np.float32(heading_x))
                                   + np.float32(sy * np.float32(heading_y)))
                moving = ustar > t and along > 0
                if moving and shelter:
                    top = sample_bilinear(bubble_top, ox, oy, cell_size, x, y)
                    moving = np.float32(height[j, i] + snow_depth[j, i]) >= top
                if moving:
                    q = np.float32(np.float32(flux_scale)
                                   * np.float32(np.float32(ustar * ustar - t * t) / ustar))
                    per_speed = np.float32(q / speed)
                    fx = np.float32(per_speed * sx)
                    fy = np.float32(per_speed * sy)
            flux_x[j, i] = fx
            flux_y[j, i] = fy


@numba.njit(inline="always", cache=True)
def _pair(q_low, q_high, snow_low, snow_high, surface_low, surface_high, courant, max_rise):
    face = np.float32(np.float32(0.5) * np.float32(q_low + q_high))
    amount = np.float32(abs(face) * np.float32(courant))
    donor = snow_low if face > 0 else snow_high
    amount = min(amount, np.float32(np.float32(0.25) * donor))
    rise = np.float32(surface_high - surface_low) if face > 0 else np.float32(surface_low - surface_high)
    if not rise <= np.float32(max_rise):
        return np.float32(0.0)
    return amount if face > 0 else -amount


@numba.njit(inline="always", cache=True)
def _between(flux, snow_depth, height, has_surface, j0, i0, j1, i1, courant, max_rise):
    """The pair transfer from node (j0, i0), the lower index, toward (j1, i1); 0 unless
    both have a surface."""
    if not (has_surface[j0, i0] and has_surface[j1, i1]):
        return np.float32(0.0)
    low, high = snow_depth[j0, i0], snow_depth[j1, i1]
    return _pair(flux[j0, i0], flux[j1, i1], low, high, np.float32(height[j0, i0] + low),
                 np.float32(height[j1, i1] + high), courant, max_rise)


@numba.njit(cache=True, nogil=True)
def _wrap_tail(snow_out, has_surface, face, downwind_axis, wrap):
    """The wrap faces' shares (the reference's edge_sum order: WRAP_THREADS strided partial
    sums, then a pairwise tree) into wrap[0:2], added to the receiving edges' surface
    nodes, first edge first."""
    ny, nx = snow_out.shape
    size = face.size
    zero = np.float32(0.0)
    forward = np.zeros(WRAP_THREADS, np.float32)
    backward = np.zeros(WRAP_THREADS, np.float32)
    low_count, high_count = 0, 0
    for thread in range(WRAP_THREADS):
        for n in range(thread, size, WRAP_THREADS):
            forward[thread] = np.float32(forward[thread] + max(face[n], zero))
            backward[thread] = np.float32(backward[thread] + max(-face[n], zero))
            if downwind_axis == 1:
                low_count += 1 if has_surface[n, 0] else 0
                high_count += 1 if has_surface[n, nx - 1] else 0
            else:
                low_count += 1 if has_surface[0, n] else 0
                high_count += 1 if has_surface[ny - 1, n] else 0
    width = WRAP_THREADS
    while width > 1:
        width //= 2
        for thread in range(width):
            forward[thread] = np.float32(forward[thread] + forward[thread + width])
            backward[thread] = np.float32(backward[thread] + backward[thread + width])
    first = np.float32(forward[0] / np.float32(low_count)) if low_count > 0 else zero
    last = np.float32(backward[0] / np.float32(high_count)) if high_count > 0 else zero
    wrap[0], wrap[1] = first, last
    for n in range(size):
        if downwind_axis == 1:
            if has_surface[n, 0]:
                snow_out[n, 0] = np.float32(snow_out[n, 0] + first)
            if has_surface[n, nx - 1]:
                snow_out[n, nx - 1] = np.float32(snow_out[n, nx - 1] + last)
        else:
            if has_surface[0, n]:
                snow_out[0, n] = np.float32(snow_out[0, n] + first)
            if has_surface[ny - 1, n]:
                snow_out[ny - 1, n] = np.float32(snow_out[ny - 1, n] + last)


@numba.njit(inline="always", cache=True)
def _boundary_face(q, snow, surface, courant, inflow_limit, first):
    """See kernels.reference.drift._boundary_faces (one node; ``first``: the face before
    the first node, else the one after the last)."""
    if not surface:
        return np.float32(0.0)
    amount = np.float32(abs(q) * courant)
    if first:
        if q > 0:
            return min(amount, inflow_limit)
        return -min(amount, np.float32(np.float32(0.25) * snow))
    if q > 0:
        return min(amount, np.float32(np.float32(0.25) * snow))
    return -min(amount, inflow_limit)


@numba.njit(cache=True, nogil=True)
def _boundary_books(first, last, books):
    """See kernels.reference.drift._boundary_books (the edge_sum order), added to books."""
    size = first.size
    zero = np.float32(0.0)
    into = np.zeros(WRAP_THREADS, np.float32)
    out = np.zeros(WRAP_THREADS, np.float32)
    for thread in range(WRAP_THREADS):
        for n in range(thread, size, WRAP_THREADS):
            a, b = first[n], last[n]
            into[thread] = np.float32(into[thread] + np.float32(max(a, zero) + max(-b, zero)))
            out[thread] = np.float32(out[thread] + np.float32(max(-a, zero) + max(b, zero)))
    width = WRAP_THREADS
    while width > 1:
        width //= 2
        for thread in range(width):
            into[thread] = np.float32(into[thread] + into[thread + width])
            out[thread] = np.float32(out[thread] + out[thread + width])
    books[0] = books[0] + np.float64(into[0])
    books[1] = books[1] + np.float64(out[0])


@numba.njit(parallel=True, cache=True, nogil=True)
def _drift_transport(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise,
                     snow_out, downwind_axis, face, opened, inflow_limit, first_face,
                     last_face):
    ny, nx = snow_depth.shape
    zero = np.float32(0.0)
    c = np.float32(courant)
    r = np.float32(max_rise)
    for j in prange(ny):
        for i in range(nx):
            s = snow_depth[j, i]
            # face values as the reference's fx / fy: positive toward +x (+y); the
            # neighbours wrap around the grid's edges (compares, not %: a division each)
            w = i - 1 if i > 0 else nx - 1
            e = i + 1 if i < nx - 1 else 0
            south = j - 1 if j > 0 else ny - 1
            north = j + 1 if j < ny - 1 else 0
            d, h, a = snow_depth, height, has_surface
            if opened and downwind_axis == 1 and i == 0:
                left = _boundary_face(flux_x[j, i], s, a[j, i], c, inflow_limit, True)
                first_face[j] = left
            else:
                left = _between(flux_x, d, h, a, j, w, j, i, c, r)
            if opened and downwind_axis == 0 and j == 0:
                down = _boundary_face(flux_y[j, i], s, a[j, i], c, inflow_limit, True)
                first_face[i] = down
            else:
                down = _between(flux_y, d, h, a, south, i, j, i, c, r)
            if opened and downwind_axis == 1 and i == nx - 1:
                right = _boundary_face(flux_x[j, i], s, a[j, i], c, inflow_limit, False)
                last_face[j] = right
            else:
                right = _between(flux_x, d, h, a, j, i, j, e, c, r)
            if opened and downwind_axis == 0 and j == ny - 1:
                up = _boundary_face(flux_y[j, i], s, a[j, i], c, inflow_limit, False)
                last_face[i] = up
            else:
                up = _between(flux_y, d, h, a, j, i, north, i, c, r)
            # the downwind wrap's faces go to the tail, which shares them across the edge
            if not opened and downwind_axis == 1 and i == 0:
                face[j] = left
            elif not opened and downwind_axis == 0 and j == 0:
                face[i] = down
            if not has_surface[j, i]:
                snow_out[j, i] = s
                continue
            outflow = np.float32(max(-left, zero) + max(right, zero))
            outflow = np.float32(outflow + max(-down, zero))
            outflow = np.float32(outflow + max(up, zero))
            gain_left, gain_right = max(left, zero), max(-right, zero)
            gain_down, gain_up = max(down, zero), max(-up, zero)
            if opened:
                pass                       # the open faces carry their own inflow
            elif downwind_axis == 1:
                if i == 0:
                    gain_left = zero
                if i == nx - 1:
                    gain_right = zero
            elif downwind_axis == 0:
                if j == 0:
                    gain_down = zero
                if j == ny - 1:
                    gain_up = zero
            inflow = np.float32(gain_left + gain_right)
            inflow = np.float32(inflow + gain_down)
            inflow = np.float32(inflow + gain_up)
            snow_out[j, i] = np.float32(max(np.float32(s - outflow), zero) + inflow)


def drift_transport(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise,
                    snow_out, downwind_axis=-1, wrap=None, boundary=0, inflow_limit=0.0,
                    books=None):
    """One pairwise transport step into snow_out; the grid wraps around, the downwind
    edges' inflow spread evenly with ``downwind_axis`` 0 or 1, or those edges open with
    ``boundary`` OPEN_SNOWFIELD or BARE_GROUND (see the reference)."""
    axis = int(downwind_axis) if int(downwind_axis) in (0, 1) else -1
    opened = axis >= 0 and int(boundary) in (OPEN_SNOWFIELD, BARE_GROUND)
    limit = np.float32(inflow_limit) if int(boundary) == OPEN_SNOWFIELD else np.float32(0.0)
    ny, nx = snow_depth.shape
    face = np.zeros(ny if axis == 1 else nx, np.float32)
    first, last = np.zeros_like(face), np.zeros_like(face)
    _drift_transport(flux_x, flux_y, height, has_surface, snow_depth, np.float32(courant),
                     np.float32(max_rise), snow_out, axis, face, opened, limit, first, last)
    if opened:
        _boundary_books(first, last, books)
    elif axis >= 0:
        _wrap_tail(snow_out, has_surface, face, axis, wrap)


@numba.njit(cache=True, nogil=True)
def _column_index(coordinate, origin, cell_size, count):
    index = floor_int(np.float32(np.float32(coordinate - np.float32(origin))
                                 * np.float32(np.float32(1.0) / np.float32(cell_size))))
    return index if 0 <= index < count else -1


@numba.njit(parallel=True, cache=True, nogil=True)
def column_surface(height, snow_depth, has_surface, hx0, hy0, spacing, x0, y0, cell_size,
                   surface_out):
    """Highest surface (m) of the heightmap nodes in each wind column (see the reference)."""
    ny, nx = height.shape
    wny, wnx = surface_out.shape
    ci = np.empty(nx, np.int64)
    for i in range(nx):
        ci[i] = _column_index(np.float32(np.float32(hx0) + np.float32(np.float32(i) * np.float32(spacing))),
                              x0, cell_size, wnx)
    cj = np.empty(ny, np.int64)
    for j in range(ny):
        cj[j] = _column_index(np.float32(np.float32(hy0) + np.float32(np.float32(j) * np.float32(spacing))),
                              y0, cell_size, wny)
    for row in prange(wny):
        for c in range(wnx):
            surface_out[row, c] = NO_SURFACE
        for j in range(ny):
            if cj[j] != row:
                continue
            for i in range(nx):
                c = ci[i]
                if c < 0:
                    continue
                value = np.float32(height[j, i] + snow_depth[j, i]) if has_surface[j, i] else NO_SURFACE
                if value > surface_out[row, c]:
                    surface_out[row, c] = value


@numba.njit(inline="always", cache=True)
def _upwind_surface(column_height, ox, oy, h, x, y, s, hx, hy, spread):
    """The surface s m straight upwind of (x, y), and that at most the mean across the
    wake's window."""
    cx = np.float32(x - np.float32(s * hx))
    cy = np.float32(y - np.float32(s * hy))
    half = np.float32(np.float32(spread) * s)
    total = np.float32(0.0)
    centre = np.float32(0.0)
    for m in range(WAKE_SAMPLES):
        offset = np.float32(np.float32(np.float32(2 * m - (WAKE_SAMPLES - 1))
                                       / np.float32(WAKE_SAMPLES - 1)) * half)
        px = np.float32(cx - np.float32(offset * hy))
        py = np.float32(cy + np.float32(offset * hx))
        value = sample_bilinear(column_height, ox, oy, h, px, py)
        total = np.float32(total + value)
        if 2 * m == WAKE_SAMPLES - 1:
            centre = value
    mean = np.float32(total / np.float32(WAKE_SAMPLES))
    return centre, (centre if centre < mean else mean)


@numba.njit(parallel=True, cache=True, nogil=True)
def separation_bubble(column_height, x0, y0, cell_size, heading_x, heading_y, slope, rise,
                      edge, spread, max_distance, bubble_top):
    """Top (m) of the lee's separation bubble over each wind column (see the reference)."""
    ny, nx = column_height.shape
    h = np.float32(cell_size)
    half_cell = np.float32(np.float32(0.5) * h)
    ox, oy = np.float32(np.float32(x0) + half_cell), np.float32(np.float32(y0) + half_cell)
    hx, hy = np.float32(heading_x), np.float32(heading_y)
    limit = np.float32(max_distance)
    face = np.float32(np.float32(edge) * h)
    for j in prange(ny):
        y = np.float32(oy + np.float32(np.float32(j) * h))
        for i in range(nx):
            x = np.float32(ox + np.float32(np.float32(i) * h))
            here = column_height[j, i]
            top = NO_SURFACE
            s = h
            centre, upwind = np.float32(0.0), np.float32(0.0)
            if s <= limit:
                centre, upwind = _upwind_surface(column_height, ox, oy, h, x, y, s, hx, hy,
                                                 spread)
            while s <= limit:
                further_centre, further = _upwind_surface(column_height, ox, oy, h, x, y,
                                                          np.float32(s + h), hx, hy, spread)
                drop = np.float32(s * np.float32(slope))
                line = np.float32(upwind - drop)
                lift = np.float32(upwind - here)
                if (rise > 0 and here != NO_SURFACE and lift > 0 and drop < lift
                        and np.float32(centre - further_centre) >= face):
                    climb = np.float32(np.float32(np.float32(rise) * s)
                                       * np.float32(np.float32(1.0) - np.float32(drop / lift)))
                    line = np.float32(line + climb)
                if line > top:
                    top = line
                centre, upwind = further_centre, further
                s = np.float32(s + h)
            bubble_top[j, i] = top


@numba.njit(inline="always", cache=True)
def _grid_step(component):
    """-1, 0 or 1: the grid step of one component of a unit vector (see the reference)."""
    if component >= GRID_STEP_FROM:
        return 1
    if component <= -GRID_STEP_FROM:
        return -1
    return 0


@numba.njit(parallel=True, cache=True, nogil=True)
def horseshoe_vortex(column_height, cell_size, heading_x, heading_y, reach, gain, leg,
                     max_cells, scour):
    """Factor (>= 1) on the surface wind from the horseshoe vortex at the windward base of
    bluff obstacles and its legs trailing downwind of their sides, per wind column (see
    the reference)."""
    ny, nx = column_height.shape
    hx, hy = np.float32(heading_x), np.float32(heading_y)
    reach32, gain32, leg32 = np.float32(reach), np.float32(gain), np.float32(leg)
    one, half, cell = np.float32(1.0), np.float32(0.5), np.float32(cell_size)
    for j in prange(ny):
        for i in range(nx):
            here = column_height[j, i]
            best = one
            for dj in range(-max_cells, max_cells + 1):
                n = j + dj
                if here == NO_SURFACE or n < 0 or n >= ny:
                    continue
                for di in range(-max_cells, max_cells + 1):
                    m = i + di
                    if (di == 0 and dj == 0) or m < 0 or m >= nx:
                        continue
                    other = column_height[n, m]
                    if other == NO_SURFACE:
                        continue
                    rise = np.float32(other - here)
                    if not rise > 0:
                        continue
                    limit = np.float32(reach32 * rise)
                    along = np.float32(np.float32(np.float32(di) * hx)
                                       + np.float32(np.float32(dj) * hy))
                    factor = one
                    if along >= 0:
                        distance = np.float32(np.float32(math.sqrt(di * di + dj * dj)) * cell)
                        if distance < limit:
                            factor = np.float32(one + np.float32(gain32 * np.float32(
                                one - np.float32(distance / limit))))
                    else:
                        cross = np.float32(np.float32(np.float32(dj) * hx)
                                           - np.float32(np.float32(di) * hy))
                        if abs(cross) < half:
                            continue
                        sign = np.float32(-1.0) if cross > 0 else one
                        bi = m + _grid_step(np.float32(sign * -hy))
                        bj = n + _grid_step(np.float32(sign * hx))
                        if bi < 0 or bi >= nx or bj < 0 or bj >= ny:
                            continue
                        beside = column_height[bj, bi]
                        if beside != NO_SURFACE and \
                                np.float32(beside - here) > np.float32(half * rise):
                            continue
                        lateral = np.float32(np.float32(abs(cross)) * cell)
                        behind = np.float32(np.float32(-along) * cell)
                        length = np.float32(leg32 * rise)
                        if lateral < limit and behind < length:
                            fade = np.float32(np.float32(one - np.float32(lateral / limit))
                                              * np.float32(one - np.float32(behind / length)))
                            factor = np.float32(one + np.float32(gain32 * fade))
                    if factor > best:
                        best = factor
            scour[j, i] = best
