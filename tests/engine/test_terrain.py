"""Terrain -> heightmap and snow depth -> vertices: analytic surfaces, open nodes, overhangs,
Numba/reference parity, bad input and memory limits."""
import math
import re
import tracemalloc

import numpy as np
import pytest

from snowfall.snow_addon import backend as backend_module
from snowfall.snow_addon import scenes
from snowfall.snow_addon.errors import SnowInputError, SnowMemoryError
from snowfall.snow_addon.grid import OPEN_HEIGHT
from snowfall.snow_addon.terrain import (Heightmap, build_heightmap, check_terrain_arrays,
                                         surface_mean_height, vertex_snow_depth)

BACKENDS = ["numpy", "cpu"]


def node_xy(heightmap: Heightmap):
    g = heightmap.grid
    x = g.x0 + np.arange(g.nx) * g.spacing
    y = g.y0 + np.arange(g.ny) * g.spacing
    return np.meshgrid(x, y)


def float32_slack(values) -> float:
    """A few float32 ulps of the largest magnitude: the rounding of stored heights."""
    return 4.0 * float(np.finfo(np.float32).eps) * max(1.0, float(np.max(np.abs(values))))


def gaussian_interpolation_bound(height, sigma, mesh_spacing):
    """Largest error of linear interpolation of the Gaussian hill over the mesh's right
    triangles (legs ``mesh_spacing``): |f - I f| <= M2 R^2 / 2 with M2 = height / sigma^2
    (the Hessian's largest eigenvalue magnitude, at the summit) and R^2 = h^2 / 2 (the
    squared circumradius), i.e. height h^2 / (4 sigma^2)."""
    return height * mesh_spacing**2 / (4.0 * sigma**2)


# --- analytic surfaces --------------------------------------------------------------------

@pytest.mark.parametrize("backend_name", BACKENDS)
def test_tilted_plane_is_exact(backend_name):
    size, slope = 10.0, 0.35
    vertices, triangles = scenes.tilted_plane(size, slope, resolution=7)
    hm = build_heightmap(vertices, triangles, 33, backend_name)
    x, _ = node_xy(hm)
    assert hm.grid.shape == (33, 33) and hm.has_surface.all()
    # barycentric interpolation reproduces a plane exactly: only float32 rounding remains
    np.testing.assert_allclose(hm.height, slope * x, rtol=0, atol=float32_slack(slope * x))
    assert hm.z_min == pytest.approx(-0.5 * size * slope, abs=1e-6)
    assert hm.z_max == pytest.approx(0.5 * size * slope, abs=1e-6)
    assert hm.surface_fraction == 1.0


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_gaussian_hill_within_interpolation_bound_and_converges(backend_name):
    size, height, sigma = 12.0, 3.0, 2.0
    errors = []
    for mesh_resolution in (13, 25):
        vertices, triangles = scenes.gaussian_hill(size, height, sigma, mesh_resolution)
        hm = build_heightmap(vertices, triangles, 41, backend_name)
        x, y = node_xy(hm)
        exact = height * np.exp(-(x * x + y * y) / (2 * sigma * sigma))
        error = np.abs(hm.height - exact).max()
        bound = gaussian_interpolation_bound(height, sigma, size / (mesh_resolution - 1))
        assert hm.has_surface.all()
        assert error <= bound + float32_slack(exact)
        errors.append(error)
    # linear interpolation is second order: halving the mesh spacing quarters the error
    assert errors[1] < errors[0] / 3.0


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_rotated_scaled_offset_object_matches_transformed_surface(backend_name):
    size, height, sigma, mesh_resolution = 12.0, 3.0, 2.0, 25
    vertices, triangles = scenes.gaussian_hill(size, height, sigma, mesh_resolution)
    angle = math.radians(30.0)
    scale = np.array([1.7, 0.6, 2.5])
    offset = np.array([100.0, -40.0, 7.0])
    rotation = np.array([[math.cos(angle), -math.sin(angle), 0.0],
                         [math.sin(angle), math.cos(angle), 0.0],
                         [0.0, 0.0, 1.0]])
    world = (vertices * scale) @ rotation.T + offset
    hm = build_heightmap(world, triangles, 48, backend_name)

    x, y = node_xy(hm)
    local = np.stack([x - offset[0], y - offset[1]], axis=-1) @ rotation[:2, :2]  # R^T (p - o)
    lx, ly = local[..., 0] / scale[0], local[..., 1] / scale[1]
    exact = scale[2] * height * np.exp(-(lx * lx + ly * ly) / (2 * sigma * sigma)) + offset[2]
    # how far inside the object's square outline each node lies (negative: outside), m
    inside_by = (0.5 * size - np.maximum(np.abs(lx), np.abs(ly))) * min(scale[:2])
    margin = 1e-6
    assert hm.has_surface[inside_by > margin].all()
    assert not hm.has_surface[inside_by < -margin].any()
    assert np.all(hm.height[~hm.has_surface] == np.float32(OPEN_HEIGHT))
    # Interpolation over triangles commutes with affine maps of the plane, so the error is
    # the untransformed mesh's, scaled by the Z scale.
    bound = scale[2] * gaussian_interpolation_bound(height, sigma, size / (mesh_resolution - 1))
    surface = hm.has_surface
    error = np.abs(hm.height[surface] - exact[surface]).max()
    assert error <= bound + float32_slack(exact[surface])
    assert hm.z_min >= offset[2] - 1e-4 and hm.z_max <= offset[2] + scale[2] * height + 1e-4


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_overhang_top_most_surface_wins(backend_name):
    ledge_height, ledge_depth = 4.0, 3.0
    vertices, triangles = scenes.overhang_mesh(10.0, ledge_height, ledge_depth, 0.5, 41)
    hm = build_heightmap(vertices, triangles, 21, backend_name)  # spacing 0.5: a node at the lip
    x, _ = node_xy(hm)
    assert hm.has_surface.all()
    assert np.any(np.isclose(x, ledge_depth))
    under_or_on_ledge = x <= ledge_depth + 1e-9
    np.testing.assert_array_equal(hm.height[under_or_on_ledge], np.float32(ledge_height))
    np.testing.assert_array_equal(hm.height[~under_or_on_ledge], np.float32(0.0))
    assert (hm.z_min, hm.z_max) == (0.0, ledge_height)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_open_nodes_outside_outline_and_in_hole(backend_name):
    # 10 m x 10 m grid of 1 m cells: keep a disc of cells (touching all four sides of the
    # box) minus a 2 x 2-cell hole in the middle
    axis = np.arange(11.0)
    xx, yy = np.meshgrid(axis, axis)
    z = 0.3 * xx - 0.2 * yy + 1.0
    centre_x, centre_y = np.meshgrid(axis[:-1] + 0.5, axis[:-1] + 0.5)
    keep = (np.hypot(centre_x - 5.0, centre_y - 5.0) < 5.0)
    keep[4:6, 4:6] = False
    vertices, triangles = scenes.grid_mesh(axis, axis, z, keep=keep)
    hm = build_heightmap(vertices, triangles, 21, backend_name)  # nodes every 0.5 m
    assert (hm.grid.x0, hm.grid.y0, hm.grid.spacing, hm.grid.shape) == (0.0, 0.0, 0.5, (21, 21))

    x, y = node_xy(hm)
    expected = np.zeros(hm.grid.shape, dtype=bool)
    for cj, ci in zip(*np.nonzero(keep)):  # closed cells: edges and corners count
        expected |= ((x >= ci - 1e-9) & (x <= ci + 1 + 1e-9) & (y >= cj - 1e-9)
                     & (y <= cj + 1 + 1e-9))
    np.testing.assert_array_equal(hm.has_surface, expected)
    assert not expected.all() and (~expected[8:13, 8:13]).sum() == 9  # the hole's interior
    assert np.all(hm.height[~expected] == np.float32(OPEN_HEIGHT))
    plane = (0.3 * x - 0.2 * y + 1.0)
    np.testing.assert_allclose(hm.height[expected], plane[expected], rtol=0, atol=1e-5)
    assert hm.surface_fraction == pytest.approx(expected.mean())
    # the flakes' fall and the suspension's column measure from the surface nodes only
    assert hm.mean_height == pytest.approx(plane[expected].mean(), abs=1e-5)
    assert math.isnan(surface_mean_height(np.full((3, 3), OPEN_HEIGHT, np.float32)))
    assert hm.z_min == pytest.approx(plane[expected].min(), abs=1e-5)
    assert hm.z_max == pytest.approx(plane[expected].max(), abs=1e-5)


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_shared_edges_leave_no_cracks(backend_name, jitter):
    # A mesh covering its whole bounding box: every node must see a surface. With no jitter
    # nodes lie exactly on the shared diagonals; with jitter the edges run every which way.
    rng = np.random.default_rng(5)
    n = 9
    axis = np.linspace(0.0, 8.0, n)
    xx, yy = np.meshgrid(axis, axis)
    xx[:, 1:-1] += rng.uniform(-jitter, jitter, (n, n - 2))
    yy[1:-1, :] += rng.uniform(-jitter, jitter, (n - 2, n))
    z = rng.uniform(-1.0, 1.0, (n, n))
    vertices, triangles = scenes.grid_mesh(xx, yy, z)
    hm = build_heightmap(vertices, triangles, 33, backend_name)
    assert hm.has_surface.all()
    assert hm.z_min >= -1.0 and hm.z_max <= 1.0


# --- Numba build against the reference ------------------------------------------------------

def random_soup(rng, count):
    vertices = np.column_stack([rng.uniform(-3.0, 7.0, (3 * count, 2)),
                                rng.uniform(-5.0, 5.0, 3 * count)])
    triangles = rng.integers(0, vertices.shape[0], (count, 3))
    return vertices, triangles


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numba_heightmap_matches_reference(seed):
    rng = np.random.default_rng(seed)
    soup = random_soup(rng, 200)
    axis = np.linspace(-3.0, 7.0, 21)
    grid = scenes.grid_mesh(axis, axis, rng.uniform(-2.0, 2.0, (21, 21)))
    small = (rng.uniform(0.0, 10.0, (60, 3)), rng.integers(0, 60, (40, 3)))  # sub-node triangles
    vertices, triangles = scenes.merge_meshes(soup, grid, small)
    for resolution in (23, 57):
        reference = build_heightmap(vertices, triangles, resolution, "numpy")
        numba_build = build_heightmap(vertices, triangles, resolution, "cpu")
        assert reference.grid == numba_build.grid
        np.testing.assert_array_equal(numba_build.has_surface, reference.has_surface)
        np.testing.assert_array_max_ulp(numba_build.height, reference.height, maxulp=1)
        assert numba_build.z_min == pytest.approx(reference.z_min, rel=1e-6)
        assert numba_build.z_max == pytest.approx(reference.z_max, rel=1e-6)


# --- snow depth back on the vertices --------------------------------------------------------

def linear_depth(hm, a=0.5, b=0.02, c=-0.01):
    x, y = node_xy(hm)
    return (a + b * x + c * y).astype(np.float32), (lambda px, py: a + b * px + c * py)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_vertex_depth_is_bilinear_on_steep_fine_surfaces(backend_name):
    # Mesh much finer than the heightmap, slopes up to ~1.6 (Gaussian) and rough noise
    # (valley): every vertex is on the top surface and gets the bilinear depth, which for a
    # linear depth field is the field itself.
    for vertices, triangles, resolution in (
            (*scenes.gaussian_hill(12.0, 4.0, 1.5, 97), 33),
            (*scenes.mountain_valley(120.0, 90.0, 40.0, 129, seed=3), 40)):
        hm = build_heightmap(vertices, triangles, resolution)
        depth_nodes, depth_at = linear_depth(hm, b=0.002, c=-0.001)
        depth = vertex_snow_depth(hm, depth_nodes, vertices, backend_name=backend_name)
        assert depth.dtype == np.float32 and depth.shape == (vertices.shape[0],)
        expected = depth_at(vertices[:, 0], vertices[:, 1])
        np.testing.assert_allclose(depth, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_vertex_depth_is_zero_under_an_overhang(backend_name):
    size, ledge_height, ledge_depth, thickness = 10.0, 4.0, 3.0, 0.5
    vertices, triangles = scenes.overhang_mesh(size, ledge_height, ledge_depth, thickness, 41)
    hm = build_heightmap(vertices, triangles, 41)
    depth_nodes, depth_at = linear_depth(hm)
    depth = vertex_snow_depth(hm, depth_nodes, vertices, backend_name=backend_name)
    x, z = vertices[:, 0], vertices[:, 2]
    expected = depth_at(vertices[:, 0], vertices[:, 1])
    spacing = hm.grid.spacing
    top = z == ledge_height
    ground_beyond = (z == 0.0) & (x > ledge_depth + 2.5 * spacing)
    # well under the ledge: the ground, the cliff face and the ledge's underside
    deep_under = (x < ledge_depth - 2.5 * spacing) & (x >= 0.0) & (z < ledge_height - 1e-9)
    assert top.sum() > 100 and ground_beyond.sum() > 100 and deep_under.sum() > 100
    np.testing.assert_allclose(depth[top], expected[top], rtol=0, atol=1e-5)
    np.testing.assert_allclose(depth[ground_beyond], expected[ground_beyond], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(depth[deep_under], np.float32(0.0))


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_vertex_depth_box_test_block_top_and_buried_faces(backend_name):
    size, block, block_height = 20.0, 4.0, 2.0
    vertices, triangles = scenes.box_test(size, block, block_height, resolution=41)
    hm = build_heightmap(vertices, triangles, 41)
    depth = vertex_snow_depth(hm, np.ones(hm.grid.shape, np.float32), vertices,
                              backend_name=backend_name)
    x, y, z = vertices.T
    inside = np.maximum(np.abs(x), np.abs(y)) < 0.5 * block - 2.5 * hm.grid.spacing
    outside = np.maximum(np.abs(x), np.abs(y)) > 0.5 * block + 2.5 * hm.grid.spacing
    on_block = inside & (z == block_height)
    buried = inside & (z == 0.0)  # the plane and the block's bottom under the block
    assert on_block.sum() >= 9 and buried.sum() >= 18 and outside.sum() > 1000
    np.testing.assert_allclose(depth[on_block], 1.0, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(depth[buried], 0.0)
    np.testing.assert_allclose(depth[outside], 1.0, rtol=0, atol=1e-6)


def test_vertex_depth_numba_matches_reference_on_random_points():
    rng = np.random.default_rng(11)
    vertices, triangles = scenes.merge_meshes(scenes.overhang_mesh(resolution=33),
                                              scenes.gaussian_hill(8.0, 2.0, 1.5, 33))
    hm = build_heightmap(vertices, triangles, 37)
    snow = rng.uniform(0.1, 1.0, hm.grid.shape).astype(np.float32)
    points = np.column_stack([rng.uniform(-7.0, 7.0, (20_000, 2)), rng.uniform(-1.0, 5.0, 20_000)])
    points = np.concatenate([points, vertices])
    reference = vertex_snow_depth(hm, snow, points, backend_name="numpy")
    numba_build = vertex_snow_depth(hm, snow, points, backend_name="cpu")
    np.testing.assert_array_equal(numba_build > 0, reference > 0)
    assert 0.2 < (reference > 0).mean() < 0.95  # both outcomes are exercised
    np.testing.assert_allclose(numba_build, reference, rtol=1e-5, atol=1e-6)


def test_vertex_depth_rejects_mismatched_inputs():
    hm = build_heightmap(*scenes.tilted_plane(), 8)
    with pytest.raises(SnowInputError) as info:
        vertex_snow_depth(hm, np.zeros((3, 3), np.float32), np.zeros((1, 3)))
    assert info.value.setting == "snow_depth" and info.value.suggestion
    with pytest.raises(SnowInputError) as info:
        vertex_snow_depth(hm, np.zeros(hm.grid.shape, np.float32), [[0.0, np.nan, 0.0]])
    assert info.value.setting == "terrain" and info.value.suggestion


# --- bad input ---------------------------------------------------------------------------

def _walls():
    """A square tube: four vertical walls, no top or bottom."""
    corners = [(0, 0), (1, 0), (1, 1), (0, 1)]
    vertices = [(x, y, z) for x, y in corners for z in (0.0, 1.0)]
    triangles = []
    for k in range(4):
        a0, a1, b0, b1 = 2 * k, 2 * k + 1, 2 * ((k + 1) % 4), 2 * ((k + 1) % 4) + 1
        triangles += [(a0, b0, b1), (a0, b1, a1)]
    return np.array(vertices, float), np.array(triangles)


GOOD_V = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.5]])
GOOD_T = np.array([[0, 1, 2]])

BAD_TERRAINS = {
    "strings": ([["a", "b", "c"]] * 3, GOOD_T, "numbers"),
    "ragged": ([[0.0, 0.0, 0.0], [1.0, 0.0]], GOOD_T, "rectangular"),
    "none": (None, GOOD_T, "numbers"),
    "complex": (GOOD_V.astype(complex), GOOD_T, "numbers"),
    "bool_triangles": (GOOD_V, np.ones((1, 3), bool), "numbers"),
    "vertices_2d_points": (GOOD_V[:, :2], GOOD_T, "shape"),
    "vertices_flat": (GOOD_V.ravel(), GOOD_T, "shape"),
    "triangles_quads": (GOOD_V, np.array([[0, 1, 2, 0]]), "shape"),
    "triangles_flat": (GOOD_V, np.array([0, 1, 2]), "shape"),
    "nan": (np.where(np.arange(9).reshape(3, 3) == 4, np.nan, GOOD_V), GOOD_T, "NaN"),
    "inf": (np.where(np.arange(9).reshape(3, 3) == 2, np.inf, GOOD_V), GOOD_T, "infinite"),
    "huge": (GOOD_V * np.array([1.0, 1.0, 1e12]) + np.array([0.0, 0.0, 1.0]), GOOD_T, "large"),
    "index_too_big": (GOOD_V, np.array([[0, 1, 3]]), "indices"),
    "index_negative": (GOOD_V, np.array([[0, -1, 2]]), "indices"),
    "index_fractional": (GOOD_V, np.array([[0.0, 1.5, 2.0]]), "whole"),
    "no_faces": (GOOD_V, np.zeros((0, 3), np.int64), "no faces"),
    "only_vertical_faces": (*_walls(), "vertical"),
    "zero_xy_extent": (np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), GOOD_T,
                       "XY area"),
}


@pytest.mark.parametrize("case", sorted(BAD_TERRAINS))
def test_bad_terrain_raises_input_error(case):
    vertices, triangles, words = BAD_TERRAINS[case]
    for call in (lambda: check_terrain_arrays(vertices, triangles),
                 lambda: build_heightmap(vertices, triangles, 16)):
        with pytest.raises(SnowInputError) as info:
            call()
        assert not isinstance(info.value, SnowMemoryError)
        assert info.value.setting == "terrain"
        assert words.lower() in info.value.problem.lower()
        assert info.value.suggestion


def test_good_terrain_passes_and_is_converted():
    vertices, triangles = check_terrain_arrays(GOOD_V.astype(np.float32).tolist(),
                                               GOOD_T.astype(np.uint32))
    assert vertices.dtype == np.float64 and vertices.shape == (3, 3)
    assert triangles.dtype == np.int64 and triangles.shape == (1, 3)
    np.testing.assert_array_equal(vertices, GOOD_V)


@pytest.mark.parametrize("resolution", [3, 0, -5, 2.5, True, "64", None])
def test_bad_resolution_raises_input_error(resolution):
    with pytest.raises(SnowInputError) as info:
        build_heightmap(GOOD_V, GOOD_T, resolution)
    assert info.value.setting == "heightmap_resolution" and info.value.suggestion


# --- memory ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend_name", BACKENDS)
def test_too_large_resolution_raises_memory_error_before_allocating(monkeypatch, backend_name):
    budget = 2 * 1024 * 1024
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: budget)
    vertices, triangles = scenes.tilted_plane(10.0, 0.1, resolution=9)
    tracemalloc.start()
    try:
        with pytest.raises(SnowMemoryError) as info:
            build_heightmap(vertices, triangles, 200_000, backend_name)  # 40e9 nodes
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # nothing resolution-sized was allocated
    error = info.value
    assert error.setting == "heightmap_resolution"
    assert error.needed_bytes > budget and error.available_bytes == budget
    largest = int(re.search(r"heightmap_resolution <= (\d+)", error.suggestion).group(1))
    assert largest >= 100
    # the suggestion is the largest resolution that fits: it builds, one more does not
    hm = build_heightmap(vertices, triangles, largest, backend_name)
    assert hm.grid.nx == largest and hm.has_surface.all()
    with pytest.raises(SnowMemoryError):
        build_heightmap(vertices, triangles, largest + 1, backend_name)
    # when not even the smallest heightmap fits, the terrain itself is what to change
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: 64)
    with pytest.raises(SnowMemoryError) as info:
        build_heightmap(vertices, triangles, 64, backend_name)
    assert info.value.setting == "terrain" and info.value.suggestion


def test_open_nodes_take_the_heights_of_the_surface_around_them():
    from snowfall.snow_addon.terrain import fill_open_heights
    height = np.full((5, 6), -1e30, np.float32)
    surface = np.zeros((5, 6), bool)
    height[1:4, 1:4] = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    surface[1:4, 1:4] = True
    surface[2, 2] = False                  # a hole inside the mesh
    filled = fill_open_heights(height, surface)
    np.testing.assert_array_equal(filled[surface], height[surface])   # surface kept
    assert filled[2, 2] == np.float32((2 + 4 + 6 + 8) / 4)            # the hole: its ring
    assert filled[0, 2] == 2.0 and filled[2, 0] == 4.0                # edges continue outward
    assert filled[2, 5] == filled[2, 4] == 6.0                        # two rings out
    assert np.isfinite(filled).all() and (filled > 0).all()
    all_open = fill_open_heights(height, np.zeros_like(surface))
    np.testing.assert_array_equal(all_open, height)
