"""Wind kernels, Numba build (same names, signatures and rules as kernels.reference.wind)."""
import numba
import numpy as np
from numba import prange

from .sampling import open_range, sample_bilinear, sample_open

F32 = np.float32


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                         column_top=None):
    """solid[k, j, i] = 1 where the cell centre lies below bilinear height + snow depth, or
    below a thin obstacle's ``column_top`` (see the reference)."""
    use_top = column_top is not None
    _solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                          use_top, column_top if use_top else height)


@numba.njit(parallel=True, cache=True)
def _solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                          use_top, column_top):
    nz, ny, nx = solid.shape
    h = np.float32(cell_size)
    half = np.float32(0.5)
    centre = np.empty((ny, nx), np.float32)
    for j in prange(ny):
        for i in range(nx):
            cx = np.float32(x0) + (np.float32(i) + half) * h
            cy = np.float32(y0) + (np.float32(j) + half) * h
            centre[j, i] = np.float32(sample_bilinear(height, hx0, hy0, spacing, cx, cy)
                                      + sample_bilinear(snow_depth, hx0, hy0, spacing, cx, cy))
    limit = np.float32(half * h)
    for j in prange(ny):
        for i in range(nx):
            ground = centre[j, i]
            if use_top:
                top = column_top[j, i]
                thin = np.float32(top - ground) > limit
                thin = thin and np.float32(top - centre[j, max(i - 1, 0)]) > limit
                thin = thin and np.float32(top - centre[j, min(i + 1, nx - 1)]) > limit
                thin = thin and np.float32(top - centre[max(j - 1, 0), i]) > limit
                thin = thin and np.float32(top - centre[min(j + 1, ny - 1), i]) > limit
                if thin:
                    ground = top
            for k in range(nz):
                cz = np.float32(z0) + (np.float32(k) + half) * h
                solid[k, j, i] = 1 if cz < ground else 0


@numba.njit(inline="always", cache=True)
def _departure(x, y, z, vx, vy, vz, h, dt, sx, sy, sz):
    inv = np.float32(1.0) / h
    gx = np.float32(np.float32(x - dt * vx) * inv)
    gy = np.float32(np.float32(y - dt * vy) * inv)
    gz = np.float32(np.float32(z - dt * vz) * inv)
    return np.float32(gx - sx), np.float32(gy - sy), np.float32(gz - sz)


@numba.njit(cache=True)
def _interior(field, adv, solid, blocks, component, correct, x, y, z, vx, vy, vz, h, dt, sx, sy, sz,
              own, adv_own):
    """The semi-Lagrangian value at a face (correct False) or its MacCormack correction."""
    gx, gy, gz = _departure(x, y, z, vx, vy, vz, h, dt, sx, sy, sz)
    if not correct:
        return sample_open(field, solid, blocks, component, gx, gy, gz, own)
    low, high = open_range(field, solid, blocks, component, gx, gy, gz, own)
    bx, by, bz = _departure(x, y, z, vx, vy, vz, h, np.float32(-dt), sx, sy, sz)
    back = sample_open(adv, solid, blocks, component, bx, by, bz, adv_own)
    value = np.float32(adv_own + np.float32(0.5) * np.float32(own - back))
    return min(max(value, low), high)


@numba.njit(inline="always", cache=True)
def _quarter(a, b, c, d):
    return np.float32(np.float32(0.25) * np.float32(np.float32(a + b) + np.float32(c + d)))


@numba.njit(parallel=True, cache=True)
def _advect(u, v, w, solid, blocks, inflow_x, inflow_y, inflow_sides, cell_size, dt, u_adv, v_adv,
            w_adv, correct, u_out, v_out, w_out):
    nz, ny, nx = solid.shape
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
    for kj in prange(nz * ny):
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
                val = _interior(u, u_adv, solid, blocks, 0, correct, np.float32(src) * h, y, z,
                                u[k, j, src], fy, fz, h, dt, zero, half, half, u[k, j, src],
                                u_adv[k, j, src])
                if i == 0:      # an outflow side: no backflow
                    val = min(val, zero)
                elif i == nx:
                    val = max(val, zero)
            if (i > 0 and solid[k, j, i - 1] != 0) or (i < nx and solid[k, j, i] != 0):
                val = zero
            u_out[k, j, i] = val
    for kj in prange(nz * (ny + 1)):
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
                val = _interior(v, v_adv, solid, blocks, 1, correct, x, np.float32(src) * h, z, fx,
                                v[k, src, i], fz, h, dt, half, zero, half, v[k, src, i],
                                v_adv[k, src, i])
                if j == 0:      # an outflow side: no backflow
                    val = min(val, zero)
                elif j == ny:
                    val = max(val, zero)
            if (j > 0 and solid[k, j - 1, i] != 0) or (j < ny and solid[k, j, i] != 0):
                val = zero
            v_out[k, j, i] = val
    for kj in prange((nz + 1) * ny):
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
            elif solid[k - 1, j, i] != 0 or solid[k, j, i] != 0:
                val = zero
            else:
                kl = k - 1
                kr = k  # 0 < k < nz here: no clamping needed
                fx = _quarter(u[kl, j, i], u[kl, j, i + 1], u[kr, j, i], u[kr, j, i + 1])
                fy = _quarter(v[kl, j, i], v[kl, j + 1, i], v[kr, j, i], v[kr, j + 1, i])
                x = (np.float32(i) + half) * h
                val = _interior(w, w_adv, solid, blocks, 2, correct, x, y, z, fx, fy, w[k, j, i], h,
                                dt, half, half, zero, w[k, j, i], w_adv[k, j, i])
            w_out[k, j, i] = val


@numba.njit(parallel=True, cache=True)
def open_blocks(solid, out):
    """out[k, j, i] bit C (1 u, 2 v, 4 w): every face of component C in the 2 x 2 x 2
    block from face index (k, j, i) is open (see the reference): no solid cell among
    u: cells k..k+1, j..j+1, i-1..i+1; v: k..k+1, j-1..j+1, i..i+1; w: k-1..k+1, j..j+1,
    i..i+1 (cells outside the grid count as fluid)."""
    nz, ny, nx = solid.shape
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            u_open = True
            v_open = True
            w_open = True
            for dk in range(-1, 2):
                kk = k + dk
                if kk < 0 or kk >= nz:
                    continue
                for dj in range(-1, 2):
                    jj = j + dj
                    if jj < 0 or jj >= ny:
                        continue
                    for di in range(-1, 2):
                        ii = i + di
                        if ii < 0 or ii >= nx or solid[kk, jj, ii] == 0:
                            continue
                        if dk >= 0 and dj >= 0:
                            u_open = False
                        if dk >= 0 and di >= 0:
                            v_open = False
                        if dj >= 0 and di >= 0:
                            w_open = False
            out[k, j, i] = (1 if u_open else 0) | (2 if v_open else 0) | (4 if w_open else 0)


def _blocks_of(solid, blocks):
    if blocks is None:
        blocks = np.empty(solid.shape, np.uint8)
        open_blocks(solid, blocks)
    return blocks


def advect_velocity(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out, blocks=None):
    """Semi-Lagrangian self-advection over dt (s), sampling open faces only, plus the
    boundary conditions (inflow through the sides of the bit mask ``inflow_sides``, see
    the reference). ``blocks``: open_blocks(solid) when the caller keeps it (computed here
    otherwise); the result does not depend on it."""
    _advect(u, v, w, solid, _blocks_of(solid, blocks), inflow_x, inflow_y, int(inflow_sides),
            cell_size, dt, u, v, w, False, u_out, v_out, w_out)


def correct_advection(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                      u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
    """MacCormack correction of advect_velocity's result (u_adv, v_adv, w_adv); see the
    reference."""
    _advect(u, v, w, solid, _blocks_of(solid, blocks), inflow_x, inflow_y, int(inflow_sides),
            cell_size, dt, u_adv, v_adv, w_adv, True, u_out, v_out, w_out)


@numba.njit(parallel=True, cache=True)
def divergence(u, v, w, solid, scale, out):
    """out = scale * net outflow of face velocities per fluid cell, 0 in solid cells."""
    nz, ny, nx = solid.shape
    s = np.float32(scale)
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            if solid[k, j, i] != 0:
                out[k, j, i] = 0.0
            else:
                flux = np.float32(np.float32(np.float32(u[k, j, i + 1] - u[k, j, i])
                                             + np.float32(v[k, j + 1, i] - v[k, j, i]))
                                  + np.float32(w[k + 1, j, i] - w[k, j, i]))
                out[k, j, i] = s * flux


@numba.njit(inline="always", cache=True)
def _p(p, k, j, i):
    nz, ny, nx = p.shape
    if k < 0 or k >= nz or j < 0 or j >= ny or i < 0 or i >= nx:
        return np.float32(0.0)
    return p[k, j, i]


@numba.njit(parallel=True, cache=True)
def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract scale * coefficient * pressure difference across each face, in place."""
    nz, ny, nx = pressure.shape
    s = np.float32(scale)
    for kj in prange(nz * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx + 1):
            c = np.float32(coef_x[k, j, i])
            if c != 0:
                u[k, j, i] = u[k, j, i] - (s * c) * (_p(pressure, k, j, i) - _p(pressure, k, j, i - 1))
    for kj in prange(nz * (ny + 1)):
        k = kj // (ny + 1)
        j = kj % (ny + 1)
        for i in range(nx):
            c = np.float32(coef_y[k, j, i])
            if c != 0:
                v[k, j, i] = v[k, j, i] - (s * c) * (_p(pressure, k, j, i) - _p(pressure, k, j - 1, i))
    for kj in prange((nz + 1) * ny):
        k = kj // ny
        j = kj % ny
        for i in range(nx):
            c = np.float32(coef_z[k, j, i])
            if c != 0:
                w[k, j, i] = w[k, j, i] - (s * c) * (_p(pressure, k, j, i) - _p(pressure, k - 1, j, i))
