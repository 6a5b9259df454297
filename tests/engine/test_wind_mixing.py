"""The wind's eddy viscosity (Prandtl's mixing length) and its diffusion: the Numba kernels
are the NumPy reference bit for bit; the viscosity is l^2 |S| of an analytic shear; the
diffusion is the heat equation's, keeps a uniform wind and makes no new extrema; and it
closes the wake behind a fence, steady, where the inviscid wind's never closes."""
import math

import numpy as np
import pytest

from snowfall.kernels.cpu import wind as cpu
from snowfall.kernels.reference import wind as ref
from snowfall.snow_addon import Simulation
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.grid import WindGrid
from snowfall.snow_addon.scenes import snow_fence
from snowfall.snow_addon.settings import SnowSettings
from snowfall.snow_addon.wind import KARMAN, MIXING_HEIGHT, WindSolver

F32 = np.float32


def _faces(shape, rng, scale=3.0):
    nz, ny, nx = shape
    return tuple((scale * rng.standard_normal(s)).astype(F32)
                 for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])


def _mixing_case(shape, seed, fractions_of):
    rng = np.random.default_rng(seed)
    u, v, w = _faces(shape, rng)
    solid = (rng.random(shape) < 0.2).astype(np.uint8)
    fractions = fractions_of(solid, rng)
    column_top = rng.uniform(-1.0, 2.0, shape[1:]).astype(F32)
    return u, v, w, solid, fractions, column_top


@pytest.mark.parametrize("shape", [(7, 9, 11), (2, 2, 2), (3, 5, 2), (6, 1, 4)])
def test_mixing_kernels_are_the_reference_bit_for_bit(shape, fractions_of):
    u, v, w, solid, fractions, column_top = _mixing_case(shape, 3, fractions_of)
    results = []
    for kernels in (ref, cpu):
        nu = np.zeros(shape, F32)
        # limit 1.5 m^2/s binds in part of the cells, mixing height 2 m in part
        kernels.eddy_viscosity(u, v, w, solid, column_top, -0.5, 0.5, KARMAN, 2.0, 1.5, nu)
        out = [np.full_like(a, np.nan) for a in (u, v, w)]
        kernels.diffuse_velocity(u, v, w, fractions, nu, 0.08, *out)
        results.append((nu, out))
    (nu_ref, out_ref), (nu_cpu, out_cpu) = results
    assert np.array_equal(nu_ref, nu_cpu)
    if shape == (7, 9, 11):
        assert (nu_ref == F32(1.5)).any() and ((nu_ref > 0) & (nu_ref < 1.5)).any()
    for a, b in zip(out_ref, out_cpu):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kernels", [ref, cpu], ids=["reference", "cpu"])
def test_eddy_viscosity_of_a_linear_shear_is_l_squared_times_the_shear(kernels):
    nz, ny, nx = 12, 4, 5
    h, z0, shear, ground = 0.5, -0.5, 1.7, 0.0   # u = shear * z over flat ground at z = 0
    centres = z0 + (np.arange(nz) + 0.5) * h
    u = np.broadcast_to((shear * centres)[:, None, None], (nz, ny, nx + 1)).astype(F32)
    v = np.zeros((nz, ny + 1, nx), F32)
    w = np.zeros((nz + 1, ny, nx), F32)
    solid = np.zeros((nz, ny, nx), np.uint8)
    solid[0] = 1                                 # the cell below the ground
    column_top = np.full((ny, nx), ground, F32)
    nu = np.zeros((nz, ny, nx), F32)
    kernels.eddy_viscosity(u, v, w, solid, column_top, z0, h, KARMAN, 4.0, 100.0, nu)
    height = np.clip(centres - ground, 0.0, 4.0)
    expected = (KARMAN * height) ** 2 * shear
    np.testing.assert_allclose(nu[1:], np.broadcast_to(expected[1:, None, None], nu[1:].shape),
                               rtol=1e-5)
    assert not nu[0].any()                       # solid
    capped = np.zeros_like(nu)
    kernels.eddy_viscosity(u, v, w, solid, column_top, z0, h, KARMAN, 4.0, 0.5, capped)
    np.testing.assert_array_equal(capped, np.minimum(nu, F32(0.5)))


@pytest.mark.parametrize("kernels", [ref, cpu], ids=["reference", "cpu"])
def test_diffusion_keeps_a_uniform_wind_and_makes_no_new_extrema(kernels, fractions_of):
    shape = (6, 7, 8)
    rng = np.random.default_rng(5)
    _u, _v, _w, solid, fractions, _top = _mixing_case(shape, 5, fractions_of)
    nu = rng.uniform(0.0, 2.0, shape).astype(F32)
    scale = 0.125 / 2.0                          # scale * nu <= MIXING_STABILITY
    uniform = [np.full(s, value, F32) for s, value in
               zip([a.shape for a in fractions], (3.0, -1.25, 0.5))]
    out = [np.zeros_like(a) for a in uniform]
    kernels.diffuse_velocity(*uniform, fractions, nu, scale, *out)
    for a, b in zip(uniform, out):
        assert np.array_equal(a, b)
    fields = _faces(shape, rng)
    kernels.diffuse_velocity(*fields, fractions, nu, scale, *out)
    for axis, (field, fraction, result) in enumerate(zip(fields, fractions, out)):
        normal = 2 - axis                        # u: x (array axis 2), v: y, w: z
        padded_low = np.pad(np.where(fraction > 0, field, np.inf), 1, constant_values=np.inf)
        padded_high = np.pad(np.where(fraction > 0, field, -np.inf), 1, constant_values=-np.inf)
        low, high = field.copy(), field.copy()
        for ax in range(3):
            for by in (-1, 1):
                sl = [slice(1, -1)] * 3
                sl[ax] = slice(1 + by, field.shape[ax] + 1 + by)
                low = np.minimum(low, padded_low[tuple(sl)])
                high = np.maximum(high, padded_high[tuple(sl)])
        assert (result >= low - 1e-5).all() and (result <= high + 1e-5).all()
        keep = fraction <= 0
        side = np.zeros(field.shape, bool)
        index = [slice(None)] * 3
        for end in (0, -1):
            index[normal] = end
            side[tuple(index)] = True
        assert np.array_equal(result[keep | side], field[keep | side])
        assert not np.array_equal(result, field)


@pytest.mark.parametrize("kernels", [ref, cpu], ids=["reference", "cpu"])
def test_diffusion_of_a_cosine_decays_as_the_heat_equation(kernels):
    """u(z) = cos(pi z / L) between free-slip ground and lid under a constant nu decays as
    exp(-nu (pi / L)^2 t): the discrete step's factor converges to it. (The side faces keep
    their values, so the long x axis keeps them 5 diffusion lengths from the middle.)"""
    nz, ny, nx, h, nu_value, dt = 32, 3, 40, 0.25, 0.2, 0.01
    length = nz * h
    z = (np.arange(nz) + 0.5) * h
    profile = np.cos(math.pi * z / length)
    u = np.broadcast_to(profile[:, None, None], (nz, ny, nx + 1)).astype(F32).copy()
    v = np.zeros((nz, ny + 1, nx), F32)
    w = np.zeros((nz + 1, ny, nx), F32)
    fractions = tuple(np.ones(a.shape, F32) for a in (u, v, w))
    nu = np.full((nz, ny, nx), nu_value, F32)
    steps = 200
    outs = [np.zeros_like(a) for a in (u, v, w)]
    for _ in range(steps):
        kernels.diffuse_velocity(u, v, w, fractions, nu, dt / h ** 2, *outs)
        u, outs[0] = outs[0], u
    amplitude = float(np.dot(u[:, 1, nx // 2], profile) / np.dot(profile, profile))
    expected = math.exp(-nu_value * (math.pi / length) ** 2 * steps * dt)
    assert amplitude == pytest.approx(expected, rel=2e-3)
    np.testing.assert_allclose(u[:, :, 0], np.repeat(profile[:, None], ny, 1), atol=1e-6)  # sides keep


def _fence_strip(mixing, fence_x=-29.75):
    """A 2 m solid fence across an 80 x 3 m strip with free-slip side walls (the 2D set-up
    of a long snow fence), 10 m/s along +x, 0.5 m wind cells, 35 fence heights of lee;
    at the default ``fence_x`` the fence is centred on a wind column."""
    terrain = snow_fence(size_x=80.0, size_y=3.0, fence_height=2.0, fence_length=3.0,
                         thickness=0.6, fence_x=fence_x, resolution=321)
    settings = SnowSettings(wind_speed=10.0, gust_strength=0.0, gust_direction_jitter=0.0,
                            side_walls=True, wind_mixing=mixing, heightmap_resolution=321,
                            wind_cell_size=0.5, sky_height=8.0, flake_count=500,
                            drift_enabled=False)
    return Simulation(settings, *terrain, backend="cpu")


def _near_ground_u(sim):
    """(x of the u faces (m), u (m/s) of the two open layers from 0 to 1 m, averaged
    across the strip)."""
    g = sim.grid
    u = np.asarray(sim.wind.u)
    k = int(round((0.25 - g.z0) / g.cell_size - 0.5))      # the layer centred at 0.25 m
    return g.x0 + np.arange(g.nx + 1) * g.cell_size, u[k:k + 2].mean(axis=(0, 1))


def test_mixing_closes_the_wake_behind_a_fence():
    lee_face, height = -29.45, 2.0
    sim = _fence_strip(1.0)
    readings = []
    for _ in range(6):                          # 6 x 4 s: 3 flow-throughs of the strip
        sim.step(96)
        x, u = _near_ground_u(sim)
        behind = (x - lee_face) / height
        readings.append(float(u[(behind >= 12) & (behind < 20)].mean()))
    # the flow reattaches behind the bubble and stays so: forward wind 12-20 H behind,
    # steady over the last two flow-throughs (within 10 %)
    late = readings[2:]
    assert min(late) > 2.0, readings
    assert max(late) - min(late) < 0.1 * np.mean(late), readings
    reversed_ = np.nonzero((behind > 0) & (behind < 30) & (u < 0))[0]
    assert reversed_.size and 4.0 < behind[reversed_[-1]] < 16.0   # reattachment, in H
    assert float(u[(behind >= 25) & (behind < 33)].mean()) > readings[-1]  # recovering


@pytest.mark.parametrize("value", [-0.5, float("nan"), float("inf"), 11.0])
def test_bad_wind_mixing_names_the_setting(value):
    with pytest.raises(SnowInputError) as error:
        SnowSettings(wind_mixing=value).validate()
    assert "wind_mixing" in str(error.value) and "1" in str(error.value)


def test_no_mixing_allocates_no_viscosity_and_estimate_covers_it():
    for mixing in (0.0, 1.0):
        settings = SnowSettings(wind_mixing=mixing)
        grid = WindGrid(0.0, 0.0, 0.0, 1.0, 8, 6, 5)
        solver = WindSolver(settings, grid, select_backend("cpu"))
        assert (solver.eddy_viscosity is None) == (mixing == 0.0)
    on = WindSolver.estimate_bytes(SnowSettings(wind_mixing=1.0), grid)
    off = WindSolver.estimate_bytes(SnowSettings(wind_mixing=0.0), grid)
    # nu per cell, and the third velocity buffer the wind solve begun ahead mixes into
    faces = (grid.nx + 1) * grid.ny * grid.nz + grid.nx * (grid.ny + 1) * grid.nz \
        + grid.nx * grid.ny * (grid.nz + 1)
    assert on - off == 4 * grid.cell_count + 4 * faces
    assert MIXING_HEIGHT == 10.0


@pytest.mark.parametrize("mixing", [0.0, 1.0])
def test_a_fence_on_a_wind_cell_boundary_keeps_the_wind_bounded(mixing):
    """A 0.6 m thick fence centred on the boundary between two wind columns: both columns'
    centres lie inside it but most of each cell is open, and the faces between those cells
    are cut, 0.125-0.5 open. The flow squeezing through them is fast; while the advection
    sampled them at full weight it spread that into the wind (peaks of 381 m/s without
    mixing and 96 m/s with it in these 8 s of a 10 m/s storm). Weighted by their opening
    (min(1, 2 A_f)), the wind stays bounded."""
    sim = _fence_strip(mixing, fence_x=-29.5)
    solid = np.asarray(sim.wind.solid) != 0
    fw = np.asarray(sim.wind.fractions[2])
    inside = solid[:-1] & solid[1:]                  # w faces between two solid cells
    assert ((fw[1:-1] > 0) & (fw[1:-1] < 1) & inside).any()   # the cut faces inside
    peaks = []
    for _ in range(4):
        sim.step(48)
        peaks.append(max(float(np.abs(np.asarray(a)).max())
                         for a in (sim.wind.u, sim.wind.v, sim.wind.w)))
    assert max(peaks) < 30.0, peaks
