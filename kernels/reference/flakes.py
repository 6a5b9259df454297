"""Snowflake kernels, NumPy reference (the test oracle): plain vectorised float32 NumPy.

Per-flake state is struct-of-arrays, float32 ``pos_*``, ``vel_*`` (m, m/s), ``phase`` (rad),
uint32 ``respawn_count`` and ``flake_id``, all shape (N,), updated in place. Per-flake
constants (terminal speed, spiral radius and angular speed) are not stored: they are drawn
again each step from the counter-based generator with counter ``CONSTANT_COUNTER``.

Random streams (``random_uniform(seed, flake_id, counter, stream)``):

* counter ``0xFFFFFFFF``: stream 0 terminal speed, 1 spiral radius, 2 angular speed,
  3 angular-speed sign (fixed for the life of the flake).
* counter = respawn count (0 at initialisation): stream 4 x, 5 y, 6 z of the (re)spawn
  point, stream 7 initial spiral phase (initialisation only).
* counter = the simulation's step index: stream 8 whether a landing flake is lifted again,
  stream 9 the height it is lifted to (a flake lands at most once per step), stream 13
  the crosswind place where a flake that left downwind comes back (with the drift on).
* counter = an eddy node, (step index + flake id mod eddy_steps) // eddy_steps: streams 10,
  11, 12 the turbulent air velocity along x, y, z at that node (see below).

Blowing snow: a flake that lands where the surface wind's friction velocity u* exceeds the
threshold u*_t (and blows along the storm's heading, not in a lee eddy) is lifted again
with probability ``strength * (1 - u*_t^2 / u*^2)`` (the share of the surface stress above
the threshold) instead of settling: it restarts at a uniform height within one wind cell
above the ground with the local wind's velocity and does not count as a hit. Snow that
falls on scoured ground thus travels on with the wind until it lands in shelter. With
``grain_speed`` > 0 a lifted flake is a grain of blowing snow until it settles (the
``BLOWING`` bit of its respawn count): it falls at that terminal speed instead of its own.

Turbulence: with ``eddy_scale`` (von Karman's constant) > 0 each flake feels, on top of the
resolved wind, a random air velocity that is linear in time between independent nodes
``eddy_steps`` steps apart (a smooth path, no state): uniform node values of variance
sigma^2 = 2 K / T (T = eddy_steps dt) give the eddy diffusivity K = kappa u* l of the
surface layer, u* that of the wind column's surface wind and the mixing length l the
least of the height above the ground, ``mixing_height`` and the depth below the wind
grid's top (a lid). A mean velocity dK/dz / 2 (up near the ground, down under the lid)
keeps a well-mixed cloud well mixed: the other half of the random displacement model's
drift dK/dz comes from the eddies' own memory (their velocity is smooth, not white).
Sheltered air (the bubble) keeps its eddies: flakes that cross above an obstacle are
mixed down into its lee, as in a real wake. With eddies a flake never rises above the
grid's top.
"""
import numpy as np

from .rng import random_uniform
from .sampling import sample_bilinear, sample_wind

# One home for the streams and constants: kernels.contract.
from ..contract import (BARE_GROUND, BLOWING, CONSTANT_COUNTER, COUNT_BITS,  # noqa: F401
                        FRESH_LIFTS, FROM_UPWIND, GRAIN_LANDINGS, GRAIN_WEIGHT_BITS,
                        GRAIN_WEIGHT_SHIFT, GRAINS_ALOFT, LIFTED_EXITS, UPWIND_SETTLES,
                        INFLOW_HEIGHT_BINS, STREAM_INJECT, STREAM_INJECT_HEIGHT,
                        OMEGA_MAX, OMEGA_MIN, OPEN_LIMIT, OPEN_SNOWFIELD, SPAWN_MARGIN, SQRT3,
                        STREAM_EDDY_X, STREAM_EDDY_Y, STREAM_EDDY_Z, STREAM_LIFT,
                        STREAM_LIFT_HEIGHT, STREAM_OMEGA, STREAM_OMEGA_SIGN, STREAM_PHASE,
                        STREAM_RADIUS, STREAM_REENTRY, STREAM_TERMINAL_SPEED, STREAM_X,
                        STREAM_Y, STREAM_Z, TWO_PI, WRAP)
from ..contract import flake_kernels

f32 = np.float32


def flake_constants(seed, flake_id, vt_min, vt_max, spiral_radius):
    """Terminal speed Vt (m/s), spiral radius R (m) and signed angular speed w (rad/s)."""
    vt = f32(vt_min) + random_uniform(seed, flake_id, CONSTANT_COUNTER, STREAM_TERMINAL_SPEED) \
        * f32(f32(vt_max) - f32(vt_min))
    radius = random_uniform(seed, flake_id, CONSTANT_COUNTER, STREAM_RADIUS) * f32(spiral_radius)
    omega = OMEGA_MIN + random_uniform(seed, flake_id, CONSTANT_COUNTER, STREAM_OMEGA) \
        * f32(OMEGA_MAX - OMEGA_MIN)
    sign = random_uniform(seed, flake_id, CONSTANT_COUNTER, STREAM_OMEGA_SIGN)
    omega = np.where(sign < f32(0.5), -omega, omega).astype(np.float32)
    return vt.astype(np.float32), radius.astype(np.float32), omega


def _ground(height, snow_depth, hx0, hy0, spacing, x, y):
    return (sample_bilinear(height, hx0, hy0, spacing, x, y)
            + sample_bilinear(snow_depth, hx0, hy0, spacing, x, y)).astype(np.float32)


def _bubble_top(bubble_top, wx0, wy0, cell_size, x, y):
    """Bilinear top of the separation bubble (m) at (x, y), from the wind columns' centres."""
    half = f32(f32(0.5) * f32(cell_size))
    return sample_bilinear(bubble_top, f32(f32(wx0) + half), f32(f32(wy0) + half), cell_size, x, y)


def _nearest_node(coordinate, origin, inv_spacing, count):
    """Index of the heightmap node nearest to ``coordinate`` (m) along one axis, clamped."""
    return np.clip(np.floor((coordinate - f32(origin)) * inv_spacing + f32(0.5)), 0,
                   count - 1).astype(np.int64)


def _spawn_xy(seed, flake_id, counter, wx0, wy0, length_x, length_y):
    x = f32(wx0) + random_uniform(seed, flake_id, counter, STREAM_X) * f32(length_x)
    y = f32(wy0) + random_uniform(seed, flake_id, counter, STREAM_Y) * f32(length_y)
    return x.astype(np.float32), y.astype(np.float32)


# ``inflow_mode`` (the upwind fetch, settings.upwind_fetch; kernels.contract.Inflow): the
# domain wraps around along the wind (WRAP, what leaves downwind comes back upwind), or it
# is a piece of an open landscape (OPEN_SNOWFIELD: flakes come in from the sky upwind and
# landings upwind of the terrain may be lifted and blow in as grains; BARE_GROUND: the
# same snowfall, no blowing snow from upwind).


def _target_xy(seed, flake_id, counter, wx0, wy0, length_x, length_y, inflow_x, inflow_y,
               margin):
    """The landing target of a (re)spawned flake with an open fetch: uniform over the wind
    domain lengthened by ``margin`` m at both ends along the wind's axis (x when |inflow_x|
    >= |inflow_y|), across it over the domain."""
    rx = random_uniform(seed, flake_id, counter, STREAM_X)
    ry = random_uniform(seed, flake_id, counter, STREAM_Y)
    m = f32(margin)
    if abs(f32(inflow_x)) >= abs(f32(inflow_y)):
        low, span = f32(f32(wx0) - m), f32(f32(length_x) + f32(m + m))
        return ((low + (rx * span).astype(np.float32)).astype(np.float32),
                (f32(wy0) + (ry * f32(length_y)).astype(np.float32)).astype(np.float32))
    low, span = f32(f32(wy0) - m), f32(f32(length_y) + f32(m + m))
    return ((f32(wx0) + (rx * f32(length_x)).astype(np.float32)).astype(np.float32),
            (low + (ry * span).astype(np.float32)).astype(np.float32))


def _upwind_of(x, y, fall, vt, wx0, wy0, length_x, length_y, inflow_x, inflow_y):
    """(x, y) moved upwind by fall * (inflow_x, inflow_y) / vt (m: the way the wind carries
    a flake of terminal speed vt while it falls ``fall`` m), the crosswind coordinate
    wrapped into the domain (the terrain goes on sideways, periodically)."""
    dx = ((fall * f32(inflow_x)).astype(np.float32) / vt).astype(np.float32)
    dy = ((fall * f32(inflow_y)).astype(np.float32) / vt).astype(np.float32)
    x = (x - dx).astype(np.float32)
    y = (y - dy).astype(np.float32)
    if abs(f32(inflow_x)) >= abs(f32(inflow_y)):
        return x, _wrap(y, f32(wy0), f32(length_y))
    return _wrap(x, f32(wx0), f32(length_x)), y


def _initialize_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase,
                     respawn_count, u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth,
                     hx0, hy0, spacing, seed, vt_min, vt_max, spiral_radius, inflow_mode=0,
                     inflow_x=0.0, inflow_y=0.0, margin=0.0):
    """Place every flake (counter 0): XY uniform over the wind domain, z uniform between
    the ground (+ a small margin) and the top, velocity = local wind + (0, 0, -Vt). With an
    open upwind fetch (``inflow_mode`` OPEN_SNOWFIELD or BARE_GROUND) the XY point drawn is
    the flake's landing target, uniform over the domain lengthened by ``margin`` m at both
    ends along the wind's axis, and the flake starts (z - ground) * (inflow_x, inflow_y) /
    Vt upwind of it (``step_flakes``), or above it where that point is below the ground (a
    ridge between)."""
    nz, ny, nx = u.shape[0], u.shape[1], u.shape[2] - 1
    h = f32(cell_size)
    top = f32(f32(wz0) + f32(nz) * h)
    vt, _radius, _omega = flake_constants(seed, flake_id, vt_min, vt_max, spiral_radius)
    length_x, length_y = f32(f32(nx) * h), f32(f32(ny) * h)
    opened = int(inflow_mode) in (OPEN_SNOWFIELD, BARE_GROUND)
    if opened:
        x, y = _target_xy(seed, flake_id, 0, wx0, wy0, length_x, length_y, inflow_x, inflow_y,
                          margin)
    else:
        x, y = _spawn_xy(seed, flake_id, 0, wx0, wy0, length_x, length_y)
    low = np.maximum(_ground(height, snow_depth, hx0, hy0, spacing, x, y), f32(wz0)) + SPAWN_MARGIN * h
    low = np.minimum(low, top - h).astype(np.float32)
    z = (low + random_uniform(seed, flake_id, 0, STREAM_Z) * (top - low)).astype(np.float32)
    if opened:
        # a flake above its landing target starts as far upwind as the wind carries it
        # while it falls to the ground there, unless that is inside the terrain upwind (a
        # ridge between): then it starts above its target
        fall = (z - low).astype(np.float32)
        sx, sy = _upwind_of(x, y, fall, vt, wx0, wy0, length_x, length_y, inflow_x, inflow_y)
        clear = _ground(height, snow_depth, hx0, hy0, spacing, sx, sy) < z
        x, y = np.where(clear, sx, x), np.where(clear, sy, y)
    wind_x, wind_y, wind_z = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
    pos_x[:], pos_y[:], pos_z[:] = x, y, z
    vel_x[:], vel_y[:], vel_z[:] = wind_x, wind_y, wind_z - vt
    phase[:] = random_uniform(seed, flake_id, 0, STREAM_PHASE) * TWO_PI
    respawn_count[:] = 0


def column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed):
    """(sx, sy, u*) float32: the surface wind (m/s) of the wind column holding (x, y)
    (clamped to the grid) and its friction velocity ustar_per_speed * |(sx, sy)|."""
    ny, nx = surface_x.shape
    inv = f32(1.0) / f32(cell_size)
    i = np.clip(np.floor((x - f32(wx0)) * inv), 0, nx - 1).astype(np.int64)
    j = np.clip(np.floor((y - f32(wy0)) * inv), 0, ny - 1).astype(np.int64)
    sx, sy = surface_x[j, i], surface_y[j, i]
    ustar = (f32(ustar_per_speed) * np.sqrt((sx * sx + sy * sy).astype(np.float32))).astype(np.float32)
    return sx, sy, ustar


def eddy_velocity(seed, flake_id, step_index, eddy_steps, eddy_scale, mixing_height, dt,
                  ustar, above_ground, below_top):
    """(ex, ey, ez) float32 m/s: the turbulent air velocity a flake feels in step
    ``step_index`` (module docstring), ez including the mean velocity dK/dz / 2. ``ustar``
    (m/s), ``above_ground`` and ``below_top`` (m, to the wind grid's top) at the flake's
    position before the step."""
    steps = np.uint32(max(int(eddy_steps), 1))
    shifted = (np.uint32(step_index) + flake_id.astype(np.uint32) % steps).astype(np.uint32)
    node = (shifted // steps).astype(np.uint32)
    after = (node + np.uint32(1)).astype(np.uint32)
    frac = ((shifted % steps).astype(np.float32) / f32(steps)).astype(np.float32)
    one, two = f32(1.0), f32(2.0)
    d = np.maximum(above_ground, f32(0.0)).astype(np.float32)
    lid = np.maximum(below_top, f32(0.0)).astype(np.float32)
    ground_wins = (d <= f32(mixing_height)) & (d <= lid)
    lid_wins = ~ground_wins & (lid < f32(mixing_height))
    mixing = np.where(ground_wins, d, np.where(lid_wins, lid, f32(mixing_height))).astype(np.float32)
    gradient = (f32(eddy_scale) * ustar).astype(np.float32)            # |dK/dz| = kappa u*
    diffusivity = (gradient * mixing).astype(np.float32)
    half_gradient = (f32(0.5) * gradient).astype(np.float32)
    period = (f32(steps) * f32(dt)).astype(np.float32)
    sigma = (np.sqrt(((two * diffusivity).astype(np.float32) / period).astype(np.float32))
             * SQRT3).astype(np.float32)
    out = []
    for stream in (STREAM_EDDY_X, STREAM_EDDY_Y, STREAM_EDDY_Z):
        a = (two * random_uniform(seed, flake_id, node, stream) - one).astype(np.float32)
        b = (two * random_uniform(seed, flake_id, after, stream) - one).astype(np.float32)
        mixed = ((one - frac) * a + frac * b).astype(np.float32)
        out.append((sigma * mixed).astype(np.float32))
    out[2] = np.where(ground_wins, (out[2] + half_gradient).astype(np.float32),
                      np.where(lid_wins, (out[2] - half_gradient).astype(np.float32),
                               out[2])).astype(np.float32)
    return tuple(out)


def grain_flights(speed, ustar, cell_size, column, dt, eddy_scale, mixing_height, eddy_steps,
                  grain_speed, gravity, steps, travelled, crossings):
    """Flights of ``samples`` = len(``travelled``) grains of blowing snow over level open ground under a wind of
    ``speed`` m/s along x at every height and friction velocity ``ustar`` m/s (the open
    fetch of snow_addon.suspension). Grain n (seed 0, id n) starts at a uniform height
    within one cell (``cell_size`` m; stream STREAM_LIFT_HEIGHT, counter 0) with the wind's
    velocity, then steps ``dt`` s at a time with the flakes' drag (terminal speed
    ``grain_speed``), gravity and eddies (``eddy_velocity``, step index = step number,
    ``column`` m from the ground to the lid) until it lands (z < 0) or ``steps`` have run.
    Writes float64 ``travelled`` (samples,) and ``crossings`` (samples, INFLOW_HEIGHT_BINS):
    the metres each grain moved downwind, and the same per whole cell of its height at the
    start of each step (the last bin takes the rest), each summed in step order."""
    samples = travelled.shape[0]
    ids = np.arange(samples, dtype=np.uint32)
    h, dt32, fall, g = f32(cell_size), f32(dt), f32(grain_speed), f32(gravity)
    top, wind = f32(column), f32(speed)
    z = (random_uniform(0, ids, 0, STREAM_LIFT_HEIGHT) * h).astype(f32)
    vx = np.full(ids.size, wind)
    vy, vz = np.zeros(ids.size, f32), np.zeros(ids.size, f32)
    travelled[...] = 0.0
    crossings[...] = 0.0
    aloft = np.arange(ids.size)
    for step in range(int(steps)):
        if aloft.size == 0:
            break
        za = z[aloft]
        ex, ey, ez = eddy_velocity(0, ids[aloft], step, eddy_steps, eddy_scale, mixing_height,
                                   dt32, np.full(aloft.size, f32(ustar)), za,
                                   (top - za).astype(f32))
        wind_x = (wind + ex).astype(f32)
        old_x, old_y, old_z = vx[aloft], vy[aloft], vz[aloft]
        rx, ry, rz = wind_x - old_x, ey - old_y, ez - old_z
        k = (g * np.sqrt(rx * rx + ry * ry + rz * rz) / (fall * fall)).astype(f32)
        denominator = (f32(1.0) + k * dt32).astype(f32)
        new_x = ((old_x + dt32 * (k * wind_x)) / denominator).astype(f32)
        new_y = ((old_y + dt32 * (k * ey)) / denominator).astype(f32)
        new_z = ((old_z + dt32 * (k * ez - g)) / denominator).astype(f32)
        advance = (f32(0.5) * (old_x + new_x) * dt32).astype(f32)
        travelled[aloft] += advance
        cells = np.clip(np.floor(za / h), 0, INFLOW_HEIGHT_BINS - 1).astype(np.int64)
        crossings[aloft, cells] += advance
        za = np.minimum((za + f32(0.5) * (old_z + new_z) * dt32).astype(f32), top)
        z[aloft], vx[aloft], vy[aloft], vz[aloft] = za, new_x, new_y, new_z
        aloft = aloft[za >= 0.0]


def lift_share(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed, threshold,
               heading_x, heading_y, strength):
    """Probability (float32) that snow landing at (x, y) is lifted again: strength *
    (1 - u*_t^2 / u*^2) where u* = ustar_per_speed * |surface wind of the wind column
    holding (x, y)| exceeds ``threshold`` and that wind blows along the heading; else 0.
    ``surface_x``, ``surface_y`` (ny_w, nx_w) m/s as kernels.reference.drift.surface_wind."""
    sx, sy, ustar = column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed)
    along = (sx * f32(heading_x) + sy * f32(heading_y)).astype(np.float32)
    t = f32(threshold)
    moving = (ustar > t) & (along > f32(0.0))
    safe = np.where(moving, ustar, f32(1.0)).astype(np.float32)
    share = (f32(strength) * (((safe * safe).astype(np.float32) - f32(t * t)) / (safe * safe).astype(np.float32))).astype(np.float32)
    return np.where(moving, share, f32(0.0)).astype(np.float32)


def _step_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count,
               u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth, hx0, hy0, spacing,
               hit_counts, seed, vt_min, vt_max, spiral_radius, gravity, dt,
               surface_x=None, surface_y=None, ustar_per_speed=0.0, threshold=0.0,
               heading_x=1.0, heading_y=0.0, lift_strength=0.0, step_index=0,
               bubble_top=None, eddy_scale=0.0, mixing_height=10.0, eddy_steps=24,
               grain_speed=0.0, grain_count=None, eddy_floor=0.0, inflow_mode=0,
               inflow_x=0.0, inflow_y=0.0, margin=0.0,
               inflow_share=0.0, inflow_exponent=0, inflow_heights=None):
    """One step of every flake: sample the wind, integrate drag (semi-implicit), gravity
    and the spiral, wrap sideways, collide with height + snow_depth (+1 in int32
    ``hit_counts[ny, nx]`` at the nearest node, or at the foot of a wall it struck, then
    respawn), respawn below the grid.
    With ``lift_strength`` > 0 a landing flake may be lifted again instead (blowing snow,
    see the module docstring and ``lift_share``); ``step_index`` seeds that draw. With
    ``bubble_top`` (wind columns, m, from kernels.reference.drift.separation_bubble) a
    flake below the bubble's top feels still air, and none is lifted where the ground lies
    below it. With ``eddy_scale`` > 0 (and the surface wind) the flakes feel the surface
    layer's eddies (``eddy_velocity``; ``mixing_height`` m, ``eddy_steps`` per node), with
    u* at least ``eddy_floor`` m/s (the open fetch's: a wake is no calmer than the fetch
    upwind of its obstacle). With ``grain_speed`` > 0 (m/s) lifted flakes fall at it until
    they settle, and
    ``grain_count`` (int32 (GRAIN_COUNT_SLOTS,), when given) gains the number of grains
    aloft after the step (StepDiagnostics.grains_aloft), of grains that settled on the
    terrain, of fresh flakes lifted off it, of grains from upwind that settled on the
    terrain and of grains lifted off it that ended without settling on it
    (kernels.contract.GRAINS_ALOFT ...).

    With ``inflow_mode`` OPEN_SNOWFIELD or BARE_GROUND the domain is a piece of an open
    landscape along the wind's axis (x when |inflow_x| >= |inflow_y|; across it the flakes
    still wrap): a flake does not wrap along it. Outside the domain it flies on in the
    wind of the domain's edge (the wind sampled there is clamped) and lands on the edge's
    ground (no hit: it landed upwind of the terrain; with OPEN_SNOWFIELD it may be lifted
    again there, the blowing snow of the open fetch), and it respawns without a hit once
    it is downwind of the domain. A flake respawns above its landing target
    (``_target_xy``: uniform over the domain lengthened by ``margin`` m at both ends along
    the axis) moved upwind by its fall to the ground
    at the target times (inflow_x, inflow_y) / Vt (m; ``inflow`` the wind before gusts,
    m/s), so that the snowfall lands on every part of the terrain, its upwind edge too, as
    from the sky over an endless snowfield.

    With OPEN_SNOWFIELD, grains and ``inflow_share`` > 0 the suspended snow of the open
    snowfield upwind comes in across the upwind edge at its equilibrium transport
    (snow_addon.suspension): each respawning flake enters instead as a grain with
    probability ``inflow_share``, standing for 2^``inflow_exponent`` grains, at a random
    crosswind place, up to a step's travel of the inflow wind inside the edge, at a height
    above the ground drawn from ``inflow_heights`` (int32 (INFLOW_HEIGHT_BINS,), whole wind
    cells: ``injection_bin``), with the wind's velocity; it carries FROM_UPWIND until it
    respawns. Landings outside the domain are then never lifted: the open snowfield's
    blowing snow is what comes in across the edge."""
    nz, ny, nx = u.shape[0], u.shape[1], u.shape[2] - 1
    hny, hnx = height.shape
    h = f32(cell_size)
    g, dt = f32(gravity), f32(dt)
    one, half = f32(1.0), f32(0.5)
    vt, radius, omega = flake_constants(seed, flake_id, vt_min, vt_max, spiral_radius)
    grains = f32(grain_speed) > f32(0.0)
    was_grain = (respawn_count & BLOWING) != 0
    weight = grain_weight(respawn_count)
    fall = vt
    if grains:
        fall = np.where(was_grain, f32(grain_speed), vt).astype(np.float32)

    x, y, z = pos_x.copy(), pos_y.copy(), pos_z.copy()
    vx, vy, vz = vel_x.copy(), vel_y.copy(), vel_z.copy()
    wind_x, wind_y, wind_z = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
    if bubble_top is not None:
        moving_air = z >= _bubble_top(bubble_top, wx0, wy0, cell_size, x, y)
        wind_x, wind_y, wind_z = (np.where(moving_air, c, f32(0.0)).astype(np.float32)
                                  for c in (wind_x, wind_y, wind_z))
    if surface_x is None:
        eddy_scale = 0.0                   # the eddies need the surface wind's u*
    if f32(eddy_scale) > f32(0.0):
        _sx, _sy, ustar = column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y,
                                      ustar_per_speed)
        ustar = np.maximum(ustar, f32(eddy_floor)).astype(np.float32)
        above = (z - _ground(height, snow_depth, hx0, hy0, spacing, x, y)).astype(np.float32)
        below_top = (f32(f32(wz0) + f32(nz) * h) - z).astype(np.float32)
        ex, ey, ez = eddy_velocity(seed, flake_id, step_index, eddy_steps, eddy_scale,
                                   mixing_height, dt, ustar, above, below_top)
        wind_x = (wind_x + ex).astype(np.float32)
        wind_y = (wind_y + ey).astype(np.float32)
        wind_z = (wind_z + ez).astype(np.float32)
    # drag linearised about the old relative velocity, solved implicitly for v_new
    rx, ry, rz = wind_x - vx, wind_y - vy, wind_z - vz
    k = (g * np.sqrt(rx * rx + ry * ry + rz * rz) / (fall * fall)).astype(np.float32)
    denominator = (one + k * dt).astype(np.float32)
    nvx = ((vx + dt * (k * wind_x)) / denominator).astype(np.float32)
    nvy = ((vy + dt * (k * wind_y)) / denominator).astype(np.float32)
    nvz = ((vz + dt * (k * wind_z - g)) / denominator).astype(np.float32)
    # spiral lift from the new relative speed, at the old phase
    rx, ry, rz = wind_x - nvx, wind_y - nvy, wind_z - nvz
    relative_speed = np.sqrt(rx * rx + ry * ry + rz * rz)
    speed = np.maximum(np.sqrt(nvx * nvx + nvy * nvy + nvz * nvz), one)
    spiral = (relative_speed / speed * omega * radius).astype(np.float32)
    th = phase.astype(np.float64)
    circle_x = (-spiral * np.sin(th).astype(np.float32)).astype(np.float32)
    circle_y = (spiral * np.cos(th).astype(np.float32)).astype(np.float32)
    x = (x + (half * (vx + nvx) + circle_x) * dt).astype(np.float32)
    y = (y + (half * (vy + nvy) + circle_y) * dt).astype(np.float32)
    z = (z + half * (vz + nvz) * dt).astype(np.float32)
    if f32(eddy_scale) > f32(0.0):
        z = np.minimum(z, f32(f32(wz0) + f32(nz) * h)).astype(np.float32)
    new_phase = (phase + omega * dt).astype(np.float32)
    new_phase = (new_phase - TWO_PI * np.floor(new_phase / TWO_PI)).astype(np.float32)

    # sideways wrap into [x0, x0 + nx h)
    length_x, length_y = f32(f32(nx) * h), f32(f32(ny) * h)
    out_x = (x < f32(wx0)) | (x >= f32(f32(wx0) + length_x))
    out_y = (y < f32(wy0)) | (y >= f32(f32(wy0) + length_y))
    opened = int(inflow_mode) in (OPEN_SNOWFIELD, BARE_GROUND)
    outside = np.zeros(x.shape, bool)
    beyond = outside
    if opened:
        # open along the wind's axis: no wrap there; a flake downwind of the domain is done
        if abs(f32(inflow_x)) >= abs(f32(inflow_y)):
            y = _wrap(y, f32(wy0), length_y)
            outside, ahead = out_x, f32(inflow_x)
            past = np.where(ahead > 0, x >= f32(f32(wx0) + length_x),
                            np.where(ahead < 0, x < f32(wx0), True))
        else:
            x = _wrap(x, f32(wx0), length_x)
            outside, ahead = out_y, f32(inflow_y)
            past = np.where(ahead > 0, y >= f32(f32(wy0) + length_y),
                            np.where(ahead < 0, y < f32(wy0), True))
        beyond = outside & past
    else:
        x = _wrap(x, f32(wx0), length_x)
        y = _wrap(y, f32(wy0), length_y)
    if surface_x is not None and not opened:
        # a flake that leaves downwind comes back upwind at a random crosswind place, so an
        # obstacle's wake does not wrap around onto the ground upwind of it
        draw = random_uniform(seed, flake_id, np.uint32(step_index), STREAM_REENTRY)
        if abs(f32(heading_x)) >= abs(f32(heading_y)):
            y = np.where(out_x, (f32(wy0) + draw * length_y).astype(np.float32), y)
        else:
            x = np.where(out_y, (f32(wx0) + draw * length_x).astype(np.float32), x)
        x, y = x.astype(np.float32), y.astype(np.float32)

    # collision with the ground (terrain + snow), then the bottom of the wind grid
    ground = _ground(height, snow_depth, hx0, hy0, spacing, x, y)
    inv = one / f32(spacing)
    ni, nj = _nearest_node(x, hx0, inv, hnx), _nearest_node(y, hy0, inv, hny)
    hit = (z < ground) & (height[nj, ni] > OPEN_LIMIT)
    # a flake that struck a wall (its nearest node stands more than a spacing above it)
    # slides down to the foot on the side it came from: the node nearest its start of
    # step, where that is lower (not for a flake that wrapped)
    oi, oj = _nearest_node(pos_x, hx0, inv, hnx), _nearest_node(pos_y, hy0, inv, hny)
    surface = (height[nj, ni] + snow_depth[nj, ni]).astype(np.float32)
    foot = (~(out_x | out_y) & ((surface - z).astype(np.float32) > f32(spacing))
            & ((height[oj, oi] + snow_depth[oj, oi]).astype(np.float32) < surface))
    ni, nj = np.where(foot, oi, ni), np.where(foot, oj, nj)
    entering = (opened and int(inflow_mode) == OPEN_SNOWFIELD and grains and f32(ahead) != f32(0.0)
                and f32(inflow_share) > f32(0.0) and inflow_heights is not None)
    if f32(lift_strength) > f32(0.0):
        counter = np.uint32(step_index)
        share = lift_share(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed,
                           threshold, heading_x, heading_y, lift_strength)
        lifted = hit & (random_uniform(seed, flake_id, counter, STREAM_LIFT) < share)
        if bubble_top is not None:
            lifted &= ground >= _bubble_top(bubble_top, wx0, wy0, cell_size, x, y)
        if opened:
            lifted &= ~outside             # upwind blowing snow enters across the edge
        if np.any(lifted):
            lz = (ground[lifted] + random_uniform(seed, flake_id[lifted], counter,
                                                  STREAM_LIFT_HEIGHT) * h).astype(np.float32)
            lwx, lwy, lwz = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x[lifted],
                                        y[lifted], lz)
            z[lifted] = lz
            nvx[lifted], nvy[lifted], nvz[lifted] = lwx, lwy, lwz
            if grains:
                respawn_count[lifted] |= BLOWING
        hit = hit & ~lifted
    else:
        lifted = np.zeros(x.shape, bool)
    landed = hit & ~outside                # a landing outside the domain is no hit
    np.add.at(hit_counts, (nj[landed], ni[landed]), weight[landed])
    if grains and grain_count is not None:
        grain_count[GRAIN_LANDINGS] += np.int32(weight[landed & was_grain].sum())
        from_upwind = (respawn_count & FROM_UPWIND) != 0
        grain_count[UPWIND_SETTLES] += np.int32(weight[landed & was_grain & from_upwind].sum())
        grain_count[FRESH_LIFTS] += np.int32(np.count_nonzero(lifted & ~was_grain & ~outside))
    respawn = hit | (z < f32(wz0)) | beyond
    if grains and grain_count is not None:
        # grains lifted off the terrain that end here without settling on it: they left the
        # domain or landed outside it (a fresh flake lifted in this step counts too)
        exits = respawn & ~landed & ((respawn_count & BLOWING) != 0) & \
            ((respawn_count & FROM_UPWIND) == 0)
        grain_count[LIFTED_EXITS] += np.int32(weight[exits].sum())

    pos_x[:], pos_y[:], pos_z[:] = x, y, z
    vel_x[:], vel_y[:], vel_z[:] = nvx, nvy, nvz
    phase[:] = new_phase
    if np.any(respawn):
        ids = flake_id[respawn]
        counter = ((respawn_count[respawn] & COUNT_BITS) + np.uint32(1)).astype(np.uint32)
        top = f32(f32(wz0) + f32(nz) * h)
        sz = ((top - h) + random_uniform(seed, ids, counter, STREAM_Z) * h).astype(np.float32)
        if opened:
            sx, sy = _target_xy(seed, ids, counter, wx0, wy0, length_x, length_y, inflow_x,
                                inflow_y, margin)
            # as far upwind as the wind carries it while it falls to its target's ground
            fall = np.maximum(sz - np.maximum(_ground(height, snow_depth, hx0, hy0, spacing,
                                                      sx, sy), f32(wz0)), f32(0.0))
            sx, sy = _upwind_of(sx, sy, fall.astype(np.float32), vt[respawn], wx0, wy0,
                                length_x, length_y, inflow_x, inflow_y)
        else:
            sx, sy = _spawn_xy(seed, ids, counter, wx0, wy0, f32(f32(nx) * h),
                               f32(f32(ny) * h))
        swx, swy, swz = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, sx, sy, sz)
        swz = (swz - vt[respawn]).astype(np.float32)
        if entering:
            along_x = abs(f32(inflow_x)) >= abs(f32(inflow_y))
            origin, length = (f32(wx0), length_x) if along_x else (f32(wy0), length_y)
            enter = random_uniform(seed, ids, counter, STREAM_INJECT) < f32(inflow_share)
            if np.any(enter):
                ex, ey, ez = _entry_point(seed, ids[enter], counter[enter], inflow_heights,
                                          along_x, origin, length, ahead, dt, wx0, wy0,
                                          length_x, length_y, h, top, height, snow_depth, hx0,
                                          hy0, spacing)
                sx[enter], sy[enter], sz[enter] = ex, ey, ez
                swx[enter], swy[enter], swz[enter] = sample_wind(u, v, w, wx0, wy0, wz0,
                                                                 cell_size, ex, ey, ez)
                counter[enter] |= (BLOWING | FROM_UPWIND
                                   | np.uint32(int(inflow_exponent) << GRAIN_WEIGHT_SHIFT))
        pos_x[respawn], pos_y[respawn], pos_z[respawn] = sx, sy, sz
        vel_x[respawn], vel_y[respawn] = swx, swy
        vel_z[respawn] = swz
        respawn_count[respawn] = counter
    if grains and grain_count is not None:
        grain_count[GRAINS_ALOFT] += np.int32(np.count_nonzero(respawn_count & BLOWING))


def grain_weight(respawn_count):
    """int32 grains each flake stands for: 2^k, k from its GRAIN_WEIGHT_BITS (1 for all but
    the grains that entered across the upwind edge in a strong wind)."""
    exponent = (respawn_count & GRAIN_WEIGHT_BITS) >> np.uint32(GRAIN_WEIGHT_SHIFT)
    return (np.int32(1) << exponent.astype(np.int32)).astype(np.int32)


def injection_bin(draw, inflow_heights):
    """Height bin (int64, whole wind cells above the ground) of entering grains for uniform
    ``draw`` in [0, 1): the first bin whose running sum of ``inflow_heights`` exceeds
    floor(draw * their total) (float32), else the last."""
    histogram = np.asarray(inflow_heights[:INFLOW_HEIGHT_BINS], np.int64)
    total = int(histogram.sum())
    rank = np.floor((draw * f32(total)).astype(np.float32)).astype(np.int64)
    bins = np.searchsorted(np.cumsum(histogram), rank, side="right")
    return np.minimum(bins, INFLOW_HEIGHT_BINS - 1).astype(np.int64)


def _entry_point(seed, ids, counter, inflow_heights, along_x, origin, length, ahead,
                 dt, wx0, wy0, length_x, length_y, h, top, height, snow_depth, hx0, hy0,
                 spacing):
    """(x, y, z) float32 where grains enter across the upwind edge (see _step_flat)."""
    travel = f32(abs(f32(ahead)) * f32(dt))
    offset = (random_uniform(seed, ids, counter, STREAM_X) * travel).astype(np.float32)
    if f32(ahead) > f32(0.0):
        along = (f32(origin) + offset).astype(np.float32)
    else:
        along = (f32(f32(origin) + f32(length)) - offset).astype(np.float32)
    if along_x:
        x = along
        y = (f32(wy0) + random_uniform(seed, ids, counter, STREAM_Y) * f32(length_y)).astype(np.float32)
    else:
        y = along
        x = (f32(wx0) + random_uniform(seed, ids, counter, STREAM_Y) * f32(length_x)).astype(np.float32)
    bins = injection_bin(random_uniform(seed, ids, counter, STREAM_INJECT_HEIGHT),
                         inflow_heights)
    ground = _ground(height, snow_depth, hx0, hy0, spacing, x, y)
    z = (ground + ((bins.astype(np.float32) + random_uniform(seed, ids, counter, STREAM_Z))
                   .astype(np.float32) * f32(h)).astype(np.float32)).astype(np.float32)
    z = np.minimum(z, f32(f32(top) - f32(f32(0.5) * f32(h)))).astype(np.float32)
    return x, y, z


def _wrap(coordinate, origin, length):
    """Periodic wrap into [origin, origin + length); points already inside are untouched."""
    end = f32(origin + length)
    outside = (coordinate < origin) | (coordinate >= end)
    offset = (coordinate - origin).astype(np.float32)
    offset = (offset - length * np.floor(offset / length)).astype(np.float32)
    wrapped = (origin + offset).astype(np.float32)
    wrapped = np.where((wrapped >= end) | (wrapped < origin), origin, wrapped).astype(np.float32)
    return np.where(outside, wrapped, coordinate).astype(np.float32)


def cell_keys(pos_x, pos_y, pos_z, wx0, wy0, wz0, cell_size, nx, ny, nz, keys):
    """Linear wind-cell index (k * ny + j) * nx + i of each flake (clamped), into uint32 keys."""
    inv = f32(1.0) / f32(cell_size)
    i = np.clip(np.floor((pos_x - f32(wx0)) * inv), 0, nx - 1).astype(np.int64)
    j = np.clip(np.floor((pos_y - f32(wy0)) * inv), 0, ny - 1).astype(np.int64)
    k = np.clip(np.floor((pos_z - f32(wz0)) * inv), 0, nz - 1).astype(np.int64)
    keys[:] = ((k * ny + j) * nx + i).astype(np.uint32)


#: Steps between spatial sorts of the flake arrays (0: this backend does not sort).
SORT_INTERVAL = 0


def sort_permutation(keys, cell_counts, destination):
    """Destination index of each flake so that keys end up ascending (stable here; the GPU's
    order inside a cell is arbitrary). ``destination`` may be ``keys``; ``cell_counts``
    (uint32, one per cell) is scratch."""
    order = np.argsort(keys, kind="stable")
    result = np.empty(keys.size, np.uint32)
    result[order] = np.arange(keys.size, dtype=np.uint32)
    cell_counts[...] = np.bincount(keys, minlength=cell_counts.size)[:cell_counts.size]
    destination[...] = result


def scatter(source, destination, out):
    """out[destination[n]] = source[n] for 4-byte words (uint32 views of any state array)."""
    out[destination.astype(np.int64)] = source


#: The records-taking entry points (kernels.contract.FlakesKernels) of the bodies above.
initialize_flakes, step_flakes = flake_kernels(_initialize_flat, _step_flat)
