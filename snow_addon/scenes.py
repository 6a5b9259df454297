"""Procedural terrains for tests, command-line presets, benchmarks and the Blender sample
scenes.

Every scene returns ``(vertices, triangles)``: float64 (N, 3) world-space metres, Z up,
and int64 (M, 3) vertex indices, triangles counter-clockwise seen from outside (surfaces
facing up have normals pointing up). Meshes are welded (no duplicate vertices) and use
every vertex. Randomised scenes are deterministic for a given ``seed``.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import SnowInputError


def _positive(name: str, value, suggestion) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SnowInputError(name, f"must be a number, got {value!r}", str(suggestion)) from None
    if not (math.isfinite(number) and number > 0.0):
        raise SnowInputError(name, f"must be a positive finite number, got {value!r}",
                             str(suggestion))
    return number


def _finite(name: str, value, suggestion) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SnowInputError(name, f"must be a number, got {value!r}", str(suggestion)) from None
    if not math.isfinite(number):
        raise SnowInputError(name, f"must be finite, got {value!r}", str(suggestion))
    return number


def _count(name: str, value, low: int, suggestion) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SnowInputError(name, f"must be a whole number >= {low}, got {value!r}",
                             str(suggestion))
    return int(value)


def _grid_counts(size_x: float, size_y: float, resolution: int) -> tuple[int, int]:
    """Vertices along x and y: ``resolution`` along the longer side, about square cells."""
    longer = max(size_x, size_y)
    nx = max(2, int(round((resolution - 1) * size_x / longer)) + 1)
    ny = max(2, int(round((resolution - 1) * size_y / longer)) + 1)
    return nx, ny


def grid_mesh(x, y, z, keep=None) -> tuple[np.ndarray, np.ndarray]:
    """Triangulate a height grid.

    ``x``: (nx,) or (ny, nx) metres, ``y``: (ny,) or (ny, nx) metres, ``z``: (ny, nx) metres
    (vertex ``[j, i]`` at ``(x[i], y[j], z[j, i])`` for 1-D axes). ``keep``: optional bool
    (ny-1, nx-1), the grid cells to keep (holes, outlines); vertices no kept cell uses are
    dropped. Each kept cell becomes two triangles, counter-clockwise seen from above when x
    grows with i and y with j.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 2 or z.shape[1] < 2:
        raise SnowInputError("z", f"must be a (ny, nx) grid with ny, nx >= 2, got {z.shape}",
                             "np.zeros((8, 8))")
    ny, nx = z.shape
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim == 1 and y.ndim == 1:
        if x.shape != (nx,) or y.shape != (ny,):
            raise SnowInputError("x", f"1-D axes must have lengths nx={nx}, ny={ny}, got "
                                 f"{x.shape[0]}, {y.shape[0]}", "np.linspace over each side")
        x, y = np.broadcast_to(x[None, :], z.shape), np.broadcast_to(y[:, None], z.shape)
    elif x.shape != z.shape or y.shape != z.shape:
        raise SnowInputError("x", f"x and y must be 1-D axes or grids of z's shape {z.shape}",
                             "np.meshgrid(x, y)")
    vertices = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1).astype(np.float64)
    index = np.arange(ny * nx, dtype=np.int64).reshape(ny, nx)
    v00, v10 = index[:-1, :-1], index[:-1, 1:]
    v01, v11 = index[1:, :-1], index[1:, 1:]
    first = np.stack([v00, v10, v11], axis=-1)
    second = np.stack([v00, v11, v01], axis=-1)
    if keep is None:
        triangles = np.concatenate([first.reshape(-1, 3), second.reshape(-1, 3)])
        return vertices, triangles
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != (ny - 1, nx - 1):
        raise SnowInputError("keep", f"must have shape {(ny - 1, nx - 1)}, got {keep.shape}",
                             "one bool per grid cell")
    triangles = np.concatenate([first[keep], second[keep]])
    return _drop_unused(vertices, triangles)


def _drop_unused(vertices: np.ndarray, triangles: np.ndarray):
    used = np.zeros(vertices.shape[0], dtype=bool)
    used[triangles.ravel()] = True
    new_index = np.cumsum(used) - 1
    return vertices[used], new_index[triangles].astype(np.int64)


def merge_meshes(*meshes) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate (vertices, triangles) pairs into one mesh (indices offset, not welded)."""
    vertices, triangles, offset = [], [], 0
    for v, t in meshes:
        vertices.append(np.asarray(v, dtype=np.float64))
        triangles.append(np.asarray(t, dtype=np.int64) + offset)
        offset += vertices[-1].shape[0]
    return np.concatenate(vertices), np.concatenate(triangles)


def box_mesh(lower, upper, cell_size: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A closed, welded, outward-facing box from corner ``lower`` to ``upper`` (x, y, z in m),
    each face subdivided into cells of about ``cell_size`` m (None: one cell per face)."""
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    if lower.shape != (3,) or upper.shape != (3,) or not np.all(upper > lower):
        raise SnowInputError("box", f"needs 3-D corners with upper > lower, got {lower} {upper}",
                             "lower=(0, 0, 0), upper=(1, 1, 1)")
    if cell_size is None:
        divisions = [1, 1, 1]
    else:
        cell_size = _positive("cell_size", cell_size, 1.0)
        divisions = [max(1, int(math.ceil((upper[a] - lower[a]) / cell_size - 1e-9)))
                     for a in range(3)]
    axes = [np.linspace(lower[a], upper[a], divisions[a] + 1) for a in range(3)]
    pieces = []
    # (first in-face axis, second in-face axis, normal axis): first x second = +normal
    for u_axis, v_axis, n_axis in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        for side, value in ((1, upper[n_axis]), (-1, lower[n_axis])):
            u_values, v_values = axes[u_axis], axes[v_axis]
            grid_u, grid_v = np.meshgrid(u_values, v_values)  # (nv, nu)
            points = np.empty(grid_u.shape + (3,))
            points[..., u_axis] = grid_u
            points[..., v_axis] = grid_v
            points[..., n_axis] = value
            # the (u, v) grid's triangles, counter-clockwise seen from +normal
            _, face_triangles = grid_mesh(grid_u, grid_v, np.zeros(grid_u.shape))
            if side < 0:
                face_triangles = face_triangles[:, [0, 2, 1]]
            pieces.append((points.reshape(-1, 3), face_triangles))
    vertices, triangles = merge_meshes(*pieces)
    welded, inverse = np.unique(vertices, axis=0, return_inverse=True)
    return welded, inverse.reshape(-1)[triangles].astype(np.int64)


def tilted_plane(size: float = 10.0, slope: float = 0.2,
                 resolution: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """A square plane of side ``size`` m centred on the origin, rising along +x:
    ``z = slope * x`` (slope in m/m), ``resolution`` vertices along each side."""
    size = _positive("size", size, 10.0)
    slope = _finite("slope", slope, 0.2)
    resolution = _count("resolution", resolution, 2, 2)
    axis = np.linspace(-0.5 * size, 0.5 * size, resolution)
    return grid_mesh(axis, axis, slope * np.broadcast_to(axis[None, :], (resolution, resolution)))


def gaussian_hill(size: float = 20.0, height: float = 4.0, sigma: float = 3.0,
                  resolution: int = 65) -> tuple[np.ndarray, np.ndarray]:
    """A Gaussian hill ``z = height * exp(-(x^2 + y^2) / (2 sigma^2))`` (m) on a square of
    side ``size`` m centred on the origin, ``resolution`` vertices along each side."""
    size = _positive("size", size, 20.0)
    height = _finite("height", height, 4.0)
    sigma = _positive("sigma", sigma, 3.0)
    resolution = _count("resolution", resolution, 2, 65)
    axis = np.linspace(-0.5 * size, 0.5 * size, resolution)
    xx, yy = np.meshgrid(axis, axis)
    return grid_mesh(axis, axis, height * np.exp(-(xx * xx + yy * yy) / (2.0 * sigma * sigma)))


def _fourier_noise(xx, yy, rng, shortest: float, longest: float, waves: int) -> np.ndarray:
    """Smooth noise in [-1, 1]: a sum of plane waves with random headings, phases and
    wavelengths log-uniform in [shortest, longest] m, amplitude proportional to wavelength."""
    heading = rng.uniform(0.0, 2.0 * math.pi, waves)
    wavelength = np.exp(rng.uniform(math.log(shortest), math.log(longest), waves))
    phase = rng.uniform(0.0, 2.0 * math.pi, waves)
    total = np.zeros(xx.shape)
    for k in range(waves):
        along = xx * math.cos(heading[k]) + yy * math.sin(heading[k])
        total += wavelength[k] * np.cos(2.0 * math.pi * along / wavelength[k] + phase[k])
    return total / wavelength.sum()


def _scaled(z: np.ndarray, relief: float) -> np.ndarray:
    """``z`` shifted and scaled to span exactly [0, relief]."""
    z = z - z.min()
    return z * (relief / z.max())


def _centred_grid(size_x, size_y, resolution):
    """Node coordinates (x, y) and their meshgrid (xx, yy) of a ``size_x`` by ``size_y`` m
    grid centred on the origin with square cells, ``resolution`` nodes along the longer side."""
    nx, ny = _grid_counts(size_x, size_y, resolution)
    x = np.linspace(-0.5 * size_x, 0.5 * size_x, nx)
    y = np.linspace(-0.5 * size_y, 0.5 * size_y, ny)
    xx, yy = np.meshgrid(x, y)
    return x, y, xx, yy


def mountain_valley(size_x: float = 400.0, size_y: float = 300.0, relief: float = 60.0,
                    resolution: int = 129, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A valley running along y between two ridges, with rough slopes and a floor that
    rises gently toward +y.

    ``size_x`` by ``size_y`` m centred on the origin; heights span exactly [0, ``relief``] m;
    ``resolution`` vertices along the longer side (square cells). Deterministic for ``seed``.
    """
    size_x = _positive("size_x", size_x, 400.0)
    size_y = _positive("size_y", size_y, 300.0)
    relief = _positive("relief", relief, 60.0)
    resolution = _count("resolution", resolution, 8, 129)
    seed = _count("seed", seed, 0, 0)
    rng = np.random.default_rng(seed)
    x, y, xx, yy = _centred_grid(size_x, size_y, resolution)
    across = xx / (0.5 * size_x)          # -1 .. 1 across the valley
    along = (yy + 0.5 * size_y) / size_y  # 0 .. 1 along it
    crest = 1.0 + 0.25 * np.sin(2.0 * math.pi * along + rng.uniform(0, 2 * math.pi))
    ridges = crest * np.exp(-((np.abs(across) - 0.6) / 0.28) ** 2)
    floor = 0.12 * across ** 2 + 0.15 * along
    longer = max(size_x, size_y)
    roughness = _fourier_noise(xx, yy, rng, 0.04 * longer, 0.3 * longer, 24)
    z = ridges + floor + 0.12 * (0.3 + ridges) * roughness
    return grid_mesh(x, y, _scaled(z, relief))


def rolling_hills(size_x: float = 512.0, size_y: float = 512.0, relief: float = 30.0,
                  resolution: int = 129, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Smooth rolling hills (benchmark terrains of a given extent).

    ``size_x`` by ``size_y`` m centred on the origin; heights span exactly
    [0, ``relief``] m; ``resolution`` vertices along the longer side (square cells);
    hill wavelengths between a tenth and a half of the longer side. Deterministic for
    ``seed``.
    """
    size_x = _positive("size_x", size_x, 512.0)
    size_y = _positive("size_y", size_y, 512.0)
    relief = _positive("relief", relief, 30.0)
    resolution = _count("resolution", resolution, 2, 129)
    seed = _count("seed", seed, 0, 0)
    rng = np.random.default_rng(seed)
    x, y, xx, yy = _centred_grid(size_x, size_y, resolution)
    longer = max(size_x, size_y)
    z = _fourier_noise(xx, yy, rng, 0.1 * longer, 0.5 * longer, 16)
    return grid_mesh(x, y, _scaled(z, relief))


def box_test(size: float = 20.0, block: float = 4.0, block_height: float = 2.0,
             resolution: int = 81) -> tuple[np.ndarray, np.ndarray]:
    """The theses' box test (2009 thesis, fig. 4.10): a flat square plane of side ``size`` m
    at z = 0, centred on the origin, with a closed square block of side ``block`` m and
    height ``block_height`` m standing on its middle.

    The plane has ``resolution`` vertices along each side; the block's faces are
    subdivided at the same spacing (so snow on its top shows on the mesh). The two are
    separate (unwelded) pieces, as two objects in Blender would be.
    """
    size = _positive("size", size, 20.0)
    block = _positive("block", block, 4.0)
    block_height = _positive("block_height", block_height, 2.0)
    resolution = _count("resolution", resolution, 2, 81)
    if block >= size:
        raise SnowInputError("block", f"the block ({block:g} m) must be smaller than the plane "
                             f"({size:g} m)", f"{0.2 * size:g}")
    axis = np.linspace(-0.5 * size, 0.5 * size, resolution)
    plane = grid_mesh(axis, axis, np.zeros((resolution, resolution)))
    half = 0.5 * block
    cube = box_mesh((-half, -half, 0.0), (half, half, block_height),
                    cell_size=size / (resolution - 1))
    return merge_meshes(plane, cube)


def overhang_mesh(size: float = 10.0, ledge_height: float = 4.0, ledge_depth: float = 3.0,
                  ledge_thickness: float = 0.5,
                  resolution: int = 41) -> tuple[np.ndarray, np.ndarray]:
    """A cliff with an overhanging ledge: one connected sheet extruded along y.

    Square of side ``size`` m centred on the origin. Seen from the side (x to the right):
    a plateau at z = ``ledge_height`` from x = -size/2 to the ledge's lip at
    x = ``ledge_depth``, the lip face down to ``ledge_height - ledge_thickness``, the
    ledge's underside back to x = 0, the cliff face down to z = 0, and the ground from
    x = 0 to size/2. So the top-most surface is ``ledge_height`` for x <= ledge_depth and 0
    beyond; the ground for 0 <= x < ledge_depth, the underside and the cliff face lie under
    the ledge. Every segment is subdivided at about size / (resolution - 1) m.
    """
    size = _positive("size", size, 10.0)
    ledge_height = _positive("ledge_height", ledge_height, 4.0)
    ledge_depth = _positive("ledge_depth", ledge_depth, 3.0)
    ledge_thickness = _positive("ledge_thickness", ledge_thickness, 0.5)
    resolution = _count("resolution", resolution, 4, 41)
    if ledge_depth >= 0.5 * size:
        raise SnowInputError("ledge_depth", f"must be less than size/2 = {0.5 * size:g} m",
                             f"{0.3 * size:g}")
    if ledge_thickness >= ledge_height:
        raise SnowInputError("ledge_thickness", f"must be less than ledge_height "
                             f"({ledge_height:g} m)", f"{0.2 * ledge_height:g}")
    step = size / (resolution - 1)
    corners = [(-0.5 * size, ledge_height), (ledge_depth, ledge_height),
               (ledge_depth, ledge_height - ledge_thickness), (0.0, ledge_height - ledge_thickness),
               (0.0, 0.0), (0.5 * size, 0.0)]
    profile_x, profile_z = [corners[0][0]], [corners[0][1]]
    for (xa, za), (xb, zb) in zip(corners[:-1], corners[1:]):
        pieces = max(1, int(math.ceil(math.hypot(xb - xa, zb - za) / step - 1e-9)))
        fraction = np.arange(1, pieces + 1) / pieces
        profile_x.extend(xa + (xb - xa) * fraction)
        profile_z.extend(za + (zb - za) * fraction)
    profile_x, profile_z = np.asarray(profile_x), np.asarray(profile_z)
    y = np.linspace(-0.5 * size, 0.5 * size, resolution)
    shape = (resolution, profile_x.size)
    return grid_mesh(np.broadcast_to(profile_x[None, :], shape),
                     np.broadcast_to(y[:, None], shape),
                     np.broadcast_to(profile_z[None, :], shape))


def snow_fence(size_x: float = 60.0, size_y: float = 30.0, fence_height: float = 2.0,
               fence_length: float = 20.0, thickness: float = 0.4, fence_x: float = -10.0,
               resolution: int = 241) -> tuple[np.ndarray, np.ndarray]:
    """A solid snow fence on flat ground: a plane of ``size_x`` x ``size_y`` m at z = 0,
    centred on the origin, with a wall ``fence_height`` m high, ``thickness`` m thick and
    ``fence_length`` m long across y, centred at x = ``fence_x`` (wind along +x leaves
    most of the plane in its lee). ``resolution`` plane vertices along x."""
    size_x = _positive("size_x", size_x, 60.0)
    size_y = _positive("size_y", size_y, 30.0)
    fence_height = _positive("fence_height", fence_height, 2.0)
    fence_length = _positive("fence_length", fence_length, 20.0)
    thickness = _positive("thickness", thickness, 0.4)
    fence_x = _finite("fence_x", fence_x, -10.0)
    resolution = _count("resolution", resolution, 2, 241)
    if fence_length > size_y or abs(fence_x) + thickness >= 0.5 * size_x:
        raise SnowInputError("fence_length", "the fence must stand inside the plane",
                             f"fence_length <= {size_y:g} and |fence_x| < {0.5 * size_x:g}")
    nx, ny = _grid_counts(size_x, size_y, resolution)
    plane = grid_mesh(np.linspace(-0.5 * size_x, 0.5 * size_x, nx),
                      np.linspace(-0.5 * size_y, 0.5 * size_y, ny), np.zeros((ny, nx)))
    half_t, half_l = 0.5 * thickness, 0.5 * fence_length
    wall = box_mesh((fence_x - half_t, -half_l, 0.0), (fence_x + half_t, half_l, fence_height),
                    cell_size=size_x / (resolution - 1))
    return merge_meshes(plane, wall)


def ridge(size_x: float = 240.0, size_y: float = 120.0, height: float = 20.0,
          half_width: float = 30.0, asymmetry: float = 0.0,
          resolution: int = 241) -> tuple[np.ndarray, np.ndarray]:
    """A 2D ridge across y: ``z = height / (1 + (x / half_width)^2)`` (a Witch of Agnesi,
    m; half_width is the half-width at half height) on a ``size_x`` x ``size_y`` m plane
    centred on the origin. ``asymmetry`` in [0, 1) steepens the lee (x > 0) side by that
    fraction of its half-width, as wind-shaped ridges are."""
    size_x = _positive("size_x", size_x, 240.0)
    size_y = _positive("size_y", size_y, 120.0)
    height = _positive("height", height, 20.0)
    half_width = _positive("half_width", half_width, 30.0)
    asymmetry = _finite("asymmetry", asymmetry, 0.0)
    if not 0.0 <= asymmetry < 1.0:
        raise SnowInputError("asymmetry", f"must be in [0, 1), got {asymmetry!r}", "0.0")
    resolution = _count("resolution", resolution, 2, 241)
    nx, ny = _grid_counts(size_x, size_y, resolution)
    x = np.linspace(-0.5 * size_x, 0.5 * size_x, nx)
    width = np.where(x > 0, half_width * (1.0 - asymmetry), half_width)
    z = height / (1.0 + (x / width) ** 2)
    return grid_mesh(x, np.linspace(-0.5 * size_y, 0.5 * size_y, ny),
                     np.broadcast_to(z[None, :], (ny, nx)))


def porous_fence(size_x: float = 60.0, size_y: float = 30.0, fence_height: float = 2.0,
                 fence_length: float = 20.0, fence_x: float = -10.0, bottom_gap: float = 0.0,
                 resolution: int = 241) -> tuple[tuple[np.ndarray, np.ndarray],
                                                 tuple[np.ndarray, np.ndarray]]:
    """A porous snow fence on flat ground: ((ground vertices, triangles), (fence vertices,
    triangles)). The ground is a ``size_x`` x ``size_y`` m plane at z = 0 centred on the
    origin; the fence a vertical plane up to ``fence_height`` m and ``fence_length`` m long
    across y at x = ``fence_x``, from ``bottom_gap`` m above the ground (Tabler's fences
    leave 10-15 % of their height open at the bottom), for
    ``Simulation(..., fences=[PorousFence(*fence, porosity)])``."""
    size_x = _positive("size_x", size_x, 60.0)
    size_y = _positive("size_y", size_y, 30.0)
    fence_height = _positive("fence_height", fence_height, 2.0)
    fence_length = _positive("fence_length", fence_length, 20.0)
    fence_x = _finite("fence_x", fence_x, -10.0)
    bottom_gap = _finite("bottom_gap", bottom_gap, 0.0)
    if not 0.0 <= bottom_gap < fence_height:
        raise SnowInputError("bottom_gap", f"must be in [0, fence_height) m, got {bottom_gap!r}",
                             f"{0.1 * fence_height:g} (a tenth of the fence's height)")
    resolution = _count("resolution", resolution, 2, 241)
    if fence_length > size_y or abs(fence_x) >= 0.5 * size_x:
        raise SnowInputError("fence_length", "the fence must stand inside the plane",
                             f"fence_length <= {size_y:g} and |fence_x| < {0.5 * size_x:g}")
    nx, ny = _grid_counts(size_x, size_y, resolution)
    ground = grid_mesh(np.linspace(-0.5 * size_x, 0.5 * size_x, nx),
                       np.linspace(-0.5 * size_y, 0.5 * size_y, ny), np.zeros((ny, nx)))
    half = 0.5 * fence_length
    fence_vertices = np.array([(fence_x, -half, bottom_gap), (fence_x, half, bottom_gap),
                               (fence_x, half, fence_height), (fence_x, -half, fence_height)])
    fence_triangles = np.array([(0, 1, 2), (0, 2, 3)], dtype=np.int64)
    return ground, (fence_vertices, fence_triangles)
