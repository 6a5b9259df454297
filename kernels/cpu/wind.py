"""Wind kernels, Numba build (same names, signatures and rules as kernels.reference.wind)."""
import numba
import numpy as np
from numba import prange

from ..contract import (FRACTION_HIGH, FRACTION_LOW, FRACTION_MIN,  # one home
                        FRACTION_SAMPLES, FRACTION_STEP, FRACTION_STEPS, NO_BLOCK, OPEN_LIMIT)
from .sampling import open_range, sample_bilinear_sum, sample_open, sample_weight
from .shares import SHARES, share, njit_uncounted

F32 = np.float32


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                         column_top=None):
    """solid[k, j, i] = 1 where the cell centre lies below bilinear height + snow depth, or
    below a thin obstacle's ``column_top`` (see the reference)."""
    use_top = column_top is not None
    _solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                          use_top, column_top if use_top else height)


@numba.njit(parallel=True, cache=True, nogil=True)
def _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx):
    """(ny, nx) float32 m: bilinear height + snow depth at each wind column's centre."""
    h = np.float32(cell_size)
    half = np.float32(0.5)
    centre = np.empty((ny, nx), np.float32)
    for j in prange(ny):
        for i in range(nx):
            cx = np.float32(x0) + (np.float32(i) + half) * h
            cy = np.float32(y0) + (np.float32(j) + half) * h
            centre[j, i] = sample_bilinear_sum(height, snow_depth, hx0, hy0, spacing, cx, cy)
    return centre


@numba.njit(inline="always", cache=True)
def _thin(centre, top, j, i, limit):
    """A thin obstacle: ``top`` more than ``limit`` above the centre ground of column
    (j, i) and of its four neighbours (clamped at the grid's edge)."""
    ny, nx = centre.shape
    thin = np.float32(top - centre[j, i]) > limit
    thin = thin and np.float32(top - centre[j, max(i - 1, 0)]) > limit
    thin = thin and np.float32(top - centre[j, min(i + 1, nx - 1)]) > limit
    thin = thin and np.float32(top - centre[max(j - 1, 0), i]) > limit
    thin = thin and np.float32(top - centre[min(j + 1, ny - 1), i]) > limit
    return thin


@numba.njit(parallel=True, cache=True, nogil=True)
def _solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                          use_top, column_top):
    nz, ny, nx = solid.shape
    h = np.float32(cell_size)
    half = np.float32(0.5)
    centre = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    limit = np.float32(half * h)
    for j in prange(ny):
        for i in range(nx):
            ground = centre[j, i]
            if use_top and _thin(centre, column_top[j, i], j, i, limit):
                ground = column_top[j, i]
            for k in range(nz):
                cz = np.float32(z0) + (np.float32(k) + half) * h
                solid[k, j, i] = 1 if cz < ground else 0


@numba.njit(parallel=True, cache=True, nogil=True)
def obstacle_surface(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top,
                     out):
    """out (ny, nx) float32 m: the surface the wind's solid mask stands on in each column
    (see the reference)."""
    ny, nx = out.shape
    centre = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    limit = np.float32(np.float32(0.5) * np.float32(cell_size))
    for j in prange(ny):
        for i in range(nx):
            top = column_top[j, i]
            if _thin(centre, top, j, i, limit) or not centre[j, i] > OPEN_LIMIT:
                out[j, i] = top
            else:
                out[j, i] = centre[j, i]


@numba.njit(parallel=True, cache=True, nogil=True)
def block_tops(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top, out):
    """out (ny, nx) float32 m: ``column_top`` in the columns of a thin obstacle, NO_BLOCK
    elsewhere (see the reference)."""
    ny, nx = out.shape
    centre = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    limit = np.float32(np.float32(0.5) * np.float32(cell_size))
    for j in prange(ny):
        for i in range(nx):
            out[j, i] = column_top[j, i] if _thin(centre, column_top[j, i], j, i, limit) else NO_BLOCK


@numba.njit(inline="always", cache=True)
def _snap(a):
    if a < FRACTION_LOW:
        return np.float32(0.0)
    if a > FRACTION_HIGH:
        return np.float32(1.0)
    steps = np.float32(np.floor(np.float32(np.float32(a) * np.float32(FRACTION_STEPS)) + np.float32(0.5)))
    return max(np.float32(steps * FRACTION_STEP), FRACTION_MIN)


@numba.njit(inline="always", cache=True)
def _terrain(height, snow_depth, hx0, hy0, spacing, x, y, block):
    return max(sample_bilinear_sum(height, snow_depth, hx0, hy0, spacing, x, y), block)


@numba.njit(inline="always", cache=True)
def _vertical(samples, out_column, z0, h, step):
    """out_column[k] = snapped mean over ``samples`` of clamp((top_k - t) / h, 0, 1)."""
    zero = np.float32(0.0)
    one = np.float32(1.0)
    for k in range(out_column.shape[0]):
        top = np.float32(z0 + np.float32(k + 1) * h)
        total = zero
        for s in range(samples.shape[0]):
            share = np.float32(np.float32(top - samples[s]) / h)
            total = np.float32(total + min(max(share, zero), one))
        out_column[k] = _snap(np.float32(total * step))


@numba.njit(inline="always", cache=True)
def _side_samples(height, snow_depth, hx0, hy0, spacing, fixed, origin, index, along_x, h,
                  block):
    """The terrain at the FRACTION_SAMPLES points of a vertical face: at ``fixed`` across
    it and origin + (index + (s + 0.5) / S) h along it (along x when ``along_x``)."""
    step = np.float32(np.float32(1.0) / np.float32(FRACTION_SAMPLES))
    samples = np.empty(FRACTION_SAMPLES, np.float32)
    for s in range(FRACTION_SAMPLES):
        offset = np.float32(np.float32(np.float32(s) + np.float32(0.5)) * step)
        moving = np.float32(origin + np.float32(np.float32(index) + offset) * h)
        x = moving if along_x else fixed
        y = fixed if along_x else moving
        samples[s] = _terrain(height, snow_depth, hx0, hy0, spacing, x, y, block)
    return samples


def face_fractions(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                   frac_u, frac_v, frac_w):
    """Open area fraction of every face against the terrain surface, thin obstacles' columns
    filled to ``blocks`` (see the reference)."""
    _face_fractions(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                    frac_u, frac_v, frac_w)


@numba.njit(parallel=True, cache=True, nogil=True)
def _face_fractions(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                    frac_u, frac_v, frac_w):
    nzp, ny, nx = frac_w.shape
    nz = nzp - 1
    S = FRACTION_SAMPLES
    h = np.float32(cell_size)
    step = np.float32(np.float32(1.0) / np.float32(S))
    half = np.float32(0.5)
    x0 = np.float32(x0)
    y0 = np.float32(y0)
    z0 = np.float32(z0)
    zero = np.float32(0.0)
    one = np.float32(1.0)
    area = np.float32(step * step)
    # u faces (x fixed, y along the face), then v faces (y fixed, x along): a face column
    # (j, i) per iteration; its block top is the higher of the two columns beside it
    for ji in prange(ny * (nx + 1)):
        j = ji // (nx + 1)
        i = ji % (nx + 1)
        block = max(blocks[j, max(i - 1, 0)], blocks[j, min(i, nx - 1)])
        samples = _side_samples(height, snow_depth, hx0, hy0, spacing,
                                np.float32(x0 + np.float32(i) * h), y0, j, False, h, block)
        _vertical(samples, frac_u[:, j, i], z0, h, step)
    for ji in prange((ny + 1) * nx):
        j = ji // nx
        i = ji % nx
        block = max(blocks[max(j - 1, 0), i], blocks[min(j, ny - 1), i])
        samples = _side_samples(height, snow_depth, hx0, hy0, spacing,
                                np.float32(y0 + np.float32(j) * h), x0, i, True, h, block)
        _vertical(samples, frac_v[:, j, i], z0, h, step)
    # w faces: the footprint of column (j, i), S rows of S segments
    for ji in prange(ny * nx):
        j = ji // nx
        i = ji % nx
        block = blocks[j, i]
        t = np.empty((S, S + 1), np.float32)
        low = np.float32(np.inf)
        high = np.float32(-np.inf)
        for r in range(S):
            offset = np.float32(np.float32(np.float32(r) + half) * step)
            y = np.float32(y0 + np.float32(np.float32(j) + offset) * h)
            for e in range(S + 1):
                x = np.float32(x0 + np.float32(np.float32(i) + np.float32(np.float32(e) * step)) * h)
                value = _terrain(height, snow_depth, hx0, hy0, spacing, x, y, block)
                t[r, e] = value
                low = min(low, value)
                high = max(high, value)
        for k in range(nz + 1):
            z = np.float32(z0 + np.float32(k) * h)
            if z > high:
                frac_w[k, j, i] = one
                continue
            if z <= low:
                frac_w[k, j, i] = zero
                continue
            total = zero
            for r in range(S):
                for s in range(S):
                    lo = min(t[r, s], t[r, s + 1])
                    hi = max(t[r, s], t[r, s + 1])
                    span = np.float32(hi - lo)
                    if span > zero:
                        part = min(max(np.float32(np.float32(z - lo) / span), zero), one)
                    else:
                        part = one if lo < z else zero
                    total = np.float32(total + part)
            frac_w[k, j, i] = _snap(np.float32(total * area))


@numba.njit(parallel=True, cache=True, nogil=True)
def _voxel_fractions(solid, frac_u, frac_v, frac_w):
    nz, ny, nx = solid.shape
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx + 1):
            shut = (i > 0 and solid[k, j, i - 1] != 0) or (i < nx and solid[k, j, i] != 0)
            frac_u[k, j, i] = np.float32(0.0) if shut else np.float32(1.0)
    for kj in prange(nz * (ny + 1)):
        k = kj // (ny + 1)
        j = kj % (ny + 1)
        for i in range(nx):
            shut = (j > 0 and solid[k, j - 1, i] != 0) or (j < ny and solid[k, j, i] != 0)
            frac_v[k, j, i] = np.float32(0.0) if shut else np.float32(1.0)
    for kj in prange((nz + 1) * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            shut = (k > 0 and solid[k - 1, j, i] != 0) or (k < nz and solid[k, j, i] != 0)
            frac_w[k, j, i] = np.float32(0.0) if shut else np.float32(1.0)


def voxel_fractions(solid, frac_u, frac_v, frac_w):
    """Open fractions of a solid mask: 1 where no solid cell touches a face, else 0."""
    _voxel_fractions(solid, frac_u, frac_v, frac_w)


@numba.njit(inline="always", cache=True)
def _departure(x, y, z, vx, vy, vz, h, dt, sx, sy, sz):
    inv = np.float32(1.0) / h
    gx = np.float32(np.float32(x - dt * vx) * inv)
    gy = np.float32(np.float32(y - dt * vy) * inv)
    gz = np.float32(np.float32(z - dt * vz) * inv)
    return np.float32(gx - sx), np.float32(gy - sy), np.float32(gz - sz)


# The face components as plain int64 values, not literals: a literal argument would compile
# _interior and the samplers once per component (three times the compile, the same code).
U_FACES, V_FACES, W_FACES = np.int64(0), np.int64(1), np.int64(2)


@numba.njit(inline="always", cache=True)
def _interior(field, adv, fraction, blocks, component, correct, x, y, z, vx, vy, vz, h, dt, sx,
              sy, sz, own, adv_own):
    """The semi-Lagrangian value at a face (correct False) or its MacCormack correction."""
    gx, gy, gz = _departure(x, y, z, vx, vy, vz, h, dt, sx, sy, sz)
    if not correct:
        return sample_open(field, fraction, blocks, component, gx, gy, gz, own)
    low, high = open_range(field, fraction, blocks, component, gx, gy, gz, own)
    bx, by, bz = _departure(x, y, z, vx, vy, vz, h, np.float32(-dt), sx, sy, sz)
    back = sample_open(adv, fraction, blocks, component, bx, by, bz, adv_own)
    value = np.float32(adv_own + np.float32(0.5) * np.float32(own - back))
    return min(max(value, low), high)


@numba.njit(inline="always", cache=True)
def _quarter(a, b, c, d):
    return np.float32(np.float32(0.25) * np.float32(np.float32(a + b) + np.float32(c + d)))


@njit_uncounted
def _advect_share(share_index, shares, u, v, w, fu, fv, fw, blocks, inflow_x, inflow_y,
                  inflow_sides, cell_size, dt, u_adv, v_adv, w_adv, correct, u_out, v_out,
                  w_out):
    nz, ny, nx = fw.shape[0] - 1, fw.shape[1], fw.shape[2]
    h = np.float32(cell_size)
    dt = np.float32(dt)
    vx = np.float32(inflow_x)
    vy = np.float32(inflow_y)
    x_minus = (inflow_sides & 1) != 0
    x_plus = (inflow_sides & 2) != 0
    y_minus = (inflow_sides & 4) != 0
    y_plus = (inflow_sides & 8) != 0
    # inflow sides also set their first column's tangential faces; closed pairs do not
    x_in_minus = x_minus and not x_plus
    x_in_plus = x_plus and not x_minus
    y_in_minus = y_minus and not y_plus
    y_in_plus = y_plus and not y_minus
    zero = np.float32(0.0)
    half = np.float32(0.5)
    begin, end = share(share_index, shares, nz * ny)
    for kj in range(begin, end):
        k = kj // ny
        j = kj % ny
        y = (np.float32(j) + half) * h
        z = (np.float32(k) + half) * h
        for i in range(nx + 1):
            if i == 0 and x_minus:
                val = vx
            elif i == nx and x_plus:
                val = vx
            elif (j == 0 and y_in_minus) or (j == ny - 1 and y_in_plus):
                val = vx
            else:
                src = 1 if i == 0 else (nx - 1 if i == nx else i)
                il = max(src - 1, 0)
                ir = min(src, nx - 1)
                fy = _quarter(v[k, j, il], v[k, j, ir], v[k, j + 1, il], v[k, j + 1, ir])
                fz = _quarter(w[k, j, il], w[k, j, ir], w[k + 1, j, il], w[k + 1, j, ir])
                val = _interior(u, u_adv, fu, blocks, U_FACES, correct, np.float32(src) * h, y, z,
                                u[k, j, src], fy, fz, h, dt, zero, half, half, u[k, j, src],
                                u_adv[k, j, src])
                if i == 0:      # an outflow side: no backflow
                    val = min(val, zero)
                elif i == nx:
                    val = max(val, zero)
            if not fu[k, j, i] > 0:     # a closed face (last rule: it wins)
                val = zero
            u_out[k, j, i] = val
    begin, end = share(share_index, shares, nz * (ny + 1))
    for kj in range(begin, end):
        k = kj // (ny + 1)
        j = kj % (ny + 1)
        z = (np.float32(k) + half) * h
        for i in range(nx):
            if j == 0 and y_minus:
                val = vy
            elif j == ny and y_plus:
                val = vy
            elif (i == 0 and x_in_minus) or (i == nx - 1 and x_in_plus):
                val = vy
            else:
                src = 1 if j == 0 else (ny - 1 if j == ny else j)
                jl = max(src - 1, 0)
                jr = min(src, ny - 1)
                fx = _quarter(u[k, jl, i], u[k, jl, i + 1], u[k, jr, i], u[k, jr, i + 1])
                fz = _quarter(w[k, jl, i], w[k, jr, i], w[k + 1, jl, i], w[k + 1, jr, i])
                x = (np.float32(i) + half) * h
                val = _interior(v, v_adv, fv, blocks, V_FACES, correct, x, np.float32(src) * h, z, fx,
                                v[k, src, i], fz, h, dt, half, zero, half, v[k, src, i],
                                v_adv[k, src, i])
                if j == 0:      # an outflow side: no backflow
                    val = min(val, zero)
                elif j == ny:
                    val = max(val, zero)
            if not fv[k, j, i] > 0:
                val = zero
            v_out[k, j, i] = val
    begin, end = share(share_index, shares, (nz + 1) * ny)
    for kj in range(begin, end):
        k = kj // ny
        j = kj % ny
        z = np.float32(k) * h
        y = (np.float32(j) + half) * h
        for i in range(nx):
            if k == 0 or k == nz:
                val = zero
            elif (i == 0 and x_in_minus) or (i == nx - 1 and x_in_plus) or \
                    (j == 0 and y_in_minus) or (j == ny - 1 and y_in_plus):
                val = zero
            elif not fw[k, j, i] > 0:
                val = zero
            else:
                kl = k - 1
                kr = k  # 0 < k < nz here: no clamping needed
                fx = _quarter(u[kl, j, i], u[kl, j, i + 1], u[kr, j, i], u[kr, j, i + 1])
                fy = _quarter(v[kl, j, i], v[kl, j + 1, i], v[kr, j, i], v[kr, j + 1, i])
                x = (np.float32(i) + half) * h
                val = _interior(w, w_adv, fw, blocks, W_FACES, correct, x, y, z, fx, fy, w[k, j, i], h,
                                dt, half, half, zero, w[k, j, i], w_adv[k, j, i])
            w_out[k, j, i] = val


@numba.njit(parallel=True, cache=True, nogil=True)
def _advect(*args):
    for share_index in prange(SHARES):
        _advect_share(np.int64(share_index), SHARES, *args)


@numba.njit(parallel=True, cache=True, nogil=True)
def _open_blocks(fu, fv, fw, out):
    nz, ny, nx = out.shape
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            bits = 0
            for component in range(3):
                f = fu if component == 0 else (fv if component == 1 else fw)
                fk, fj, fi = f.shape
                is_open = True
                for kk in range(k, min(k + 2, fk)):
                    for jj in range(j, min(j + 2, fj)):
                        for ii in range(i, min(i + 2, fi)):
                            if not sample_weight(f, kk, jj, ii) >= 1:
                                is_open = False
                if is_open:
                    bits |= 1 << component
            out[k, j, i] = bits


def open_blocks(fractions, out):
    """out[k, j, i] bit C (1 u, 2 v, 4 w): every face of component C in the 2 x 2 x 2
    block from face index (k, j, i) is open, A_f > 0 (see the reference)."""
    _open_blocks(*fractions, out)


def _blocks_of(fractions, blocks):
    if blocks is None:
        blocks = np.empty(fractions[2][:-1].shape, np.uint8)
        open_blocks(fractions, blocks)
    return blocks


def advect_velocity(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out, blocks=None):
    """Semi-Lagrangian self-advection over dt (s), sampling open faces only, plus the
    boundary conditions (inflow through the sides of the bit mask ``inflow_sides``, see
    the reference); ``fractions``: the faces' open fractions. ``blocks``:
    open_blocks(fractions) when the caller keeps it (computed here otherwise); the result
    does not depend on it."""
    _advect(u, v, w, *fractions, _blocks_of(fractions, blocks), inflow_x, inflow_y,
            int(inflow_sides), cell_size, dt, u, v, w, False, u_out, v_out, w_out)


def correct_advection(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                      u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
    """MacCormack correction of advect_velocity's result (u_adv, v_adv, w_adv); see the
    reference."""
    _advect(u, v, w, *fractions, _blocks_of(fractions, blocks), inflow_x, inflow_y,
            int(inflow_sides), cell_size, dt, u_adv, v_adv, w_adv, True, u_out, v_out, w_out)


def divergence(u, v, w, fractions, scale, out):
    """out = scale * net outflow A_f u_f of each cell's faces (see the reference)."""
    _divergence(u, v, w, *fractions, scale, out)


@numba.njit(parallel=True, cache=True, nogil=True)
def _divergence(u, v, w, fu, fv, fw, scale, out):
    nz, ny, nx = out.shape
    s = np.float32(scale)
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            x = np.float32(np.float32(fu[k, j, i + 1] * u[k, j, i + 1])
                           - np.float32(fu[k, j, i] * u[k, j, i]))
            y = np.float32(np.float32(fv[k, j + 1, i] * v[k, j + 1, i])
                           - np.float32(fv[k, j, i] * v[k, j, i]))
            z = np.float32(np.float32(fw[k + 1, j, i] * w[k + 1, j, i])
                           - np.float32(fw[k, j, i] * w[k, j, i]))
            out[k, j, i] = np.float32(s * np.float32(np.float32(x + y) + z))


@numba.njit(inline="always", cache=True)
def _p(p, k, j, i):
    nz, ny, nx = p.shape
    if k < 0 or k >= nz or j < 0 or j >= ny or i < 0 or i >= nx:
        return np.float32(0.0)
    return p[k, j, i]


@numba.njit(parallel=True, cache=True, nogil=True)
def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract scale * pressure difference across each face whose coefficient is not 0
    (the full gradient, also on a partly open face), in place."""
    nz, ny, nx = pressure.shape
    s = np.float32(scale)
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx + 1):
            c = np.float32(coef_x[k, j, i])
            if c != 0:
                u[k, j, i] = u[k, j, i] - s * (_p(pressure, k, j, i) - _p(pressure, k, j, i - 1))
    for kj in prange(nz * (ny + 1)):
        k = kj // (ny + 1)
        j = kj % (ny + 1)
        for i in range(nx):
            c = np.float32(coef_y[k, j, i])
            if c != 0:
                v[k, j, i] = v[k, j, i] - s * (_p(pressure, k, j, i) - _p(pressure, k, j - 1, i))
    for kj in prange((nz + 1) * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            c = np.float32(coef_z[k, j, i])
            if c != 0:
                w[k, j, i] = w[k, j, i] - s * (_p(pressure, k, j, i) - _p(pressure, k - 1, j, i))


# --- turbulent mixing (see the reference for the model) -----------------------------------
@numba.njit(inline="always", cache=True)
def _cross(qm, q, qp, ok_m, ok_p, inv_h, half_inv_h):
    if ok_m and ok_p:
        return np.float32(np.float32(qp - qm) * half_inv_h)
    if ok_p:
        return np.float32(np.float32(qp - q) * inv_h)
    if ok_m:
        return np.float32(np.float32(q - qm) * inv_h)
    return np.float32(0.0)


@numba.njit(inline="always", cache=True)
def _centre(u, v, w, k, j, i):
    half = np.float32(0.5)
    return (np.float32(half * np.float32(u[k, j, i] + u[k, j, i + 1])),
            np.float32(half * np.float32(v[k, j, i] + v[k, j + 1, i])),
            np.float32(half * np.float32(w[k, j, i] + w[k + 1, j, i])))


@numba.njit(inline="always", cache=True)
def _axis_gradient(u, v, w, solid, k, j, i, dk, dj, di, uc, vc, wc, inv_h, half_inv_h):
    """The centred (u, v, w)'s derivatives along the axis (dk, dj, di) at cell (k, j, i)."""
    nz, ny, nx = solid.shape
    zero = np.float32(0.0)
    km, jm, im = k - dk, j - dj, i - di
    kp, jp, ip = k + dk, j + dj, i + di
    ok_m = km >= 0 and jm >= 0 and im >= 0 and solid[km, jm, im] == 0
    ok_p = kp < nz and jp < ny and ip < nx and solid[kp, jp, ip] == 0
    um, vm, wm = _centre(u, v, w, km, jm, im) if ok_m else (zero, zero, zero)
    up, vp, wp = _centre(u, v, w, kp, jp, ip) if ok_p else (zero, zero, zero)
    return (_cross(um, uc, up, ok_m, ok_p, inv_h, half_inv_h),
            _cross(vm, vc, vp, ok_m, ok_p, inv_h, half_inv_h),
            _cross(wm, wc, wp, ok_m, ok_p, inv_h, half_inv_h))


@numba.njit(parallel=True, cache=True, nogil=True)
def _eddy_viscosity(u, v, w, solid, column_top, z0, h, mixing, mixing_height, limit, out):
    nz, ny, nx = solid.shape
    inv_h = np.float32(np.float32(1.0) / h)
    half_inv_h = np.float32(np.float32(0.5) * inv_h)
    zero = np.float32(0.0)
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        cz = np.float32(z0 + np.float32(np.float32(np.float32(k) + np.float32(0.5)) * h))
        for i in range(nx):
            if solid[k, j, i] != 0:
                out[k, j, i] = zero
                continue
            uc, vc, wc = _centre(u, v, w, k, j, i)
            # d/dz, d/dy, d/dx of the centred (u, v, w)
            uz, vz, wz = _axis_gradient(u, v, w, solid, k, j, i, 1, 0, 0, uc, vc, wc, inv_h,
                                        half_inv_h)
            uy, vy, wy = _axis_gradient(u, v, w, solid, k, j, i, 0, 1, 0, uc, vc, wc, inv_h,
                                        half_inv_h)
            ux, vx, wx = _axis_gradient(u, v, w, solid, k, j, i, 0, 0, 1, uc, vc, wc, inv_h,
                                        half_inv_h)
            dudx = np.float32(np.float32(u[k, j, i + 1] - u[k, j, i]) * inv_h)
            dvdy = np.float32(np.float32(v[k, j + 1, i] - v[k, j, i]) * inv_h)
            dwdz = np.float32(np.float32(w[k + 1, j, i] - w[k, j, i]) * inv_h)
            sxy = np.float32(uy + vx)
            sxz = np.float32(uz + wx)
            syz = np.float32(vz + wy)
            normal = np.float32(np.float32(dudx * dudx) + np.float32(dvdy * dvdy))
            normal = np.float32(normal + np.float32(dwdz * dwdz))
            s2 = np.float32(np.float32(np.float32(2.0) * normal) + np.float32(sxy * sxy))
            s2 = np.float32(s2 + np.float32(sxz * sxz))
            s2 = np.float32(s2 + np.float32(syz * syz))
            rate = np.float32(np.sqrt(s2))
            height = np.float32(cz - column_top[j, i])
            height = min(max(height, zero), mixing_height)
            length = np.float32(mixing * height)
            nu = np.float32(np.float32(length * length) * rate)
            out[k, j, i] = min(nu, limit)


def eddy_viscosity(u, v, w, solid, column_top, z0, cell_size, mixing, mixing_height, limit,
                   out):
    """out = the cells' eddy viscosity nu (m^2/s), l^2 |S| (see the reference)."""
    f = np.float32
    _eddy_viscosity(u, v, w, solid, column_top, f(z0), f(cell_size), f(mixing),
                    f(mixing_height), f(limit), out)


@numba.njit(inline="always", cache=True)
def _face_laplacian(c, fraction, k, j, i):
    """Sum over the six neighbour faces (x-, x+, y-, y+, z-, z+) that exist and are open
    of their difference to c[k, j, i]."""
    nk, nj, ni = c.shape
    centre = c[k, j, i]
    total = np.float32(0.0)
    if i > 0 and fraction[k, j, i - 1] > 0:
        total = np.float32(total + np.float32(c[k, j, i - 1] - centre))
    if i < ni - 1 and fraction[k, j, i + 1] > 0:
        total = np.float32(total + np.float32(c[k, j, i + 1] - centre))
    if j > 0 and fraction[k, j - 1, i] > 0:
        total = np.float32(total + np.float32(c[k, j - 1, i] - centre))
    if j < nj - 1 and fraction[k, j + 1, i] > 0:
        total = np.float32(total + np.float32(c[k, j + 1, i] - centre))
    if k > 0 and fraction[k - 1, j, i] > 0:
        total = np.float32(total + np.float32(c[k - 1, j, i] - centre))
    if k < nk - 1 and fraction[k + 1, j, i] > 0:
        total = np.float32(total + np.float32(c[k + 1, j, i] - centre))
    return total


@numba.njit(inline="always", cache=True)
def _diffused(c, fraction, nu_a, nu_b, scale, k, j, i):
    nu_face = np.float32(np.float32(0.5) * np.float32(nu_a + nu_b))
    step = np.float32(np.float32(scale * nu_face) * _face_laplacian(c, fraction, k, j, i))
    return np.float32(c[k, j, i] + step)


@numba.njit(parallel=True, cache=True, nogil=True)
def _diffuse_velocity(u, v, w, fu, fv, fw, nu, scale, u_out, v_out, w_out):
    nz, ny, nx = nu.shape
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx + 1):
            if 0 < i < nx and fu[k, j, i] > 0:
                u_out[k, j, i] = _diffused(u, fu, nu[k, j, i - 1], nu[k, j, i], scale, k, j, i)
            else:
                u_out[k, j, i] = u[k, j, i]
    for kj in prange(nz * (ny + 1)):
        k = kj // (ny + 1)
        j = kj % (ny + 1)
        for i in range(nx):
            if 0 < j < ny and fv[k, j, i] > 0:
                v_out[k, j, i] = _diffused(v, fv, nu[k, j - 1, i], nu[k, j, i], scale, k, j, i)
            else:
                v_out[k, j, i] = v[k, j, i]
    for kj in prange((nz + 1) * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            if 0 < k < nz and fw[k, j, i] > 0:
                w_out[k, j, i] = _diffused(w, fw, nu[k - 1, j, i], nu[k, j, i], scale, k, j, i)
            else:
                w_out[k, j, i] = w[k, j, i]


def diffuse_velocity(u, v, w, fractions, nu, scale, u_out, v_out, w_out):
    """One explicit step of the eddy viscosity's diffusion (see the reference)."""
    _diffuse_velocity(u, v, w, *fractions, nu, np.float32(scale), u_out, v_out, w_out)


@numba.njit(inline="always", cache=True)
def _cell_drag(solid, fence_bottom, fence_top, fence_resistance, z0, h, k, j, i):
    """The cell's porous-fence drag coefficient (see kernels.reference.wind)."""
    if solid[k, j, i] != 0:
        return np.float32(0.0)
    bottom = np.float32(z0 + np.float32(np.float32(k) * h))
    top = np.float32(z0 + np.float32(np.float32(k + 1) * h))
    low = max(fence_bottom[j, i], bottom)
    high = min(fence_top[j, i], top)
    cover = np.float32(np.float32(high - low) / h)
    cover = min(max(cover, np.float32(0.0)), np.float32(1.0))
    return np.float32(fence_resistance[j, i] * cover)


@numba.njit(inline="always", cache=True)
def _damped(value, drag_a, drag_b, dt):
    face = np.float32(np.float32(0.5) * np.float32(drag_a + drag_b))
    rate = np.float32(dt * face)
    factor = max(np.float32(np.float32(1.0) - np.float32(rate * abs(value))), np.float32(0.0))
    return np.float32(value * factor)


@numba.njit(parallel=True, cache=True, nogil=True)
def _porous_drag(u, v, w, solid, fence_bottom, fence_top, fence_resistance, z0, h, dt):
    nz, ny, nx = solid.shape
    along_x, along_y, along_z = fence_resistance[0], fence_resistance[1], fence_resistance[2]
    for kj in prange(nz * ny):
        k, j = kj // ny, kj % ny
        for i in range(1, nx):
            u[k, j, i] = _damped(u[k, j, i],
                                 _cell_drag(solid, fence_bottom, fence_top, along_x, z0, h, k, j, i - 1),
                                 _cell_drag(solid, fence_bottom, fence_top, along_x, z0, h, k, j, i), dt)
        if j > 0:
            for i in range(nx):
                v[k, j, i] = _damped(v[k, j, i],
                                     _cell_drag(solid, fence_bottom, fence_top, along_y, z0, h, k, j - 1, i),
                                     _cell_drag(solid, fence_bottom, fence_top, along_y, z0, h, k, j, i),
                                     dt)
        if k > 0:
            for i in range(nx):
                w[k, j, i] = _damped(w[k, j, i],
                                     _cell_drag(solid, fence_bottom, fence_top, along_z, z0, h, k - 1, j, i),
                                     _cell_drag(solid, fence_bottom, fence_top, along_z, z0, h, k, j, i),
                                     dt)


def porous_drag(u, v, w, solid, fence_bottom, fence_top, fence_resistance, z0, cell_size, dt):
    """The porous fences' drag over ``dt`` s, in place (see the reference)."""
    f = np.float32
    _porous_drag(u, v, w, solid, fence_bottom, fence_top, fence_resistance, f(z0), f(cell_size),
                 f(dt))
