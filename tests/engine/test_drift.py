"""Wind-driven snow transport: the Numba and CUDA kernels against the NumPy reference (bit
for bit; the ``backend`` fixture: cpu, and gpu where CuPy has a device, else skipped with the
reason), exact volume books, erosion where the flux grows and deposition where it shrinks, the
threshold, the settings' checks, and the lee drift of a snow fence in a whole bake."""
import math

import numpy as np
import pytest

from snowfall.kernels.cpu import drift as cpu
from snowfall.kernels.reference import drift as ref
from snowfall.kernels.reference import wind as ref_wind
from snowfall.snow_addon import Simulation, SnowSettings
from snowfall.snow_addon import drift as drift_model
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.scenes import box_test, grid_mesh, ridge, snow_fence


def _random_case(seed, nz=6, ny=7, nx=9, hy=23, hx=31):
    rng = np.random.default_rng(seed)
    ground = rng.integers(0, 4, (ny, nx))
    ground[2, 3] = nz  # a column solid to the top
    solid = (np.arange(nz)[:, None, None] < ground[None]).astype(np.uint8)
    u = (5 * rng.standard_normal((nz, ny, nx + 1))).astype(np.float32)
    v = (5 * rng.standard_normal((nz, ny + 1, nx))).astype(np.float32)
    w = (2 * rng.standard_normal((nz + 1, ny, nx))).astype(np.float32)
    has_surface = rng.random((hy, hx)) > 0.1
    snow = (0.2 * rng.random((hy, hx))).astype(np.float32)
    height = np.where(rng.random((hy, hx)) > 0.8, 1.0, 0.0).astype(np.float32)  # some walls
    return solid, u, v, w, has_surface, snow, height


def _cut(fractions, seed):
    """Voxel fractions with cut faces along the ground: every closed face next to an open
    one gets a fraction in (0, 1), as the terrain's surface crossing it would."""
    rng = np.random.default_rng(seed)
    cut = []
    for axis, f in enumerate(fractions):
        axis = 2 - axis                         # u varies along x (the last axis), w along z
        shifted = np.maximum(np.roll(f, 1, axis=axis), np.roll(f, -1, axis=axis))
        edge = (f == 0) & (shifted > 0) & (rng.random(f.shape) < 0.7)
        f = f.copy()
        f[edge] = rng.uniform(0.01, 0.99, int(edge.sum())).astype(np.float32)
        cut.append(f)
    return tuple(cut)


def _wrap_buffer(xp, shape):
    """A backend's wrap buffer (wrap_buffer_size): 9.0 where the transport writes, its count
    of finished blocks (the GPU's, a uint32 in slot 2) 0 as a launch needs it."""
    wrap = xp.full(ref.wrap_buffer_size(shape), 9.0, np.float32)
    wrap[2] = 0.0                                   # the bits of uint32 0
    return wrap


# small: 7 x 9 wind columns over 23 x 31 nodes; wide: 37 x 70 columns over 45 x 83 nodes,
# rows wider than a block of threads
_DRIFT_CASES = ([pytest.param(seed, False, id=f"small-{seed}") for seed in (1, 2, 3)]
                + [pytest.param(seed, True, id=f"wide-{seed}") for seed in (1, 2)])


@pytest.mark.parametrize("seed, wide", _DRIFT_CASES)
def test_drift_kernels_match_reference_bit_for_bit(backend, seed, wide, fractions_of):
    """The backend's surface wind (voxel faces, faces cut along the ground, faces cut at
    random), saltation flux and transport (the edges wrapping across either axis, or not)
    against the reference, bit for bit."""
    kd, xp, host = backend.kernel_module("drift"), backend.xp, backend.to_host
    solid, u, v, w, has_surface, snow, height = (
        _random_case(seed, ny=37, nx=70, hy=45, hx=83) if wide else _random_case(seed))
    ny, nx = solid.shape[1:]
    device_faces = [xp.asarray(a) for a in (u, v, w)]
    for fractions in (_cut(fractions_of(solid), seed),
                      fractions_of(solid, np.random.default_rng(seed)), fractions_of(solid)):
        wind = [np.zeros((ny, nx), np.float32) for _ in range(2)]
        ref.surface_wind(u, v, w, fractions, *wind)
        device_wind = [xp.full((ny, nx), 9.0, np.float32) for _ in range(2)]
        kd.surface_wind(*device_faces, tuple(xp.asarray(f) for f in fractions), *device_wind)
        for a, e in zip(device_wind, wind):
            np.testing.assert_array_equal(host(a), e)
    assert wind[0][2, 3] == 0 and wind[1][2, 3] == 0  # voxels: no open cell in that column
    shape = has_surface.shape
    args = (-1.0, -2.0, 1.5, -0.5, -1.7, 0.4)
    flux = [np.zeros(shape, np.float32) for _ in range(2)]
    ref.saltation_flux(*wind, *args, has_surface, 0.07, 0.3, 0.05, 0.6, 0.8, *flux)
    device_flux = [xp.full(shape, 9.0, np.float32) for _ in range(2)]
    kd.saltation_flux(*device_wind, *args, xp.asarray(has_surface), 0.07, 0.3, 0.05, 0.6, 0.8,
                      *device_flux)
    for a, e in zip(device_flux, flux):
        np.testing.assert_array_equal(host(a), e)
    assert np.abs(flux[0]).max() > 0 and not flux[0][~has_surface].any()
    for downwind_axis in (-1, 0, 1):
        out = np.zeros(shape, np.float32)
        wrap = np.full(ref.wrap_buffer_size(shape), 9.0, np.float32)
        ref.drift_transport(*flux, height, has_surface, snow, 2.0, 0.3, out, downwind_axis,
                            wrap)
        device_out, device_wrap = xp.zeros(shape, np.float32), _wrap_buffer(xp, shape)
        kd.drift_transport(*device_flux, xp.asarray(height), xp.asarray(has_surface),
                           xp.asarray(snow), 2.0, 0.3, device_out, downwind_axis, device_wrap)
        np.testing.assert_array_equal(host(device_out), out)
        np.testing.assert_array_equal(host(device_wrap[:2]), wrap[:2])
        if downwind_axis >= 0:
            assert wrap[0] > 0 or wrap[1] > 0
        # the GPU's count of finished blocks is back to 0, ready for the next launch
        assert host(device_wrap[2:3]).view(np.uint32)[0] == 0


@pytest.mark.parametrize("size", [1, 255, 256, 257, 600, 1031, 8193])
def test_the_wrap_matches_reference_bit_for_bit_on_long_and_short_edges(backend, size):
    # edges longer than the reduction's threads (256) take the strided partial sums (on the
    # GPU in the last block's tail, then a tree, in the reference's order); an edge of one
    # node is both the first and the last; one buffer for every launch on the backend (the
    # GPU's count of finished blocks back to 0 each time)
    kd, xp, host = backend.kernel_module("drift"), backend.xp, backend.to_host
    rng = np.random.default_rng(size)
    for shape in ((size, 5), (5, size), (size, 1)):
        flux_x = (0.5 * rng.standard_normal(shape)).astype(np.float32)
        flux_y = (0.5 * rng.standard_normal(shape)).astype(np.float32)
        snow = (0.2 * rng.random(shape)).astype(np.float32)
        height = np.zeros(shape, np.float32)
        has_surface = rng.random(shape) > 0.1
        device_in = [xp.asarray(a) for a in (flux_x, flux_y, height, has_surface, snow)]
        device_wrap = _wrap_buffer(xp, shape)
        for axis in (0, 1, 0):
            out = np.zeros(shape, np.float32)
            wrap = np.full(ref.wrap_buffer_size(shape), 9.0, np.float32)
            ref.drift_transport(flux_x, flux_y, height, has_surface, snow, 2.0, 0.3, out, axis,
                                wrap)
            device_out = xp.zeros(shape, np.float32)
            kd.drift_transport(*device_in, 2.0, 0.3, device_out, axis, device_wrap)
            np.testing.assert_array_equal(host(device_out), out)
            np.testing.assert_array_equal(host(device_wrap[:2]), wrap[:2])
            assert out.sum(dtype=np.float64) == pytest.approx(snow.sum(dtype=np.float64),
                                                              rel=1e-5)
    # the fixed-order float32 sum is the sum to float32 rounding
    values = rng.random(size).astype(np.float32)
    assert float(ref.edge_sum(values)) == pytest.approx(math.fsum(values.tolist()), rel=1e-5)


def test_transport_conserves_volume_and_never_goes_negative():
    solid, u, v, _w, has_surface, snow, height = _random_case(7)
    shape = has_surface.shape
    rng = np.random.default_rng(8)
    flux_x = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    flux_y = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    before = snow.sum(dtype=np.float64)
    for _ in range(200):
        out = np.zeros(shape, np.float32)
        cpu.drift_transport(flux_x, flux_y, height, has_surface, snow, 3.0, 0.3, out)
        snow = out
        assert (snow >= 0).all()
    after = snow.sum(dtype=np.float64)
    # each step conserves to float32 rounding; 200 steps of this churn (every face at its
    # limit) add up to a few 1e-5
    assert after == pytest.approx(before, rel=1e-4)


@pytest.mark.parametrize("module", [ref, cpu], ids=["reference", "cpu"])
def test_transport_wraps_around_the_grid_as_the_flakes_do(module):
    # what blows off the downwind edge comes in at the upwind one (the flakes leave and
    # come back the same way), so a uniform cover under a uniform wind stays uniform up to
    # the edges, and nothing leaves the grid
    shape = (5, 9)
    height, has_surface = np.zeros(shape, np.float32), np.ones(shape, bool)
    flux_x, flux_y = np.full(shape, 0.04, np.float32), np.full(shape, -0.03, np.float32)
    snow = np.full(shape, 0.1, np.float32)
    out = np.zeros_like(snow)
    module.drift_transport(flux_x, flux_y, height, has_surface, snow, 0.5, 0.2, out)
    np.testing.assert_allclose(out, 0.1, rtol=1e-6)
    # a heap on the last column moves on into the first (every face at its donor's limit)
    snow[:, -1] = 0.25
    module.drift_transport(flux_x, np.zeros_like(flux_y), height, has_surface, snow, 5.0, 0.2,
                           out)
    assert (out[:, 0] > 0.13).all() and (out[:, -1] < 0.25).all()
    np.testing.assert_allclose(out[:, 1:-1], 0.1, rtol=1e-6)
    assert out.sum(dtype=np.float64) == pytest.approx(snow.sum(dtype=np.float64), rel=1e-6)


@pytest.mark.parametrize("module", [ref, cpu], ids=["reference", "cpu"])
@pytest.mark.parametrize("downwind_axis", [0, 1])
def test_what_leaves_downwind_comes_back_spread_across_the_upwind_edge(module, downwind_axis):
    # an obstacle's wake starves the rows in line with it of saltating snow; coming back in
    # the same rows, that wake would reach the fetch upwind of the obstacle. Like a flake
    # that leaves downwind, the snow comes back at any crosswind place: evenly across the
    # upwind edge's surface nodes, none into a node without a surface, the volume kept
    shape = (7, 11)
    height, has_surface = np.zeros(shape, np.float32), np.ones(shape, bool)
    has_surface[3, 0] = has_surface[0, 3] = False          # holes on both upwind edges
    snow = np.full(shape, 0.1, np.float32)
    flux_x, flux_y = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    if downwind_axis == 1:
        flux_x[5, -1] = 0.8                                # one row blows off the x edge
        flux_y[-1, 4] = 0.02                               # the crosswind wrap stays paired
    else:
        flux_y[-1, 5] = 0.8
        flux_x[4, -1] = 0.02
    wrap, out = np.zeros(ref.wrap_buffer_size(shape), np.float32), np.zeros_like(snow)
    module.drift_transport(flux_x, flux_y, height, has_surface, snow, 0.5, 0.2, out,
                           downwind_axis, wrap)
    share = wrap[:2]
    first = out[:, 0] if downwind_axis == 1 else out[0, :]
    receivers = has_surface[:, 0] if downwind_axis == 1 else has_surface[0, :]
    gained = first[receivers] - np.float32(0.1)
    # the donor gave min(|q| dt / spacing, snow / 4) = 0.025 m, shared by the edge's 6
    # (x edges) or 10 (y edges) surface nodes
    count = 6 if downwind_axis == 1 else 10
    assert receivers.sum() == count
    np.testing.assert_allclose(share, [0.025 / count, 0.0], rtol=1e-6)
    np.testing.assert_allclose(gained, 0.025 / count, rtol=1e-4)
    assert first[~receivers] == np.float32(0.1)
    crosswind_row = out[:, 4] if downwind_axis == 1 else out[4, :]
    # the pairwise crosswind wrap: 0.005 m leaves the last node into the first of its line
    # (and as much comes into the last from the one before it)
    np.testing.assert_allclose(crosswind_row[[0, -2, -1]], [0.105, 0.095, 0.1], rtol=1e-5)
    assert out.sum(dtype=np.float64) == pytest.approx(snow.sum(dtype=np.float64), rel=1e-6)
    # without the spread the same row takes it all back
    module.drift_transport(flux_x, flux_y, height, has_surface, snow, 0.5, 0.2, out)
    first = out[:, 0] if downwind_axis == 1 else out[0, :]
    assert first[5] == pytest.approx(0.125, rel=1e-6) and first[1] == np.float32(0.1)


def _strip(flux, snow=0.1, steps=1, height=None):
    """1-D strip of surface nodes along x with flux (m^2/s) per node over terrain ``height``
    (m, flat by default), wrapping around from its last node to its first; returns the
    depth."""
    flux_x = np.tile(np.asarray(flux, np.float32), (3, 1))
    has_surface = np.ones(flux_x.shape, bool)
    depth = np.full(flux_x.shape, snow, np.float32)
    height = np.zeros_like(flux_x) if height is None else np.tile(np.float32(height), (3, 1))
    for _ in range(steps):
        out = np.zeros_like(depth)
        ref.drift_transport(flux_x, np.zeros_like(flux_x), height, has_surface, depth, 0.5, 0.2,
                            out)
        depth = out
    return depth[1]


def test_uniform_flux_over_uniform_snow_changes_nothing():
    np.testing.assert_allclose(_strip([0.04] * 12, steps=20), 0.1, rtol=1e-6)  # float32 rounding


def test_erosion_where_the_flux_grows_and_deposition_where_it_shrinks():
    ramp_up = _strip(np.linspace(0.0, 0.04, 12), steps=5)
    assert ramp_up[1:11].max() < 0.1  # scoured where the flux grows
    assert ramp_up[11] > 0.1 and ramp_up[0] > 0.1   # it settles where the flux drops (the
    #                                                 strip wraps from node 11 to node 0)
    shelter = _strip([0.04] * 6 + [0.0] * 6, steps=5)   # wind dies behind an obstacle
    # the face fluxes fall from full to half to none across nodes 5 and 6: both gain,
    # the fetch upwind and the lee beyond keep their snow (nodes 11 and 0, where the
    # strip wraps around from the still lee to the fetch, give some, and so node 1 later)
    assert shelter[5] > 0.1 and shelter[6] > 0.1
    assert np.allclose(shelter[2:5], 0.1, rtol=1e-6)
    assert np.allclose(shelter[7:11], 0.1, rtol=1e-6)


def test_saltating_snow_piles_at_the_foot_of_a_wall_instead_of_climbing_it():
    wall = [0.0] * 6 + [2.0] * 2 + [0.0] * 4
    depth = _strip([0.04] * 12, steps=5, height=wall)
    assert depth[5] > 0.1                       # the windward foot gains
    assert depth[6] < 0.1                       # the wall top gets nothing from below
    assert np.allclose(depth[:4], 0.1, rtol=1e-6)  # the fetch upwind is unchanged


def test_no_flux_below_the_threshold_and_flux_along_the_wind_above():
    ny, nx = 4, 5
    wind_x = np.full((ny, nx), 3.0, np.float32)
    wind_y = np.full((ny, nx), 4.0, np.float32)          # |U| = 5 m/s
    has_surface = np.ones((6, 7), bool)
    out = [np.zeros((6, 7), np.float32) for _ in range(2)]
    per_speed = 0.3 / 5.0                                 # u* = 0.3 m/s
    ref.saltation_flux(wind_x, wind_y, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, has_surface, per_speed, 0.31,
                       1.0, 1.0, 0.0, *out)
    assert not out[0].any() and not out[1].any()
    ref.saltation_flux(wind_x, wind_y, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, has_surface, per_speed, 0.2,
                       2.0, 1.0, 0.0, *out)
    expected = 2.0 * (0.3 ** 2 - 0.2 ** 2) / 0.3          # flux_scale (u*^2 - u*_t^2) / u*
    np.testing.assert_allclose(np.hypot(*out), expected, rtol=1e-5)
    np.testing.assert_allclose(out[1] / out[0], 4.0 / 3.0, rtol=1e-5)
    # a surface wind against the heading (a lee eddy's reversed flow) moves nothing
    ref.saltation_flux(wind_x, wind_y, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, has_surface, per_speed, 0.2,
                       2.0, -1.0, 0.0, *out)
    assert not out[0].any() and not out[1].any()


def test_constants_follow_the_cited_sources():
    settings = SnowSettings()
    # Pomeroy and Gray (1990) at u* = 0.5, u*_t = 0.32: 0.68 rho u*_t (u*^2 - u*_t^2) / (g u*)
    q_mass = 0.68 * 1.23 * 0.32 * (0.25 - 0.32 ** 2) / (9.81 * 0.5)
    per_unit = drift_model.flux_scale(settings.replace(snowfall_rate=0.0)) * (0.25 - 0.32 ** 2) / 0.5
    assert per_unit == pytest.approx(q_mass / drift_model.DRIFT_SNOW_DENSITY, rel=1e-9)
    # the thresholds are Li and Pomeroy's (1997) mean 10 m speeds through the log law
    for snow_type, speed_10m in (("dry", 7.7), ("wet", 9.9)):
        ustar = 0.41 * speed_10m / math.log(10.0 / 5e-4)
        assert drift_model.threshold(SnowSettings(snow_type=snow_type)) == pytest.approx(ustar, abs=0.01)


@pytest.mark.parametrize("changes, setting", [
    ({"drift_threshold": -0.1}, "drift_threshold"),
    ({"drift_threshold": float("nan")}, "drift_threshold"),
    ({"drift_strength": -1.0}, "drift_strength"),
    ({"drift_strength": float("nan")}, "drift_strength"),
    ({"roughness_length": 0.0}, "roughness_length"),
    ({"roughness_length": 0.4}, "roughness_length"),   # above half a 0.625 m wind cell
    ({"drift_enabled": "yes"}, "drift_enabled"),
    ({"turbulence": -0.5}, "turbulence"),
    ({"turbulence": float("inf")}, "turbulence"),
])
def test_bad_drift_settings_name_the_setting_before_anything_runs(changes, setting):
    settings = SnowSettings(heightmap_resolution=32, wind_resolution=32, flake_count=100, **changes)
    with pytest.raises(SnowInputError) as error:
        Simulation(settings, *box_test(), backend="cpu")
    assert error.value.setting == setting


def test_volume_books_balance_with_drift_in_a_bake():
    settings = SnowSettings(heightmap_resolution=48, wind_resolution=16, flake_count=3000,
                            snowfall_rate=60.0, wind_speed=12.0, seed=5)
    sim = Simulation(settings, *box_test(), backend="cpu")
    d = sim.step(120)
    assert d.deposited_volume > 0
    assert d.snow_volume == pytest.approx(d.deposited_volume, rel=1e-5)
    # a resumed bake carries the drift's books
    state = sim.state_dict()
    again = Simulation(settings, *box_test(), backend="cpu")
    again.load_state_dict(state)
    np.testing.assert_array_equal(sim.step(5).snow_volume, again.step(5).snow_volume)


@pytest.mark.parametrize("module", [ref, cpu], ids=["reference", "cpu"])
def test_surface_wind_keeps_the_speed_of_air_turning_up_a_slope(module, fractions_of):
    nz, ny, nx = 3, 1, 2
    solid = np.zeros((nz, ny, nx), np.uint8)
    solid[0] = 1                                     # the lowest open cells are at k = 1
    u = np.full((nz, ny, nx + 1), 1.0, np.float32)
    v = np.zeros((nz, ny + 1, nx), np.float32)
    w = np.zeros((nz + 1, ny, nx), np.float32)
    w[2, 0, 0] = 3.0                                 # air rising out of column 0's cell
    wind = [np.zeros((ny, nx), np.float32) for _ in range(2)]
    module.surface_wind(u, v, w, fractions_of(solid), *wind)
    np.testing.assert_allclose(wind[0][0], [np.sqrt(10.0), 1.0], rtol=1e-6)
    assert not wind[1].any()
    solid[2, 0, 0] = 1                               # an overhang: its face is not open
    module.surface_wind(u, v, w, fractions_of(solid), *wind)
    np.testing.assert_allclose(wind[0][0], [1.0, 1.0], rtol=1e-6)
    # cut cells: the lowest cell with an open face is the one the terrain cuts, and its
    # faces count by their open fractions
    fu, fv, fw = fractions_of(np.zeros((nz, ny, nx), np.uint8))
    fu[0] = [[0.0, 0.25, 0.75]]                       # the ground rises toward -x in layer 0
    fw[0] = 0.0
    u[0] = [[7.0, 2.0, 4.0]]
    w[1] = 0.0
    module.surface_wind(u, v, w, (fu, fv, fw), *wind)
    np.testing.assert_allclose(wind[0][0], [2.0, (0.25 * 2.0 + 0.75 * 4.0) / 1.0], rtol=1e-6)


def _shelter_case(seed, ny=23, nx=31, wny=9, wnx=13):
    rng = np.random.default_rng(seed)
    height = np.where(rng.random((ny, nx)) > 0.85, 2.0, 0.0).astype(np.float32)
    height += (0.1 * rng.random((ny, nx))).astype(np.float32)
    has_surface = rng.random((ny, nx)) > 0.05
    height[~has_surface] = -1.0e30
    snow = (0.3 * rng.random((ny, nx))).astype(np.float32)
    return height, has_surface, snow, (wny, wnx)


# small: 23 x 31 nodes under 9 x 13 wind columns of 1.25 m; wide: 45 x 83 nodes under
# 17 x 29 columns of 1.45 m, rows wider than a block of threads, the bubble 30 m long
_SHELTER_CASES = ([pytest.param(seed, False, id=f"small-{seed}") for seed in (4, 5)]
                  + [pytest.param(seed, True, id=f"wide-{seed}") for seed in (4, 5)])


@pytest.mark.parametrize("seed, wide", _SHELTER_CASES)
def test_shelter_kernels_match_reference_bit_for_bit(backend, seed, wide):
    """The backend's column surface, obstacle surface, separation bubble, sheltered
    saltation flux, horseshoe vortex and the surface wind under it against the reference,
    bit for bit; then what the reference's surface wind does under the vortex."""
    kd, kw = backend.kernel_module("drift"), backend.kernel_module("wind")
    xp, host = backend.xp, backend.to_host
    height, has_surface, snow, columns = (_shelter_case(seed, 45, 83, 17, 29) if wide
                                          else _shelter_case(seed))
    cell, reach = (1.45, 30.0) if wide else (1.25, 12.0)
    device_ground = [xp.asarray(a) for a in (height, snow, has_surface)]

    def matches(expected, run):
        """run(out) on a backend array that starts as 9.0 gives the bits of ``expected``;
        returns that array."""
        out = xp.full(expected.shape, 9.0, np.float32)
        run(out)
        np.testing.assert_array_equal(host(out), expected)
        return out

    surface = np.zeros(columns, np.float32)
    geometry = (-1.7, 0.4, 0.5, -2.0, 0.1, cell)
    ref.column_surface(height, snow, has_surface, *geometry, surface)
    device_surface = matches(surface,
                             lambda out: kd.column_surface(*device_ground, *geometry, out))
    obstacles = np.zeros(columns, np.float32)
    ref_wind.obstacle_surface(height, snow, *geometry, surface, obstacles)
    device_obstacles = matches(obstacles, lambda out: kw.obstacle_surface(
        *device_ground[:2], *geometry, device_surface, out))
    assert (obstacles < surface).any() and (obstacles == surface).any()
    top = np.zeros(columns, np.float32)
    bubble = (-2.0, 0.1, cell, 0.8, -0.6, 1 / 12, 0.2, 1.25, 2.0, reach)
    ref.separation_bubble(surface, *bubble, top)
    device_top = matches(top, lambda out: kd.separation_bubble(device_surface, *bubble, out))
    assert (top > surface).any()
    wind = (4 * np.random.default_rng(seed).standard_normal((2,) + columns)).astype(np.float32)
    flux = [np.zeros(height.shape, np.float32) for _ in range(2)]
    args = (-2.0, 0.1, cell, -1.7, 0.4, 0.5, has_surface, 0.07, 0.1, 0.05, 0.8, -0.6)
    ref.saltation_flux(*wind, *args, *flux, height, snow, top)
    device_args = args[:6] + (device_ground[2],) + args[7:]
    device_flux = [xp.full(height.shape, 9.0, np.float32) for _ in range(2)]
    kd.saltation_flux(*[xp.asarray(a) for a in wind], *device_args, *device_flux,
                      *device_ground[:2], device_top)
    for a, e in zip(device_flux, flux):
        np.testing.assert_array_equal(host(a), e)
    for heading in ((0.8, -0.6), (1.0, 0.0), (-0.28, 0.96)):
        scour = np.zeros(columns, np.float32)
        vortex = (cell, *heading, 1.0, 0.7, 2.5, 4)
        ref.horseshoe_vortex(obstacles, *vortex, scour)
        device_scour = matches(scour,
                               lambda out: kd.horseshoe_vortex(device_obstacles, *vortex, out))
        assert (scour > 1).any() and (scour == 1).any()
    fluxes = [np.zeros(columns, np.float32) for _ in range(4)]
    rng = np.random.default_rng(seed)
    nz, (wny, wnx) = 4, columns
    u = rng.standard_normal((nz, wny, wnx + 1)).astype(np.float32)
    v = rng.standard_normal((nz, wny + 1, wnx)).astype(np.float32)
    w = rng.standard_normal((nz + 1, wny, wnx)).astype(np.float32)
    fractions = (np.ones(u.shape, np.float32), np.ones(v.shape, np.float32),
                 np.ones(w.shape, np.float32))
    heading = (-0.28, 0.96)
    ref.surface_wind(u, v, w, fractions, fluxes[0], fluxes[1], scour, 1.5, *heading)
    device_wind = [xp.full(columns, 9.0, np.float32) for _ in range(2)]
    kd.surface_wind(*[xp.asarray(a) for a in (u, v, w)], tuple(xp.asarray(f) for f in fractions),
                    *device_wind, device_scour, 1.5, *heading)
    for a, e in zip(device_wind, fluxes[:2]):
        np.testing.assert_array_equal(host(a), e)
    # under the vortex: scour times the larger of the resolved and the approach speed,
    # along the resolved wind plus the heading times the speed it lacks of the approach
    # flow's, where that blows with the heading, else along the heading
    ref.surface_wind(u, v, w, fractions, fluxes[2], fluxes[3])
    band = scour > 1
    plain_speed = np.hypot(fluxes[2], fluxes[3])
    np.testing.assert_array_equal(fluxes[0][~band], fluxes[2][~band])
    np.testing.assert_allclose(np.hypot(fluxes[0], fluxes[1])[band],
                               (scour * np.maximum(plain_speed, 1.5))[band], rtol=1e-5)
    deficit = np.maximum(1.5 - plain_speed, 0.0)
    direction = np.stack([fluxes[2] + deficit * heading[0], fluxes[3] + deficit * heading[1]])
    with_heading = direction[0] * heading[0] + direction[1] * heading[1] > 0
    unit = np.stack([fluxes[0], fluxes[1]]) / np.hypot(fluxes[0], fluxes[1])
    np.testing.assert_allclose(unit[:, band & with_heading],
                               (direction / np.hypot(*direction))[:, band & with_heading],
                               atol=1e-5)
    fast = band & (plain_speed > 1.5) & with_heading       # as fast as the approach flow:
    assert fast.any()                                       # the resolved wind's direction
    np.testing.assert_allclose(unit[:, fast], (np.stack([fluxes[2], fluxes[3]])
                                               / plain_speed)[:, fast], atol=1e-5)
    np.testing.assert_allclose(unit[:, band & ~with_heading].T,
                               np.broadcast_to(heading, (int((band & ~with_heading).sum()), 2)),
                               atol=1e-5)
    assert (band & with_heading).any() and (band & ~with_heading).any()
    assert (band & (plain_speed > 1.5)).any() and (band & (plain_speed < 1.5)).any()
    plain = [np.zeros(height.shape, np.float32) for _ in range(2)]
    ref.saltation_flux(*wind, *args, *plain)
    sheltered = (plain[0] != 0) & (flux[0] == 0)
    assert sheltered.any() and not ((plain[0] == 0) & (flux[0] != 0)).any()


def _bubble_top(column_height, cell=1.0, heading=(1.0, 0.0), rise=drift_model.SEPARATION_RISE):
    top = np.zeros(column_height.shape, np.float32)
    ref.separation_bubble(column_height, 0.0, 0.0, cell, *heading, drift_model.SEPARATION_SLOPE,
                          rise, drift_model.SEPARATION_EDGE, drift_model.WAKE_SPREAD, 200.0, top)
    return top


def _bubble_behind(column_height, cell=1.0, heading=(1.0, 0.0)):
    return _bubble_top(column_height, cell, heading) > column_height


def test_separation_bubble_of_a_long_fence_is_about_12_heights_and_of_a_cube_under_2():
    # a 2 m fence across the whole grid (1 m columns), wind along +x
    fence = np.zeros((40, 120), np.float32)
    fence[:, 10] = 2.0
    sheltered = _bubble_behind(fence)
    row = sheltered[20]
    assert not row[:11].any()                    # nothing windward or on the fence
    length = np.flatnonzero(row).max() - 10      # metres behind the fence
    assert 22 <= length <= 25                    # 12 H, Tabler's solid-fence drift length
    assert row[11:11 + 20].all()
    # the dividing streamline leaves the top climbing: 1.2 H high 3.5 H behind the fence,
    # above the fence's top over the first half of the bubble, then down to the ground
    top = _bubble_top(fence)[20]
    behind = np.arange(120) - 10.0                                 # metres behind the fence
    expected = 2.0 * (1 - behind / 24) * (1 + 0.2 * behind / 2)   # H (1 - x/12H)(1 + 0.2 x/H)
    np.testing.assert_allclose(top[11:34], expected[11:34], atol=1e-5)
    assert top[11:34].max() == pytest.approx(2.4, abs=0.01)        # 1.2 H at 3.5 H
    assert (top[11:11 + 13] > 2.0).all() and (top[11 + 15:34] < 2.0).all()
    # a 2 m cube: flow from the sides closes its wake within 1.6-2 H (Martinuzzi and Tropea)
    cube = np.zeros((40, 120), np.float32)
    cube[19:21, 10:12] = 2.0
    wake = _bubble_behind(cube)
    behind = np.flatnonzero(wake[19]).max() - 11
    assert 2 <= behind <= 4.5
    assert not wake[:, :10].any() and not wake[:15].any() and not wake[25:].any()
    # the heading turns the bubble with it
    turned = _bubble_behind(fence.T.copy(), heading=(0.0, 1.0))
    np.testing.assert_array_equal(turned, sheltered.T)


def test_the_dividing_streamline_climbs_off_bluff_faces_only():
    # a smooth ridge (Witch of Agnesi, 20 m high, half-width 30 m, steepest 33 degrees) on
    # 2.5 m columns: its lee bubble is the straight line's, with or without the climb
    x = (np.arange(96) - 30.0) * 2.5
    ridge = np.broadcast_to(20.0 / (1 + (x / 30.0) ** 2), (8, 96)).astype(np.float32)
    smooth = _bubble_top(ridge, cell=2.5)
    np.testing.assert_array_equal(smooth, _bubble_top(ridge, cell=2.5, rise=0.0))
    assert (smooth > ridge).any()                 # its lee is still sheltered
    # the same ridge with a 4 m wall on its crest (4 m over one 2.5 m column: bluff), whose
    # streamline climbs
    walled = ridge.copy()
    walled[:, 30] += 4.0
    assert (_bubble_top(walled, cell=2.5) > _bubble_top(walled, cell=2.5, rise=0.0)).any()
    # a fence's windward side buried up to its top is no longer a bluff face
    fence = np.zeros((8, 120), np.float32)
    fence[:, 10] = 2.0
    buried = fence.copy()
    buried[:, :10] = np.linspace(0.0, 1.9, 10, dtype=np.float32)   # a drift ramp to the top
    np.testing.assert_array_equal(_bubble_top(buried), _bubble_top(buried, rise=0.0))
    assert (_bubble_top(fence) > _bubble_top(fence, rise=0.0)).any()


def _scour(column_height, cell=0.5, heading=(1.0, 0.0), module=ref):
    scour = np.zeros(column_height.shape, np.float32)
    module.horseshoe_vortex(column_height, cell, *heading, drift_model.VORTEX_REACH,
                            drift_model.VORTEX_GAIN, drift_model.VORTEX_LEG, 8, scour)
    return scour


@pytest.mark.parametrize("module", [ref, cpu], ids=["reference", "cpu"])
def test_horseshoe_vortex_wraps_the_windward_foot_and_sides_of_a_block_only(module):
    # a 2 m cube (4 x 4 columns of 0.5 m) on flat ground, wind along +x
    ground = np.zeros((40, 60), np.float32)
    ground[18:22, 20:24] = 2.0
    scour = _scour(ground, module=module)
    reach = drift_model.VORTEX_REACH * 2.0                   # metres from the foot
    gain = drift_model.VORTEX_GAIN
    assert scour[19, 19] == pytest.approx(1 + gain * (1 - 0.5 / reach))   # at the foot
    front = int(round(reach / 0.5))                         # columns the band reaches
    assert (scour[18:22, 20 - front + 1:20] > 1).all()      # in front, within reach
    assert (scour[18:22, :20 - front] == 1).all()           # upwind of it: none
    assert np.all(np.diff(scour[19, 20 - front:20]) > 0)     # growing toward the face
    assert (scour[18 - front + 1:18, 20:24] > 1).all()      # beside, both sides
    assert (scour[22:22 + front - 1, 20:24] > 1).all()
    assert (scour[18:22, 24:] == 1).all()                   # straight behind: none
    legs = int(round(drift_model.VORTEX_LEG * 2.0 / 0.5))   # columns the legs trail
    for row in (17, 22):                                    # the legs beside the lee
        assert np.all(np.diff(scour[row, 23:23 + legs]) < 0)   # fading downwind
    assert (scour[18 - front + 1:18, 24:23 + legs] > 1).all()
    assert (scour[22:22 + front - 1, 24:23 + legs] > 1).all()
    assert (scour[:, 23 + legs:] == 1).all()                # beyond them: none
    assert (scour[18:22, 20:24] == 1).all()                 # the block's top: none
    assert (scour[:10] == 1).all() and (scour[30:] == 1).all()
    # the heading turns it with the wind
    turned = _scour(ground.T.copy(), heading=(0.0, 1.0), module=module)
    np.testing.assert_array_equal(turned, scour.T)
    # flat ground and a 30 degree slope have none; a 60 degree cliff face has some
    x = 0.5 * np.arange(60, dtype=np.float32)[None, :].repeat(20, axis=0)
    assert (_scour(np.zeros((20, 60), np.float32), module=module) == 1).all()
    assert (_scour((x * np.float32(math.tan(math.radians(30)))).astype(np.float32),
                   module=module) == 1).all()
    cliff = _scour((x * np.float32(math.tan(math.radians(60)))).astype(np.float32),
                   module=module)
    assert (cliff[:, :-1] > 1.2).all()


def _saltation_around_a_block(leg):
    """Snow (m) after 40 steps of saltation alone (a uniform 10 m/s surface wind along +x
    times the vortex's factor with legs ``leg`` H long, or 1 where ``leg`` is None; no
    flakes) on 0.1 m of snow
    around a 2 x 2 x 2 m block (x 10-12 m, y 9-11 m), and the volume it ends with."""
    spacing, cell = 0.25, 0.5
    height = np.zeros((81, 121), np.float32)
    height[36:45, 40:49] = 2.0
    has_surface = np.ones(height.shape, bool)
    top, columns = np.zeros((40, 60), np.float32), np.zeros((40, 60), np.float32)
    ref.column_surface(height, np.zeros_like(height), has_surface, 0.0, 0.0, spacing, 0.0,
                       0.0, cell, top)
    ref_wind.obstacle_surface(height, np.zeros_like(height), 0.0, 0.0, spacing, 0.0, 0.0,
                              cell, top, columns)
    scour = np.ones_like(columns)
    if leg is not None:
        ref.horseshoe_vortex(columns, cell, 1.0, 0.0, drift_model.VORTEX_REACH,
                             drift_model.VORTEX_GAIN, leg, 8, scour)
    wind_x = (np.float32(10.0) * scour).astype(np.float32)
    snow = np.full(height.shape, 0.1, np.float32)
    spare = np.zeros_like(snow)
    flux = [np.zeros_like(snow) for _ in range(2)]
    ref.saltation_flux(wind_x, np.zeros_like(wind_x), 0.0, 0.0, cell, 0.0, 0.0, spacing,
                       has_surface, 0.066, 0.32, 0.05, 1.0, 0.0, *flux)
    for _ in range(40):
        ref.drift_transport(*flux, height, has_surface, snow, 0.04 / spacing, 0.2, spare)
        snow, spare = spare, snow
    total = np.sum(snow, dtype=np.float64)
    return snow, total / (0.1 * snow.size)


@pytest.mark.parametrize("module", [ref, cpu])
def test_under_the_vortex_stagnant_air_drifts_along_the_approach_flow(module):
    """Against a wall the resolved air stagnates and its direction is noise: a column
    under the vortex whose resolved wind is slow (0.05 m/s along the storm, 0.5 across)
    drifts along the approach flow, within 7 degrees of the heading (it drifted 84 degrees
    off it, along the wall's foot, and piled cones there: docs/drift.md); one whose
    resolved wind is as fast as the approach flow keeps its own direction."""
    nz, ny, nx = 3, 2, 2
    for (u0, v0), expect in (((0.05, 0.5), None), ((3.0, 5.0), (3.0, 5.0))):
        u = np.full((nz, ny, nx + 1), u0, np.float32)
        v = np.full((nz, ny + 1, nx), v0, np.float32)
        w = np.zeros((nz + 1, ny, nx), np.float32)
        fractions = (np.ones(u.shape, np.float32), np.ones(v.shape, np.float32),
                     np.ones(w.shape, np.float32))
        wind_x, wind_y = np.zeros((ny, nx), np.float32), np.zeros((ny, nx), np.float32)
        scour = np.full((ny, nx), 1.69, np.float32)
        module.surface_wind(u, v, w, fractions, wind_x, wind_y, scour, 5.0, 1.0, 0.0)
        angle = np.degrees(np.arctan2(wind_y, wind_x))
        speed = np.hypot(wind_x, wind_y)
        np.testing.assert_allclose(speed, 1.69 * max(5.0, np.hypot(u0, v0)), rtol=1e-5)
        if expect is None:
            assert (np.abs(angle) < 7.0).all(), angle
        else:
            np.testing.assert_allclose(angle, np.degrees(np.arctan2(expect[1], expect[0])),
                                       atol=1e-3)


def test_horseshoe_vortex_scours_the_windward_corners_and_its_legs_carry_the_snow_on():
    # with the vortex the snow leaves the band's entry (in front of the windward face and
    # around its corners, where the flux grows); its legs carry it on past the lee corner
    # and let it settle along them, where a band that stopped at the lee face piled it
    # beside the lee corner
    snow, kept = _saltation_around_a_block(drift_model.VORTEX_LEG)
    assert kept == pytest.approx(1.0, rel=1e-5)                   # volume stays exact
    assert snow[31:36, 36:41].mean() < 0.085                    # around the windward corner
    assert snow[37:44, 33:38].mean() < 0.085                    # in front, short of the foot
    assert snow[28:36, 49:53].max() < 0.12                      # no pile at the lee corner
    assert snow[28:36, 49:66].mean() > 0.1025                   # settled along the leg
    stopped, _ = _saltation_around_a_block(0.0)
    assert stopped[28:36, 49:53].max() > 0.14                   # the band that stops: a pile
    assert stopped[28:36, 49:66].mean() < 0.1025


def test_the_vortex_scours_the_windward_face_of_a_block_where_the_air_stagnates():
    # a 2 m cube in a 10 m/s storm: the solver's air stagnates against the windward face,
    # but the horseshoe vortex scales the approach flow's surface wind, so the foot of the
    # face and the strip along the sides are a wind scoop (Oikawa et al.: erosion nearly
    # surrounding the cube). With the factor on the resolved wind they held 2.3 and 0.8
    # times the far field (seed 3); now 0.30-0.48 and 0.08-0.13 (seeds 1-3). The wrap keeps
    # the blowing snow to what this 20 m plane lifts itself: with the open snowfield's
    # suspension blowing through, the sides held 0.53 of the far field after these 6 s
    # (seed 3; docs/drift_validation.md has the open fetch's cubes, 0.17-0.25 at 12 m/s)
    settings = SnowSettings(wind_speed=10.0, snowfall_rate=60.0, heightmap_resolution=81,
                            wind_cell_size=0.5, sky_height=8.0, flake_count=20_000, seed=3,
                            upwind_fetch="wrap")
    sim = Simulation(settings, *box_test(size=20.0, block=2.0, block_height=2.0,
                                         resolution=81), backend="cpu")
    sim.step(144)
    depth, grid = sim.snow_depth(), sim.heightmap.grid
    x, y = np.meshgrid(grid.x0 + np.arange(grid.nx) * grid.spacing,
                       grid.y0 + np.arange(grid.ny) * grid.spacing)
    ground = np.asarray(sim.heightmap.height) < 1e-3
    ring = np.maximum(np.maximum(abs(x) - 1.0, 0.0), np.maximum(abs(y) - 1.0, 0.0))
    far = float(depth[ground & (ring >= 5.0)].mean())
    face = float(depth[ground & (x < -1.0) & (x >= -2.0) & (abs(y) <= 1.0)].mean())
    sides = float(depth[ground & (abs(y) > 1.0) & (abs(y) <= 1.5) & (x >= 0.0) & (x <= 1.0)]
                  .mean())
    assert face < 0.75 * far and sides < 0.4 * far


def test_saltation_without_the_vortex_moves_no_snow_off_a_block():
    snow, kept = _saltation_around_a_block(None)
    assert kept == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(snow[:, :39], 0.1, rtol=1e-6)
    np.testing.assert_allclose(snow[:34], 0.1, rtol=1e-6)


@pytest.mark.slow
def test_blowing_snow_keeps_the_snowfall_rate():
    # 10 m/s over a fence: many landings are lifted and blow about as grains, flakes that
    # are not falling from the sky meanwhile, and strong eddies hold flakes aloft longer.
    # The snowfall is imposed at the sky (each step's landings share that step's snow), so
    # the snow lands at snowfall_rate with the drift on or off and at any turbulence. (It
    # used to be a count of landings: 0.73-0.98 of the rate per 48 steps without drift as
    # the gusts swung, and less with grains aloft.)
    terrain = snow_fence(size_x=40.0, size_y=6.0, fence_height=2.0, fence_length=6.0,
                         thickness=0.6, fence_x=-10.25)
    for drift, turbulence in ((True, 1.0), (False, 1.0), (True, 3.0)):
        settings = SnowSettings(wind_speed=10.0, snowfall_rate=60.0, heightmap_resolution=161,
                                wind_cell_size=0.5, flake_count=20_000, seed=4,
                                drift_enabled=drift, turbulence=turbulence)
        sim = Simulation(settings, *terrain, backend="cpu")
        surface_area = float(np.count_nonzero(sim.heightmap.has_surface)) * sim.heightmap.grid.node_area
        per_window = settings.snowfall_rate / 3600.0 * surface_area * 48 * settings.time_step
        before = 0.0
        for _window in range(4):     # the gusts used to swing 48-step windows by up to 30 %
            after = sim.step(48)
            assert after.snowfall_volume - before == pytest.approx(per_window, rel=2e-3)
            before = after.snowfall_volume
        assert after.snow_volume == pytest.approx(after.deposited_volume, rel=1e-5)
        if drift:
            # many flakes aloft as grains (4.7 % since the wind's mixing closes the fence's
            # wake; 5-13 % with the inviscid wind)
            assert after.grains_aloft > 0.04 * settings.flake_count
        else:
            assert after.grains_aloft == 0


@pytest.mark.slow
def test_a_long_solid_fence_has_a_lee_drift_that_ends_downwind():
    # a 2 m solid fence across the whole width (2D, as Tabler's long fences), 10 m/s: the
    # lee 0.3-10 H holds clearly more than 15-20 H downwind. (The strip's 8 H of fetch is
    # inside the reach of the windward slow-down once the wind is stepped at its own
    # Courant number, so the fetch is no reference here: docs/drift_validation.md.)
    fence_x, height = -14.25, 2.0       # on a wind cell's centre, so the wind sees it
    settings = SnowSettings(wind_speed=10.0, snowfall_rate=60.0, heightmap_resolution=241,
                            wind_cell_size=0.5, flake_count=60_000, seed=2)
    terrain = snow_fence(size_x=60.0, size_y=8.0, fence_height=height, fence_length=8.0,
                         thickness=0.6, fence_x=fence_x)
    sim = Simulation(settings, *terrain, backend="cpu")
    diagnostics = sim.step(168)
    depth = sim.snow_depth().mean(axis=0)
    hm = sim.heightmap.grid
    x_in_h = (hm.x0 + np.arange(hm.nx) * hm.spacing - fence_x) / height

    def mean(lo, hi):
        return float(depth[(x_in_h >= lo) & (x_in_h < hi)].mean())

    lee, beyond = mean(0.3, 10), mean(15, 20)
    assert beyond < 0.8 * lee           # a lee drift, which ends before 15 H
    assert diagnostics.deposited_volume == pytest.approx(diagnostics.snow_volume, rel=1e-4)


@pytest.mark.slow
def test_a_ridge_has_its_windward_slope_and_crest_scoured_and_its_lee_loaded():
    """The validation's Agnesi ridge (H = 20 m, half-width a = 30 m, 2D) in a 20 s storm
    at 10 m/s: with the drift the windward slope (-2a..-0.5a) and the crest's windward half
    keep a fraction of the snow that fell, the lee shoulder (0.25-0.75a, where a cornice
    grows) and the lee slope (0.5-2a) gather it, as on real ridges (docs/
    drift_validation.md); without the drift the lee holds far less.
    (Seeds 1-3 with the drift: windward 0.43-0.54, crest's windward half 0.17-0.22,
    shoulder 3.3-3.7, lee 2.3-2.4; seed 2 without: 1.24, 0.58, 0.01, 0.87.)"""
    a = 30.0
    zones = {}
    for drift in (True, False):
        settings = SnowSettings(wind_speed=10.0, gust_strength=0.2, gust_direction_jitter=5.0,
                                snowfall_rate=60.0, heightmap_resolution=241,
                                wind_cell_size=2.5, sky_height=30.0, flake_count=30_000,
                                side_walls=True, seed=2, drift_enabled=drift)
        sim = Simulation(settings, *ridge(size_x=240.0, size_y=10.0, height=20.0,
                                          half_width=a, resolution=241), backend="cpu")
        diagnostics = sim.step(480)
        assert diagnostics.snow_volume == pytest.approx(diagnostics.deposited_volume, rel=1e-4)
        depth = sim.snow_depth().astype(np.float64).mean(axis=0)
        hm = sim.heightmap.grid
        x = (hm.x0 + np.arange(hm.nx) * hm.spacing) / a
        fell = diagnostics.snowfall_volume / (np.count_nonzero(sim.heightmap.has_surface)
                                               * hm.node_area)

        def mean(lo, hi):
            return float(depth[(x >= lo) & (x < hi)].mean()) / fell

        zones[drift] = dict(windward=mean(-2.0, -0.5), crest=mean(-0.25, 0.0),
                            shoulder=mean(0.25, 0.75), lee=mean(0.5, 2.0))
    drifted, still = zones[True], zones[False]
    assert drifted["windward"] < 0.7 and drifted["crest"] < 0.4, drifted
    assert drifted["shoulder"] > 2.0 and drifted["lee"] > 1.5, drifted
    assert drifted["lee"] > 3.0 * drifted["windward"], drifted
    # the drift is what loads the lee. (Without it the windward slope used to be the
    # snowier side, 1.24 against 0.87 with seed 2, while the flakes wrapped around: those
    # that had crossed the ridge came back low onto its windward slope. With the open
    # upwind fetch, the default, it gets 0.73 and the lee 0.79.)
    assert drifted["lee"] > 1.5 * still["lee"], (drifted, still)


def test_side_walls_keep_the_side_edges_like_the_plane_between_them():
    """On a flat plane under a gusty storm along +x, the default sides (walls that carry the
    gusts' crosswind) keep the surface wind's crosswind along them as between them, and
    the rows along them close to the plane's depth (within the boundary rows' smaller
    catch of flakes). Open sides at p = 0 pin the pressure at the sides while the gusts
    change the pressure inside: their crosswind departs from the middle's, and the rows
    along them collect or lose the snow (measured: 0.14-2.98 of the middle, seeds 1-3)."""
    axis = np.linspace(-10.0, 10.0, 41)
    vertices, triangles = grid_mesh(axis, axis, np.zeros((41, 41)))
    departures = {}
    for walls in (False, True):
        settings = SnowSettings(heightmap_resolution=128, wind_resolution=32, sky_height=6.0,
                                wind_speed=10.0, gust_strength=0.2, flake_count=20_000,
                                snowfall_rate=60.0, seed=1)
        if not walls:
            settings = settings.replace(side_walls=False)
        sim = Simulation(settings, vertices, triangles, backend="cpu")
        sim.step(96)
        rows = sim.snow_depth().astype(np.float64).mean(axis=1)
        edges = np.array([rows[0], rows[-1]]) / rows[16:-16].mean()
        departures[walls] = np.abs(1.0 - edges).max()
        if walls:
            assert settings.side_walls
            assert ((edges > 0.6) & (edges < 1.0)).all(), edges
            crosswind = np.asarray(sim.drift.wind_y, np.float64)[:, 4:-4].mean(axis=1)
            middle = crosswind[len(crosswind) // 2]
            assert abs(middle) > 0.3                     # the gusts blow across the plane
            assert np.abs(crosswind[[0, 1, -2, -1]] - middle).max() < 0.25 * abs(middle)
    assert departures[False] > 2.0 * departures[True], departures
