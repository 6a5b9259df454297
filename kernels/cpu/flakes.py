"""Snowflake kernels, Numba build (same names, arguments and streams as
kernels.reference.flakes; see there for the model and the random streams)."""
import math

import numba
import numpy as np
from numba import prange

from .rounding import floor_int
from .rng import random_uniform
from .sampling import sample_bilinear, sample_bilinear_sum, sample_wind
from .shares import SHARES, share, njit_uncounted

# One home for the random streams and constants: the reference build defines them.
from ..contract import (BLOWING, CONSTANT_COUNTER, COUNT_BITS, FRESH_LIFTS, FROM_UPWIND,
                        GRAIN_COUNT_SLOTS, GRAIN_LANDINGS, GRAIN_WEIGHT_BITS,
                        GRAIN_WEIGHT_SHIFT, GRAINS_ALOFT, LIFTED_EXITS, UPWIND_SETTLES,
                        INFLOW_HEIGHT_BINS, STREAM_INJECT, STREAM_INJECT_HEIGHT, OMEGA_MAX,
                        OMEGA_MIN,
                        OPEN_LIMIT, SPAWN_MARGIN, SQRT3, STREAM_EDDY_X, STREAM_EDDY_Y,
                        STREAM_EDDY_Z, STREAM_LIFT, STREAM_LIFT_HEIGHT, STREAM_OMEGA,
                        STREAM_OMEGA_SIGN, STREAM_PHASE, STREAM_RADIUS, STREAM_REENTRY,
                        STREAM_TERMINAL_SPEED, STREAM_X, STREAM_Y, STREAM_Z, TWO_PI,
                        OPEN_SNOWFIELD, BARE_GROUND)
from ..contract import flake_kernels


@numba.njit(inline="always", cache=True)
def flake_constants(seed, fid, vt_min, vt_max, spiral_radius):
    """(Vt m/s, R m, signed w rad/s) of flake ``fid``."""
    vt = np.float32(vt_min) + random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_TERMINAL_SPEED) \
        * np.float32(np.float32(vt_max) - np.float32(vt_min))
    radius = random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_RADIUS) * np.float32(spiral_radius)
    omega = OMEGA_MIN + random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_OMEGA) \
        * np.float32(OMEGA_MAX - OMEGA_MIN)
    if random_uniform(seed, fid, CONSTANT_COUNTER, STREAM_OMEGA_SIGN) < np.float32(0.5):
        omega = -omega
    return np.float32(vt), np.float32(radius), np.float32(omega)


@numba.njit(inline="always", cache=True)
def _ground(height, snow_depth, hx0, hy0, spacing, x, y):
    """Bilinear terrain + snow surface (m) at (x, y)."""
    return sample_bilinear_sum(height, snow_depth, hx0, hy0, spacing, x, y)


@numba.njit(inline="always", cache=True)
def _nearest_node(coordinate, origin, inv_spacing, count):
    """See kernels.reference.flakes._nearest_node (one coordinate)."""
    index = floor_int(np.float32(np.float32(coordinate - origin) * inv_spacing)
                      + np.float32(0.5))
    return min(max(index, 0), count - 1)


@numba.njit(inline="always", cache=True)
def _wrap(coordinate, origin, length):
    end = np.float32(origin + length)
    if coordinate >= origin and coordinate < end:
        return coordinate
    offset = np.float32(coordinate - origin)
    offset = np.float32(offset - length * np.float32(floor_int(offset / length)))
    wrapped = np.float32(origin + offset)
    if wrapped >= end or wrapped < origin:
        wrapped = origin
    return wrapped


@numba.njit(inline="always", cache=True)
def _target_xy(seed, fid, counter, x0, y0, length_x, length_y, along_x, margin):
    """See kernels.reference.flakes._target_xy (one flake)."""
    rx = random_uniform(seed, fid, counter, STREAM_X)
    ry = random_uniform(seed, fid, counter, STREAM_Y)
    m = np.float32(margin)
    if along_x:
        low = np.float32(x0 - m)
        span = np.float32(length_x + np.float32(m + m))
        return np.float32(low + np.float32(rx * span)), np.float32(y0 + np.float32(ry * length_y))
    low = np.float32(y0 - m)
    span = np.float32(length_y + np.float32(m + m))
    return np.float32(x0 + np.float32(rx * length_x)), np.float32(low + np.float32(ry * span))


@numba.njit(inline="always", cache=True)
def _upwind_of(x, y, fall, vt, x0, y0, length_x, length_y, inflow_x, inflow_y, along_x):
    """See kernels.reference.flakes._upwind_of (one flake)."""
    dx = np.float32(np.float32(fall * inflow_x) / vt)
    dy = np.float32(np.float32(fall * inflow_y) / vt)
    x = np.float32(x - dx)
    y = np.float32(y - dy)
    if along_x:
        return x, _wrap(y, y0, length_y)
    return _wrap(x, x0, length_x), y


@numba.njit(cache=True, nogil=True)
def _entry_point(seed, fid, counter, inflow_heights, open_x, origin, length, ahead, dt,
                 x0, y0, length_x, length_y, h, top, height, snow_depth, hx0, hy0, spacing):
    """See kernels.reference.flakes._entry_point (one flake)."""
    travel = np.float32(abs(ahead) * dt)
    offset = np.float32(random_uniform(seed, fid, counter, STREAM_X) * travel)
    if ahead > np.float32(0.0):
        along = np.float32(origin + offset)
    else:
        along = np.float32(np.float32(origin + length) - offset)
    if open_x:
        x = along
        y = np.float32(y0 + np.float32(random_uniform(seed, fid, counter, STREAM_Y) * length_y))
    else:
        y = along
        x = np.float32(x0 + np.float32(random_uniform(seed, fid, counter, STREAM_Y) * length_x))
    total = 0
    for b in range(INFLOW_HEIGHT_BINS):
        total += int(inflow_heights[b])
    draw = random_uniform(seed, fid, counter, STREAM_INJECT_HEIGHT)
    rank = floor_int(np.float32(draw * np.float32(total)))
    chosen = 0
    running = int(inflow_heights[0])
    while chosen < INFLOW_HEIGHT_BINS - 1 and running <= rank:
        chosen += 1
        running += int(inflow_heights[chosen])
    ground = _ground(height, snow_depth, hx0, hy0, spacing, x, y)
    lift = np.float32(np.float32(np.float32(chosen) + random_uniform(seed, fid, counter, STREAM_Z))
                      * h)
    z = min(np.float32(ground + lift), np.float32(top - np.float32(np.float32(0.5) * h)))
    return x, y, z


def _initialize_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase,
                     respawn_count, u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth,
                     hx0, hy0, spacing, seed, vt_min, vt_max, spiral_radius, inflow_mode=0,
                     inflow_x=0.0, inflow_y=0.0, margin=0.0):
    """See kernels.reference.flakes._initialize_flat."""
    _initialize_flakes(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase,
                       respawn_count, u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth,
                       hx0, hy0, spacing, seed, vt_min, vt_max, spiral_radius,
                       int(inflow_mode) in (OPEN_SNOWFIELD, BARE_GROUND), np.float32(inflow_x),
                       np.float32(inflow_y), np.float32(margin))


@njit_uncounted
def _initialize_flakes_share(share_index, shares, flake_id, pos_x, pos_y, pos_z, vel_x, vel_y,
                             vel_z, phase, respawn_count, u, v, w, wx0, wy0, wz0, cell_size,
                             height, snow_depth, hx0, hy0, spacing, seed, vt_min, vt_max,
                             spiral_radius, opened, inflow_x, inflow_y, margin):
    nz, ny, nx = u.shape[0], u.shape[1], u.shape[2] - 1
    h = np.float32(cell_size)
    x0, y0, z0 = np.float32(wx0), np.float32(wy0), np.float32(wz0)
    length_x, length_y = np.float32(np.float32(nx) * h), np.float32(np.float32(ny) * h)
    top = np.float32(z0 + np.float32(nz) * h)
    along_x = abs(inflow_x) >= abs(inflow_y)
    begin, end = share(share_index, shares, flake_id.size)
    for n in range(begin, end):
        fid = flake_id[n]
        vt, _radius, _omega = flake_constants(seed, fid, vt_min, vt_max, spiral_radius)
        if opened:
            x, y = _target_xy(seed, fid, 0, x0, y0, length_x, length_y, along_x, margin)
        else:
            x = np.float32(x0 + random_uniform(seed, fid, 0, STREAM_X) * length_x)
            y = np.float32(y0 + random_uniform(seed, fid, 0, STREAM_Y) * length_y)
        ground = _ground(height, snow_depth, hx0, hy0, spacing, x, y)
        low = np.float32(max(ground, z0) + SPAWN_MARGIN * h)
        low = min(low, np.float32(top - h))
        z = np.float32(low + random_uniform(seed, fid, 0, STREAM_Z) * np.float32(top - low))
        if opened:
            sx, sy = _upwind_of(x, y, np.float32(z - low), vt, x0, y0, length_x, length_y,
                                inflow_x, inflow_y, along_x)
            # not inside the terrain upwind: a flake that would start below the ground there
            # starts above its target instead
            if _ground(height, snow_depth, hx0, hy0, spacing, sx, sy) < z:
                x, y = sx, sy
        wind_x, wind_y, wind_z = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
        pos_x[n], pos_y[n], pos_z[n] = x, y, z
        vel_x[n], vel_y[n], vel_z[n] = wind_x, wind_y, np.float32(wind_z - vt)
        phase[n] = random_uniform(seed, fid, 0, STREAM_PHASE) * TWO_PI
        respawn_count[n] = 0


@numba.njit(parallel=True, cache=True, nogil=True)
def _initialize_flakes(*args):
    for share_index in prange(SHARES):
        _initialize_flakes_share(np.int64(share_index), SHARES, *args)


@numba.njit(inline="always", cache=True)
def column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed):
    """See kernels.reference.flakes.column_wind (one point)."""
    ny, nx = surface_x.shape
    inv = np.float32(np.float32(1.0) / np.float32(cell_size))
    i = min(max(floor_int(np.float32(np.float32(x - np.float32(wx0)) * inv)), 0), nx - 1)
    j = min(max(floor_int(np.float32(np.float32(y - np.float32(wy0)) * inv)), 0), ny - 1)
    sx, sy = surface_x[j, i], surface_y[j, i]
    ustar = np.float32(np.float32(ustar_per_speed)
                       * np.float32(math.sqrt(np.float32(np.float32(sx * sx) + np.float32(sy * sy)))))
    return sx, sy, ustar


@numba.njit(inline="always", cache=True)
def _eddy_component(seed, fid, node, after, stream, frac, sigma):
    one, two = np.float32(1.0), np.float32(2.0)
    a = np.float32(two * random_uniform(seed, fid, node, stream) - one)
    b = np.float32(two * random_uniform(seed, fid, after, stream) - one)
    mixed = np.float32(np.float32(np.float32(one - frac) * a) + np.float32(frac * b))
    return np.float32(sigma * mixed)


@numba.njit(inline="always", cache=True)
def eddy_velocity(seed, fid, step_index, eddy_steps, eddy_scale, mixing_height, dt, ustar,
                  above_ground, below_top):
    """See kernels.reference.flakes.eddy_velocity (one flake)."""
    steps = np.uint32(eddy_steps)
    shifted = np.uint32(np.uint32(step_index) + np.uint32(np.uint32(fid) % steps))
    node = np.uint32(shifted // steps)
    after = np.uint32(node + np.uint32(1))
    frac = np.float32(np.float32(shifted % steps) / np.float32(steps))
    d = max(above_ground, np.float32(0.0))
    lid = max(below_top, np.float32(0.0))
    ground_wins = d <= mixing_height and d <= lid
    lid_wins = (not ground_wins) and lid < mixing_height
    mixing = d if ground_wins else (lid if lid_wins else mixing_height)
    gradient = np.float32(eddy_scale * ustar)
    half_gradient = np.float32(np.float32(0.5) * gradient)
    diffusivity = np.float32(gradient * mixing)
    period = np.float32(np.float32(steps) * dt)
    sigma = np.float32(np.float32(math.sqrt(np.float32(np.float32(np.float32(2.0) * diffusivity)
                                                       / period))) * SQRT3)
    ex = _eddy_component(seed, fid, node, after, STREAM_EDDY_X, frac, sigma)
    ey = _eddy_component(seed, fid, node, after, STREAM_EDDY_Y, frac, sigma)
    ez = _eddy_component(seed, fid, node, after, STREAM_EDDY_Z, frac, sigma)
    if ground_wins:
        ez = np.float32(ez + half_gradient)
    elif lid_wins:
        ez = np.float32(ez - half_gradient)
    return ex, ey, ez


@numba.njit(inline="always", cache=True)
def _drag(vx, vy, vz, wind_x, wind_y, wind_z, fall, g, dt):
    """The velocity (m/s) after one semi-implicit step of ``dt`` s of quadratic drag
    towards the air's velocity (terminal speed ``fall`` m/s) and gravity ``g`` m/s^2."""
    rx = np.float32(wind_x - vx)
    ry = np.float32(wind_y - vy)
    rz = np.float32(wind_z - vz)
    k = np.float32(g * np.float32(math.sqrt(np.float32(rx * rx + ry * ry + rz * rz)))
                   / np.float32(fall * fall))
    denominator = np.float32(np.float32(1.0) + k * dt)
    nvx = np.float32(np.float32(vx + dt * np.float32(k * wind_x)) / denominator)
    nvy = np.float32(np.float32(vy + dt * np.float32(k * wind_y)) / denominator)
    nvz = np.float32(np.float32(vz + dt * np.float32(k * wind_z - g)) / denominator)
    return nvx, nvy, nvz


@numba.njit(cache=True, nogil=True)
def _grain_flights(speed, ustar, h, top, dt, eddy_scale, mixing_height, eddy_steps, fall, g,
                   steps, travelled, crossings):
    seed = np.uint32(0)
    half = np.float32(0.5)
    last_bin = crossings.shape[1] - 1
    for n in range(travelled.size):
        fid = np.uint32(n)
        z = np.float32(random_uniform(seed, fid, np.uint32(0), STREAM_LIFT_HEIGHT) * h)
        vx, vy, vz = speed, np.float32(0.0), np.float32(0.0)
        for step in range(steps):
            ex, ey, ez = eddy_velocity(seed, fid, np.uint32(step), eddy_steps, eddy_scale,
                                       mixing_height, dt, ustar, z, np.float32(top - z))
            wind_x = np.float32(speed + ex)
            nvx, nvy, nvz = _drag(vx, vy, vz, wind_x, ey, ez, fall, g, dt)
            advance = np.float32(np.float32(half * np.float32(vx + nvx)) * dt)
            travelled[n] += np.float64(advance)
            cell = min(max(floor_int(np.float32(z / h)), 0), last_bin)
            crossings[n, cell] += np.float64(advance)
            z = min(np.float32(z + np.float32(np.float32(half * np.float32(vz + nvz)) * dt)), top)
            vx, vy, vz = nvx, nvy, nvz
            if not z >= np.float32(0.0):
                break


def grain_flights(speed, ustar, cell_size, column, dt, eddy_scale, mixing_height, eddy_steps,
                  grain_speed, gravity, steps, travelled, crossings):
    """See kernels.reference.flakes.grain_flights (one grain after the other, without the
    GIL: a bake's thread computes these while Blender's runs)."""
    travelled[...] = 0.0
    crossings[...] = 0.0
    _grain_flights(np.float32(speed), np.float32(ustar), np.float32(cell_size),
                   np.float32(column), np.float32(dt), np.float32(eddy_scale),
                   np.float32(mixing_height), np.uint32(max(int(eddy_steps), 1)),
                   np.float32(grain_speed), np.float32(gravity), int(steps), travelled,
                   crossings)


@numba.njit(inline="always", cache=True)
def lift_share(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed, threshold,
               heading_x, heading_y, strength):
    """See kernels.reference.flakes.lift_share (one point)."""
    sx, sy, ustar = column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y, ustar_per_speed)
    along = np.float32(np.float32(sx * np.float32(heading_x)) + np.float32(sy * np.float32(heading_y)))
    t = np.float32(threshold)
    if not (ustar > t and along > np.float32(0.0)):
        return np.float32(0.0)
    square = np.float32(ustar * ustar)
    return np.float32(np.float32(strength) * np.float32(np.float32(square - np.float32(t * t)) / square))


_NO_SURFACE = np.zeros((1, 1), np.float32)
#: Stand-in for ``grain_count`` when the caller counts no grains (size 0: never written).
_NO_COUNT = np.zeros(0, np.int32)


def _step_flat(flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count,
               u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth, hx0, hy0, spacing,
               hit_counts, seed, vt_min, vt_max, spiral_radius, gravity, dt,
               surface_x=None, surface_y=None, ustar_per_speed=0.0, threshold=0.0,
               heading_x=1.0, heading_y=0.0, lift_strength=0.0, step_index=0,
               bubble_top=None, eddy_scale=0.0, mixing_height=10.0, eddy_steps=24,
               grain_speed=0.0, grain_count=None, eddy_floor=0.0, inflow_mode=0,
               inflow_x=0.0, inflow_y=0.0, margin=0.0,
               inflow_share=0.0, inflow_exponent=0, inflow_heights=None):
    """See kernels.reference.flakes._step_flat. Hits are gathered per chunk of flakes and
    added to ``hit_counts`` afterwards (integer sums: the order does not matter)."""
    ahead = inflow_y if abs(np.float32(inflow_x)) < abs(np.float32(inflow_y)) else inflow_x
    entering = (int(inflow_mode) == OPEN_SNOWFIELD and np.float32(grain_speed) > 0
                and np.float32(ahead) != 0 and np.float32(inflow_share) > 0
                and inflow_heights is not None)
    chunks = max(1, min(numba.get_num_threads() * 4, flake_id.size))
    reentry = surface_x is not None
    if surface_x is None:
        surface_x = surface_y = _NO_SURFACE
        lift_strength = eddy_scale = 0.0
    shelter = bubble_top is not None
    if not shelter:
        bubble_top = _NO_SURFACE
    count = flake_id.size
    hit_nodes = np.empty(count, np.int64)
    hits_in_chunk = np.zeros(chunks, np.int64)
    grains_in_chunk = np.zeros((chunks, GRAIN_COUNT_SLOTS), np.int64)
    _step_flakes(chunks, hit_nodes, hits_in_chunk, grains_in_chunk,
                 flake_id, pos_x, pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count,
                 u, v, w, wx0, wy0, wz0, cell_size, height, snow_depth, hx0, hy0, spacing,
                 hit_counts, seed, vt_min, vt_max, spiral_radius, gravity, dt,
                 surface_x, surface_y, np.float32(ustar_per_speed), np.float32(threshold),
                 np.float32(heading_x), np.float32(heading_y), np.float32(lift_strength),
                 np.uint32(step_index), shelter, bubble_top, np.float32(eddy_scale),
                 np.float32(mixing_height), np.uint32(max(int(eddy_steps), 1)),
                 np.float32(grain_speed), _NO_COUNT if grain_count is None else grain_count,
                 reentry, np.float32(eddy_floor), int(inflow_mode), np.float32(inflow_x),
                 np.float32(inflow_y), np.float32(margin), entering,
                 np.float32(inflow_share), np.uint32(inflow_exponent),
                 inflow_heights if entering else _NO_COUNT)
    _gather_hits(hit_nodes, hits_in_chunk, hit_counts, grains_in_chunk,
                 _NO_COUNT if grain_count is None else grain_count)


@njit_uncounted
def _step_flakes_share(c, chunks, hit_nodes, hits_in_chunk, grains_in_chunk, flake_id, pos_x,
                       pos_y, pos_z, vel_x, vel_y, vel_z, phase, respawn_count, u, v, w, wx0,
                       wy0, wz0, cell_size, height, snow_depth, hx0, hy0, spacing, hit_counts,
                       seed, vt_min, vt_max, spiral_radius, gravity, dt, surface_x, surface_y,
                       ustar_per_speed, threshold, heading_x, heading_y, lift_strength,
                       step_index, shelter, bubble_top, eddy_scale, mixing_height, eddy_steps,
                       grain_speed, grain_count, reentry, eddy_floor, inflow_mode, inflow_x,
                       inflow_y, margin, entering, inflow_share, exponent, inflow_heights):
    """Chunk ``c`` of ``chunks`` of the flakes (see step_flakes): its hits' node indices
    go to ``hit_nodes`` (node index * 8 + the exponent of the grains it stands for) from the
    chunk's first flake on, their count to ``hits_in_chunk[c]``,
    its grain counts (kernels.contract.GRAINS_ALOFT ...) to ``grains_in_chunk[c]``."""
    nz, ny, nx = u.shape[0], u.shape[1], u.shape[2] - 1
    hny, hnx = height.shape
    h = np.float32(cell_size)
    x0, y0, z0 = np.float32(wx0), np.float32(wy0), np.float32(wz0)
    length_x, length_y = np.float32(np.float32(nx) * h), np.float32(np.float32(ny) * h)
    top = np.float32(z0 + np.float32(nz) * h)
    g, dt = np.float32(gravity), np.float32(dt)
    one, half = np.float32(1.0), np.float32(0.5)
    inv_spacing = one / np.float32(spacing)
    hx, hy = np.float32(hx0), np.float32(hy0)
    # bubble_top lives on the wind columns' centres
    bx, by = np.float32(x0 + np.float32(half * h)), np.float32(y0 + np.float32(half * h))
    grains = grain_speed > np.float32(0.0)
    along_x = abs(heading_x) >= abs(heading_y)       # the wind's axis: where a flake re-enters
    opened = inflow_mode == OPEN_SNOWFIELD or inflow_mode == BARE_GROUND
    open_x = abs(inflow_x) >= abs(inflow_y)          # with an open fetch: its axis
    ahead = inflow_x if open_x else inflow_y
    origin, length = (x0, length_x) if open_x else (y0, length_y)
    count = flake_id.size
    begin = c * count // chunks
    end = (c + 1) * count // chunks
    found = 0
    # the chunk's grain counts in locals, stored once: chunks' rows share cache lines
    aloft = landings = upwind_settles = lifted_exits = fresh_lifts = np.int64(0)
    for n in range(begin, end):
        fid = flake_id[n]
        vt, radius, omega = flake_constants(seed, fid, vt_min, vt_max, spiral_radius)
        was_grain = (respawn_count[n] & BLOWING) != 0
        weight_exponent = (respawn_count[n] & GRAIN_WEIGHT_BITS) >> np.uint32(GRAIN_WEIGHT_SHIFT)
        weight = np.int64(1) << np.int64(weight_exponent)
        fall = vt
        if grains and was_grain:
            fall = grain_speed
        x, y, z = pos_x[n], pos_y[n], pos_z[n]
        vx, vy, vz = vel_x[n], vel_y[n], vel_z[n]
        wind_x, wind_y, wind_z = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
        if shelter and z < sample_bilinear(bubble_top, bx, by, h, x, y):
            wind_x = wind_y = wind_z = np.float32(0.0)
        if eddy_scale > np.float32(0.0):
            _sx, _sy, ustar = column_wind(surface_x, surface_y, wx0, wy0, cell_size, x, y,
                                          ustar_per_speed)
            ustar = max(ustar, eddy_floor)
            above = np.float32(z - _ground(height, snow_depth, hx0, hy0, spacing, x, y))
            ex, ey, ez = eddy_velocity(seed, fid, step_index, eddy_steps, eddy_scale,
                                       mixing_height, dt, ustar, above, np.float32(top - z))
            wind_x = np.float32(wind_x + ex)
            wind_y = np.float32(wind_y + ey)
            wind_z = np.float32(wind_z + ez)
        nvx, nvy, nvz = _drag(vx, vy, vz, wind_x, wind_y, wind_z, fall, g, dt)
        rx = np.float32(wind_x - nvx)
        ry = np.float32(wind_y - nvy)
        rz = np.float32(wind_z - nvz)
        relative_speed = np.float32(math.sqrt(np.float32(rx * rx + ry * ry + rz * rz)))
        speed = max(np.float32(math.sqrt(np.float32(nvx * nvx + nvy * nvy + nvz * nvz))), one)
        spiral = np.float32(np.float32(np.float32(relative_speed / speed) * omega) * radius)
        th = np.float64(phase[n])
        circle_x = np.float32(-spiral * np.float32(math.sin(th)))
        circle_y = np.float32(spiral * np.float32(math.cos(th)))
        x = np.float32(x + np.float32(np.float32(half * np.float32(vx + nvx)) + circle_x) * dt)
        y = np.float32(y + np.float32(np.float32(half * np.float32(vy + nvy)) + circle_y) * dt)
        z = np.float32(z + np.float32(half * np.float32(vz + nvz)) * dt)
        if eddy_scale > np.float32(0.0):
            z = min(z, top)
        new_phase = np.float32(phase[n] + np.float32(omega * dt))
        new_phase = np.float32(new_phase - TWO_PI * np.float32(floor_int(new_phase / TWO_PI)))
        out_x = not (x >= x0 and x < np.float32(x0 + length_x))
        out_y = not (y >= y0 and y < np.float32(y0 + length_y))
        outside = False
        beyond = False
        if opened:
            if open_x:
                y = _wrap(y, y0, length_y)
                outside = out_x
                if ahead > np.float32(0.0):
                    past = x >= np.float32(x0 + length_x)
                elif ahead < np.float32(0.0):
                    past = x < x0
                else:
                    past = True
            else:
                x = _wrap(x, x0, length_x)
                outside = out_y
                if ahead > np.float32(0.0):
                    past = y >= np.float32(y0 + length_y)
                elif ahead < np.float32(0.0):
                    past = y < y0
                else:
                    past = True
            beyond = outside and past
        else:
            x = _wrap(x, x0, length_x)
            y = _wrap(y, y0, length_y)
        if reentry and not opened and ((out_x and along_x) or (out_y and not along_x)):
            draw = random_uniform(seed, fid, step_index, STREAM_REENTRY)
            if along_x:
                y = np.float32(y0 + np.float32(draw * length_y))
            else:
                x = np.float32(x0 + np.float32(draw * length_x))

        ground = _ground(height, snow_depth, hx0, hy0, spacing, x, y)
        ni = _nearest_node(x, hx, inv_spacing, hnx)
        nj = _nearest_node(y, hy, inv_spacing, hny)
        hit = z < ground and height[nj, ni] > OPEN_LIMIT
        if hit and not (out_x or out_y):
            surface = np.float32(height[nj, ni] + snow_depth[nj, ni])
            if np.float32(surface - z) > np.float32(spacing):
                # struck a wall: the snow slides to its foot on the side it came from
                oi = _nearest_node(pos_x[n], hx, inv_spacing, hnx)
                oj = _nearest_node(pos_y[n], hy, inv_spacing, hny)
                if np.float32(height[oj, oi] + snow_depth[oj, oi]) < surface:
                    ni, nj = oi, oj
        if hit and lift_strength > np.float32(0.0) and not (
                shelter and ground < sample_bilinear(bubble_top, bx, by, h, x, y)) and not (
                outside and opened):
            share = lift_share(surface_x, surface_y, wx0, wy0, cell_size, x, y,
                               ustar_per_speed, threshold, heading_x, heading_y,
                               lift_strength)
            if random_uniform(seed, fid, step_index, STREAM_LIFT) < share:
                hit = False
                z = np.float32(ground + random_uniform(seed, fid, step_index,
                                                       STREAM_LIFT_HEIGHT) * h)
                nvx, nvy, nvz = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
                if grains:
                    respawn_count[n] = np.uint32(respawn_count[n] | BLOWING)
                    if not was_grain and not outside:
                        fresh_lifts += 1
        if hit and not outside:
            hit_nodes[begin + found] = (nj * hnx + ni) * 8 + np.int64(weight_exponent)
            found += 1
            if grains and was_grain:
                landings += weight
                if (respawn_count[n] & FROM_UPWIND) != 0:
                    upwind_settles += weight
        if hit or z < z0 or beyond:
            if grains and (respawn_count[n] & BLOWING) != 0 and not (hit and not outside) \
                    and (respawn_count[n] & FROM_UPWIND) == 0:
                lifted_exits += weight     # lifted, left unsettled
            counter = np.uint32(np.uint32(respawn_count[n] & COUNT_BITS) + np.uint32(1))
            z = np.float32(np.float32(top - h) + random_uniform(seed, fid, counter, STREAM_Z) * h)
            if opened:
                x, y = _target_xy(seed, fid, counter, x0, y0, length_x, length_y, open_x,
                                  margin)
                # as far upwind as the wind carries it while it falls to its target's ground
                fall = max(np.float32(z - max(_ground(height, snow_depth, hx, hy, spacing, x, y),
                                              z0)), np.float32(0.0))
                x, y = _upwind_of(x, y, fall, vt, x0, y0, length_x, length_y,
                                  inflow_x, inflow_y, open_x)
            else:
                x = np.float32(x0 + random_uniform(seed, fid, counter, STREAM_X) * length_x)
                y = np.float32(y0 + random_uniform(seed, fid, counter, STREAM_Y) * length_y)
            fresh = True
            if entering and random_uniform(seed, fid, counter, STREAM_INJECT) < inflow_share:
                fresh = False
                x, y, z = _entry_point(seed, fid, counter, inflow_heights, open_x,
                                       origin, length, ahead, dt, x0, y0, length_x,
                                       length_y, h, top, height, snow_depth, hx, hy, spacing)
                counter = np.uint32(counter | BLOWING | FROM_UPWIND
                                    | np.uint32(exponent << np.uint32(GRAIN_WEIGHT_SHIFT)))
            wind_x, wind_y, wind_z = sample_wind(u, v, w, wx0, wy0, wz0, cell_size, x, y, z)
            nvx, nvy, nvz = wind_x, wind_y, (np.float32(wind_z - vt) if fresh else wind_z)
            respawn_count[n] = counter
        pos_x[n], pos_y[n], pos_z[n] = x, y, z
        vel_x[n], vel_y[n], vel_z[n] = nvx, nvy, nvz
        phase[n] = new_phase
        if grains and (respawn_count[n] & BLOWING) != 0:
            aloft += 1
    hits_in_chunk[c] = found
    grains_in_chunk[c, GRAINS_ALOFT] = aloft
    grains_in_chunk[c, GRAIN_LANDINGS] = landings
    grains_in_chunk[c, UPWIND_SETTLES] = upwind_settles
    grains_in_chunk[c, LIFTED_EXITS] = lifted_exits
    grains_in_chunk[c, FRESH_LIFTS] = fresh_lifts


@numba.njit(parallel=True, cache=True, nogil=True)
def _step_flakes(chunks, *args):
    for c in prange(chunks):
        _step_flakes_share(np.int64(c), chunks, *args)


@numba.njit(cache=True, nogil=True)
def _gather_hits(hit_nodes, hits_in_chunk, hit_counts, grains_in_chunk, grain_count):
    """Add each chunk's hits to ``hit_counts`` and its grain counts to ``grain_count``
    (integer sums: the order does not matter)."""
    chunks = hits_in_chunk.size
    count = hit_nodes.size
    if grain_count.size > 0:
        for slot in range(GRAIN_COUNT_SLOTS):
            grain_count[slot] += np.int32(grains_in_chunk[:, slot].sum())
    flat_hits = hit_counts.reshape(-1)
    for c in range(chunks):
        begin = c * count // chunks
        for m in range(hits_in_chunk[c]):
            packed = hit_nodes[begin + m]
            flat_hits[packed >> 3] += np.int32(1) << np.int32(packed & 7)


@numba.njit(parallel=True, cache=True, nogil=True)
def cell_keys(pos_x, pos_y, pos_z, wx0, wy0, wz0, cell_size, nx, ny, nz, keys):
    """Linear wind-cell index (k * ny + j) * nx + i of each flake (clamped), into uint32 keys."""
    inv = np.float32(1.0) / np.float32(cell_size)
    for n in numba.prange(pos_x.size):
        i = min(max(floor_int(np.float32(pos_x[n] - np.float32(wx0)) * inv), 0), nx - 1)
        j = min(max(floor_int(np.float32(pos_y[n] - np.float32(wy0)) * inv), 0), ny - 1)
        k = min(max(floor_int(np.float32(pos_z[n] - np.float32(wz0)) * inv), 0), nz - 1)
        keys[n] = (k * ny + j) * nx + i


#: Steps between spatial sorts of the flake arrays by wind cell: the flakes of a cell then
#: sit together, and the step's gathers of the wind, the heights, the snow and the shelter
#: find their rows in the caches (cpu-small: the flakes' step 9.8 -> 7.9 ms per step with
#: the flakes sorted by cell, docs/benchmarks.md). In id order they miss: the fields the
#: step reads outgrow a core's cache.
SORT_INTERVAL = 16


@numba.njit(cache=True, nogil=True)
def sort_permutation(keys, cell_counts, destination):
    """Stable counting sort: the destination slot of each flake so that keys ascend.
    ``destination`` may be ``keys`` (each key is read before its slot is written);
    ``cell_counts`` (uint32, one per cell) ends with each cell's count, as in the other
    builds. One thread without the GIL: a sort every SORT_INTERVAL steps."""
    cell_counts[:] = 0
    for n in range(keys.size):
        cell_counts[keys[n]] += np.uint32(1)
    start = np.uint32(0)
    for cell in range(cell_counts.size):        # each cell's first slot
        count = cell_counts[cell]
        cell_counts[cell] = start
        start += count
    for n in range(keys.size):
        key = keys[n]
        destination[n] = cell_counts[key]
        cell_counts[key] += np.uint32(1)
    start = np.uint32(0)
    for cell in range(cell_counts.size):        # each cell's end back to its count
        end = cell_counts[cell]
        cell_counts[cell] = end - start
        start = end


@numba.njit(parallel=True, cache=True, nogil=True)
def scatter(source, destination, out):
    """out[destination[n]] = source[n] (4-byte words)."""
    for n in numba.prange(source.size):
        out[destination[n]] = source[n]


#: The records-taking entry points (kernels.contract.FlakesKernels) of the bodies above.
initialize_flakes, step_flakes = flake_kernels(_initialize_flat, _step_flat)
