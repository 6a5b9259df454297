"""Wind-driven snow transport (saltation), NumPy reference (the test oracle).

Three stages per step:

1. ``surface_wind``: per wind column (ny_w, nx_w), the wind (m/s) at the centre of the
   column's lowest open cell, from the open faces beside it (a face on a wall carries the
   wall's zero normal velocity, not the wind), as a horizontal vector as long as the whole
   wind there (the vertical part of flow that follows a slope counts toward its speed).
2. ``saltation_flux``: per heightmap node (ny, nx), the friction velocity from the log law
   u* = ustar_per_speed * |U| (ustar_per_speed = kappa / ln(z_ref / z0)), and above the
   threshold u*_t the saltation flux of Pomeroy and Gray (1990),
   Q = 0.68 rho_air u*_t (u*^2 - u*_t^2) / (g u*), as a volume flux of snow along the
   surface wind: q = flux_scale * (u*^2 - u*_t^2) / u* (m^2/s; flux_scale folds in the
   constants, the snow density, the time-lapse factor and the user's strength).
3. ``drift_transport``: each 4-neighbour pair of surface nodes moves the donor-cell flux of
   its face, min(|q_face| dt / spacing, snow of the donor / 4) metres of depth, from the
   upwind node to the downwind one; the same amount leaves one node and enters the other,
   so snow volume is conserved exactly (to float32 rounding). A node gives at most a
   quarter of its snow through each face, so it never goes negative. The grid wraps
   around, as the flakes do (they leave downwind and come back upwind): the last and the
   first node of each row and column are a pair too, so the snow stays in the grid. (A
   zero-gradient edge, whose inflow took the edge node's own snow, let a deficit at the
   upwind edge creep downwind: the flakes that wrapped from the deeper downwind edge flew
   on over the shallower upwind one, and the supply-limited flux carried the cover's
   deficit on, about 1.5 m/s at these limits; 10-15 m of every scene's upwind edge held
   a quarter to four fifths of the snow further in.) Across the edges the storm's heading
   points through (``downwind_axis``), what leaves comes back spread evenly over the
   upwind edge's surface nodes, as a flake that leaves downwind comes back at a random
   crosswind place: an obstacle's drift wake, which starves the rows in line with it of
   saltating snow, does not come back around onto the fetch upwind of it.
"""
import math

import numpy as np

# One home for the shared constants and the wrap buffer's layout: kernels.contract.
from ..contract import (BARE_GROUND, GRID_STEP_FROM, NO_SURFACE, OPEN_SNOWFIELD,  # noqa: F401
                        WAKE_SAMPLES, WRAP, WRAP_THREADS, wrap_buffer_size)
from .sampling import sample_bilinear

F32 = np.float32


def surface_wind(u, v, w, fractions, wind_x, wind_y, scour=None, approach_speed=0.0,
                 heading_x=1.0, heading_y=0.0):
    """wind_x, wind_y (ny_w, nx_w) float32 m/s: the wind along the surface at each column's
    lowest open cell (the lowest with a face of open fraction A_f > 0, ``fractions`` =
    (frac_u, frac_v, frac_w) of the wind: with cut cells the air right over the terrain),
    as a horizontal vector: the direction of the A_f-weighted mean of its two u (and v)
    faces, the length of the whole wind with the w of its top face (when open): on a slope
    the air turns upward, and its speed along the surface is not lost. 0 where no
    horizontal face of that cell is open or the whole column is closed.

    With ``scour`` (ny_w, nx_w, from ``horseshoe_vortex``), a column under the vortex
    (scour > 1) gets scour * max(speed, ``approach_speed``) (m/s, the open fetch's surface
    wind): the vortex amplifies the bed stress of the approaching flow, not that of the
    air stagnating at the obstacle's face, whose resolved speed is near 0. Its direction
    is that of the resolved wind plus the unit heading (heading_x, heading_y) times the
    speed it lacks of ``approach_speed`` (where that sum blows along the heading, else the
    heading): the approach flow's direction where the resolved air stagnates, whose own
    direction there is noise (amplified to the approach flow's speed, it blew the snow
    along a fence's foot into cones), the resolved wind's where it is as fast. Other
    columns keep the resolved wind (times scour = 1)."""
    fu, fv, fw = (np.asarray(f, F32) for f in fractions)
    nz, ny, nx = fw.shape[0] - 1, fw.shape[1], fw.shape[2]
    cell_open = (((fu[:, :, :-1] + fu[:, :, 1:]) + (fv[:, :-1, :] + fv[:, 1:, :]))
                 + (fw[:-1] + fw[1:])) > 0
    lowest = np.argmax(cell_open, axis=0)          # first open cell from the bottom
    any_open = cell_open.any(axis=0)
    j, i = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    k = lowest

    def weighted(a, weight_a, b, weight_b):
        total = ((a * weight_a).astype(F32) + (b * weight_b).astype(F32)).astype(F32)
        count = (weight_a + weight_b).astype(F32)
        return np.where(count > 0, (total / np.where(count > 0, count, F32(1))).astype(F32),
                        F32(0)).astype(F32)

    wx = weighted(u[k, j, i], fu[k, j, i], u[k, j, i + 1], fu[k, j, i + 1])
    wy = weighted(v[k, j, i], fv[k, j, i], v[k, j + 1, i], fv[k, j + 1, i])
    wz = np.where(fw[k + 1, j, i] > 0, w[k + 1, j, i], F32(0)).astype(F32)
    horizontal = ((wx * wx).astype(F32) + (wy * wy).astype(F32)).astype(F32)
    safe = np.where(horizontal > 0, horizontal, F32(1))
    factor = np.sqrt(((horizontal + (wz * wz).astype(F32)) / safe).astype(F32)).astype(F32)
    wx = np.where(horizontal > 0, (wx * factor).astype(F32), wx)
    wy = np.where(horizontal > 0, (wy * factor).astype(F32), wy)
    if scour is not None:
        hx, hy = F32(heading_x), F32(heading_y)
        speed = np.sqrt(((wx * wx).astype(F32) + (wy * wy).astype(F32)).astype(F32)).astype(F32)
        # the direction: the resolved wind plus the approach flow's share that it lacks
        deficit = np.maximum((F32(approach_speed) - speed).astype(F32), F32(0)).astype(F32)
        vx = (wx + (deficit * hx).astype(F32)).astype(F32)
        vy = (wy + (deficit * hy).astype(F32)).astype(F32)
        length = np.sqrt(((vx * vx).astype(F32) + (vy * vy).astype(F32)).astype(F32)).astype(F32)
        along = ((vx * hx).astype(F32) + (vy * hy).astype(F32)).astype(F32)
        resolved = (length > 0) & (along > 0)
        safe = np.where(resolved, length, F32(1))
        dx = np.where(resolved, (vx / safe).astype(F32), hx).astype(F32)
        dy = np.where(resolved, (vy / safe).astype(F32), hy).astype(F32)
        magnitude = (scour * np.maximum(speed, F32(approach_speed))).astype(F32)
        band = scour > F32(1)
        wx = np.where(band, (dx * magnitude).astype(F32), (wx * scour).astype(F32))
        wy = np.where(band, (dy * magnitude).astype(F32), (wy * scour).astype(F32))
    wind_x[...] = np.where(any_open, wx, F32(0))
    wind_y[...] = np.where(any_open, wy, F32(0))


def saltation_flux(wind_x, wind_y, column_x0, column_y0, cell_size, hx0, hy0, spacing,
                   has_surface, ustar_per_speed, threshold, flux_scale, heading_x, heading_y,
                   flux_x, flux_y, height=None, snow_depth=None, bubble_top=None):
    """flux_x, flux_y (ny, nx) float32 m^2/s: the saltation volume flux at each heightmap node
    (origin (hx0, hy0), node ``spacing`` m) from the surface wind of the columns (centres at
    column_x0 + (i + 0.5) cell_size, ...; sampled bilinearly); 0 at open nodes, where
    u* <= threshold (m/s), and where the surface wind blows against the wind's heading
    (heading_x, heading_y), a unit vector: the reversed flow of a lee eddy is sheltered
    (the log law, made for attached flow, would overstate its shear). With ``bubble_top``
    (columns, from ``separation_bubble``) also 0 where height + snow_depth lies below it."""
    ny, nx = has_surface.shape
    half = F32(0.5) * F32(cell_size)
    x = F32(hx0) + np.arange(nx, dtype=F32)[None, :] * F32(spacing)
    y = F32(hy0) + np.arange(ny, dtype=F32)[:, None] * F32(spacing)
    x, y = np.broadcast_to(x, (ny, nx)), np.broadcast_to(y, (ny, nx))
    ox, oy = F32(F32(column_x0) + half), F32(F32(column_y0) + half)
    sx = sample_bilinear(wind_x, ox, oy, cell_size, x, y)
    sy = sample_bilinear(wind_y, ox, oy, cell_size, x, y)
    speed = np.sqrt((sx * sx + sy * sy).astype(F32)).astype(F32)
    ustar = (F32(ustar_per_speed) * speed).astype(F32)
    t = F32(threshold)
    along = (sx * F32(heading_x) + sy * F32(heading_y)).astype(F32)
    moving = has_surface & (ustar > t) & (along > 0)
    if bubble_top is not None:
        top = sample_bilinear(bubble_top, ox, oy, cell_size, x, y)
        moving &= (height + snow_depth).astype(F32) >= top
    safe_ustar = np.where(moving, ustar, F32(1))
    safe_speed = np.where(moving, speed, F32(1))
    q = (F32(flux_scale) * ((ustar * ustar - t * t).astype(F32) / safe_ustar)).astype(F32)
    per_speed = (q / safe_speed).astype(F32)
    flux_x[...] = np.where(moving, (per_speed * sx).astype(F32), F32(0))
    flux_y[...] = np.where(moving, (per_speed * sy).astype(F32), F32(0))


def _pair_transfer(q_low, q_high, snow_low, snow_high, surface_low, surface_high, both,
                   courant, max_rise):
    """Depth (m) each face moves toward the higher index (negative: toward the lower);
    nothing where the surface rises from donor to receiver by more than ``max_rise`` m
    (saltating snow does not climb a wall: it piles at its foot)."""
    face = (F32(0.5) * (q_low + q_high)).astype(F32)
    amount = (np.abs(face) * F32(courant)).astype(F32)
    donor_snow = np.where(face > 0, snow_low, snow_high)
    amount = np.minimum(amount, (F32(0.25) * donor_snow).astype(F32))
    rise = np.where(face > 0, (surface_high - surface_low).astype(F32),
                    (surface_low - surface_high).astype(F32))
    moves = both & (rise <= F32(max_rise))
    return np.where(moves, np.where(face > 0, amount, -amount), F32(0)).astype(F32)


def edge_sum(values):
    """Float32 sum of a 1-D array in the fixed order of the GPU's one-block reduction:
    ``WRAP_THREADS`` strided partial sums, each in index order, then a pairwise tree."""
    values = np.asarray(values, F32)
    rows = -(-values.size // WRAP_THREADS)
    padded = np.zeros(rows * WRAP_THREADS, F32)
    padded[:values.size] = values
    padded = padded.reshape(rows, WRAP_THREADS)
    partial = np.zeros(WRAP_THREADS, F32)
    for row in padded:
        partial = (partial + row).astype(F32)
    size = WRAP_THREADS
    while size > 1:
        size //= 2
        partial[:size] = (partial[:size] + partial[size:2 * size]).astype(F32)
    return F32(partial[0])


def _faces(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise):
    """(fx, fy): the depth each face moves toward +x (+y), fx[:, i] through the face left of
    node i, fx[:, 0] the wrap face between the last node (its low side) and the first."""
    s = snow_depth
    surface = (height + s).astype(F32)
    fx = _pair_transfer(np.roll(flux_x, 1, axis=1), flux_x, np.roll(s, 1, axis=1), s,
                        np.roll(surface, 1, axis=1), surface,
                        np.roll(has_surface, 1, axis=1) & has_surface, courant, max_rise)
    fy = _pair_transfer(np.roll(flux_y, 1, axis=0), flux_y, np.roll(s, 1, axis=0), s,
                        np.roll(surface, 1, axis=0), surface,
                        np.roll(has_surface, 1, axis=0) & has_surface, courant, max_rise)
    return fx, fy


# ``boundary`` of ``drift_transport`` (the same numbers as the flakes' ``Inflow.mode``,
# settings.upwind_fetch): the edges across the wind wrap around (WRAP), or they are open:
# an open snowfield upwind (OPEN_SNOWFIELD) or bare ground (BARE_GROUND).


def _boundary_faces(q_first, q_last, snow_first, snow_last, surface_first, surface_last,
                    courant, inflow_limit):
    """(first, last) float32 m: the transfers toward the higher index through the open faces
    before the first and after the last node of each line along the downwind axis. The
    face's flux is the edge node's own (the open land beyond blows as the edge does): what
    it carries out of the grid is limited by the edge node's snow (a quarter, as a pair's
    donor), what it carries in by ``inflow_limit`` (m: a quarter of the open snowfield's
    depth; 0 for bare ground). 0 at nodes without a surface."""
    zero = F32(0)
    c = F32(courant)
    amount_first = (np.abs(q_first) * c).astype(F32)
    amount_last = (np.abs(q_last) * c).astype(F32)
    limit = F32(inflow_limit)
    first = np.where(q_first > 0, np.minimum(amount_first, limit),
                     -np.minimum(amount_first, (F32(0.25) * snow_first).astype(F32)))
    last = np.where(q_last > 0, np.minimum(amount_last, (F32(0.25) * snow_last).astype(F32)),
                    -np.minimum(amount_last, limit))
    return (np.where(surface_first, first, zero).astype(F32),
            np.where(surface_last, last, zero).astype(F32))


def _boundary_books(first, last):
    """(in, out) float32 m of depth summed over the edge (``edge_sum``): what the open faces
    ``first``, ``last`` (``_boundary_faces``) carried into and out of the grid."""
    zero = F32(0)
    into = (np.maximum(first, zero) + np.maximum(-last, zero)).astype(F32)
    out = (np.maximum(-first, zero) + np.maximum(last, zero)).astype(F32)
    return edge_sum(into), edge_sum(out)


def _wrap_shares(face, low, high):
    """(share toward the first edge, share toward the last), float32 m: what the wrap faces
    ``face`` (m, positive toward the first edge) carry, summed (``edge_sum``) and shared
    evenly among the receiving edge's surface nodes (bool ``low``, ``high``)."""
    zero = F32(0)
    forward = edge_sum(np.maximum(face, zero))
    backward = edge_sum(np.maximum(-face, zero))
    low_count, high_count = int(np.count_nonzero(low)), int(np.count_nonzero(high))
    return (F32(forward / F32(low_count)) if low_count else zero,
            F32(backward / F32(high_count)) if high_count else zero)


def drift_transport(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise,
                    snow_out, downwind_axis=-1, wrap=None, boundary=WRAP, inflow_limit=0.0,
                    books=None):
    """One transport step from ``snow_depth`` into ``snow_out`` (both (ny, nx) float32 m, must
    not alias) over terrain ``height`` (m); courant = dt / spacing (s/m); no transfer up a
    step of more than ``max_rise`` m (the repose slope times the spacing). The grid wraps
    around, as the flakes do: the last node of a row (column) and its first are a pair
    too, so what blows off the downwind edge comes in at the upwind one and the volume
    stays in the grid: snow_out = max(snow - outflow, 0) + inflow (fixed order, as the
    redistribution). With ``downwind_axis`` 1 (0) the x (y) edges' wrap faces instead
    carry what leaves evenly across the receiving edge: their inflow is left out above and
    each surface node of the first (last) edge then gains ``wrap[0]`` (``wrap[1]``), the
    wrap faces' sum over the edge (``edge_sum``) shared among the edge's surface nodes;
    ``wrap`` is a float32 buffer of ``wrap_buffer_size`` that receives the two shares.

    With ``boundary`` OPEN_SNOWFIELD or BARE_GROUND (and ``downwind_axis`` 0 or 1) the
    edges across that axis are open instead (``_boundary_faces``): snow blows in across
    the face before the first (or after the last) node at the edge node's flux, at most
    ``inflow_limit`` m per step (0 with BARE_GROUND), and out at the edge node's flux, at
    most a quarter of its snow; ``books`` (float64 (2,)) gains the step's inflow and
    outflow (m of depth summed over the edge's nodes; times the node area, m^3)."""
    zero = F32(0)
    s = snow_depth
    fx, fy = _faces(flux_x, flux_y, height, has_surface, snow_depth, courant, max_rise)
    left, right = fx, np.roll(fx, -1, axis=1)
    down, up = fy, np.roll(fy, -1, axis=0)
    if boundary in (OPEN_SNOWFIELD, BARE_GROUND) and downwind_axis in (0, 1):
        limit = F32(inflow_limit) if boundary == OPEN_SNOWFIELD else zero
        if downwind_axis == 1:
            first, last = _boundary_faces(flux_x[:, 0], flux_x[:, -1], s[:, 0], s[:, -1],
                                          has_surface[:, 0], has_surface[:, -1], courant, limit)
            left, right = left.copy(), right.copy()
            left[:, 0], right[:, -1] = first, last
        else:
            first, last = _boundary_faces(flux_y[0, :], flux_y[-1, :], s[0, :], s[-1, :],
                                          has_surface[0, :], has_surface[-1, :], courant, limit)
            down, up = down.copy(), up.copy()
            down[0, :], up[-1, :] = first, last
        into, out = _boundary_books(first, last)
        books[0] = np.float64(books[0]) + np.float64(into)
        books[1] = np.float64(books[1]) + np.float64(out)
        downwind_axis = -1                 # no wrap to share
    outflow = (np.maximum(-left, zero) + np.maximum(right, zero)).astype(F32)
    outflow = (outflow + np.maximum(-down, zero)).astype(F32)
    outflow = (outflow + np.maximum(up, zero)).astype(F32)
    gain_left, gain_right = np.maximum(left, zero), np.maximum(-right, zero)
    gain_down, gain_up = np.maximum(down, zero), np.maximum(-up, zero)
    if downwind_axis == 1:
        face, first, last = fx[:, 0], (slice(None), 0), (slice(None), -1)
        gain_left[first], gain_right[last] = zero, zero
    elif downwind_axis == 0:
        face, first, last = fy[0, :], (0, slice(None)), (-1, slice(None))
        gain_down[first], gain_up[last] = zero, zero
    inflow = (gain_left + gain_right).astype(F32)
    inflow = (inflow + gain_down).astype(F32)
    inflow = (inflow + gain_up).astype(F32)
    out = np.where(has_surface, (np.maximum(s - outflow, zero) + inflow).astype(F32),
                   s).astype(F32)
    if downwind_axis in (0, 1):
        share_first, share_last = _wrap_shares(face, has_surface[first], has_surface[last])
        wrap[0], wrap[1] = share_first, share_last
        out[first] = np.where(has_surface[first], (out[first] + share_first).astype(F32),
                              out[first])
        out[last] = np.where(has_surface[last], (out[last] + share_last).astype(F32),
                             out[last])
    snow_out[...] = out


def _column_index(coordinate, origin, cell_size, count):
    """Column of each coordinate, floor((c - origin) / cell_size); -1 when outside."""
    index = np.floor((coordinate - F32(origin)) * (F32(1.0) / F32(cell_size))).astype(np.int64)
    return np.where((index >= 0) & (index < count), index, -1)


def column_surface(height, snow_depth, has_surface, hx0, hy0, spacing, x0, y0, cell_size,
                   surface_out):
    """surface_out (ny_w, nx_w) float32 m: the highest surface (terrain + snow) of the
    heightmap nodes inside each wind column (node (i, j) lies in column
    floor((hx0 + i spacing - x0) / cell_size), ...), NO_SURFACE where there is none: thin
    obstacles such as fences keep their height on the coarser grid."""
    ny, nx = height.shape
    wny, wnx = surface_out.shape
    ci = _column_index((F32(hx0) + np.arange(nx, dtype=F32) * F32(spacing)).astype(F32), x0,
                       cell_size, wnx)
    cj = _column_index((F32(hy0) + np.arange(ny, dtype=F32) * F32(spacing)).astype(F32), y0,
                       cell_size, wny)
    surface = np.where(has_surface, (height + snow_depth).astype(F32), NO_SURFACE)
    jj, ii = np.meshgrid(cj, ci, indexing="ij")
    inside = (jj >= 0) & (ii >= 0)
    out = np.full((wny, wnx), NO_SURFACE, F32)
    np.maximum.at(out, (jj[inside], ii[inside]), surface[inside])
    surface_out[...] = out


def separation_bubble(column_height, x0, y0, cell_size, heading_x, heading_y, slope, rise,
                      edge, spread, max_distance, bubble_top):
    """The separated flow in the lee of obstacles, from the surface alone (the inviscid
    wind solver keeps flow attached behind sharp edges). ``column_height`` (ny_w, nx_w) m
    from ``column_surface``, columns centred at x0 + (i + 0.5) cell_size, ... For each
    column, march upwind (against the unit heading) in steps of one cell to
    ``max_distance`` m; at distance s the surface straight upwind, but at most the mean
    across a crosswind window of half-width ``spread`` * s (WAKE_SAMPLES points, odd: the
    middle one is straight upwind), lowered by ``slope`` * s, is a point of the dividing
    streamline leaving that obstacle (the mean shortens the wake of a narrow obstacle, the
    minimum keeps it as wide as the obstacle). Where the surface straight upwind tops a
    bluff face there (it stands at least ``edge`` * cell_size above the surface straight
    upwind one cell further) and that point stands a rise r above the column's own with
    s * slope < r, the streamline first climbs: it is raised by
    ``rise`` * s * (1 - s * slope / r), which is r (1 - x / L)(1 + rise x) above the column
    with x = s / r and L = 1 / slope (the bubble still closes at L heights, but peaks at
    (1 + rise L)^2 / (4 rise L) heights, near L / 2 - 1 / (2 rise) downwind). A smooth
    crest leaves no climb. ``bubble_top`` (ny_w, nx_w) float32 m:
    the highest such point; air below it (bilinear between column centres) is still, and
    a surface below it is sheltered. Where no obstacle shelters a column it lies below
    the surface."""
    ny, nx = column_height.shape
    half_cell = F32(F32(0.5) * F32(cell_size))
    ox, oy = F32(F32(x0) + half_cell), F32(F32(y0) + half_cell)
    x = ox + np.arange(nx, dtype=F32)[None, :] * F32(cell_size)
    y = oy + np.arange(ny, dtype=F32)[:, None] * F32(cell_size)
    x, y = np.broadcast_to(x, (ny, nx)).astype(F32), np.broadcast_to(y, (ny, nx)).astype(F32)
    hx, hy = F32(heading_x), F32(heading_y)
    here = np.asarray(column_height, F32)
    face = F32(F32(edge) * F32(cell_size))
    top = np.full((ny, nx), NO_SURFACE, F32)

    def upwind_surface(s):
        cx = (x - F32(s * hx)).astype(F32)
        cy = (y - F32(s * hy)).astype(F32)
        half = F32(F32(spread) * s)
        total = np.zeros((ny, nx), F32)
        for m in range(WAKE_SAMPLES):
            offset = F32(F32(F32(2 * m - (WAKE_SAMPLES - 1)) / F32(WAKE_SAMPLES - 1)) * half)
            px = (cx - F32(offset * hy)).astype(F32)
            py = (cy + F32(offset * hx)).astype(F32)
            value = sample_bilinear(column_height, ox, oy, cell_size, px, py)
            total = (total + value).astype(F32)
            if 2 * m == WAKE_SAMPLES - 1:
                centre = value
        return centre, np.minimum(centre, (total / F32(WAKE_SAMPLES)).astype(F32))

    # each point's line waits for the surface one cell further upwind (is its face bluff?)
    s = F32(cell_size)
    if s <= F32(max_distance):
        centre, upwind = upwind_surface(s)
    while s <= F32(max_distance):
        further_centre, further = upwind_surface(F32(s + F32(cell_size)))
        drop = F32(s * F32(slope))
        line = (upwind - drop).astype(F32)
        lift = (upwind - here).astype(F32)
        climbs = ((F32(rise) > 0) & (here != NO_SURFACE) & (lift > 0) & (drop < lift)
                  & ((centre - further_centre).astype(F32) >= face))
        ratio = (drop / np.where(climbs, lift, F32(1))).astype(F32)
        climb = (F32(F32(rise) * s) * (F32(1) - ratio)).astype(F32)
        line = np.where(climbs, (line + climb).astype(F32), line)
        top = np.maximum(top, line)
        centre, upwind = further_centre, further
        s = F32(s + F32(cell_size))
    bubble_top[...] = top


def _grid_step(component):
    """-1, 0 or 1: the grid step of one component of a unit vector (float32 comparisons,
    the same on every backend)."""
    component = F32(component)
    if component >= GRID_STEP_FROM:
        return 1
    return -1 if component <= -GRID_STEP_FROM else 0


def _shifted(h, di, dj):
    """h at (j + dj, i + di) for every column, NO_SURFACE outside the grid."""
    ny, nx = h.shape
    out = np.full((ny, nx), NO_SURFACE, F32)
    if abs(di) < nx and abs(dj) < ny:
        out[max(0, -dj):ny - max(0, dj), max(0, -di):nx - max(0, di)] = \
            h[max(0, dj):ny + min(0, dj), max(0, di):nx + min(0, di)]
    return out


def _inside(shape, di, dj):
    """True where (j + dj, i + di) lies in the grid."""
    ny, nx = shape
    j, i = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    return (i + di >= 0) & (i + di < nx) & (j + dj >= 0) & (j + dj < ny)


def horseshoe_vortex(column_height, cell_size, heading_x, heading_y, reach, gain, leg,
                     max_cells, scour):
    """The horseshoe vortex that wraps around the windward base of a bluff obstacle and
    trails downwind of its sides in two legs, from the surface alone (the inviscid wind
    solver has no boundary layer to roll it up). ``column_height`` (ny_w, nx_w) m from
    ``obstacle_surface``, columns ``cell_size`` m apart. For each column, every other
    column within ``max_cells`` (a square window) that rises above it (rise > 0 m):

    - if it does not lie upwind (its offset times the unit heading >= 0: the obstacle
      stands downwind or beside), at a distance d < reach * rise, gives
      1 + gain * (1 - d / (reach * rise)): largest at the obstacle's foot, 1 at ``reach``
      obstacle heights from it, and only where the rise is steeper than 1 / reach;
    - if it lies upwind, b = its distance along the heading behind it, and it is the
      obstacle's crosswind edge on this column's side (the next column from it toward this
      one, across the wind, rises at most half as much) with this column beside its track
      (crosswind offset c >= half a cell), the leg gives
      1 + gain * (1 - c / (reach * rise)) * (1 - b / (leg * rise)) for c < reach * rise and
      b < leg * rise: the band beside the obstacle carried on downwind, fading over
      ``leg`` obstacle heights; none straight behind it (the wake).

    ``scour`` (ny_w, nx_w) float32 >= 1: the largest of them (1 where none), the factor
    on the surface wind (surface_wind)."""
    ny, nx = column_height.shape
    h = np.asarray(column_height, F32)
    best = np.ones((ny, nx), F32)
    hx, hy = F32(heading_x), F32(heading_y)
    one, half = F32(1), F32(0.5)
    for dj in range(-max_cells, max_cells + 1):
        for di in range(-max_cells, max_cells + 1):
            if di == 0 and dj == 0:
                continue
            along = F32(F32(F32(di) * hx) + F32(F32(dj) * hy))
            other = _shifted(h, di, dj)
            rise = (other - h).astype(F32)
            limit = (F32(reach) * rise).astype(F32)
            near = (h != NO_SURFACE) & (other != NO_SURFACE) & (rise > 0)
            if along >= 0:
                distance = F32(F32(math.sqrt(di * di + dj * dj)) * F32(cell_size))
                near &= distance < limit
                safe = np.where(near, limit, one)
                factor = (one + (F32(gain) * (one - (distance / safe).astype(F32))
                                 ).astype(F32)).astype(F32)
            else:
                cross = F32(F32(F32(dj) * hx) - F32(F32(di) * hy))
                if abs(cross) < half:
                    continue
                sign = F32(-1) if cross > 0 else one    # from the obstacle toward here
                si, sj = _grid_step(F32(sign * -hy)), _grid_step(F32(sign * hx))
                beside = _shifted(h, di + si, dj + sj)
                lateral = F32(F32(abs(cross)) * F32(cell_size))
                behind = F32(F32(-along) * F32(cell_size))
                length = (F32(leg) * rise).astype(F32)
                edge = (beside == NO_SURFACE) | ((beside - h).astype(F32)
                                                 <= (half * rise).astype(F32))
                near &= _inside(h.shape, di + si, dj + sj) & edge & (lateral < limit) \
                    & (behind < length)
                safe_limit = np.where(near, limit, one)
                safe_length = np.where(near, length, one)
                fade = ((one - (lateral / safe_limit).astype(F32)).astype(F32)
                        * (one - (behind / safe_length).astype(F32)).astype(F32)).astype(F32)
                factor = (one + (F32(gain) * fade).astype(F32)).astype(F32)
            best = np.where(near, np.maximum(best, factor), best)
    scour[...] = best
