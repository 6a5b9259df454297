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
* every closed face (open fraction 0) is 0 (applied last, it wins).

Obstacles enter as the open area fraction A_f in [0, 1] of every face, ``fractions`` =
(frac_u, frac_v, frac_w) of the face shapes: ``face_fractions`` measures them against the
terrain surface (cut cells: a face the terrain crosses is partly open), ``voxel_fractions``
gives 0/1 from a solid-cell mask (a face is open when no solid cell touches it). The
divergence weights each face by A_f, the pressure's face coefficients are A_f, and the
projection gives every face with A_f > 0 the full pressure gradient (Batty, Bertails and
Bridson 2007; Ng, Min and Gibou 2009): the wind then flows along a sloping surface instead
of around the corners of a staircase.

Free slip at obstacles: the back-trace samples only *open* faces (A_f > 0): the zeros
stored on closed faces would otherwise act as a no-slip wall that diffuses into the flow
every step. Where some of the eight samples are closed, the open ones are renormalised;
where all are, the face keeps its own value.
"""
import numpy as np

# One home for the shared constants: kernels.contract.
from ..contract import (FRACTION_HIGH, FRACTION_LOW, FRACTION_MIN,  # noqa: F401
                        FRACTION_SAMPLES, FRACTION_STEP, FRACTION_STEPS, INFLOW_X_MINUS,
                        INFLOW_X_PLUS, INFLOW_Y_MINUS, INFLOW_Y_PLUS, NO_BLOCK, OPEN_LIMIT,
                        SAMPLE_WEIGHT_SCALE, inflow_sides_of)
from .sampling import open_range, sample_bilinear, sample_open

F32 = np.float32
HALF = F32(0.5)


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


def voxel_fractions(solid, frac_u, frac_v, frac_w):
    """Open fractions of a solid-cell mask (uint8 (nz, ny, nx)): 1 where no solid cell
    touches a face, else 0 (the "voxels" wind boundary)."""
    for out, is_open in zip((frac_u, frac_v, frac_w), face_open(solid)):
        out[...] = is_open


def sample_weights(fraction):
    """The faces' weights in the advection's samples (float32, the fraction's shape):
    min(1, SAMPLE_WEIGHT_SCALE * A_f), 0 on closed faces."""
    return np.minimum((np.asarray(fraction, F32) * SAMPLE_WEIGHT_SCALE).astype(F32), F32(1.0))


def open_blocks(fractions, out):
    """out[k, j, i] (uint8, the cell shape (nz, ny, nx)): bit C (1 u, 2 v, 4 w) set when
    every face of component C in the 2 x 2 x 2 block whose lowest face index is (k, j, i)
    has the full sample weight, A_f >= 1 / SAMPLE_WEIGHT_SCALE (faces past the end of the
    face array left out). A trilinear sample whose lower corner is (k, j, i) then has all
    eight corners' weights 1, and ``sample_open`` is
    exactly the plain trilinear value: the CPU and GPU builds take that path without
    reading the fractions there (computed once per obstacle refresh). The reference's own
    advection does not need it."""
    nz, ny, nx = out.shape
    result = np.zeros((nz, ny, nx), np.uint8)
    for bit, is_open in zip((1, 2, 4), (sample_weights(f) >= 1 for f in fractions)):
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


def _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx):
    """(ny, nx) float32 m: bilinear height + snow depth at each wind column's centre."""
    h = F32(cell_size)
    j, i = np.meshgrid(np.arange(ny, dtype=F32), np.arange(nx, dtype=F32), indexing="ij")
    cx = F32(x0) + (i + HALF) * h
    cy = F32(y0) + (j + HALF) * h
    return (sample_bilinear(height, hx0, hy0, spacing, cx, cy)
            + sample_bilinear(snow_depth, hx0, hy0, spacing, cx, cy)).astype(F32)


def _thin(ground, column_top, cell_size):
    """(ny, nx) bool: columns whose ``column_top`` stands more than half a cell above the
    ground at their own centre and at their four neighbours' centres (clamped at the
    grid's edge): a thin obstacle (a fence, a post) that no centre sees."""
    ny, nx = ground.shape
    padded = np.pad(ground, 1, mode="edge")
    thin = np.ones(ground.shape, bool)
    for dj, di in ((1, 1), (0, 1), (2, 1), (1, 0), (1, 2)):
        near = padded[dj:dj + ny, di:di + nx]
        thin &= (column_top - near).astype(F32) > F32(HALF * F32(cell_size))
    return thin


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
    ground = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    if column_top is not None:
        ground = np.where(_thin(ground, column_top, cell_size), column_top, ground).astype(F32)
    cz = F32(z0) + (np.arange(nz, dtype=F32) + HALF) * h
    solid[...] = (cz[:, None, None] < ground[None, :, :]).astype(np.uint8)


def obstacle_surface(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top,
                     out):
    """out (ny, nx) float32 m: the surface the wind's solid mask stands on in each column
    (solid_from_heightmap's rule): the bilinear height + snow depth at the column's
    centre, or ``column_top`` (the highest surface inside the column,
    kernels.reference.drift.column_surface) where that is a thin obstacle or where the
    centre's ground mixes in open nodes (at most OPEN_LIMIT). Unlike the highest node,
    it places an obstacle's sides where the wind sees them, the same on every side."""
    ny, nx = out.shape
    ground = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    top = np.asarray(column_top, F32)
    use_top = _thin(ground, top, cell_size) | ~(ground > OPEN_LIMIT)
    out[...] = np.where(use_top, top, ground).astype(F32)


def _snap(a):
    """Below FRACTION_LOW 0, above FRACTION_HIGH 1, else the nearest multiple of
    FRACTION_STEP, at least FRACTION_MIN (float32: a * 128 is exact, + 0.5 rounds once)."""
    a = np.asarray(a, F32)
    steps = np.floor((a * F32(FRACTION_STEPS)).astype(F32) + F32(0.5)).astype(F32)
    quantised = np.maximum((steps * FRACTION_STEP).astype(F32), FRACTION_MIN)
    return np.where(a < FRACTION_LOW, F32(0.0),
                    np.where(a > FRACTION_HIGH, F32(1.0), quantised)).astype(F32)


def block_tops(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, column_top, out):
    """out (ny, nx) float32 m: ``column_top`` in the columns of a thin obstacle (the rule of
    solid_from_heightmap), NO_BLOCK elsewhere; face_fractions fills those columns up to it,
    as the voxel mask does."""
    ny, nx = out.shape
    ground = _centre_ground(height, snow_depth, hx0, hy0, spacing, x0, y0, cell_size, ny, nx)
    out[...] = np.where(_thin(ground, column_top, cell_size), column_top, NO_BLOCK).astype(F32)


def face_fractions(height, snow_depth, hx0, hy0, spacing, x0, y0, z0, cell_size, blocks,
                   frac_u, frac_v, frac_w):
    """Open area fraction A_f in [0, 1] of every face (float32 arrays of the face shapes)
    against the terrain surface t(x, y) = max(bilinear height + snow depth, the block top
    of the column the point lies in; a point on a column boundary takes the higher of the
    two): the cut cells of the wind (heightmap and grid arguments as in
    solid_from_heightmap; ``blocks`` (ny, nx) from block_tops, or all NO_BLOCK).

    * u face (k, j, i) at x = x0 + i h: the mean over S = FRACTION_SAMPLES points
      y = y0 + (j + (s + 0.5) / S) h of clamp((z0 + (k + 1) h - t) / h, 0, 1), the open
      share of the vertical line through each point (summed in the order of s); v faces
      alike with x and y swapped.
    * w face (k, j, i) at z = z0 + k h: the share of the column's footprint where t < z,
      over S rows y = y0 + (j + (r + 0.5) / S) h, each cut into S segments between
      x = x0 + (i + e / S) h, e = 0..S, along which t is taken as linear (summed in the
      order of r, then s); exactly 1 where z lies above every sample of the column and 0
      where it lies at or below all of them.

    Every fraction is then snapped: below FRACTION_LOW to 0, above FRACTION_HIGH to 1,
    and raised to at least FRACTION_MIN.
    All arithmetic is float32 in the order written here (the CPU and GPU builds match it
    bit for bit)."""
    nzp, ny, nx = frac_w.shape
    nz = nzp - 1
    h = F32(cell_size)
    S = FRACTION_SAMPLES
    step = F32(1.0 / S)
    x0, y0, z0 = F32(x0), F32(y0), F32(z0)
    one, zero = F32(1.0), F32(0.0)

    def terrain(x, y, block):
        t = (sample_bilinear(height, hx0, hy0, spacing, x, y)
             + sample_bilinear(snow_depth, hx0, hy0, spacing, x, y)).astype(F32)
        return np.maximum(t, block).astype(F32)

    def vertical(t_samples, out):
        """out[k] = snapped mean over the samples of the open share of cell layer k."""
        for k in range(out.shape[0]):
            top = F32(z0 + F32(k + 1) * h)
            total = np.zeros(t_samples[0].shape, F32)
            for t in t_samples:
                share = ((top - t) / h).astype(F32)
                total = (total + np.minimum(np.maximum(share, zero), one)).astype(F32)
            out[k] = _snap(total * step)

    def boundary_blocks(n_faces, axis):
        """Block top of each face column on a column boundary along ``axis``: the higher
        of the two columns beside it."""
        shape = list(blocks.shape)
        shape[axis] = n_faces
        result = np.full(shape, NO_BLOCK, F32)
        lower = [slice(None)] * 2
        upper = [slice(None)] * 2
        lower[axis] = slice(0, -1)
        upper[axis] = slice(1, None)
        result[tuple(lower)] = blocks
        result[tuple(upper)] = np.maximum(result[tuple(upper)], blocks)
        return result

    offsets = [F32(F32(s) + HALF) * step for s in range(S)]
    # u faces
    jj, ii = np.meshgrid(np.arange(ny, dtype=F32), np.arange(nx + 1, dtype=F32), indexing="ij")
    x = (x0 + ii * h).astype(F32)
    block = boundary_blocks(nx + 1, 1)
    vertical([terrain(x, (y0 + (jj + o) * h).astype(F32), block) for o in offsets], frac_u)
    # v faces
    jj, ii = np.meshgrid(np.arange(ny + 1, dtype=F32), np.arange(nx, dtype=F32), indexing="ij")
    y = (y0 + jj * h).astype(F32)
    block = boundary_blocks(ny + 1, 0)
    vertical([terrain((x0 + (ii + o) * h).astype(F32), y, block) for o in offsets], frac_v)
    # w faces: t[r][e] over each column's footprint
    jj, ii = np.meshgrid(np.arange(ny, dtype=F32), np.arange(nx, dtype=F32), indexing="ij")
    t = [[terrain((x0 + (ii + F32(e) * step) * h).astype(F32),
                  (y0 + (jj + offsets[r]) * h).astype(F32), blocks)
          for e in range(S + 1)] for r in range(S)]
    low = np.min(np.stack([a for row in t for a in row]), axis=0)
    high = np.max(np.stack([a for row in t for a in row]), axis=0)
    area = F32(step * step)
    for k in range(nz + 1):
        z = F32(z0 + F32(k) * h)
        total = np.zeros((ny, nx), F32)
        for r in range(S):
            for s in range(S):
                lo = np.minimum(t[r][s], t[r][s + 1])
                hi = np.maximum(t[r][s], t[r][s + 1])
                span = (hi - lo).astype(F32)
                safe = np.where(span > zero, span, one)
                part = np.minimum(np.maximum(((z - lo) / safe).astype(F32), zero), one)
                part = np.where(span > zero, part, np.where(lo < z, one, zero))
                total = (total + part).astype(F32)
        frac = _snap(total * area)
        frac_w[k] = np.where(z > high, one, np.where(z <= low, zero, frac))


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


def _advect(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt, advected,
            u_out, v_out, w_out):
    """advect_velocity (``advected`` None) or correct_advection (``advected`` = the
    semi-Lagrangian (u, v, w)): interior values, then the boundary rules."""
    nz, ny, nx = w.shape[0] - 1, u.shape[1], u.shape[2] - 1
    h, dt = F32(cell_size), F32(dt)
    vx, vy = F32(inflow_x), F32(inflow_y)
    x_minus, x_plus, y_minus, y_plus, x_in_minus, x_in_plus, y_in_minus, y_in_plus = \
        side_flags(inflow_sides)
    zero = F32(0.0)
    opens = tuple(sample_weights(f) for f in fractions)
    closed = tuple(np.asarray(f) <= 0 for f in fractions)
    values = []
    for index, (field, src, position, velocity, offsets) in enumerate(_sources(u, v, w, h)):
        if advected is None:
            values.append(_semi_lagrangian(field, opens[index], src, position, velocity,
                                           offsets, h, dt))
        else:
            values.append(_maccormack(field, advected[index], opens[index], src, position,
                                      velocity, offsets, h, dt))
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
    out[closed[0]] = zero
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
    out[closed[1]] = zero
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
    out[closed[2]] = zero
    w_out[...] = out


def advect_velocity(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                    u_out, v_out, w_out, blocks=None):
    """Semi-Lagrangian self-advection of each face component over ``dt`` seconds (back-trace
    with the full velocity at the face: the component itself and the trilinear (4-face
    average) other two; trilinear sampling over open faces, clamped at the domain), then
    the boundary conditions for inflow (inflow_x, inflow_y) m/s through ``inflow_sides``
    (bit mask; see the module's rules). ``fractions``: the faces' open fractions (faces
    with A_f > 0 are sampled, the others end at 0). Writes u_out, v_out, w_out. ``blocks``
    (open_blocks of ``fractions``) lets the CPU and GPU builds skip the mask where a
    sample's corners are all open; the result does not depend on it, and the reference
    ignores it."""
    _advect(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt, None,
            u_out, v_out, w_out)


def correct_advection(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
                      u_adv, v_adv, w_adv, u_out, v_out, w_out, blocks=None):
    """MacCormack step after ``advect_velocity`` (Selle et al. 2008): (u_adv, v_adv, w_adv)
    are its semi-Lagrangian result from (u, v, w); each face gets
    clamp(adv + (field - forward(adv)) / 2) over the samples its back-trace used, then the
    same boundary rules. Second order where the flow is smooth: the semi-Lagrangian step
    alone diffuses like a viscosity of about 0.1 h^2 / dt, enough to grow a slow layer
    over terrain. Writes u_out, v_out, w_out (must not alias the inputs). ``blocks``: as
    in advect_velocity."""
    _advect(u, v, w, fractions, inflow_x, inflow_y, inflow_sides, cell_size, dt,
            (u_adv, v_adv, w_adv), u_out, v_out, w_out)


def divergence(u, v, w, fractions, scale, out):
    """out = scale * (net outflow A_f u_f of each cell's faces) (cells (nz, ny, nx)): the
    velocity of a face is the velocity of its open part; 0 in a cell with no open face.
    scale = 1/h gives the divergence in 1/s."""
    fu, fv, fw = (np.asarray(f, F32) for f in fractions)
    flux = (((fu[:, :, 1:] * u[:, :, 1:]).astype(F32) - (fu[:, :, :-1] * u[:, :, :-1]).astype(F32))
            + ((fv[:, 1:, :] * v[:, 1:, :]).astype(F32) - (fv[:, :-1, :] * v[:, :-1, :]).astype(F32))
            ).astype(F32)
    flux = (flux + ((fw[1:] * w[1:]).astype(F32) - (fw[:-1] * w[:-1]).astype(F32))).astype(F32)
    out[...] = (F32(scale) * flux).astype(F32)


def project(u, v, w, pressure, coef_x, coef_y, coef_z, scale):
    """Subtract ``scale`` * pressure difference across each face whose coefficient is not 0,
    in place (scale = dt/h for kinematic pressure in m^2/s^2): the full gradient, also on
    a partly open face (its coefficient A_f weights the divergence, not the velocity's
    update). Outside the domain the pressure is 0 (the Dirichlet outflow ghost); faces with
    coefficient 0 keep their velocity. Coefficients float32, or uint8 (0/1)."""
    s = F32(scale)
    p = np.pad(pressure, 1)  # zero ghost layer
    for field, coef, gradient in (
            (u, coef_x, p[1:-1, 1:-1, 1:] - p[1:-1, 1:-1, :-1]),
            (v, coef_y, p[1:-1, 1:, 1:-1] - p[1:-1, :-1, 1:-1]),
            (w, coef_z, p[1:, 1:-1, 1:-1] - p[:-1, 1:-1, 1:-1])):
        field -= np.where(np.asarray(coef) != 0, (s * gradient).astype(F32), F32(0.0))


# --- turbulent mixing ---------------------------------------------------------------------
# The mean wind feels the turbulence it does not resolve as an eddy viscosity nu (m^2/s):
# Prandtl's mixing length, nu = l^2 |S|, l = mixing * d with d the height above the
# column's surface (at most mixing_height) and |S| = sqrt(2 S_ij S_ij) the strain rate of
# the cell-centred wind, nu at most ``limit`` (the explicit diffusion's stability). The
# derivatives across cells are central, one-sided next to a solid cell or the domain's
# edge, 0 between two of them: a wall's zeros do not count as shear (free slip).


def _centre_velocities(u, v, w):
    """Cell-centred (uc, vc, wc) float32 (nz, ny, nx): the mean of each axis' two faces."""
    return ((HALF * (u[:, :, :-1] + u[:, :, 1:])).astype(F32),
            (HALF * (v[:, :-1, :] + v[:, 1:, :])).astype(F32),
            (HALF * (w[:-1] + w[1:])).astype(F32))


def _cross_derivative(q, usable, axis, inv_h, half_inv_h):
    """d q / d axis at cell centres (q float32 (nz, ny, nx)): central where both neighbour
    cells along ``axis`` are usable (inside the domain, not solid), one-sided where one is,
    0 where none is."""
    n = q.shape[axis]
    index = np.arange(n)

    def shifted(a, by, fill):
        taken = np.take(a, np.clip(index + by, 0, n - 1), axis=axis)
        edge = (index + by < 0) | (index + by >= n)
        shape = [1, 1, 1]
        shape[axis] = n
        return np.where(edge.reshape(shape), fill, taken)

    q_minus, q_plus = shifted(q, -1, F32(0)), shifted(q, 1, F32(0))
    ok_minus, ok_plus = shifted(usable, -1, False), shifted(usable, 1, False)
    central = ((q_plus - q_minus).astype(F32) * F32(half_inv_h)).astype(F32)
    forward = ((q_plus - q).astype(F32) * F32(inv_h)).astype(F32)
    backward = ((q - q_minus).astype(F32) * F32(inv_h)).astype(F32)
    return np.where(ok_minus & ok_plus, central,
                    np.where(ok_plus, forward, np.where(ok_minus, backward, F32(0)))).astype(F32)


def eddy_viscosity(u, v, w, solid, column_top, z0, cell_size, mixing, mixing_height, limit,
                   out):
    """out (nz, ny, nx) float32 = the eddy viscosity nu (m^2/s) of each cell: l^2 |S| with
    l = mixing * clamp(z - column_top, 0, mixing_height) (z the centre's height, column_top
    (ny, nx) m the column's surface), at most ``limit``; 0 in solid cells (uint8 mask)."""
    nz, ny, nx = solid.shape
    h = F32(cell_size)
    inv_h = F32(F32(1.0) / h)
    half_inv_h = F32(HALF * inv_h)
    uc, vc, wc = _centre_velocities(u, v, w)
    usable = np.asarray(solid) == 0
    dudx = ((u[:, :, 1:] - u[:, :, :-1]).astype(F32) * inv_h).astype(F32)
    dvdy = ((v[:, 1:, :] - v[:, :-1, :]).astype(F32) * inv_h).astype(F32)
    dwdz = ((w[1:] - w[:-1]).astype(F32) * inv_h).astype(F32)
    d = {(name, axis): _cross_derivative(q, usable, axis, inv_h, half_inv_h)
         for name, q in (("u", uc), ("v", vc), ("w", wc)) for axis in range(3)}
    sxy = (d["u", 1] + d["v", 2]).astype(F32)   # du/dy + dv/dx
    sxz = (d["u", 0] + d["w", 2]).astype(F32)   # du/dz + dw/dx
    syz = (d["v", 0] + d["w", 1]).astype(F32)   # dv/dz + dw/dy
    normal = ((dudx * dudx).astype(F32) + (dvdy * dvdy).astype(F32)).astype(F32)
    normal = (normal + (dwdz * dwdz).astype(F32)).astype(F32)
    strain2 = ((F32(2.0) * normal).astype(F32) + (sxy * sxy).astype(F32)).astype(F32)
    strain2 = (strain2 + (sxz * sxz).astype(F32)).astype(F32)
    strain2 = (strain2 + (syz * syz).astype(F32)).astype(F32)
    rate = np.sqrt(strain2).astype(F32)
    centre_z = (F32(z0) + ((np.arange(nz, dtype=F32) + HALF) * h).astype(F32)).astype(F32)
    height = (centre_z[:, None, None] - np.asarray(column_top, F32)[None]).astype(F32)
    height = np.minimum(np.maximum(height, F32(0)), F32(mixing_height)).astype(F32)
    length = (F32(mixing) * height).astype(F32)
    nu = ((length * length).astype(F32) * rate).astype(F32)
    out[...] = np.where(usable, np.minimum(nu, F32(limit)), F32(0))


def _diffuse_faces(field, fraction, nu_face, axis, scale):
    """field + scale * nu_face * (sum over the six neighbour faces that exist and are open
    of their difference to the face), on open faces not on the domain's sides normal to
    ``axis``; every other face keeps its value."""
    c = np.asarray(field, F32)
    is_open = np.asarray(fraction) > 0
    total = np.zeros_like(c)
    for along in (2, 1, 0):          # x-, x+, y-, y+, z-, z+ (one order in every backend)
        n = c.shape[along]
        index = np.arange(n)
        for by in (-1, 1):
            source = np.clip(index + by, 0, n - 1)
            exists = ((index + by >= 0) & (index + by < n))
            shape = [1, 1, 1]
            shape[along] = n
            neighbour = np.take(c, source, axis=along)
            counted = exists.reshape(shape) & np.take(is_open, source, axis=along)
            total = (total + np.where(counted, (neighbour - c).astype(F32), F32(0))).astype(F32)
    n = c.shape[axis]
    inner = np.zeros(n, bool)
    inner[1:-1] = True
    shape = [1, 1, 1]
    shape[axis] = n
    update = is_open & inner.reshape(shape)
    step = ((F32(scale) * nu_face).astype(F32) * total).astype(F32)
    return np.where(update, (c + step).astype(F32), c)


def diffuse_velocity(u, v, w, fractions, nu, scale, u_out, v_out, w_out):
    """One explicit step of the eddy viscosity's diffusion: each open face not on the
    domain's sides gets scale * nu_f * (the sum over its six neighbour faces along x, y, z
    that exist and are open of their difference to it), nu_f the mean of the two cells the
    face separates, scale = dt / h^2; closed neighbours are left out (free slip at walls,
    zero gradient at the domain's edges). Faces on the sides and closed faces keep their
    values. Writes u_out, v_out, w_out (the faces' shapes)."""
    fu, fv, fw = fractions
    nu = np.asarray(nu, F32)
    nu_u = np.zeros(u.shape, F32)
    nu_u[:, :, 1:-1] = HALF * (nu[:, :, :-1] + nu[:, :, 1:])
    nu_v = np.zeros(v.shape, F32)
    nu_v[:, 1:-1, :] = HALF * (nu[:, :-1, :] + nu[:, 1:, :])
    nu_w = np.zeros(w.shape, F32)
    nu_w[1:-1] = HALF * (nu[:-1] + nu[1:])
    u_out[...] = _diffuse_faces(u, fu, nu_u, 2, scale)
    v_out[...] = _diffuse_faces(v, fv, nu_v, 1, scale)
    w_out[...] = _diffuse_faces(w, fw, nu_w, 0, scale)


def fence_drag_cells(solid, fence_bottom, fence_top, fence_resistance, z0, cell_size):
    """(nz, ny, nx) float32 1/m: each cell's porous-fence drag coefficient along one axis,
    the column's ``fence_resistance`` (ny, nx) (its share of 0.5 k / h, k the fence's
    pressure-loss coefficient: snow_addon.fences.fence_columns) times the share of the
    cell's height between the column's ``fence_bottom`` and ``fence_top`` (ny, nx) m
    (clamped to [0, 1]); 0 in solid cells (under the snow the fence is buried)."""
    nz = solid.shape[0]
    h = F32(cell_size)
    levels = np.arange(nz + 1, dtype=F32)
    bottom = (F32(z0) + (levels[:-1] * h).astype(F32)).astype(F32)[:, None, None]
    top = (F32(z0) + (levels[1:] * h).astype(F32)).astype(F32)[:, None, None]
    low = np.maximum(np.asarray(fence_bottom, F32)[None], bottom)
    high = np.minimum(np.asarray(fence_top, F32)[None], top)
    cover = ((high - low).astype(F32) / h).astype(F32)
    cover = np.minimum(np.maximum(cover, F32(0.0)), F32(1.0))
    drag = (np.asarray(fence_resistance, F32)[None] * cover).astype(F32)
    return np.where(np.asarray(solid) == 0, drag, F32(0.0)).astype(F32)


def _damp(field, drag_a, drag_b, inner, dt):
    face = (HALF * (drag_a + drag_b).astype(F32)).astype(F32)
    rate = (F32(dt) * face).astype(F32)
    factor = np.maximum((F32(1.0) - (rate * np.abs(field[inner])).astype(F32)).astype(F32), F32(0.0))
    field[inner] = (field[inner] * factor).astype(F32)


def porous_drag(u, v, w, solid, fence_bottom, fence_top, fence_resistance, z0, cell_size, dt):
    """The porous fences' drag over ``dt`` s, in place: every face inside the domain gets
    u max(0, 1 - dt c_f |u|), c_f the mean of the two cells' fence_drag_cells along the
    face's axis (the two faces of a fence's cell share its drag); ``fence_resistance`` is
    (3, ny, nx), the columns' coefficients along x, y and z. The projection turns the momentum taken into
    a pressure jump, 0.5 k u^2 across a fence one cell thick: exactly, since the drag is
    taken from the velocity the projection holds (an implicit u / (1 + dt c_f |u|) would
    take a share dt c_f |u| / (1 + dt c_f |u|) less, 20 % for a half-open fence at the
    wind's Courant number 0.25). The clamp at 0 keeps a face from turning round where dt c_f |u| > 1. Faces on
    the domain's sides keep their boundary values."""
    cx, cy, cz = (fence_drag_cells(solid, fence_bottom, fence_top, fence_resistance[axis], z0,
                                   cell_size) for axis in range(3))
    every = slice(None)
    _damp(u, cx[:, :, :-1], cx[:, :, 1:], (every, every, slice(1, -1)), dt)
    _damp(v, cy[:, :-1, :], cy[:, 1:, :], (every, slice(1, -1), every), dt)
    _damp(w, cz[:-1], cz[1:], (slice(1, -1), every, every), dt)
