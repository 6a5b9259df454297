"""Wind kernels, NumPy reference (the test oracle): obstacle mask, semi-Lagrangian
self-advection with the boundary conditions, divergence and projection on the MAC grid.

Shapes (see snow_addon/grid.py): cells ``(nz, ny, nx)``; faces ``u (nz, ny, nx+1)``,
``v (nz, ny+1, nx)``, ``w (nz+1, ny, nx)``; all float32, velocities in m/s. Positions
inside these kernels are grid-local (metres from the grid's min corner).

Boundary rule per face (the same in every backend), for inflow ``(vx, vy)`` m/s through
the sides of ``inflow_sides`` (a bit mask of INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS
and INFLOW_Y_PLUS; the solver picks them from the wind before gusts with
``inflow_sides_of``, so that gusts do not switch a side between inflow and outflow):

* a side whose bit is set has its normal faces prescribed: they take the inflow
  component (of either sign) and the pressure there is Neumann;
* an inflow side (its bit set, the opposite side's bit clear) also gives the faces of the
  first cell column inside it the inflow's tangential component (w = 0);
* a closed side (both bits of an axis set: the wind before gusts runs parallel to it) is a
  free-slip wall: normal faces prescribed as above, tangential faces advected as usual;
* any other side is an outflow side: its normal faces copy the advected value of the
  next interior face (zero gradient);
* w = 0 on the bottom and top faces (ground and free-slip lid);
* every face touching a solid cell is 0 (applied last, it wins).

Free slip at obstacles: the back-trace samples only *open* faces, those with at least one
fluid cell beside them (``face_open``): the zeros stored on faces buried inside solids
would otherwise act as a no-slip wall that diffuses into the flow every step. Where some
of the eight samples are buried, the open ones are renormalised; where all are, the face
keeps its own value. Faces on a wall (one fluid neighbour) stay in: their 0 is the wall's
true normal velocity.
"""
import numpy as np

from .sampling import open_range, sample_bilinear, sample_open

F32 = np.float32
HALF = F32(0.5)

#: Bits of ``inflow_sides``: the domain sides whose faces take the inflow wind.
INFLOW_X_MINUS, INFLOW_X_PLUS, INFLOW_Y_MINUS, INFLOW_Y_PLUS = 1, 2, 4, 8


def inflow_sides_of(vx, vy, walls: bool = False) -> int:
    """The prescribed sides of a wind (vx, vy) m/s: x- when vx > 0, x+ when vx < 0, y- when
    vy > 0, y+ when vy < 0 (float32 comparisons, as the kernels see the values). With
    ``walls``, also both sides of an axis the wind runs parallel to (vx == 0: both x
    sides), a closed free-slip pair, unless there is no wind at all: otherwise those sides
    are outflow sides at p = 0, which draw the raised pressure in front of an obstacle that
    spans the domain out sideways."""
    vx, vy = F32(vx), F32(vy)
    closed = walls and not (vx == 0 and vy == 0)
    x_sides = INFLOW_X_MINUS | INFLOW_X_PLUS if closed and vx == 0 else 0
    y_sides = INFLOW_Y_MINUS | INFLOW_Y_PLUS if closed and vy == 0 else 0
    return ((INFLOW_X_MINUS if vx > 0 else 0) | (INFLOW_X_PLUS if vx < 0 else 0)
            | (INFLOW_Y_MINUS if vy > 0 else 0) | (INFLOW_Y_PLUS if vy < 0 else 0)
            | x_sides | y_sides)


def side_flags(inflow_sides):
    """(x_minus, x_plus, y_minus, y_plus, x_in_minus, x_in_plus, y_in_minus, y_in_plus):
    which sides are prescribed, and which of them are inflow sides that also set the
    tangential faces of their first column (a prescribed side whose opposite is not)."""
    sides = int(inflow_sides)
    xm, xp = bool(sides & INFLOW_X_MINUS), bool(sides & INFLOW_X_PLUS)
    ym, yp = bool(sides & INFLOW_Y_MINUS), bool(sides & INFLOW_Y_PLUS)
    return xm, xp, ym, yp, xm and not xp, xp and not xm, ym and not yp, yp and not ym


def face_open(solid):
    """(u_open, v_open, w_open) float32 0/1 arrays of the face shapes: 1 where no solid cell
    touches a face (a face on the domain's side has one cell beside it)."""
    fluid = solid == 0
    nz, ny, nx = solid.shape
    u_open = np.ones((nz, ny, nx + 1), bool)
    u_open[:, :, :-1] &= fluid
    u_open[:, :, 1:] &= fluid
    v_open = np.ones((nz, ny + 1, nx), bool)
    v_open[:, :-1, :] &= fluid
    v_open[:, 1:, :] &= fluid
    w_open = np.ones((nz + 1, ny, nx), bool)
    w_open[:-1] &= fluid
    w_open[1:] &= fluid
    return tuple(a.astype(F32) for a in (u_open, v_open, w_open))


def open_blocks(solid, out):
    """out[k, j, i] (uint8, the cell shape): bit C (1 u, 2 v, 4 w) set when every face of
    component C in the 2 x 2 x 2 block whose lowest face index is (k, j, i) is open (faces
    past the end of the face array left out). A trilinear sample whose lower corner is
    (k, j, i) then has all eight corners open, and ``sample_open`` is exactly the plain
    trilinear value: the CPU and GPU builds take that path without reading the mask there
    (computed once per obstacle refresh). The reference's own advection does not need it."""
    nz, ny, nx = solid.shape
    result = np.zeros((nz, ny, nx), np.uint8)
    for bit, is_open in zip((1, 2, 4), face_open(solid)):
        # pad the far ends with open faces, then AND the eight shifted copies
        padded = np.ones(tuple(n + 1 for n in is_open.shape), bool)
        padded[:is_open.shape[0], :is_open.shape[1], :is_open.shape[2]] = is_open > 0
        block = np.ones((nz, ny, nx), bool)
        for a in (0, 1):
            for b in (0, 1):
                for c in (0, 1):
                    block &= padded[a:a + nz, b:b + ny, c:c + nx]
        result |= np.where(block, np.uint8(bit), np.uint8(0))
    out[...] = result


def solid_from_heightmap(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, solid,
                         column_top=None):
    """solid[k, j, i] = 1 where the cell centre lies below the bilinear height + snow depth
    (heightmap arrays (ny_h, nx_h) float32 m, origin (hx0, hy0), node spacing m) sampled at
    the centre's XY; wind grid min corner (x0, y0, z0) m, cubic cells of ``cell_size`` m.
    ``column_top`` (ny, nx) float32 m, the highest surface inside each column
    (kernels.reference.drift.column_surface): where it stands more than half a cell above
    the height at this column's centre and at its four neighbours' centres (clamped at the
    grid's edge), a thin obstacle (a fence, a post) no centre sees, the column is solid up
    to it instead. An obstacle a neighbour's centre sees keeps its cells as they are."""
    nz, ny, nx = solid.shape
    h = F32(cell_size)
    j, i = np.meshgrid(np.arange(ny, dtype=F32), np.arange(nx, dtype=F32), indexing="ij")
    cx = F32(x0) + (i + HALF) * h
    cy = F32(y0) + (j + HALF) * h
    ground = (sample_bilinear(height, hx0, hy0, spacing, cx, cy)
              + sample_bilinear(snow_depth, hx0, hy0, spacing, cx, cy)).astype(F32)
    if column_top is not None:
        padded = np.pad(ground, 1, mode="edge")
        thin = np.ones(ground.shape, bool)
        for dj, di in ((1, 1), (0, 1), (2, 1), (1, 0), (1, 2)):
            near = padded[dj:dj + ny, di:di + nx]
            thin &= (column_top - near).astype(F32) > F32(HALF * h)
        ground = np.where(thin, column_top, ground).astype(F32)
    cz = F32(z0) + (np.arange(nz, dtype=F32) + HALF) * h
    solid[...] = (cz[:, None, None] < ground[None, :, :]).astype(np.uint8)


def _departure(x, y, z, vx, vy, vz, h, dt, sx, sy, sz):
    """Fractional indices (into a field whose samples sit at grid offsets (sx, sy, sz)
    cells) of the point a back-trace over ``dt`` s with velocity (vx, vy, vz) starts from;
    -dt traces forward."""
    inv = F32(1.0) / h
    gx = ((x - dt * vx) * inv).astype(F32)
    gy = ((y - dt * vy) * inv).astype(F32)
    gz = ((z - dt * vz) * inv).astype(F32)
    return (gx - sx).astype(F32), (gy - sy).astype(F32), (gz - sz).astype(F32)


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


def _sources(u, v, w, h):
    """Per component: (field, index of the face each face samples from (a side face samples
    from the next interior face), its position (x, y, z) m, its velocity (vx, vy, vz), the
    sample offsets (sx, sy, sz) cells)."""
    nz, ny, nx = w.shape[0] - 1, u.shape[1], u.shape[2] - 1
    zero = F32(0.0)
    si = np.clip(np.arange(nx + 1), 1, nx - 1)
    sj = np.clip(np.arange(ny + 1), 1, ny - 1)
    x, y, z = _positions(u.shape, zero, HALF, HALF, h)
    u_src = (np.s_[:, :, si], (x[:, :, si], y, z), face_velocity_u(u, v, w), (zero, HALF, HALF))
    x, y, z = _positions(v.shape, HALF, zero, HALF, h)
    v_src = (np.s_[:, sj, :], (x, y[:, sj, :], z), face_velocity_v(u, v, w), (HALF, zero, HALF))
    x, y, z = _positions(w.shape, HALF, HALF, zero, h)
    w_src = (np.s_[:, :, :], (x, y, z), face_velocity_w(u, v, w), (HALF, HALF, zero))
    return ((u,) + u_src, (v,) + v_src, (w,) + w_src)


def _semi_lagrangian(field, is_open, src, position, velocity, offsets, h, dt):
    """Each face's field value at its departure point, over open faces (its own value
    where none is open)."""
    velocity = tuple(c[src] for c in velocity)
    return sample_open(field, is_open, *_departure(*position, *velocity, h, dt, *offsets),
                       field[src])


def _maccormack(field, advected, is_open, src, position, velocity, offsets, h, dt):
    """MacCormack correction of the semi-Lagrangian values ``advected``: trace them forward
    (back to the faces they came from), add half the difference to ``field`` there, and
    clamp to the open samples the back-trace interpolated (so no new extremum appears)."""
    velocity = tuple(c[src] for c in velocity)
    low, high = open_range(field, is_open, *_departure(*position, *velocity, h, dt, *offsets),
                           field[src])
    back = sample_open(advected, is_open, *_departure(*position, *velocity, h, -dt, *offsets),
                       advected[src])
    value = (advected[src] + HALF * (field[src] - back)).astype(F32)
    return np.minimum(np.maximum(value, low), high).astype(F32)


def _advect(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt, advected,
            u_out, v_out, w_out):
    """advect_velocity (``advected`` None) or correct_advection (``advected`` = the
    semi-Lagrangian (u, v, w)): interior values, then the boundary rules."""
    nz, ny, nx = solid.shape
    h, dt = F32(cell_size), F32(dt)
    vx, vy = F32(inflow_x), F32(inflow_y)
    x_minus, x_plus, y_minus, y_plus, x_in_minus, x_in_plus, y_in_minus, y_in_plus = \
        side_flags(inflow_sides)
    zero = F32(0.0)
    opens = face_open(solid)
    values = []
    for index, (field, src, position, velocity, offsets) in enumerate(_sources(u, v, w, h)):
        if advected is None:
            values.append(_semi_lagrangian(field, opens[index], src, position, velocity,
                                           offsets, h, dt))
        else:
            values.append(_maccormack(field, advected[index], opens[index], src, position,
                                      velocity, offsets, h, dt))
    solid = solid.astype(bool)
    out = values[0]
    # no backflow through an outflow side (zero gradient would let it feed itself)
    if not x_minus:
        out[:, :, 0] = np.minimum(out[:, :, 0], zero)
    if not x_plus:
        out[:, :, nx] = np.maximum(out[:, :, nx], zero)
    if x_minus:
        out[:, :, 0] = vx
    if x_plus:
        out[:, :, nx] = vx
    if y_in_minus:
        out[:, 0, 1 if x_minus else 0:nx if x_plus else nx + 1] = vx
    if y_in_plus:
        out[:, ny - 1, 1 if x_minus else 0:nx if x_plus else nx + 1] = vx
    out[:, :, :nx][solid] = zero
    out[:, :, 1:][solid] = zero
    u_out[...] = out

    out = values[1]
    if not y_minus:
        out[:, 0, :] = np.minimum(out[:, 0, :], zero)
    if not y_plus:
        out[:, ny, :] = np.maximum(out[:, ny, :], zero)
    if y_minus:
        out[:, 0, :] = vy
    if y_plus:
        out[:, ny, :] = vy
    if x_in_minus:
        out[:, 1 if y_minus else 0:ny if y_plus else ny + 1, 0] = vy
    if x_in_plus:
        out[:, 1 if y_minus else 0:ny if y_plus else ny + 1, nx - 1] = vy
    out[:, :ny, :][solid] = zero
    out[:, 1:, :][solid] = zero
    v_out[...] = out

    out = values[2]
    if x_in_minus:
        out[:, :, 0] = zero
    if x_in_plus:
        out[:, :, nx - 1] = zero
    if y_in_minus:
        out[:, 0, :] = zero
    if y_in_plus:
        out[:, ny - 1, :] = zero
    out[0] = zero
    out[nz] = zero
    out[:nz][solid] = zero
    out[1:][solid] = zero
    w_out[...] = out


def advect_velocity(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out, blocks=None):
    """Semi-Lagrangian self-advection of each face component over ``dt`` seconds (back-trace
    with the full velocity at the face: the component itself and the trilinear (4-face
    average) other two; trilinear sampling over open faces, clamped at the domain), then
    the boundary conditions for inflow (inflow_x, inflow_y) m/s through ``inflow_sides``
    (bit mask; see the module's rules). Writes u_out, v_out, w_out. ``blocks``
    (open_blocks of ``solid``) lets the CPU and GPU builds skip the mask where a sample's
    corners are all open; the result does not depend on it, and the reference ignores it."""
    _advect(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt, None,
            u_out, v_out, w_out)


def correct_advection(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                      u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
    """MacCormack step after ``advect_velocity`` (Selle et al. 2008): (u_adv, v_adv, w_adv)
    are its semi-Lagrangian result from (u, v, w); each face gets
    clamp(adv + (field - forward(adv)) / 2) over the samples its back-trace used, then the
    same boundary rules. Second order where the flow is smooth: the semi-Lagrangian step
    alone diffuses like a viscosity of about 0.1 h^2 / dt, enough to grow a slow layer
    over terrain. Writes u_out, v_out, w_out (must not alias the inputs). ``blocks``: as
    in advect_velocity."""
    _advect(u, v, w, solid, inflow_x, inflow_y, inflow_sides, cell_size, dt,
            (u_adv, v_adv, w_adv), u_out, v_out, w_out)


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
