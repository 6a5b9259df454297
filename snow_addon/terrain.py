"""Terrain -> heightmap (where snow lands), and snow depth -> terrain vertices.

The terrain is one or more world-space meshes, concatenated by the caller into
``vertices`` (N, 3) metres and ``triangles`` (M, 3) vertex indices (object transforms
applied). The heightmap covers the terrain's XY bounding box; each node holds the top-most
surface height a vertical ray from the sky meets (snow lands there, not under overhangs).
Nodes with no surface under them are open (``OPEN_HEIGHT``, ``has_surface`` False).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels.contract import OPEN_LIMIT
from . import backend as _backend
from .errors import SnowInputError, SnowMemoryError
from .grid import OPEN_HEIGHT, HeightmapGrid

#: A face counts as vertical (nothing of it is seen from above) when the Z component of its
#: unit normal is at most this (within about 0.00006 degrees of vertical).
VERTICAL_NORMAL_Z = 1e-6

#: Largest coordinate magnitude accepted (m): float32 heights would be meaningless beyond.
MAX_COORDINATE = 1e9

#: Smallest heightmap resolution (nodes along the longer side).
MIN_RESOLUTION = 4

#: Triangles checked per chunk, so checking a huge mesh needs only bounded scratch memory.
_CHECK_CHUNK = 1 << 18

#: Bytes per heightmap node: float32 height + bool has_surface (the result).
_BYTES_PER_NODE = 5
#: Reference build: float64/bool temporaries per node of a triangle's bounding box.
_REFERENCE_BYTES_PER_BOX_NODE = 120
#: Numba build: row span per triangle (2 x int64) and one int64 per (triangle, row) pair.
_NUMBA_BYTES_PER_TRIANGLE = 16
_NUMBA_BYTES_PER_ROW_PAIR = 8


@dataclass
class Heightmap:
    """The terrain seen from above, on a regular XY grid (host arrays, metres)."""

    grid: HeightmapGrid
    height: np.ndarray
    """float32 (ny, nx): top-most surface height (m); OPEN_HEIGHT at open nodes."""
    has_surface: np.ndarray
    """bool (ny, nx): True where some face lies under the node."""
    z_min: float
    """Lowest surface height (m) over the surface nodes."""
    z_max: float
    """Highest surface height (m) over the surface nodes."""

    @property
    def mean_height(self) -> float:
        """Mean surface height (m) over the surface nodes (surface_mean_height)."""
        return surface_mean_height(self.height)

    @property
    def surface_fraction(self) -> float:
        """Share of nodes with a surface under them, in (0, 1]."""
        return float(np.count_nonzero(self.has_surface)) / self.has_surface.size

    def vertex_tolerance(self) -> float:
        """Absolute slack (m) of the on-top test of ``vertex_snow_depth``: float32 rounding
        of the heights plus a thousandth of the node spacing."""
        scale = max(abs(self.z_min), abs(self.z_max), 1.0)
        return 1e-3 * self.grid.spacing + 16.0 * float(np.finfo(np.float32).eps) * scale


def _as_numeric_array(values, name: str, example: str, setting: str = "terrain") -> np.ndarray:
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise SnowInputError(setting, f"{name} is not a rectangular array of numbers ({exc})",
                             example) from None
    if array.dtype.kind not in "iuf":
        raise SnowInputError(setting, f"{name} must hold numbers, got dtype {array.dtype}",
                             example)
    return array


def check_mesh_arrays(vertices, triangles, setting: str = "terrain") -> tuple[np.ndarray, np.ndarray]:
    """Validate world-space mesh arrays; return (vertices float64 (N, 3) m, triangles int64
    (M, 3)). Raises SnowInputError naming ``setting`` for non-numeric input, wrong shapes,
    no faces, NaN, infinite or absurdly large (> MAX_COORDINATE) coordinates, or indices
    out of range."""
    vertex_example = "vertices as an (N, 3) float array of world-space x, y, z in metres"
    triangle_example = "triangles as an (M, 3) integer array of vertex indices"
    v = _as_numeric_array(vertices, "vertices", vertex_example, setting)
    t = _as_numeric_array(triangles, "triangles", triangle_example, setting)
    if v.ndim != 2 or v.shape[1] != 3:
        raise SnowInputError(setting, f"vertices must have shape (N, 3), got {v.shape}",
                             vertex_example + " (flat arrays: .reshape(-1, 3))")
    if t.ndim != 2 or t.shape[1] != 3:
        raise SnowInputError(setting, f"triangles must have shape (M, 3), got {t.shape}",
                             triangle_example + " (triangulate quads and n-gons first)")
    if t.shape[0] == 0:
        raise SnowInputError(setting, "the mesh has no faces",
                             "a mesh with faces, e.g. a subdivided plane")
    if v.shape[0] == 0:
        raise SnowInputError(setting, "the mesh has no vertices", vertex_example)
    if not np.all(np.isfinite(v)):
        bad = int(np.count_nonzero(~np.isfinite(v).all(axis=1)))
        raise SnowInputError(setting, f"{bad} vertices have NaN or infinite coordinates",
                             "a mesh with finite coordinates (check modifiers and scales)")
    largest = float(np.abs(v).max())
    if largest > MAX_COORDINATE:
        raise SnowInputError(setting, f"has coordinates as large as {largest:.3g} m, beyond "
                             f"the {MAX_COORDINATE:.0e} m that float32 heights can resolve",
                             "a mesh in metres near the origin (check the unit scale)")
    if t.dtype.kind == "f":
        if not np.all(np.isfinite(t)) or not np.all(t == np.floor(t)):
            raise SnowInputError(setting, "triangle indices must be whole numbers",
                                 triangle_example)
    n_vertices = v.shape[0]
    low, high = t.min(), t.max()
    if low < 0 or high >= n_vertices:
        raise SnowInputError(
            setting, f"triangle indices must be in [0, {n_vertices - 1}] for {n_vertices} "
            f"vertices, got {low}..{high}",
            "indices into the vertex array (offset each mesh's indices by the vertices "
            "before it when concatenating meshes)")
    v = np.ascontiguousarray(v, dtype=np.float64)
    t = np.ascontiguousarray(t, dtype=np.int64)
    return v, t


def check_terrain_arrays(vertices, triangles) -> tuple[np.ndarray, np.ndarray]:
    """Validate world-space terrain arrays; return (vertices float64 (N, 3) m,
    triangles int64 (M, 3)).

    Raises SnowInputError(setting="terrain") for non-numeric input, wrong shapes, NaN,
    infinite or absurdly large (> MAX_COORDINATE) coordinates, a mesh without faces,
    indices out of range, a zero-area XY extent, or only vertical faces (nothing seen from
    above). Allocates nothing beyond the conversion of the inputs and bounded scratch space.
    """
    v, t = check_mesh_arrays(vertices, triangles, "terrain")

    xmin, ymin, _, xmax, ymax, _ = terrain_bounds(v, t)
    if not (xmax > xmin and ymax > ymin):
        raise SnowInputError(
            "terrain", f"its faces span no XY area ({xmax - xmin:g} x {ymax - ymin:g} m): "
            "nothing can be seen from above",
            "a mesh that covers some ground, e.g. a plane lying flat (Z up)")
    if not _any_face_seen_from_above(v, t):
        raise SnowInputError(
            "terrain", "every face is vertical: nothing can be seen from above",
            "a mesh with faces that cover ground (Z is up; rotate a mesh modelled Y-up)")
    return v, t


def terrain_bounds(vertices: np.ndarray, triangles: np.ndarray) -> tuple[float, ...]:
    """(xmin, ymin, zmin, xmax, ymax, zmax) in metres over the vertices the faces use."""
    used = np.zeros(vertices.shape[0], dtype=bool)
    used[triangles.ravel()] = True
    if used.all():
        lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    else:
        picked = vertices[used]
        lo, hi = picked.min(axis=0), picked.max(axis=0)
    return (float(lo[0]), float(lo[1]), float(lo[2]), float(hi[0]), float(hi[1]), float(hi[2]))


def _any_face_seen_from_above(vertices: np.ndarray, triangles: np.ndarray) -> bool:
    for start in range(0, triangles.shape[0], _CHECK_CHUNK):
        corners = vertices[triangles[start:start + _CHECK_CHUNK]]
        normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
        length = np.sqrt(np.einsum("ij,ij->i", normal, normal))
        if np.any(np.abs(normal[:, 2]) > VERTICAL_NORMAL_Z * length):
            return True
    return False


def _check_resolution(resolution) -> int:
    if isinstance(resolution, (bool, np.bool_)) or not isinstance(resolution, (int, np.integer)):
        raise SnowInputError("heightmap_resolution",
                             f"must be a whole number of nodes, got {resolution!r}", "256")
    if resolution < MIN_RESOLUTION:
        raise SnowInputError("heightmap_resolution",
                             f"must be at least {MIN_RESOLUTION} nodes, got {resolution}", "256")
    return int(resolution)


def estimate_heightmap_bytes(grid: HeightmapGrid, triangle_count: int, triangle_y_extent_sum: float,
                             largest_box_nodes: int = 0, backend_name: str = "cpu") -> int:
    """Bytes ``build_heightmap`` allocates for ``grid``: the result arrays plus scratch.

    ``triangle_y_extent_sum``: sum over the triangles of their Y extent (m), which bounds
    the Numba build's (triangle, node row) pairs; ``largest_box_nodes``: nodes in the
    largest triangle's bounding box (the reference build's temporaries).
    """
    nodes = grid.nx * grid.ny
    total = nodes * _BYTES_PER_NODE
    if backend_name == "numpy":
        total += min(largest_box_nodes, nodes) * _REFERENCE_BYTES_PER_BOX_NODE
    else:
        row_pairs = 2 * triangle_count + triangle_y_extent_sum / grid.spacing
        total += (triangle_count * _NUMBA_BYTES_PER_TRIANGLE + 2 * (grid.ny + 1) * 8
                  + int(math.ceil(row_pairs)) * _NUMBA_BYTES_PER_ROW_PAIR)
    return int(total)


def _triangle_extents(vertices: np.ndarray, triangles: np.ndarray) -> tuple[float, float, float]:
    """(sum of triangle Y extents, largest X extent, largest Y extent), metres, chunked."""
    y_sum, largest = 0.0, [0.0, 0.0]
    coordinates = [np.ascontiguousarray(vertices[:, axis]) for axis in (0, 1)]
    for start in range(0, triangles.shape[0], _CHECK_CHUNK):
        chunk = triangles[start:start + _CHECK_CHUNK]
        for axis in (0, 1):
            a, b, c = (coordinates[axis][chunk[:, k]] for k in range(3))
            extent = np.maximum(np.maximum(a, b), c) - np.minimum(np.minimum(a, b), c)
            largest[axis] = max(largest[axis], float(extent.max()))
            if axis == 1:
                y_sum += float(extent.sum())
    return y_sum, largest[0], largest[1]


def build_heightmap(vertices, triangles, resolution: int, backend_name: str = "cpu") -> Heightmap:
    """The top-most surface of the terrain on a grid of ``resolution`` nodes along the longer
    side of its XY bounding box (square spacing).

    ``backend_name`` "numpy" runs the NumPy reference, anything else the parallel Numba
    build (the heightmap is built once per bake, on the host). Raises SnowInputError for a
    bad terrain or resolution, and SnowMemoryError naming heightmap_resolution (with the
    largest one that fits) before allocating when the arrays would not fit in RAM.
    """
    vertices, triangles = check_terrain_arrays(vertices, triangles)
    resolution = _check_resolution(resolution)
    xmin, ymin, _, xmax, ymax, _ = terrain_bounds(vertices, triangles)
    grid = HeightmapGrid.covering(xmin, ymin, xmax, ymax, resolution)

    y_sum, box_x, box_y = _triangle_extents(vertices, triangles)
    count = triangles.shape[0]

    def needed(g: HeightmapGrid) -> int:
        box = (math.floor(box_x / g.spacing) + 2) * (math.floor(box_y / g.spacing) + 2)
        return estimate_heightmap_bytes(g, count, y_sum, box, backend_name)

    available = int(_backend.host_memory_available())
    if needed(grid) > available:
        _raise_too_big(grid, resolution, needed, available, (xmin, ymin, xmax, ymax))

    kernels = _heightmap_kernels(backend_name)
    height = np.full(grid.shape, OPEN_HEIGHT, dtype=np.float32)
    has_surface = np.zeros(grid.shape, dtype=bool)
    kernels.rasterize_top_surface(vertices, triangles, grid.x0, grid.y0, grid.spacing,
                                  height, has_surface)
    if not has_surface.any():
        raise SnowInputError(
            "terrain", "no face covers any heightmap node (the faces are nearly vertical or "
            "much smaller than the node spacing)",
            f"a higher heightmap_resolution than {resolution}, or faces that cover ground")
    surface_heights = height[has_surface]
    return Heightmap(grid, height, has_surface, float(surface_heights.min()),
                     float(surface_heights.max()))


def surface_mean_height(height) -> float:
    """Mean (m, float64) of a host heightmap's (ny, nx) heights over its surface nodes
    (above OPEN_LIMIT; open nodes hold OPEN_HEIGHT); nan when it has none."""
    heights = np.asarray(height, dtype=np.float64)
    surface = heights[heights > OPEN_LIMIT]
    return float(surface.mean()) if surface.size else math.nan


def fill_open_heights(height, has_surface) -> np.ndarray:
    """Heights (ny, nx) float32 m where every node without a surface (outside the mesh, or
    in a hole) takes the mean of its surface or already filled 4-neighbours, ring by ring
    outward from the surface: the terrain continued past its edges for the wind, whose
    grid covers whole cells and so may reach past the mesh (an open node there would be an
    open slot down to the wind grid's bottom beside the terrain). Unchanged when every node
    has a surface or none has."""
    height = np.asarray(height, dtype=np.float32)
    known = np.asarray(has_surface, dtype=bool).copy()
    if known.all() or not known.any():
        return height.copy()
    filled = np.where(known, height, np.float32(0.0)).astype(np.float32)
    while not known.all():
        total = np.zeros(filled.shape, np.float32)
        count = np.zeros(filled.shape, np.float32)
        for axis in (0, 1):
            for shift in (1, -1):
                neighbour = np.roll(known, shift, axis)
                value = np.roll(filled, shift, axis)
                edge = [slice(None)] * 2
                edge[axis] = 0 if shift == 1 else -1      # np.roll wraps: no neighbour there
                neighbour[tuple(edge)] = False
                total += np.where(neighbour, value, np.float32(0.0))
                count += neighbour
        ring = ~known & (count > 0)
        filled[ring] = total[ring] / count[ring]
        known |= ring
    return filled


def _raise_too_big(grid, resolution, needed, available, box):
    gib = 1024.0**3
    xmin, ymin, xmax, ymax = box

    def fits(r):
        return needed(HeightmapGrid.covering(xmin, ymin, xmax, ymax, r)) <= available

    if not fits(MIN_RESOLUTION):
        raise SnowMemoryError(
            "terrain", f"even a {MIN_RESOLUTION}-node heightmap of this terrain needs more "
            f"than the {available / gib:.2f} GiB of RAM available",
            "a terrain mesh with fewer triangles", needed(grid), available)
    low, high = MIN_RESOLUTION, resolution - 1  # fits(low) holds, fits(resolution) does not
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    raise SnowMemoryError(
        "heightmap_resolution",
        f"a {grid.nx}x{grid.ny} heightmap needs {needed(grid) / gib:.2f} GiB, more than the "
        f"{available / gib:.2f} GiB of RAM available",
        f"heightmap_resolution <= {low}", needed(grid), available)


def _heightmap_kernels(backend_name: str):
    # the NumPy reference for "numpy", the Numba build for "cpu" and "gpu"
    return _backend.build_module(backend_name if backend_name in _backend.BUILDS else "cpu",
                                 "heightmap")


def vertex_snow_depth(heightmap: Heightmap, snow_depth, vertices,
                      backend_name: str = "cpu") -> np.ndarray:
    """Snow depth (m) per vertex: ``snow_depth`` (ny, nx) sampled bilinearly at the vertex's
    XY when the vertex lies on the top-most surface there, else 0 (no snow under overhangs).

    ``vertices`` (N, 3) world-space metres (the same transforms as the baked terrain);
    returns float32 (N,). "On the top-most surface" allows the interpolation error of
    steep slopes and of mesh detail finer than the heightmap (the largest height step
    between neighbouring nodes around the vertex), so within about two node spacings of
    an overhang's lip a vertex under it still counts as on top.
    """
    grid = heightmap.grid
    depth = np.asarray(snow_depth)
    if depth.shape != grid.shape:
        raise SnowInputError("snow_depth", f"must have the heightmap's shape {grid.shape}, "
                             f"got {depth.shape}", "the snow depth of this heightmap")
    points = _as_numeric_array(vertices, "vertices", "vertices as an (N, 3) float array")
    if points.ndim != 2 or points.shape[1] != 3:
        raise SnowInputError("terrain", f"vertices must have shape (N, 3), got {points.shape}",
                             "vertices as an (N, 3) float array (flat arrays: .reshape(-1, 3))")
    if not np.all(np.isfinite(points)):
        raise SnowInputError("terrain", "vertices have NaN or infinite coordinates",
                             "the finite world-space vertices of the baked terrain")
    points = np.ascontiguousarray(points, dtype=np.float64)
    depth = np.ascontiguousarray(depth, dtype=np.float32)
    out = np.empty(points.shape[0], dtype=np.float32)
    if points.shape[0]:
        _heightmap_kernels(backend_name).vertex_snow_depth(
            heightmap.height, heightmap.has_surface, depth, grid.x0, grid.y0, grid.spacing,
            points, heightmap.vertex_tolerance(), out)
    return out
