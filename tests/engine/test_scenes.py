"""Procedural terrains: valid, welded, deterministic meshes with the promised shapes."""
import numpy as np
import pytest

from snowfall.snow_addon import scenes
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.terrain import build_heightmap, check_terrain_arrays

SCENES = {
    "tilted_plane": lambda: scenes.tilted_plane(10.0, 0.3, resolution=9),
    "gaussian_hill": lambda: scenes.gaussian_hill(20.0, 4.0, 3.0, 33),
    "mountain_valley": lambda: scenes.mountain_valley(400.0, 300.0, 60.0, 65, seed=1),
    "rolling_hills": lambda: scenes.rolling_hills(300.0, 500.0, 25.0, 65, seed=2),
    "box_test": lambda: scenes.box_test(20.0, 4.0, 2.0, resolution=21),
    "overhang_mesh": lambda: scenes.overhang_mesh(10.0, 4.0, 3.0, 0.5, 21),
}


def triangle_areas(vertices, triangles):
    corners = vertices[triangles]
    cross = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return 0.5 * np.linalg.norm(cross, axis=1), 0.5 * cross[:, 2]


@pytest.mark.parametrize("name", sorted(SCENES))
def test_scene_is_a_valid_welded_terrain(name):
    vertices, triangles = SCENES[name]()
    assert vertices.dtype == np.float64 and vertices.ndim == 2 and vertices.shape[1] == 3
    assert triangles.dtype == np.int64 and triangles.ndim == 2 and triangles.shape[1] == 3
    checked_v, checked_t = check_terrain_arrays(vertices, triangles)
    np.testing.assert_array_equal(checked_v, vertices)
    np.testing.assert_array_equal(checked_t, triangles)
    assert np.array_equal(np.unique(triangles), np.arange(vertices.shape[0]))  # all used
    area, _ = triangle_areas(vertices, triangles)
    assert area.min() > 0.0  # no degenerate triangles
    if name != "box_test":  # box_test is two separate pieces, as two objects would be
        assert np.unique(vertices, axis=0).shape[0] == vertices.shape[0]


@pytest.mark.parametrize("name", ["tilted_plane", "gaussian_hill", "mountain_valley",
                                  "rolling_hills"])
def test_height_field_scenes_face_up_and_cover_their_square(name):
    vertices, triangles = SCENES[name]()
    _, xy_area = triangle_areas(vertices, triangles)
    assert xy_area.min() > 0.0  # every triangle counter-clockwise seen from above
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    assert xy_area.sum() == pytest.approx((hi[0] - lo[0]) * (hi[1] - lo[1]), rel=1e-12)
    np.testing.assert_allclose(lo[:2], -hi[:2], atol=1e-9)  # centred on the origin


def test_analytic_scenes_have_their_formula():
    vertices, _ = scenes.tilted_plane(10.0, 0.3, resolution=9)
    np.testing.assert_allclose(vertices[:, 2], 0.3 * vertices[:, 0], atol=1e-12)
    np.testing.assert_allclose(vertices[:, :2].min(axis=0), -5.0)
    vertices, _ = scenes.gaussian_hill(20.0, 4.0, 3.0, 33)
    r2 = vertices[:, 0] ** 2 + vertices[:, 1] ** 2
    np.testing.assert_allclose(vertices[:, 2], 4.0 * np.exp(-r2 / 18.0), atol=1e-12)
    assert vertices[:, 2].max() == pytest.approx(4.0)  # odd resolution: a vertex at the top


@pytest.mark.parametrize("builder", [scenes.mountain_valley, scenes.rolling_hills])
def test_random_scenes_sizes_relief_and_determinism(builder):
    size_x, size_y, relief = 240.0, 160.0, 35.0
    vertices, triangles = builder(size_x, size_y, relief, 49, seed=4)
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    np.testing.assert_allclose(hi - lo, [size_x, size_y, relief], rtol=1e-12)
    assert lo[2] == pytest.approx(0.0, abs=1e-12)
    assert np.unique(vertices[:, 0]).size == 49  # resolution along the longer side
    again_v, again_t = builder(size_x, size_y, relief, 49, seed=4)
    np.testing.assert_array_equal(again_v, vertices)
    np.testing.assert_array_equal(again_t, triangles)
    other, _ = builder(size_x, size_y, relief, 49, seed=5)
    assert np.abs(other[:, 2] - vertices[:, 2]).max() > 0.05 * relief


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mountain_valley_is_a_valley_between_two_ridges(seed):
    size_x, size_y, relief = 400.0, 300.0, 60.0
    vertices, _ = scenes.mountain_valley(size_x, size_y, relief, 97, seed=seed)
    x = np.unique(vertices[:, 0])
    profile = vertices[:, 2].reshape(-1, x.size).mean(axis=0)  # mean height across the valley
    left, right = x < 0, x > 0
    left_ridge = x[left][np.argmax(profile[left])]
    right_ridge = x[right][np.argmax(profile[right])]
    for ridge in (-left_ridge, right_ridge):
        assert 0.3 * size_x / 2 < ridge < 0.9 * size_x / 2
    floor = profile[np.abs(x) < 0.1 * size_x / 2].mean()
    assert min(profile[left].max(), profile[right].max()) - floor > 0.3 * relief
    # and the floor rises gently along the valley
    y = np.unique(vertices[:, 1])
    heights = vertices[:, 2].reshape(y.size, x.size)
    floor_along = heights[:, np.abs(x) < 0.1 * size_x / 2].mean(axis=1)
    assert floor_along[-y.size // 4:].mean() > floor_along[:y.size // 4].mean()


def test_grid_mesh_counts_orientation_and_kept_cells():
    x = np.linspace(0.0, 3.0, 4)
    y = np.linspace(0.0, 2.0, 3)
    z = np.arange(12.0).reshape(3, 4)
    vertices, triangles = scenes.grid_mesh(x, y, z)
    assert vertices.shape == (12, 3) and triangles.shape == (2 * 3 * 2, 3)
    np.testing.assert_array_equal(vertices[5], [1.0, 1.0, 5.0])  # vertex [j=1, i=1]
    _, xy_area = triangle_areas(vertices, triangles)
    np.testing.assert_allclose(xy_area, 0.5)
    keep = np.array([[True, False, False], [False, False, True]])
    vertices, triangles = scenes.grid_mesh(x, y, z, keep=keep)
    assert triangles.shape == (4, 3) and vertices.shape == (8, 3)  # unused vertices dropped
    _, xy_area = triangle_areas(vertices, triangles)
    assert xy_area.sum() == pytest.approx(2.0)
    with pytest.raises(SnowInputError):
        scenes.grid_mesh(x, y, z, keep=np.ones((3, 4), bool))
    with pytest.raises(SnowInputError):
        scenes.grid_mesh(x[:3], y, z)


def edges_of(triangles):
    directed = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    return directed


def test_box_mesh_is_closed_outward_and_has_the_right_volume():
    lower, upper = np.array([-1.0, 2.0, 0.5]), np.array([2.0, 3.5, 2.5])
    vertices, triangles = scenes.box_mesh(lower, upper, cell_size=0.4)
    directed = edges_of(triangles)
    # closed and consistently oriented: each directed edge once, its reverse once
    assert np.unique(directed, axis=0).shape[0] == directed.shape[0]
    forward = {tuple(e) for e in directed}
    assert all((b, a) in forward for a, b in forward)
    # divergence theorem: outward orientation gives the positive enclosed volume
    corners = vertices[triangles]
    volume = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6
    assert volume == pytest.approx(np.prod(upper - lower), rel=1e-12)
    area, _ = triangle_areas(vertices, triangles)
    size = upper - lower
    assert area.sum() == pytest.approx(2 * (size[0] * size[1] + size[1] * size[2]
                                            + size[2] * size[0]), rel=1e-12)
    assert np.abs(vertices[:, 2] - 2.5).min() == 0.0 and area.max() <= 0.5 * 0.4**2 + 1e-12


def test_box_test_is_a_plane_with_a_closed_block():
    size, block, block_height = 20.0, 4.0, 2.0
    vertices, triangles = scenes.box_test(size, block, block_height, resolution=21)
    on_plane = np.all(vertices[triangles][:, :, 2] == 0.0, axis=1) & np.all(
        np.abs(vertices[triangles][:, :, :2]).max(axis=2) <= size / 2, axis=1)
    plane_triangles = 2 * 20 * 20
    cube = triangles[plane_triangles:]
    assert not np.any(np.isin(cube, triangles[:plane_triangles]))  # separate pieces
    assert on_plane[:plane_triangles].all()
    corners = vertices[cube]
    volume = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6
    assert volume == pytest.approx(block * block * block_height, rel=1e-12)
    # seen from above: the block's top in the middle, the plane around it
    hm = build_heightmap(vertices, triangles, 41)
    g = hm.grid
    xx, yy = np.meshgrid(g.x0 + np.arange(g.nx) * g.spacing, g.y0 + np.arange(g.ny) * g.spacing)
    reach = np.maximum(np.abs(xx), np.abs(yy))
    np.testing.assert_array_equal(hm.height[reach <= block / 2 + 1e-9], block_height)
    np.testing.assert_array_equal(hm.height[reach > block / 2 + 1e-9], 0.0)


def test_overhang_mesh_has_surface_under_its_ledge():
    size, ledge_height, ledge_depth, thickness = 10.0, 4.0, 3.0, 0.5
    vertices, triangles = scenes.overhang_mesh(size, ledge_height, ledge_depth, thickness, 21)
    x, z = vertices[:, 0], vertices[:, 2]
    under = (x > 0.0) & (x < ledge_depth)
    assert np.any(under & (z == 0.0)) and np.any(under & (z == ledge_height - thickness))
    assert np.any(under & (z == ledge_height))
    # one sheet: signed areas seen from above add up to the square's footprint, the
    # ledge's underside (facing down) cancelling the ground it hides
    _, xy_area = triangle_areas(vertices, triangles)
    assert xy_area.sum() == pytest.approx(size * size, rel=1e-12)
    assert xy_area.min() < 0.0
    assert np.isclose(-xy_area[xy_area < 0].sum(), ledge_depth * size)


@pytest.mark.parametrize("call", [
    lambda: scenes.gaussian_hill(size=-1.0),
    lambda: scenes.gaussian_hill(sigma=0.0),
    lambda: scenes.tilted_plane(slope=float("nan")),
    lambda: scenes.mountain_valley(resolution=3),
    lambda: scenes.rolling_hills(seed=-1),
    lambda: scenes.box_test(size=4.0, block=5.0),
    lambda: scenes.overhang_mesh(size=10.0, ledge_depth=6.0),
    lambda: scenes.overhang_mesh(ledge_height=1.0, ledge_thickness=2.0),
    lambda: scenes.box_mesh((0, 0, 0), (1, 0, 1)),
])
def test_bad_scene_parameters_raise_input_error(call):
    with pytest.raises(SnowInputError) as info:
        call()
    assert info.value.suggestion
