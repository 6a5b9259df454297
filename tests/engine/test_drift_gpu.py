"""CUDA drift kernels against the NumPy reference, bit for bit (gpu-marked: skipped with the
reason where CuPy has no device)."""
import numpy as np
import pytest

from snowfall.kernels.reference import drift as ref
from snowfall.kernels.reference import wind as ref_wind

pytestmark = pytest.mark.gpu


def _case(seed, nz=6, ny=37, nx=70, hy=45, hx=83):
    rng = np.random.default_rng(seed)
    ground = rng.integers(0, 4, (ny, nx))
    ground[3, 5] = nz  # a fully solid column
    solid = (np.arange(nz)[:, None, None] < ground[None]).astype(np.uint8)
    u = (5 * rng.standard_normal((nz, ny, nx + 1))).astype(np.float32)
    v = (5 * rng.standard_normal((nz, ny + 1, nx))).astype(np.float32)
    w = (2 * rng.standard_normal((nz + 1, ny, nx))).astype(np.float32)
    has_surface = rng.random((hy, hx)) > 0.1
    snow = (0.2 * rng.random((hy, hx))).astype(np.float32)
    height = np.where(rng.random((hy, hx)) > 0.8, 1.0, 0.0).astype(np.float32)
    return solid, u, v, w, has_surface, snow, height


@pytest.mark.parametrize("seed", [1, 2])
def test_cuda_drift_matches_reference(gpu_backend, seed, fractions_of):
    gd, xp = gpu_backend.kernel_module("drift"), gpu_backend.xp
    solid, u, v, w, has_surface, snow, height = _case(seed)
    ny, nx = solid.shape[1:]
    for fractions in (fractions_of(solid), fractions_of(solid, np.random.default_rng(seed))):
        wind = [np.zeros((ny, nx), np.float32) for _ in range(2)]
        ref.surface_wind(u, v, w, fractions, *wind)
        device_wind = [xp.full((ny, nx), 9.0, xp.float32) for _ in range(2)]
        gd.surface_wind(xp.asarray(u), xp.asarray(v), xp.asarray(w),
                        tuple(xp.asarray(f) for f in fractions), *device_wind)
        for a, e in zip(device_wind, wind):
            np.testing.assert_array_equal(xp.asnumpy(a), e)

    shape = has_surface.shape
    args = (-1.0, -2.0, 1.5, -0.5, -1.7, 0.4)
    flux = [np.zeros(shape, np.float32) for _ in range(2)]
    ref.saltation_flux(*wind, *args, has_surface, 0.07, 0.3, 0.05, 0.6, 0.8, *flux)
    device_flux = [xp.full(shape, 9.0, xp.float32) for _ in range(2)]
    gd.saltation_flux(*device_wind, *args, xp.asarray(has_surface), 0.07, 0.3, 0.05, 0.6, 0.8,
                      *device_flux)
    for a, e in zip(device_flux, flux):
        np.testing.assert_array_equal(xp.asnumpy(a), e)
    assert np.abs(flux[0]).max() > 0

    for downwind_axis in (-1, 0, 1):
        out = np.zeros(shape, np.float32)
        wrap = np.full(ref.wrap_buffer_size(shape), 9.0, np.float32)
        ref.drift_transport(*flux, height, has_surface, snow, 2.0, 0.3, out, downwind_axis,
                            wrap)
        device_out = xp.zeros(shape, xp.float32)
        device_wrap = xp.zeros(ref.wrap_buffer_size(shape), xp.float32)
        gd.drift_transport(*device_flux, xp.asarray(height), xp.asarray(has_surface),
                           xp.asarray(snow), 2.0, 0.3, device_out, downwind_axis, device_wrap)
        np.testing.assert_array_equal(xp.asnumpy(device_out), out)
        if downwind_axis >= 0:
            np.testing.assert_array_equal(xp.asnumpy(device_wrap[:2]), wrap[:2])
            assert wrap[0] > 0 or wrap[1] > 0
            assert int(device_wrap[2:3].view(xp.uint32)[0]) == 0   # ready for the next launch


@pytest.mark.parametrize("size", [1, 255, 256, 257, 1031, 8193])
def test_cuda_wrap_matches_reference_on_long_and_short_edges(gpu_backend, size):
    # the last block's tail: strided partial sums over 256 threads, then a tree, in the
    # reference's order; edges of one node are both the first and the last; one buffer
    # for every launch (its count of finished blocks back to 0 each time)
    gd, xp = gpu_backend.kernel_module("drift"), gpu_backend.xp
    rng = np.random.default_rng(size)
    for shape in ((size, 6), (6, size), (size, 1)):
        arrays = [(0.5 * rng.standard_normal(shape)).astype(np.float32) for _ in range(2)]
        snow = (0.2 * rng.random(shape)).astype(np.float32)
        height = np.zeros(shape, np.float32)
        has_surface = rng.random(shape) > 0.1
        device_wrap = xp.zeros(ref.wrap_buffer_size(shape), xp.float32)
        for axis in (0, 1, 0):
            out, wrap = np.zeros(shape, np.float32), np.zeros(ref.wrap_buffer_size(shape), np.float32)
            ref.drift_transport(*arrays, height, has_surface, snow, 2.0, 0.3, out, axis, wrap)
            device_out = xp.zeros(shape, xp.float32)
            gd.drift_transport(*[xp.asarray(a) for a in arrays], xp.asarray(height),
                               xp.asarray(has_surface), xp.asarray(snow), 2.0, 0.3,
                               device_out, axis, device_wrap)
            np.testing.assert_array_equal(xp.asnumpy(device_out), out)
            np.testing.assert_array_equal(xp.asnumpy(device_wrap[:2]), wrap[:2])


@pytest.mark.parametrize("seed", [4, 5])
def test_cuda_shelter_kernels_match_reference(gpu_backend, seed):
    gd, xp = gpu_backend.kernel_module("drift"), gpu_backend.xp
    rng = np.random.default_rng(seed)
    ny, nx, columns = 45, 83, (17, 29)
    height = np.where(rng.random((ny, nx)) > 0.85, 2.0, 0.0).astype(np.float32)
    height += (0.1 * rng.random((ny, nx))).astype(np.float32)
    has_surface = rng.random((ny, nx)) > 0.05
    height[~has_surface] = -1.0e30
    snow = (0.3 * rng.random((ny, nx))).astype(np.float32)
    geometry = (-1.7, 0.4, 0.5, -2.0, 0.1, 1.45)
    surface = np.zeros(columns, np.float32)
    ref.column_surface(height, snow, has_surface, *geometry, surface)
    device_surface = xp.full(columns, 9.0, xp.float32)
    device_ground = [xp.asarray(a) for a in (height, snow, has_surface)]
    gd.column_surface(*device_ground, *geometry, device_surface)
    np.testing.assert_array_equal(xp.asnumpy(device_surface), surface)

    top = np.zeros(columns, np.float32)
    bubble = (-2.0, 0.1, 1.45, 0.8, -0.6, 1 / 12, 0.2, 1.25, 2.0, 30.0)
    ref.separation_bubble(surface, *bubble, top)
    device_top = xp.full(columns, 9.0, xp.float32)
    gd.separation_bubble(device_surface, *bubble, device_top)
    np.testing.assert_array_equal(xp.asnumpy(device_top), top)
    assert (top > surface).any()

    wind = (4 * rng.standard_normal((2,) + columns)).astype(np.float32)
    args = (-2.0, 0.1, 1.45, -1.7, 0.4, 0.5)
    flux = [np.zeros((ny, nx), np.float32) for _ in range(2)]
    ref.saltation_flux(*wind, *args, has_surface, 0.07, 0.1, 0.05, 0.8, -0.6, *flux,
                       height, snow, top)
    device_flux = [xp.full((ny, nx), 9.0, xp.float32) for _ in range(2)]
    gd.saltation_flux(*[xp.asarray(a) for a in wind], *args, device_ground[2], 0.07, 0.1, 0.05,
                      0.8, -0.6, *device_flux, device_ground[0], device_ground[1], device_top)
    for a, e in zip(device_flux, flux):
        np.testing.assert_array_equal(xp.asnumpy(a), e)

    obstacles = np.zeros(columns, np.float32)
    ref_wind.obstacle_surface(height, snow, *geometry, surface, obstacles)
    device_obstacles = xp.full(columns, 9.0, xp.float32)
    gpu_backend.kernel_module("wind").obstacle_surface(device_ground[0], device_ground[1],
                                                       *geometry, device_surface,
                                                       device_obstacles)
    np.testing.assert_array_equal(xp.asnumpy(device_obstacles), obstacles)
    assert (obstacles < surface).any()

    for heading in ((0.8, -0.6), (1.0, 0.0), (-0.28, 0.96)):
        scour = np.zeros(columns, np.float32)
        ref.horseshoe_vortex(obstacles, 1.45, *heading, 1.0, 0.7, 2.5, 4, scour)
        device_scour = xp.full(columns, 9.0, xp.float32)
        gd.horseshoe_vortex(device_obstacles, 1.45, *heading, 1.0, 0.7, 2.5, 4, device_scour)
        np.testing.assert_array_equal(xp.asnumpy(device_scour), scour)
    assert (scour > 1).any() and (scour == 1).any()

    nz, (wny, wnx) = 4, columns
    u = rng.standard_normal((nz, wny, wnx + 1)).astype(np.float32)
    v = rng.standard_normal((nz, wny + 1, wnx)).astype(np.float32)
    w = rng.standard_normal((nz + 1, wny, wnx)).astype(np.float32)
    fractions = tuple(np.ones(a.shape, np.float32) for a in (u, v, w))
    surface_wind = [np.zeros(columns, np.float32) for _ in range(2)]
    ref.surface_wind(u, v, w, fractions, *surface_wind, scour, 1.5, -0.28, 0.96)
    device_wind = [xp.full(columns, 9.0, xp.float32) for _ in range(2)]
    gd.surface_wind(xp.asarray(u), xp.asarray(v), xp.asarray(w),
                    tuple(xp.asarray(f) for f in fractions), *device_wind, device_scour,
                    1.5, -0.28, 0.96)
    for a, e in zip(device_wind, surface_wind):
        np.testing.assert_array_equal(xp.asnumpy(a), e)
    # both of the vortex's directions and both sides of its max were compared
    plain = [np.zeros(columns, np.float32) for _ in range(2)]
    ref.surface_wind(u, v, w, fractions, *plain)
    band, speed = scour > 1, np.hypot(*plain)
    along = plain[0] * np.float32(-0.28) + plain[1] * np.float32(0.96)
    assert (band & (along > 0)).any() and (band & (along <= 0)).any()
    assert (band & (speed > 1.5)).any() and (band & (speed < 1.5)).any()
