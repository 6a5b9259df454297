"""Wind kernels, NumPy reference (the test oracle): obstacle mask, semi-Lagrangian
self-advection with the boundary conditions, divergence and projection on the MAC grid.

Shapes (see snow_addon/grid.py): cells ``(nz, ny, nx)``; faces ``u (nz, ny, nx+1)``,
``v (nz, ny+1, nx)``, ``w (nz+1, ny, nx)``; all float32, velocities in m/s. Positions
inside these kernels are grid-local (metres from the grid's min corner).

Boundary rule per face (the same in every backend), for inflow ``(vx, vy)`` m/s through
the sides of ``inflow_sides`` (a bit mask of INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS
and INFLOW_Y_PLUS; the solver picks them from the wind before gusts with
``inflow_sides_of``, so that gusts do not switch a side between inflow and outflow):

* an inflow side's normal faces take the inflow component (of either sign), and the
  faces of the first cell column inside it take the inflow's tangential component
  (w = 0);
* any other side is an outflow side: its normal faces copy the advected value of the
  next interior face (zero gradient);
* w = 0 on the bottom and top faces (ground and free-slip lid);
* every face touching a solid cell is 0 (applied last, it wins).
"""
import numpy as np

from .sampling import sample_bilinear, sample_trilinear

F32 = np.float32
HALF = F32(0.5)

#: Bits of ``inflow_sides``: the domain sides whose faces take the inflow wind.
INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS, INFLOW_Y_PLUS = 1, 2, 4, 8


def inflow_sides_of(vx, vy) -> int:
    """The sides a wind (vx, vy) m/s blows in through: x- when vx > 0, x+ when vx < 0, y-
    when vy > 0, y+ when vy < 0 (float32 comparisons, as the kernels see the values)."""
    vx, vy = F32(vx), F32(vy)
    return ((INFLOW_X_MINUS if vx > 0 else 0) | (INFLOW_X_PLUS if vx < 0 else 0)
            | (INFLOW_Y_MINUS if vy > 0 else 0) | (INFLOW_Y_PLUS if vy < 0 else 0))


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid):
    """solid[k, j, i] = 1 where the cell centre lies below the bilinear height + snow depth
    (heightmap arrays (ny_h, nx_h) float32 m, origin (hx0, hy0), node spacing m) sampled at
    the centre's XY; wind grid min corner (x0, y0, z0) m, cubic cells of ``cell_size`` m."""
    nz, ny, nx = solid.shape
    h = F32(cell_size)
    j, i = np.meshgrid(np.arange(ny, dtype=F32), np.arange(nx, dtype=F32), indexing="ij")
    cx = F32(x0) + (i + HALF) * h
    cy = F32(y0) + (j + HALF) * h
    ground = (sample_bilinear(height, hx0, hy0, spacing, cx, cy)
              + sample_bilinear(snow_depth, hx0, hy0, spacing, cx, cy)).astype(F32)
    cz = F32(z0) + (np.arange(nz, dtype=F32) + HALF) * h
    solid[...] = (cz[:, None, None] < ground[None, :, :]).astype(np.uint8)


def _advected(field, x, y, z, vx, vy, vz, h, dt, sx, sy, sz):
    """Back-trace from (x, y, z) with velocity (vx, vy, vz) and sample ``field`` (whose
    samples sit at grid offsets (sx, sy, sz) cells) trilinearly at the departure point."""
    inv = F32(1.0) / h
    gx = ((x - dt * vx) * inv).astype(F32)
    gy = ((y - dt * vy) * inv).astype(F32)
    gz = ((z - dt * vz) * inv).astype(F32)
    return sample_trilinear(field, gx - sx, gy - sy, gz - sz)


def _quarter(a, b, c, d):
    return (F32(0.25) * ((a + b) + (c + d))).astype(F32)


def face_velocity_u(u, v, w):
    """Full velocity (vx, vy, vz) at the u faces: u itself, and the trilinear (= 4-face
    average) v and w there, clamped at the domain like sample_trilinear."""
    nx = u.shape[2] - 1
    i = np.arange(nx + 1)
    il, ir = np.clip(i - 1, 0, nx - 1), np.clip(i, 0, nx - 1)
    vy = _quarter(v[:, :-1, il], v[:, :-1, ir], v[:, 1:, il], v[:, 1:, ir])
    vz = _quarter(w[:-1][:, :, il], w[:-1][:, :, ir], w[1:][:, :, il], w[1:][:, :, ir])
    return u, vy, vz


def face_velocity_v(u, v, w):
    """Full velocity at the v faces (see face_velocity_u)."""
    ny = v.shape[1] - 1
    j = np.arange(ny + 1)
    jl, jr = np.clip(j - 1, 0, ny - 1), np.clip(j, 0, ny - 1)
    vx = _quarter(u[:, jl, :-1], u[:, jl, 1:], u[:, jr, :-1], u[:, jr, 1:])
    vz = _quarter(w[:-1][:, jl, :], w[:-1][:, jr, :], w[1:][:, jl, :], w[1:][:, jr, :])
    return vx, v, vz


def face_velocity_w(u, v, w):
    """Full velocity at the w faces (see face_velocity_u)."""
    nz = w.shape[0] - 1
    k = np.arange(nz + 1)
    kl, kr = np.clip(k - 1, 0, nz - 1), np.clip(k, 0, nz - 1)
    vx = _quarter(u[kl, :, :-1], u[kl, :, 1:], u[kr, :, :-1], u[kr, :, 1:])
    vy = _quarter(v[kl, :-1, :], v[kl, 1:, :], v[kr, :-1, :], v[kr, 1:, :])
    return vx, vy, w


def _positions(shape, ox, oy, oz, h):
    k, j, i = np.meshgrid(*(np.arange(n, dtype=F32) for n in shape), indexing="ij")
    return (i + ox) * h, (j + oy) * h, (k + oz) * h


def advect_velocity(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out):
    """Semi-Lagrangian self-advection of each face component over ``dt`` seconds (back-trace
    with the full velocity at the face: the component itself and the trilinear (4-face
    average) other two; trilinear sampling clamped at the domain), then the
    boundary conditions for inflow (inflow_x, inflow_y) m/s through ``inflow_sides`` (bit
    mask). Writes u_out, v_out, w_out."""
    nz, ny, nx = solid.shape
    h, dt = F32(cell_size), F32(dt)
    vx, vy = F32(inflow_x), F32(inflow_y)
    sides = int(inflow_sides)
    x_minus, x_plus = bool(sides & INFLOW_X_MINUS), bool(sides & INFLOW_X_PLUS)
    y_minus, y_plus = bool(sides & INFLOW_Y_MINUS), bool(sides & INFLOW_Y_PLUS)
    zero = F32(0.0)
    solid = solid.astype(bool)

    # u faces
    x, y, z = _positions(u.shape, F32(0.0), HALF, HALF, h)
    adv = _advected(u, x, y, z, *face_velocity_u(u, v, w), h, dt, zero, HALF, HALF)
    out = adv.copy()
    if x_minus:
        out[:, :, 0] = vx
    else:
        out[:, :, 0] = adv[:, :, 1]
    if x_plus:
        out[:, :, nx] = vx
    else:
        out[:, :, nx] = adv[:, :, nx - 1]
    if y_minus:
        out[:, 0, :] = vx
    if y_plus:
        out[:, ny - 1, :] = vx
    out[:, :, :nx][solid] = zero
    out[:, :, 1:][solid] = zero
    u_out[...] = out

    # v faces
    x, y, z = _positions(v.shape, HALF, F32(0.0), HALF, h)
    adv = _advected(v, x, y, z, *face_velocity_v(u, v, w), h, dt, HALF, zero, HALF)
    out = adv.copy()
    if y_minus:
        out[:, 0, :] = vy
    else:
        out[:, 0, :] = adv[:, 1, :]
    if y_plus:
        out[:, ny, :] = vy
    else:
        out[:, ny, :] = adv[:, ny - 1, :]
    if x_minus:
        out[:, :, 0] = vy
    if x_plus:
        out[:, :, nx - 1] = vy
    out[:, :ny, :][solid] = zero
    out[:, 1:, :][solid] = zero
    v_out[...] = out

    # w faces
    x, y, z = _positions(w.shape, HALF, HALF, F32(0.0), h)
    out = _advected(w, x, y, z, *face_velocity_w(u, v, w), h, dt, HALF, HALF, zero)
    if x_minus:
        out[:, :, 0] = zero
    if x_plus:
        out[:, :, nx - 1] = zero
    if y_minus:
        out[:, 0, :] = zero
    if y_plus:
        out[:, ny - 1, :] = zero
    out[0] = zero
    out[nz] = zero
    out[:nz][solid] = zero
    out[1:][solid] = zero
    w_out[...] = out


def divergence(u, v, w, solid, scale, out):
    """out = scale * (sum of outgoing minus incoming face velocities) per fluid cell, 0 in
    solid cells. scale = 1/h gives the divergence in 1/s."""
    flux = ((u[:, :, 1:] - u[:, :, :-1]) + (v[:, 1:, :] - v[:, :-1, :])
            + (w[1:, :, :] - w[:-1, :, :])).astype(F32)
    out[...] = np.where(solid != 0, F32(0.0), F32(scale) * flux).astype(F32)


def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract ``scale`` * coefficient * pressure difference across each face, in place
    (scale = dt/h for kinematic pressure in m^2/s^2). Outside the domain the pressure is
    0 (the Dirichlet outflow ghost); faces with coefficient 0 keep their velocity.
    Coefficients float32, or uint8 (0/1) as the solver stores the finest level."""
    s = F32(scale)
    coef_x, coef_y, coef_z = (np.asarray(c, dtype=F32) for c in (coef_x, coef_y, coef_z))
    p = np.pad(pressure, 1)  # zero ghost layer
    u -= (s * coef_x * (p[1:-1, 1:-1, 1:] - p[1:-1, 1:-1, :-1])).astype(F32)
    v -= (s * coef_y * (p[1:-1, 1:, 1:-1] - p[1:-1, :-1, 1:-1])).astype(F32)
    w -= (s * coef_z * (p[1:, 1:-1, 1:-1] - p[:-1, 1:-1, 1:-1])).astype(F32)
