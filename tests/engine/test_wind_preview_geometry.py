"""Wind preview geometry (pure NumPy, no Blender, no GPU): arrows, streamlines, colour
scale, obstacle and pressure views behave as the overlay and "Wind to Object" promise."""
import numpy as np
import pytest

from snowfall.snow_addon.grid import WindGrid
from snowfall.snow_addon import wind_preview as wp


def make_grid(nx=16, ny=12, nz=8, h=2.0):
    return WindGrid(x0=-10.0, y0=5.0, z0=-3.0, cell_size=h, nx=nx, ny=ny, nz=nz)


def empty_field(grid):
    nz, ny, nx = grid.shape
    u = np.zeros((nz, ny, nx + 1), np.float32)
    v = np.zeros((nz, ny + 1, nx), np.float32)
    w = np.zeros((nz + 1, ny, nx), np.float32)
    solid = np.zeros((nz, ny, nx), np.uint8)
    pressure = np.zeros((nz, ny, nx), np.float32)
    return u, v, w, solid, pressure


def uniform_field(grid, velocity):
    u, v, w, solid, pressure = empty_field(grid)
    u[:] = velocity[0]
    v[:] = velocity[1]
    w[:] = velocity[2]
    return u, v, w, solid, pressure


def face_coordinates(grid):
    """World x of u faces / cell centres, y of v faces / cell centres, as broadcastable."""
    h = grid.cell_size
    x_face = grid.x0 + np.arange(grid.nx + 1) * h
    x_cell = grid.x0 + (np.arange(grid.nx) + 0.5) * h
    y_face = grid.y0 + np.arange(grid.ny + 1) * h
    y_cell = grid.y0 + (np.arange(grid.ny) + 0.5) * h
    return x_face, x_cell, y_face, y_cell


def rotation_field(grid, omega, centre):
    """Solid-body rotation about a vertical axis through ``centre`` (x, y): u = -omega (y -
    yc), v = omega (x - xc), w = 0, sampled exactly at the MAC faces."""
    u, v, w, solid, pressure = empty_field(grid)
    x_face, x_cell, y_face, y_cell = face_coordinates(grid)
    u[:] = (-omega * (y_cell - centre[1]))[None, :, None]
    v[:] = (omega * (x_cell - centre[0]))[None, None, :]
    return u, v, w, solid, pressure


def test_uniform_field_arrows_point_along_the_wind_with_length_proportional_to_speed():
    grid = make_grid()
    velocity = np.array([3.0, -4.0, 1.0])
    for factor in (1.0, 2.5):
        u, v, w, solid, _ = uniform_field(grid, velocity * factor)
        stride = wp.stride_for_density(grid, 8)
        spacing = stride * grid.cell_size
        points = wp.slice_points(grid, wp.slice_height(grid, 0.5), stride)
        arrows = wp.wind_arrows(u, v, w, solid, grid, points, spacing, arrow_scale=1.5,
                                speed_max=20.0)
        assert len(arrows.speeds) == len(points) > 0
        np.testing.assert_allclose(arrows.speeds, 5.0 * factor * np.sqrt(1.04), rtol=1e-5)
        direction = velocity / np.linalg.norm(velocity)
        lengths = np.linalg.norm(arrows.vectors, axis=1)
        np.testing.assert_allclose(arrows.vectors / lengths[:, None],
                                   np.broadcast_to(direction, arrows.vectors.shape), atol=1e-5)
        # an arrow of speed_max spans arrow_scale lattice spacings; length is linear in speed
        np.testing.assert_allclose(lengths, 1.5 * spacing * arrows.speeds / 20.0, rtol=1e-5)
        lines = wp.arrow_lines(arrows)
        assert lines.primitive == "LINES" and lines.count == len(points)
        assert lines.positions.shape == (6 * len(points), 3) and lines.positions.dtype == np.float32
        assert lines.colors.shape == (6 * len(points), 4) and lines.colors.dtype == np.float32
        # the shaft runs from the lattice point to base + vector
        np.testing.assert_allclose(lines.positions[0::6], arrows.bases, atol=1e-5)
        np.testing.assert_allclose(lines.positions[1::6], arrows.bases + arrows.vectors,
                                   atol=1e-4)


def test_speed_colours_follow_the_stated_scale():
    scale = wp.speed_scale(10.0)
    assert (scale.minimum, scale.maximum, scale.unit) == (0.0, 10.0, "m/s")
    stops = wp.SPEED_COLORMAP
    colors = scale.colors([0.0, 2.5, 5.0, 7.5, 10.0, 25.0, -1.0])
    for row, (_, rgb) in zip(colors[:5], stops):
        np.testing.assert_allclose(row[:3], rgb, atol=1e-6)
        assert row[3] == 1.0
    np.testing.assert_allclose(colors[5], colors[4])  # faster than the scale: top colour
    np.testing.assert_allclose(colors[6], colors[0])
    # halfway between two stops is halfway between their colours
    mid = scale.colors([1.25])[0, :3]
    np.testing.assert_allclose(mid, 0.5 * (np.array(stops[0][1]) + np.array(stops[1][1])),
                               atol=1e-6)
    legend = scale.legend(3)
    assert [v for v, _ in legend] == [0.0, 5.0, 10.0]
    assert "10 m/s" in scale.describe()


def test_arrow_colours_use_the_field_maximum_when_no_scale_is_given():
    grid = make_grid()
    u, v, w, solid, _ = empty_field(grid)
    x_face = grid.x0 + np.arange(grid.nx + 1) * grid.cell_size
    u[:] = (0.25 * (x_face - grid.x0))[None, None, :]  # speed grows along x
    points = wp.slice_points(grid, wp.slice_height(grid, 0.5), 1)
    arrows = wp.wind_arrows(u, v, w, solid, grid, points, grid.cell_size)
    assert arrows.scale.maximum == pytest.approx(wp.max_fluid_speed(u, v, w, solid))
    lines = wp.arrow_lines(arrows)
    fastest = np.argmax(arrows.speeds)
    np.testing.assert_allclose(lines.colors[6 * fastest, :3], wp.SPEED_COLORMAP[-1][1], atol=1e-6)
    # faster arrows are redder
    order = np.argsort(arrows.speeds)
    red = lines.colors[6 * order, 0]
    blue = lines.colors[6 * order, 2]
    assert red[-1] > red[0] and blue[-1] < blue[0]


def test_streamlines_of_a_rotation_field_are_circles():
    grid = make_grid(nx=24, ny=24, nz=6, h=1.0)
    centre = (grid.x0 + 12.0, grid.y0 + 12.0)
    omega = 0.7
    u, v, w, solid, _ = rotation_field(grid, omega, centre)
    radii = np.array([3.0, 5.5, 8.0])
    z = wp.slice_height(grid, 0.5)
    seeds = np.stack([centre[0] + radii, np.full(3, centre[1]), np.full(3, z)], axis=1)
    lines = wp.trace_streamlines(u, v, w, solid, grid, seeds, step=0.25,
                                 max_length=2 * np.pi * radii.max() * 1.1,
                                 both_directions=False)
    assert lines.line_count == 3
    for radius, line, speeds in zip(radii, lines.lines(),
                                    np.split(lines.speeds, np.cumsum(lines.counts)[:-1])):
        r = np.hypot(line[:, 0] - centre[0], line[:, 1] - centre[1])
        np.testing.assert_allclose(r, radius, rtol=2e-3)
        np.testing.assert_allclose(line[:, 2], z, atol=1e-6)
        np.testing.assert_allclose(speeds, omega * radius, rtol=2e-3)
        # counter-clockwise (omega > 0): the first step from (xc + r, yc) goes toward +y
        assert line[1, 1] > line[0, 1]
        # at least one full turn was traced: the angle covers 2 pi
        angle = np.unwrap(np.arctan2(line[:, 1] - centre[1], line[:, 0] - centre[0]))
        assert angle[-1] - angle[0] > 2 * np.pi


def test_streamlines_in_uniform_wind_are_straight_and_stop_at_the_domain_edge():
    grid = make_grid()
    u, v, w, solid, _ = uniform_field(grid, (4.0, 1.0, 0.0))
    z = wp.slice_height(grid, 0.4)
    seeds = wp.slice_points(grid, z, 4)
    lines = wp.trace_streamlines(u, v, w, solid, grid, seeds, step=0.5)
    assert lines.line_count == len(seeds)
    sx, sy, _ = grid.size
    for seed, line in zip(seeds, lines.lines()):
        direction = np.diff(line, axis=0)
        direction /= np.linalg.norm(direction, axis=1)[:, None]
        np.testing.assert_allclose(direction, np.broadcast_to([4, 1, 0] / np.sqrt(17.0),
                                                              direction.shape), atol=1e-5)
        assert wp.inside_domain(grid, line).all()
        # the line passes through its seed and reaches within a step of the box's edge
        assert np.min(np.linalg.norm(line - seed, axis=1)) < 1e-4
        end = line[-1]
        gap = min(grid.x0 + sx - end[0], grid.y0 + sy - end[1], end[1] - grid.y0)
        assert gap < 0.5 * grid.cell_size + 1e-5
    overlay = wp.streamline_lines(lines)
    assert overlay.primitive == "LINES"
    assert len(overlay.positions) == 2 * (len(lines.points) - lines.line_count)


def test_streamlines_stop_at_obstacles_and_skip_seeds_inside_them():
    grid = make_grid()
    u, v, w, solid, _ = uniform_field(grid, (5.0, 0.0, 0.0))
    solid[:, :, 10:12] = 1  # a wall across the domain, x cells 10 and 11
    z = wp.slice_height(grid, 0.5)
    seeds = wp.slice_points(grid, z, 1)
    lines = wp.trace_streamlines(u, v, w, solid, grid, seeds, both_directions=False)
    assert lines.line_count > 0
    assert not wp.inside_solid(solid, grid, lines.points).any()
    wall_x = grid.x0 + 10 * grid.cell_size
    seeds_x = seeds[:, 0]
    upwind = (seeds_x < wall_x).sum()
    # seeds upwind of the wall end before it; seeds inside the wall make no line
    ends = np.cumsum(lines.counts) - 1
    upwind_ends = lines.points[ends][lines.points[ends][:, 0] < wall_x]
    assert len(upwind_ends) == upwind - grid.ny  # the row of seeds in the last cell moves < a step
    assert (upwind_ends[:, 0] > wall_x - 0.5 * grid.cell_size - 1e-4).all()


def test_obstacle_views_count_solid_cells():
    grid = make_grid(nx=8, ny=6, nz=5, h=1.0)
    rng = np.random.default_rng(3)
    solid = (rng.random(grid.shape) < 0.3).astype(np.uint8)
    points = wp.obstacle_points(solid, grid)
    assert points.primitive == "POINTS" and points.count == int(solid.sum())
    assert len(points.positions) == int(solid.sum())
    assert wp.inside_solid(solid, grid, points.positions).all()
    faces = wp.obstacle_faces(solid, grid)
    assert faces.count == int(solid.sum()) and faces.primitive == "TRIS"
    # one quad (6 vertices) per interior face between an obstacle and a fluid cell
    s = solid.astype(bool)
    exposed = sum(int((np.diff(s.astype(np.int8), axis=a) != 0).sum()) for a in range(3))
    assert len(faces.positions) == 6 * exposed


def test_single_obstacle_cell_hull_is_its_cube():
    grid = make_grid(nx=5, ny=5, nz=5, h=2.0)
    solid = np.zeros(grid.shape, np.uint8)
    solid[2, 1, 3] = 1
    faces = wp.obstacle_faces(solid, grid)
    assert len(faces.positions) == 36
    lo = np.array([grid.x0 + 3 * 2.0, grid.y0 + 1 * 2.0, grid.z0 + 2 * 2.0])
    np.testing.assert_allclose(faces.positions.min(axis=0), lo)
    np.testing.assert_allclose(faces.positions.max(axis=0), lo + 2.0)


def test_pressure_slice_colours_low_yellow_high_red_on_fluid_cells():
    grid = make_grid(nx=6, ny=4, nz=3, h=1.0)
    _, _, _, solid, pressure = empty_field(grid)
    pressure[:] = np.arange(grid.nx, dtype=np.float32)[None, None, :] - 2.0  # rises along x
    solid[1, 0, :] = 1
    z = grid.z0 + 1.5
    view = wp.pressure_slice(pressure, solid, grid, z)
    assert view.count == grid.nx * grid.ny - grid.nx
    assert (view.scale.minimum, view.scale.maximum) == (-2.0, 3.0)
    np.testing.assert_allclose(view.positions[:, 2], z)
    low = view.positions[:, 0] < grid.x0 + 1.0
    high = view.positions[:, 0] > grid.x0 + 5.0
    np.testing.assert_allclose(view.colors[low][:, :3], np.broadcast_to(
        wp.PRESSURE_COLORMAP[0][1], (low.sum(), 3)), atol=1e-6)
    np.testing.assert_allclose(view.colors[high][:, :3], np.broadcast_to(
        wp.PRESSURE_COLORMAP[-1][1], (high.sum(), 3)), atol=1e-6)


def test_arrow_mesh_is_closed_and_carries_speed_per_vertex():
    grid = make_grid()
    u, v, w, solid, _ = uniform_field(grid, (2.0, 1.0, 0.5))
    points = wp.slice_points(grid, wp.slice_height(grid, 0.5), 4)
    arrows = wp.wind_arrows(u, v, w, solid, grid, points, 4 * grid.cell_size)
    vertices, triangles, speeds = wp.arrow_mesh(arrows)
    n = len(arrows.speeds)
    assert vertices.shape == (13 * n, 3) and speeds.shape == (13 * n,)
    assert triangles.min() == 0 and triangles.max() == 13 * n - 1
    # closed, consistently wound surface: every directed edge is matched by its reverse
    edges = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    forward = {tuple(e) for e in edges.tolist()}
    assert all((b, a) in forward for a, b in forward)
    assert len(forward) == len(edges)
    # outward-facing: the signed volume is positive
    corners = vertices[triangles].astype(np.float64)
    volume = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6
    assert volume > 0
    # the tip of each arrow is base + vector
    np.testing.assert_allclose(vertices[12::13], arrows.bases + arrows.vectors, atol=1e-4)
    np.testing.assert_allclose(speeds, np.repeat(arrows.speeds, 13))


def test_overlay_and_store_rebuild_only_on_change():
    grid = make_grid()
    u, v, w, solid, pressure = uniform_field(grid, (3.0, 0.0, 0.0))
    solid[0] = 1

    class Field:
        pass

    field = Field()
    field.u, field.v, field.w, field.pressure, field.solid, field.grid = u, v, w, pressure, solid, grid
    store = wp.WindPreviewStore()
    options = wp.OverlayOptions(show_arrows=True, show_streamlines=True, show_obstacles=True,
                                show_pressure=True, density=8)
    assert store.geometry(options) == []
    store.publish(field, step_index=5, time=0.2, source="test")
    first = store.geometry(options)
    assert [g.primitive for g in first] == ["TRIS", "TRIS", "LINES", "LINES"]
    assert store.geometry(options) is first
    other = store.geometry(wp.OverlayOptions(placement="VOLUME", density=8))
    assert len(other) == 1 and other[0].count > len(first[3].positions) // 6
    store.publish(field)
    assert store.geometry(options) is not first
    store.clear()
    assert store.wind_field is None and store.geometry(options) == []


def test_upwind_rake_seeds_the_sides_the_wind_blows_in_through():
    grid = make_grid(nx=12, ny=10, nz=6, h=1.0)
    for velocity, sides in (((4.0, 0.0, 0.0), {"x_low"}), ((-4.0, 0.0, 0.0), {"x_high"}),
                            ((3.0, -3.0, 0.0), {"x_low", "y_high"})):
        u, v, w, solid, _ = uniform_field(grid, velocity)
        solid[0] = 1  # ground layer: no seeds in it
        seeds = wp.upwind_points(u, v, w, solid, grid, stride=2)
        assert len(seeds) > 0 and not wp.inside_solid(solid, grid, seeds).any()
        sx, sy, _ = grid.size

        def seeded(axis, value):  # a whole side, not just a corner seed of another side
            on_side = seeds[np.isclose(seeds[:, axis], value)]
            return len(np.unique(on_side[:, 1 - axis])) > 1

        found = {name for name, axis, value in (
            ("x_low", 0, grid.x0 + 0.5), ("x_high", 0, grid.x0 + sx - 0.5),
            ("y_low", 1, grid.y0 + 0.5), ("y_high", 1, grid.y0 + sy - 0.5)) if seeded(axis, value)}
        assert found == sides
        low = wp.upwind_points(u, v, w, solid, grid, stride=2, z_max=grid.z0 + 3.0)
        assert 0 < len(low) < len(seeds) and low[:, 2].max() <= grid.z0 + 3.0
        # streamlines from the rake cross the whole domain in uniform wind
        lines = wp.trace_streamlines(u, v, w, solid, grid, seeds, both_directions=False)
        assert lines.line_count == len(seeds)
