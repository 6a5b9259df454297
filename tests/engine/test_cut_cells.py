"""Cut cells: the faces' open fractions against the terrain (exact for planes, closed
inside a thin fence's column, the Numba build equal to the reference bit for bit), and
the solver's two wind boundaries."""
import numpy as np
import pytest

from snowfall.kernels.cpu import drift as cpu_drift
from snowfall.kernels.cpu import wind as cpu
from snowfall.kernels.reference import drift as ref_drift
from snowfall.kernels.reference import pressure as ref_pressure
from snowfall.kernels.reference import wind as ref
from snowfall.snow_addon import Simulation, SnowSettings
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.grid import HeightmapGrid
from snowfall.snow_addon.scenes import grid_mesh, snow_fence


def _face_arrays(shape):
    nz, ny, nx = shape
    return tuple(np.full(s, 7.0, np.float32)
                 for s in [(nz, ny, nx + 1), (nz, ny + 1, nx), (nz + 1, ny, nx)])


def _fractions(kernels, height, snow, hm, origin, cell, shape, column_top=None):
    """(frac_u, frac_v, frac_w) of ``kernels`` (a wind kernel module) for a heightmap."""
    x0, y0, z0 = origin
    blocks = np.full(shape[1:], ref.NO_BLOCK, np.float32)
    if column_top is not None:
        kernels.block_tops(height, snow, hm.x0, hm.y0, hm.spacing, x0, y0, cell, column_top,
                           blocks)
    out = _face_arrays(shape)
    kernels.face_fractions(height, snow, hm.x0, hm.y0, hm.spacing, x0, y0, z0, cell, blocks,
                           *out)
    return out


def _assert_fractions(actual, exact):
    """``actual`` holds the exact open fractions rounded to multiples of 1/128: within half
    a step of them (2e-6: float32 rounding), those in (0, FRACTION_MIN) raised to it (below
    1e-6: rounding, treated as 0)."""
    exact = np.asarray(exact)
    exact = np.where((exact > 1e-6) & (exact < ref.FRACTION_MIN), ref.FRACTION_MIN, exact)
    np.testing.assert_array_equal(actual * 128.0, np.round(actual * 128.0))
    np.testing.assert_allclose(actual, exact, rtol=0, atol=0.5 / 128 + 2e-6)


@pytest.mark.parametrize("kernels", [ref, cpu], ids=["numpy", "cpu"])
def test_open_fractions_of_a_tilted_plane_are_exact(kernels):
    """t(x, y) = 1.3 + 0.37 x (bilinear on the heightmap reproduces a plane): a u face is
    open by clamp((top - t) / h), a w face by the share of its footprint below its level,
    which is linear in x; a v face by the mean over its 8 sample points (rounded to 1/128,
    slivers raised to the smallest fraction a face keeps)."""
    hm = HeightmapGrid(-1.0, -1.0, 0.25, 57, 41)
    x = hm.x0 + np.arange(hm.nx) * hm.spacing
    height = np.broadcast_to(1.3 + 0.37 * x, hm.shape).astype(np.float32)
    snow = np.zeros(hm.shape, np.float32)
    shape, h, origin = (8, 6, 11), 1.0, (0.0, 0.0, 0.0)
    fu, fv, fw = _fractions(kernels, height, snow, hm, origin, h, shape)
    nz, ny, nx = shape
    k = np.arange(nz)[:, None, None]
    t_u = 1.3 + 0.37 * np.arange(nx + 1)[None, None, :]
    _assert_fractions(fu, np.broadcast_to(np.clip((k + 1 - t_u) / h, 0, 1), fu.shape))
    left = 1.3 + 0.37 * np.arange(nx)[None, None, :]
    level = np.arange(nz + 1)[:, None, None]
    share = np.clip((level - left) / 0.37, 0, 1)
    _assert_fractions(fw, np.broadcast_to(share, fw.shape))
    # a v face: the mean over its 8 sample points along x, which for a plane is the open
    # share of the face to within the midpoint rule's error at the kinks of the clamp
    offsets = (np.arange(8) + 0.5) / 8
    t_v = 1.3 + 0.37 * (np.arange(nx)[None, None, :, None] + offsets)
    mean = np.clip((k[..., None] + 1 - t_v) / h, 0, 1).mean(axis=-1)
    _assert_fractions(fv, np.broadcast_to(mean, fv.shape))
    assert ((fu > 0) & (fu < 1)).any() and ((fw > 0) & (fw < 1)).any()


@pytest.mark.parametrize("kernels", [ref, cpu], ids=["numpy", "cpu"])
def test_flat_ground_on_a_face_level_gives_closed_and_open_faces_exactly(kernels):
    hm = HeightmapGrid(0.0, 0.0, 0.5, 13, 13)
    height = np.full(hm.shape, 2.0, np.float32)
    fu, fv, fw = _fractions(kernels, height, np.zeros_like(height), hm, (0.0, 0.0, 0.0),
                            1.0, (5, 4, 4))
    for f in (fu, fv):
        np.testing.assert_array_equal(f[:2], 0.0)
        np.testing.assert_array_equal(f[2:], 1.0)
    np.testing.assert_array_equal(fw[:3], 0.0)       # the face on the ground is closed
    np.testing.assert_array_equal(fw[3:], 1.0)


def test_a_thin_fence_closes_the_faces_of_its_column_to_its_top():
    """A 0.4 m fence between the centres of 1 m cells: the voxel rule fills its column to
    the fence's top; the cut faces do the same (the thin fence falls between the samples
    of the u faces), and the columns around it stay open above the ground."""
    settings = SnowSettings(wind_cell_size=1.0, heightmap_resolution=241, drift_enabled=False)
    sim = Simulation(settings, *snow_fence(), backend="cpu", flakes=False)
    g, hm = sim.grid, sim.heightmap.grid
    height = sim.backend.to_host(sim.cover.height)
    snow = np.zeros_like(height)
    tops = np.zeros((g.ny, g.nx), np.float32)
    ref_drift.column_surface(height, snow, height > -1e29, hm.x0, hm.y0, hm.spacing, g.x0,
                             g.y0, g.cell_size, tops)
    origin = (g.x0, g.y0, g.z0)
    fu, fv, fw = _fractions(ref, height, snow, hm, origin, g.cell_size, g.shape, tops)
    column = int(np.floor((-10.0 - g.x0) / g.cell_size))
    ground = int(np.floor((0.0 - g.z0) / g.cell_size))          # the plane's layer
    rows = np.abs(g.y0 + (np.arange(g.ny) + 0.5) * g.cell_size) < 9.0
    np.testing.assert_array_equal(fu[ground:ground + 2, rows][:, :, [column, column + 1]], 0.0)
    np.testing.assert_array_equal(fu[ground + 2:, rows][:, :, [column, column + 1]], 1.0)
    np.testing.assert_array_equal(fw[ground + 1:ground + 3, rows, column], 0.0)
    others = np.delete(np.arange(g.nx + 1), [column, column + 1])
    np.testing.assert_array_equal(fu[ground + 1:, :, others], 1.0)
    # the wind solver's own fractions are these
    for mine, solver in zip((fu, fv, fw), sim.wind.fractions):
        np.testing.assert_array_equal(sim.backend.to_host(solver), mine)


def test_numba_face_fractions_and_block_tops_are_bitwise_the_reference():
    rng = np.random.default_rng(41)
    hm = HeightmapGrid(-1.3, 0.6, 0.29, 47, 38)
    height = (rng.random(hm.shape) * 2.5).astype(np.float32)
    height[20:23, 5:40] += 4.0        # a wall two nodes thick: thinner than a cell
    snow = (rng.random(hm.shape) * 0.4).astype(np.float32)
    shape, cell, origin = (9, 9, 11), 1.1, (-1.0, 0.9, -0.7)
    tops = np.zeros(shape[1:], np.float32)
    cpu_drift.column_surface(height, np.zeros_like(snow), height > -1e29, hm.x0, hm.y0,
                             hm.spacing, origin[0], origin[1], cell, tops)
    blocks = [np.zeros(shape[1:], np.float32) for _ in range(2)]
    for kernels, out in zip((ref, cpu), blocks):
        kernels.block_tops(height, snow, hm.x0, hm.y0, hm.spacing, origin[0], origin[1], cell,
                           tops, out)
    np.testing.assert_array_equal(blocks[1], blocks[0])
    assert (blocks[0] > ref.NO_BLOCK).any()
    expected = _fractions(ref, height, snow, hm, origin, cell, shape, tops)
    actual = _fractions(cpu, height, snow, hm, origin, cell, shape, tops)
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)
        assert ((e > 0) & (e < 1)).any() and (e == 0).any() and (e == 1).any()
    voxel = [np.zeros(shape, np.uint8)]
    ref.solid_from_heightmap(height, snow, hm.x0, hm.y0, hm.spacing, *origin, cell, voxel[0])
    expected, actual = _face_arrays(shape), _face_arrays(shape)
    ref.voxel_fractions(voxel[0], *expected)
    cpu.voxel_fractions(voxel[0], *actual)
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)


def _ridge(boundary, backend="cpu"):
    x = np.linspace(-24.0, 24.0, 193)
    y = np.linspace(-2.0, 2.0, 17)
    z = np.broadcast_to(np.sqrt(np.clip(16.0 - x ** 2, 0.0, None)), (y.size, x.size))
    settings = SnowSettings(wind_cell_size=1.0, heightmap_resolution=192, sky_height=12.0,
                            gust_strength=0.0, gust_direction_jitter=0.0, side_walls=True,
                            wind_boundary=boundary, drift_enabled=False)
    return Simulation(settings, *grid_mesh(x, y, z), backend=backend, flakes=False)


def test_voxel_boundary_has_the_open_fractions_of_its_solid_mask():
    sim = _ridge("voxels")
    solid = sim.backend.to_host(sim.wind.solid)
    expected = _face_arrays(solid.shape)
    ref.voxel_fractions(solid, *expected)
    for a, e in zip(sim.wind.fractions, expected):
        np.testing.assert_array_equal(a, e)
    cut = _ridge("cut_cells")
    assert any(((f > 0) & (f < 1)).any() for f in cut.wind.fractions)
    np.testing.assert_array_equal(cut.backend.to_host(cut.wind.solid), solid)


def test_open_fractions_are_multiples_of_a_128th_stored_exactly_as_uint8():
    """The open fractions are rounded to multiples of 1/128 (at least 3/128 where open), so
    the pressure's finest level stores them as uint8 without loss: its coefficients read
    back as the fractions themselves (inflow sides, bottom and lid closed)."""
    sim = _ridge("cut_cells")
    sim.wind._ensure_coefficients(sim.wind._last_sides)
    for fraction, coefficient in zip(sim.wind.fractions, sim.wind.levels[0].coef):
        f = np.asarray(sim.backend.to_host(fraction))
        np.testing.assert_array_equal(f * 128.0, np.round(f * 128.0))
        assert f[(f > 0)].min() >= 3.0 / 128.0
        assert coefficient.dtype == np.uint8
        values = ref_pressure.coefficient_values(sim.backend.to_host(coefficient))
        inside = values > 0
        np.testing.assert_array_equal(values[inside], f[inside])
    _u, _v, w = (np.asarray(sim.backend.to_host(c)) for c in sim.wind.levels[0].coef)
    assert not w[0].any() and not w[-1].any()


def test_resume_restores_the_fractions_and_an_older_state_gets_its_masks():
    sim = _ridge("cut_cells")
    sim.step(6)
    state = sim.state_dict()
    assert any(key.endswith("fraction_u") for key in state)
    resumed = _ridge("cut_cells")
    resumed.load_state_dict(state)
    sim.step(6)
    resumed.step(6)
    np.testing.assert_array_equal(resumed.wind_field().u, sim.wind_field().u)
    # a state saved before the fractions existed: the 0/1 fractions of its solid mask
    older = {key: value for key, value in state.items() if "fraction_" not in key}
    again = _ridge("cut_cells")
    again.load_state_dict(older)
    solid = again.backend.to_host(again.wind.solid)
    expected = _face_arrays(solid.shape)
    ref.voxel_fractions(solid, *expected)
    for a, e in zip(again.wind.fractions, expected):
        np.testing.assert_array_equal(a, e)


def test_an_unknown_wind_boundary_is_refused_with_the_choices():
    with pytest.raises(SnowInputError) as error:
        SnowSettings(wind_boundary="smooth").validate()
    assert "wind_boundary" in str(error.value) and "cut_cells" in str(error.value)
