"""Wind preview geometry: what the viewport overlay and "Wind to Object" draw, as plain
NumPy arrays (no bpy, no GPU), so it is testable anywhere.

Every function takes host arrays of one wind field: MAC faces ``u (nz, ny, nx+1)``,
``v (nz, ny+1, nx)``, ``w (nz+1, ny, nx)`` in m/s, ``solid (nz, ny, nx)`` (nonzero =
obstacle), ``pressure (nz, ny, nx)`` and its ``WindGrid``; world space, metres, Z up.
Overlay builders return an ``OverlayGeometry``: float32 ``positions (N, 3)`` and
``colors (N, 4)`` for ``gpu_extras.batch.batch_for_shader`` with the named primitive.

Colour scales (stated, returned with the geometry so the panel can show them):

* speed: ``SPEED_COLORMAP`` from 0 m/s (dark blue) through cyan, green, yellow to
  ``speed_max`` m/s (red); faster wind stays red.
* pressure: ``PRESSURE_COLORMAP`` from the slice's lowest pressure (yellow) to its highest
  (red), the papers' debug view.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from .backend import host_kernels

#: (fraction of the scale, RGB) stops of the speed colour map, 0 = still air, 1 = speed_max.
SPEED_COLORMAP = (
    (0.00, (0.05, 0.10, 0.55)),
    (0.25, (0.00, 0.60, 0.95)),
    (0.50, (0.15, 0.80, 0.30)),
    (0.75, (1.00, 0.85, 0.10)),
    (1.00, (0.90, 0.10, 0.08)),
)
#: Pressure colour map of the papers' debug view: yellow = low, red = high.
PRESSURE_COLORMAP = (
    (0.0, (1.00, 0.95, 0.15)),
    (0.5, (1.00, 0.55, 0.05)),
    (1.0, (0.85, 0.05, 0.05)),
)
#: Colour of obstacle cells (RGB); faces are shaded by their normal on top of it.
OBSTACLE_COLOR = (0.55, 0.45, 0.40)


@dataclass(frozen=True)
class ColorScale:
    """A linear colour map from ``minimum`` to ``maximum`` (in ``unit``); values outside
    take the end colours."""

    minimum: float
    maximum: float
    unit: str
    stops: tuple = SPEED_COLORMAP

    def colors(self, values, alpha: float = 1.0) -> np.ndarray:
        """RGBA float32 (N, 4) for ``values`` (N,)."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        span = self.maximum - self.minimum
        t = (values - self.minimum) / span if span > 0 else np.zeros_like(values)
        t = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0)
        where = np.array([s[0] for s in self.stops])
        rgb = np.array([s[1] for s in self.stops])
        out = np.empty((values.size, 4), dtype=np.float32)
        for channel in range(3):
            out[:, channel] = np.interp(t, where, rgb[:, channel])
        out[:, 3] = alpha
        return out

    def describe(self) -> str:
        return f"{self.minimum:.3g} to {self.maximum:.3g} {self.unit}"

    def legend(self, count: int = 5) -> list[tuple[float, tuple[float, float, float]]]:
        """``count`` (value, RGB) pairs evenly spaced over the scale, for a panel legend."""
        values = np.linspace(self.minimum, self.maximum, count)
        return [(float(v), tuple(float(c) for c in rgba[:3]))
                for v, rgba in zip(values, self.colors(values))]


def speed_scale(speed_max: float) -> ColorScale:
    """The speed colour scale from 0 to ``speed_max`` m/s."""
    if not (speed_max > 0.0) or not math.isfinite(speed_max):
        speed_max = 1.0
    return ColorScale(0.0, float(speed_max), "m/s", SPEED_COLORMAP)


@dataclass
class OverlayGeometry:
    """Vertices for one ``gpu.batch`` draw: ``primitive`` is "LINES", "TRIS" or "POINTS"."""

    primitive: str
    positions: np.ndarray
    colors: np.ndarray
    count: int
    """How many things are drawn (arrows, streamlines, solid cells, pressure cells)."""
    scale: ColorScale | None = None

    @classmethod
    def empty(cls, primitive: str, scale: ColorScale | None = None) -> "OverlayGeometry":
        return cls(primitive, np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), 0,
                   scale)


# --- sampling ----------------------------------------------------------------------------

def cell_center_velocity(u, v, w) -> np.ndarray:
    """Velocity at cell centres (m/s), float32 (nz, ny, nx, 3): the mean of opposite faces."""
    u, v, w = (np.asarray(a, dtype=np.float32) for a in (u, v, w))
    out = np.empty((w.shape[0] - 1, w.shape[1], w.shape[2], 3), np.float32)
    out[..., 0] = 0.5 * (u[:, :, :-1] + u[:, :, 1:])
    out[..., 1] = 0.5 * (v[:, :-1, :] + v[:, 1:, :])
    out[..., 2] = 0.5 * (w[:-1] + w[1:])
    return out


def max_fluid_speed(u, v, w, solid) -> float:
    """Largest cell-centre wind speed over fluid cells (m/s); 0 when there is none."""
    speed = np.linalg.norm(cell_center_velocity(u, v, w), axis=-1)
    fluid = ~np.asarray(solid, dtype=bool)
    return float(speed[fluid].max()) if fluid.any() else 0.0


def wind_at(u, v, w, grid, points) -> np.ndarray:
    """Wind (m/s) at world ``points (N, 3)``: the shared staggered trilinear sample."""
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    sample_wind = host_kernels("sampling").sample_wind
    vx, vy, vz = sample_wind(u, v, w, grid.x0, grid.y0, grid.z0, grid.cell_size,
                             points[:, 0], points[:, 1], points[:, 2])
    return np.stack([vx, vy, vz], axis=1).astype(np.float32)


def _cell_index(grid, points):
    h = grid.cell_size
    i = np.floor((points[:, 0] - grid.x0) / h).astype(np.int64)
    j = np.floor((points[:, 1] - grid.y0) / h).astype(np.int64)
    k = np.floor((points[:, 2] - grid.z0) / h).astype(np.int64)
    return (np.clip(k, 0, grid.nz - 1), np.clip(j, 0, grid.ny - 1), np.clip(i, 0, grid.nx - 1))


def inside_domain(grid, points) -> np.ndarray:
    """True where world ``points (N, 3)`` lie in the wind domain's box."""
    points = np.asarray(points).reshape(-1, 3)
    sx, sy, sz = grid.size
    return ((points[:, 0] >= grid.x0) & (points[:, 0] <= grid.x0 + sx)
            & (points[:, 1] >= grid.y0) & (points[:, 1] <= grid.y0 + sy)
            & (points[:, 2] >= grid.z0) & (points[:, 2] <= grid.z0 + sz))


def inside_solid(solid, grid, points) -> np.ndarray:
    """True where world ``points (N, 3)`` lie in an obstacle cell (clamped to the domain)."""
    points = np.asarray(points).reshape(-1, 3)
    return np.asarray(solid, dtype=bool)[_cell_index(grid, points)]


def stride_for_density(grid, density: int) -> int:
    """Cells between lattice points so that ``density`` of them span the longer side."""
    density = max(1, int(density))
    return max(1, int(math.ceil(max(grid.nx, grid.ny) / density)))


def slice_points(grid, z: float, stride: int) -> np.ndarray:
    """Cell-centre XY lattice (every ``stride`` cells) at world height ``z``: float32 (N, 3)."""
    h = grid.cell_size
    first = (stride - 1) // 2
    xs = grid.x0 + (np.arange(first, grid.nx, stride) + 0.5) * h
    ys = grid.y0 + (np.arange(first, grid.ny, stride) + 0.5) * h
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, z)], axis=1).astype(np.float32)


def volume_points(grid, stride: int, stride_z: int | None = None) -> np.ndarray:
    """Cell-centre 3D lattice (every ``stride`` cells in XY, ``stride_z`` in Z): (N, 3)."""
    stride_z = stride if stride_z is None else max(1, int(stride_z))
    h = grid.cell_size
    first = (stride - 1) // 2
    xs = grid.x0 + (np.arange(first, grid.nx, stride) + 0.5) * h
    ys = grid.y0 + (np.arange(first, grid.ny, stride) + 0.5) * h
    zs = grid.z0 + (np.arange((stride_z - 1) // 2, grid.nz, stride_z) + 0.5) * h
    gz, gy, gx = np.meshgrid(zs, ys, xs, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel(), gz.ravel()], axis=1).astype(np.float32)


def upwind_points(u, v, w, solid, grid, stride: int, z_max: float | None = None,
                  min_cosine: float = 0.3) -> np.ndarray:
    """A rake of seeds on the domain's upwind sides: cell centres one cell in from each side
    the mean horizontal wind (over fluid cells) blows in through (cosine above
    ``min_cosine``), every ``stride`` cells along the side and up to ``z_max`` (m; default
    the domain's top); fluid cells only. (N, 3)."""
    velocity = cell_center_velocity(u, v, w)
    fluid = ~np.asarray(solid, dtype=bool)
    if not fluid.any():
        return np.zeros((0, 3), np.float32)
    mean = velocity[fluid][:, :2].astype(np.float64).mean(axis=0)
    norm = float(np.hypot(mean[0], mean[1]))
    if norm == 0.0:
        return np.zeros((0, 3), np.float32)
    mean /= norm
    h = grid.cell_size
    first = (stride - 1) // 2
    along_x = grid.x0 + (np.arange(first, grid.nx, stride) + 0.5) * h
    along_y = grid.y0 + (np.arange(first, grid.ny, stride) + 0.5) * h
    heights = grid.z0 + (np.arange(first, grid.nz, stride) + 0.5) * h
    if z_max is not None:
        heights = heights[heights <= z_max]
    x_low, x_high = grid.x0 + 0.5 * h, grid.x0 + (grid.nx - 0.5) * h
    y_low, y_high = grid.y0 + 0.5 * h, grid.y0 + (grid.ny - 0.5) * h
    sides = []
    for inward, fixed_axis, fixed, along in (((1, 0), 0, x_low, along_y), ((-1, 0), 0, x_high, along_y),
                                             ((0, 1), 1, y_low, along_x), ((0, -1), 1, y_high, along_x)):
        if inward[0] * mean[0] + inward[1] * mean[1] > min_cosine:
            a, z = np.meshgrid(along, heights)
            side = np.empty((a.size, 3))
            side[:, fixed_axis] = fixed
            side[:, 1 - fixed_axis] = a.ravel()
            side[:, 2] = z.ravel()
            sides.append(side)
    if not sides:
        return np.zeros((0, 3), np.float32)
    return fluid_points(solid, grid, np.concatenate(sides))


def slice_height(grid, fraction: float) -> float:
    """World height (m) of a slice ``fraction`` (0 bottom .. 1 top) up the wind domain,
    kept half a cell inside it."""
    h = grid.cell_size
    fraction = min(max(float(fraction), 0.0), 1.0)
    return float(grid.z0 + 0.5 * h + fraction * (grid.nz - 1) * h)


def fluid_points(solid, grid, points) -> np.ndarray:
    """The ``points`` that lie in the domain and outside obstacles."""
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    keep = inside_domain(grid, points) & ~inside_solid(solid, grid, points)
    return points[keep]


# --- arrows ------------------------------------------------------------------------------

def _perpendicular(direction):
    """Unit vectors perpendicular to unit ``direction (N, 3)``, horizontal where possible."""
    side = np.cross(direction, np.array([0.0, 0.0, 1.0]))
    norm = np.linalg.norm(side, axis=1)
    vertical = norm < 1e-6
    if vertical.any():
        side[vertical] = np.cross(direction[vertical], np.array([1.0, 0.0, 0.0]))
        norm[vertical] = np.linalg.norm(side[vertical], axis=1)
    return side / norm[:, None]


@dataclass
class Arrows:
    """Wind arrows: ``bases (N, 3)`` (m), ``vectors (N, 3)`` base to tip (m), ``speeds (N,)``
    (m/s). Arrow length is ``arrow_scale * spacing * speed / speed_max``."""

    bases: np.ndarray
    vectors: np.ndarray
    speeds: np.ndarray
    scale: ColorScale
    spacing: float


def wind_arrows(u, v, w, solid, grid, points, spacing: float, arrow_scale: float = 1.0,
                speed_max: float = 0.0) -> Arrows:
    """Arrows of the wind at ``points`` outside obstacles, pointing along the wind.

    ``spacing`` (m) is the lattice spacing; an arrow of speed ``speed_max`` (m/s) is
    ``arrow_scale`` spacings long and others scale linearly with speed. ``speed_max <= 0``
    takes the largest fluid speed of the field. Still points (speed 0) get no arrow.
    """
    if not speed_max or speed_max <= 0:
        speed_max = max_fluid_speed(u, v, w, solid)
    scale = speed_scale(speed_max)
    bases = fluid_points(solid, grid, points)
    velocity = wind_at(u, v, w, grid, bases).astype(np.float64)
    speeds = np.linalg.norm(velocity, axis=1)
    moving = speeds > 1e-9
    bases, velocity, speeds = bases[moving], velocity[moving], speeds[moving]
    vectors = velocity * (float(arrow_scale) * float(spacing) / scale.maximum)
    return Arrows(bases.astype(np.float32), vectors.astype(np.float32),
                  speeds.astype(np.float32), scale, float(spacing))


def arrow_lines(arrows: Arrows, head_fraction: float = 0.3, alpha: float = 1.0) -> OverlayGeometry:
    """LINES geometry for ``arrows``: a shaft and two head barbs each (6 vertices per
    arrow), coloured by speed on the arrows' scale."""
    n = len(arrows.speeds)
    if n == 0:
        return OverlayGeometry.empty("LINES", arrows.scale)
    base = arrows.bases.astype(np.float64)
    vec = arrows.vectors.astype(np.float64)
    length = np.linalg.norm(vec, axis=1)
    direction = vec / length[:, None]
    side = _perpendicular(direction)
    tip = base + vec
    barb = (head_fraction * length)[:, None]
    left = tip - barb * (direction * 0.9 + side * 0.45)
    right = tip - barb * (direction * 0.9 - side * 0.45)
    positions = np.stack([base, tip, tip, left, tip, right], axis=1).reshape(-1, 3)
    colors = np.repeat(arrows.scale.colors(arrows.speeds, alpha), 6, axis=0)
    return OverlayGeometry("LINES", positions.astype(np.float32), colors, n, arrows.scale)


def arrow_mesh(arrows: Arrows, shaft_width: float = 0.08, head_width: float = 0.25,
               head_fraction: float = 0.3):
    """A closed triangle mesh of 3D arrows for rendering: returns ``vertices (V, 3)``
    float32, ``triangles (T, 3)`` int32 and per-vertex ``speeds (V,)`` float32.

    Widths are fractions of the lattice spacing (so arrows stay visible at any length);
    each arrow is a square shaft and a square pyramid head, 13 vertices, 22 triangles,
    a closed surface.
    """
    n = len(arrows.speeds)
    if n == 0:
        return (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32),
                np.zeros(0, np.float32))
    base = arrows.bases.astype(np.float64)
    vec = arrows.vectors.astype(np.float64)
    length = np.linalg.norm(vec, axis=1)
    d = vec / length[:, None]
    s = _perpendicular(d)
    t = np.cross(d, s)
    # the head is at most as long as it is wide, so long arrows keep a compact tip
    head_length = np.minimum(head_fraction * length, head_width * arrows.spacing)
    head_start = base + d * (length - head_length)[:, None]
    rs = 0.5 * shaft_width * arrows.spacing
    rh = 0.5 * head_width * arrows.spacing
    corners = [(+1, +1), (-1, +1), (-1, -1), (+1, -1)]
    verts = []
    for origin, radius in ((base, rs), (head_start, rs), (head_start, rh)):
        for a, b in corners:
            verts.append(origin + radius * (a * s + b * t))
    verts.append(base + vec)  # tip, local index 12
    vertices = np.stack(verts, axis=1)  # (n, 13, 3)
    local = []
    for c in range(4):  # shaft sides: ring 0 (base) to ring 1 (head start), outward
        c1 = (c + 1) % 4
        local += [(c, c1, 4 + c1), (c, 4 + c1, 4 + c)]
    local += [(0, 2, 1), (0, 3, 2)]          # base cap, facing back
    for c in range(4):                       # head underside: ring 1 out to ring 2
        c1 = (c + 1) % 4
        local += [(4 + c, 4 + c1, 8 + c1), (4 + c, 8 + c1, 8 + c)]
    for c in range(4):                       # head sides up to the tip
        local.append((8 + c, 8 + (c + 1) % 4, 12))
    local = np.array(local, dtype=np.int64)
    triangles = (local[None, :, :] + 13 * np.arange(n)[:, None, None]).reshape(-1, 3)
    speeds = np.repeat(arrows.speeds, 13)
    return (vertices.reshape(-1, 3).astype(np.float32), triangles.astype(np.int32),
            speeds.astype(np.float32))


# --- streamlines -------------------------------------------------------------------------

@dataclass
class Streamlines:
    """Polylines traced through the wind: ``points (P, 3)`` (m), the wind ``speeds (P,)``
    (m/s) at them, and ``counts (L,)`` points per line (lines stored one after another,
    each with at least 2 points)."""

    points: np.ndarray
    speeds: np.ndarray
    counts: np.ndarray
    scale: ColorScale

    @property
    def line_count(self) -> int:
        return int(len(self.counts))

    def lines(self):
        """Each line's points as a list of (n, 3) arrays."""
        ends = np.cumsum(self.counts)
        return [self.points[e - c:e] for c, e in zip(self.counts, ends)]


def _trace(u, v, w, solid, grid, seeds, step, steps, signs, min_speed):
    """Midpoint (RK2) trace by arc length from ``seeds`` (downwind where ``signs`` is +1,
    upwind where -1); returns (steps+1, S, 3) positions and a (steps+1, S) validity mask
    (a line stops at the domain edge, an obstacle or still air)."""
    h = grid.cell_size
    ds_all = np.asarray(signs, dtype=np.float64) * step * h
    points = seeds.astype(np.float64).copy()
    history = np.empty((steps + 1,) + points.shape, np.float64)
    valid = np.zeros((steps + 1, len(points)), bool)
    history[0] = points
    valid[0] = True
    alive = np.ones(len(points), bool)

    def direction(p):
        vel = wind_at(u, v, w, grid, p).astype(np.float64)
        speed = np.linalg.norm(vel, axis=1)
        return vel / np.maximum(speed, 1e-30)[:, None], speed

    for n in range(1, steps + 1):
        if not alive.any():
            history[n:] = history[n - 1]
            break
        idx = np.nonzero(alive)[0]
        p = points[idx]
        ds = ds_all[idx, None]
        k1, speed1 = direction(p)
        middle = p + 0.5 * ds * k1
        k2, speed2 = direction(middle)
        new = p + ds * k2
        ok = ((speed1 > min_speed) & (speed2 > min_speed) & inside_domain(grid, new)
              & ~inside_solid(solid, grid, new))
        points[idx[ok]] = new[ok]
        alive[idx[~ok]] = False
        history[n] = points
        valid[n, idx[ok]] = True
    return history, valid


def trace_streamlines(u, v, w, solid, grid, seeds, step: float = 0.5,
                      max_length: float | None = None, both_directions: bool = True,
                      speed_max: float = 0.0, min_speed_fraction: float = 1e-3) -> Streamlines:
    """Streamlines of the wind through ``seeds (S, 3)`` (seeds in obstacles or outside the
    domain are dropped).

    Integrates dx/ds = V/|V| with the midpoint rule (RK2), ``step`` cells of arc length per
    step, sampling the MAC faces with the shared staggered trilinear ``sample_wind``. A line
    ends at the domain's box, on entering an obstacle cell, where the wind falls below
    ``min_speed_fraction * speed_max``, or after ``max_length`` metres each way (default:
    the domain's diagonal). ``both_directions`` traces upwind too, so the line passes
    through its seed.
    """
    if not speed_max or speed_max <= 0:
        speed_max = max_fluid_speed(u, v, w, solid)
    scale = speed_scale(speed_max)
    seeds = fluid_points(solid, grid, seeds)
    if max_length is None:
        max_length = float(np.linalg.norm(grid.size))
    steps = max(1, int(math.ceil(max_length / (step * grid.cell_size))))
    min_speed = min_speed_fraction * scale.maximum
    count = len(seeds)
    if both_directions:  # one vectorised trace: the seeds downwind, then the same upwind
        signs = np.concatenate([np.ones(count), -np.ones(count)])
        history, ok = _trace(u, v, w, solid, grid, np.concatenate([seeds, seeds]), step,
                             steps, signs, min_speed)
        forward, forward_ok = history[:, :count], ok[:, :count]
        backward, backward_ok = history[:, count:], ok[:, count:]
    else:
        forward, forward_ok = _trace(u, v, w, solid, grid, seeds, step, steps,
                                     np.ones(count), min_speed)
    lines = []
    for s in range(len(seeds)):
        ahead = forward[forward_ok[:, s], s]
        if both_directions:
            behind = backward[backward_ok[:, s], s][::-1][:-1]  # drop the repeated seed
            line = np.concatenate([behind, ahead], axis=0)
        else:
            line = ahead
        if len(line) >= 2:
            lines.append(line)
    if not lines:
        return Streamlines(np.zeros((0, 3), np.float32), np.zeros(0, np.float32),
                           np.zeros(0, np.int64), scale)
    points = np.concatenate(lines).astype(np.float32)
    speeds = np.linalg.norm(wind_at(u, v, w, grid, points), axis=1).astype(np.float32)
    counts = np.array([len(line) for line in lines], dtype=np.int64)
    return Streamlines(points, speeds, counts, scale)


def streamline_lines(streamlines: Streamlines, alpha: float = 1.0) -> OverlayGeometry:
    """LINES geometry of ``streamlines``: one segment per consecutive point pair, each
    vertex coloured by the wind speed there."""
    if streamlines.line_count == 0:
        return OverlayGeometry.empty("LINES", streamlines.scale)
    total = len(streamlines.points)
    starts = np.cumsum(streamlines.counts) - streamlines.counts
    is_last = np.zeros(total, bool)
    is_last[starts + streamlines.counts - 1] = True
    first = np.nonzero(~is_last)[0]
    index = np.stack([first, first + 1], axis=1).ravel()
    colors = streamlines.scale.colors(streamlines.speeds, alpha)
    return OverlayGeometry("LINES", streamlines.points[index].astype(np.float32),
                           colors[index], streamlines.line_count, streamlines.scale)


# --- obstacles and pressure --------------------------------------------------------------

def obstacle_points(solid, grid) -> OverlayGeometry:
    """POINTS at the centre of every obstacle cell (the papers' obstacle debug view)."""
    k, j, i = np.nonzero(np.asarray(solid, dtype=bool))
    h = grid.cell_size
    positions = np.stack([grid.x0 + (i + 0.5) * h, grid.y0 + (j + 0.5) * h,
                          grid.z0 + (k + 0.5) * h], axis=1).astype(np.float32)
    colors = np.tile(np.array(OBSTACLE_COLOR + (1.0,), np.float32), (len(positions), 1))
    return OverlayGeometry("POINTS", positions.reshape(-1, 3), colors.reshape(-1, 4),
                           int(len(positions)))


def obstacle_faces(solid, grid, alpha: float = 0.5) -> OverlayGeometry:
    """TRIS of the obstacle cells' faces that touch fluid (the visible hull of the obstacle
    field; faces on the domain's box are left out). ``count`` is the number of obstacle
    cells; faces are shaded by their normal so the steps read in the viewport."""
    solid = np.asarray(solid, dtype=bool)
    h = grid.cell_size
    origin = np.array([grid.x0, grid.y0, grid.z0])
    quads, shades = [], []
    # axis in array order (k=z, j=y, i=x); world axis index is 2 - axis
    for axis, shade in ((0, (1.0, 0.55)), (1, (0.8, 0.7)), (2, (0.9, 0.65))):
        lower = np.take(solid, np.arange(solid.shape[axis] - 1), axis=axis)
        upper = np.take(solid, np.arange(1, solid.shape[axis]), axis=axis)
        world = 2 - axis
        for mask, brightness in ((lower & ~upper, shade[0]), (upper & ~lower, shade[1])):
            idx = np.stack(np.nonzero(mask), axis=1)  # (F, 3) as (k, j, i) of the lower cell
            if len(idx) == 0:
                continue
            corner = origin + h * idx[:, ::-1].astype(np.float64)  # min corner of lower cell
            corner[:, world] += h  # the shared face
            a, b = [c for c in range(3) if c != world]
            ea = np.zeros(3)
            eb = np.zeros(3)
            ea[a] = h
            eb[b] = h
            quad = np.stack([corner, corner + ea, corner + ea + eb, corner,
                             corner + ea + eb, corner + eb], axis=1)
            quads.append(quad.reshape(-1, 3))
            shades.append(np.full(len(quad) * 6, brightness))
    if not quads:
        out = OverlayGeometry.empty("TRIS")
        out.count = int(solid.sum())
        return out
    positions = np.concatenate(quads).astype(np.float32)
    brightness = np.concatenate(shades)
    colors = np.empty((len(positions), 4), np.float32)
    colors[:, :3] = brightness[:, None] * np.array(OBSTACLE_COLOR)
    colors[:, 3] = alpha
    return OverlayGeometry("TRIS", positions, colors, int(solid.sum()))


def pressure_slice(pressure, solid, grid, z: float, alpha: float = 0.6) -> OverlayGeometry:
    """TRIS: one quad per fluid cell of the cell layer containing height ``z`` (m), drawn at
    ``z`` and coloured by pressure from the layer's lowest (yellow) to highest (red)
    value; the scale is returned (in the solver's pressure units)."""
    pressure = np.asarray(pressure, dtype=np.float32)
    h = grid.cell_size
    k = int(np.clip(math.floor((z - grid.z0) / h), 0, grid.nz - 1))
    fluid = ~np.asarray(solid, dtype=bool)[k]
    j, i = np.nonzero(fluid)
    if len(i) == 0:
        return OverlayGeometry.empty("TRIS", ColorScale(0.0, 0.0, "pressure", PRESSURE_COLORMAP))
    values = pressure[k][j, i]
    scale = ColorScale(float(values.min()), float(values.max()), "pressure", PRESSURE_COLORMAP)
    x = grid.x0 + i * h
    y = grid.y0 + j * h
    zz = np.full(len(i), z)
    c00 = np.stack([x, y, zz], axis=1)
    c10 = np.stack([x + h, y, zz], axis=1)
    c11 = np.stack([x + h, y + h, zz], axis=1)
    c01 = np.stack([x, y + h, zz], axis=1)
    positions = np.stack([c00, c10, c11, c00, c11, c01], axis=1).reshape(-1, 3)
    colors = np.repeat(scale.colors(values, alpha), 6, axis=0)
    return OverlayGeometry("TRIS", positions.astype(np.float32), colors, int(len(i)), scale)


# --- the overlay as a whole --------------------------------------------------------------

@dataclass(frozen=True)
class OverlayOptions:
    """What the overlay shows; mirrors the panel's settings (units in each docstring)."""

    show_arrows: bool = True
    show_streamlines: bool = False
    show_obstacles: bool = False
    show_pressure: bool = False
    placement: str = "SLICE"
    """Where arrows and streamline seeds go: "SLICE" (a lattice on the horizontal slice),
    "VOLUME" (a 3D lattice) or "UPWIND" (a rake on the sides the wind blows in through,
    from the ground up to the slice height)."""
    slice_fraction: float = 0.3
    """Slice height as a fraction of the wind domain's height (0 bottom, 1 top)."""
    density: int = 24
    """Arrows (or streamline seeds) along the domain's longer horizontal side."""
    arrow_scale: float = 1.0
    """Length of a ``speed_max`` arrow in lattice spacings."""
    speed_max: float = 0.0
    """Top of the speed colour scale (m/s); 0 = the field's fastest fluid cell."""
    obstacle_style: str = "FACES"
    """"FACES" (the obstacle hull) or "POINTS" (one point per obstacle cell)."""


PLACEMENTS = ("SLICE", "VOLUME", "UPWIND")


def seed_points(u, v, w, solid, grid, placement: str, stride: int, z: float) -> np.ndarray:
    """Arrow bases / streamline seeds for ``placement`` (see ``OverlayOptions``): (N, 3)."""
    if placement == "VOLUME":
        return volume_points(grid, stride)
    if placement == "UPWIND":
        return upwind_points(u, v, w, solid, grid, stride, z_max=z)
    if placement == "SLICE":
        return slice_points(grid, z, stride)
    raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")


def wind_overlay(u, v, w, pressure, solid, grid, options: OverlayOptions) -> list[OverlayGeometry]:
    """Everything the viewport overlay draws for one wind field, in draw order."""
    speed_max = options.speed_max if options.speed_max > 0 else max_fluid_speed(u, v, w, solid)
    stride = stride_for_density(grid, options.density)
    spacing = stride * grid.cell_size
    z = slice_height(grid, options.slice_fraction)
    seeds = seed_points(u, v, w, solid, grid, options.placement, stride, z)
    out = []
    if options.show_obstacles:
        out.append(obstacle_points(solid, grid) if options.obstacle_style == "POINTS"
                   else obstacle_faces(solid, grid))
    if options.show_pressure:
        out.append(pressure_slice(pressure, solid, grid, z))
    if options.show_streamlines:
        out.append(streamline_lines(trace_streamlines(u, v, w, solid, grid, seeds,
                                                      speed_max=speed_max)))
    if options.show_arrows:
        out.append(arrow_lines(wind_arrows(u, v, w, solid, grid, seeds, spacing,
                                           options.arrow_scale, speed_max)))
    return out


@dataclass
class WindPreviewStore:
    """The latest host wind field shown by the overlay and its built geometry.

    Owned by the overlay manager (one per Blender session) and passed explicitly to whoever
    publishes a field (the preview and bake operators); never a module global.
    """

    wind_field: object = None
    """Object with host ``u, v, w, pressure, solid, grid`` (``Simulation.wind_field()``)."""
    step_index: int = 0
    time: float = 0.0
    source: str = ""
    version: int = 0
    build_seconds: float = 0.0
    """Wall time of the last geometry build (the preview publishes no faster than this)."""
    _geometry: list | None = dataclass_field(default=None, repr=False)
    _geometry_key: tuple | None = dataclass_field(default=None, repr=False)
    _speed_max: tuple | None = dataclass_field(default=None, repr=False)

    def field_speed_max(self) -> float:
        """The fastest fluid cell's wind speed (m/s) of the shown field (cached), 0 if none."""
        if self.wind_field is None:
            return 0.0
        if self._speed_max is None or self._speed_max[0] != self.version:
            f = self.wind_field
            self._speed_max = (self.version, max_fluid_speed(f.u, f.v, f.w, f.solid))
        return self._speed_max[1]

    def publish(self, wind_field, step_index: int = 0, time: float = 0.0,
                source: str = "") -> None:
        """Replace the shown field (host arrays; copied references, not re-read)."""
        self.wind_field = wind_field
        self.step_index = int(step_index)
        self.time = float(time)
        self.source = source
        self.version += 1
        self._geometry = None
        self._geometry_key = None

    def clear(self) -> None:
        self.wind_field = None
        self.step_index = 0
        self.time = 0.0
        self.source = ""
        self.version += 1
        self._geometry = None
        self._geometry_key = None

    def geometry(self, options: OverlayOptions) -> list[OverlayGeometry]:
        """The overlay geometry for ``options``, rebuilt only when the field or the options
        changed."""
        if self.wind_field is None:
            return []
        key = (self.version, options)
        if self._geometry is None or self._geometry_key != key:
            f = self.wind_field
            start = time.perf_counter()
            self._geometry = wind_overlay(f.u, f.v, f.w, f.pressure, f.solid, f.grid, options)
            self._geometry_key = key
            self.build_seconds = time.perf_counter() - start
        return self._geometry
