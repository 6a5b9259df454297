"""Porous snow fences: meshes apart from the terrain that slow the wind without stopping it.

A real snow fence is slatted, about half open (Tabler 1991): air passes through it, losing
a pressure 0.5 rho k u^2 on the way, and the slowed air behind it drops the snow it
carries, which builds the long lee drift of docs/drift_validation.md. A solid wall (part
of the terrain) lets nothing through and separates the flow instead.

A fence is a world-space mesh (a vertical plane, or a box thinner than a wind cell) and
a porosity, its open share. It is not part of the heightmap: flakes and drifting snow
pass through it (a slatted fence holds almost none of either), and it shelters nothing
by itself; only the wind feels it, as a drag in the cells it stands in
(kernels/*/wind.py ``porous_drag``). Snow that buries the fence's foot closes those cells
for the wind, so a fence filling with snow loses its lower part.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import SnowInputError
from .terrain import check_mesh_arrays

#: Porosity (open share of the fence's face) accepted; outside it the fence is a wall
#: (use the terrain) or next to nothing.
MIN_POROSITY, MAX_POROSITY = 0.05, 0.95
#: A half-open fence: the usual snow fence (Tabler 1991).
DEFAULT_POROSITY = 0.5
#: Marks a wind column with no fence (as NO_SURFACE does for the drift's columns).
NO_FENCE = np.float32(-1.0e30)
#: Sample points per wind cell along each edge of a fence triangle.
SAMPLES_PER_CELL = 4


def resistance_coefficient(porosity: float) -> float:
    """The pressure-loss coefficient k of a thin perforated plate with open share
    ``porosity`` (Idelchik, Handbook of Hydraulic Resistance, sharp-edged orifices):
    k = (1 + 0.707 sqrt(1 - p) - p)^2 / p^2: 4.0 at p = 0.5, 0.13 at 0.9, 18 at 0.3."""
    p = float(porosity)
    return (1.0 + 0.707 * math.sqrt(1.0 - p) - p) ** 2 / (p * p)


def check_porosity(porosity, setting: str = "fence_porosity") -> float:
    try:
        p = float(porosity)
    except (TypeError, ValueError):
        p = float("nan")
    if not (MIN_POROSITY <= p <= MAX_POROSITY):
        raise SnowInputError(setting, f"must be between {MIN_POROSITY} and {MAX_POROSITY} (the "
                             f"open share of the fence), got {porosity!r}; a solid wall belongs in "
                             "the terrain", "0.5 (a slatted snow fence)")
    return p


@dataclass(frozen=True)
class PorousFence:
    """One porous fence: world-space mesh arrays (``vertices`` (N, 3) m, ``triangles`` (M, 3)
    indices; vertical faces are fine) and its ``porosity`` (open share, 0.05-0.95)."""

    vertices: np.ndarray
    triangles: np.ndarray
    porosity: float = DEFAULT_POROSITY

    def __post_init__(self):
        vertices, triangles = check_mesh_arrays(self.vertices, self.triangles, "fences")
        object.__setattr__(self, "vertices", vertices)
        object.__setattr__(self, "triangles", triangles)
        object.__setattr__(self, "porosity", check_porosity(self.porosity))

    @property
    def resistance(self) -> float:
        """Pressure-loss coefficient k (resistance_coefficient)."""
        return resistance_coefficient(self.porosity)


def check_fences(fences) -> tuple[PorousFence, ...]:
    """A tuple of PorousFence from ``fences`` (None or an iterable of them)."""
    if fences is None:
        return ()
    if isinstance(fences, PorousFence):
        return (fences,)
    try:
        items = tuple(fences)
    except TypeError:
        raise SnowInputError("fences", f"expected a list of PorousFence, got {type(fences).__name__}",
                             "[PorousFence(vertices, triangles, porosity=0.5)]") from None
    for item in items:
        if not isinstance(item, PorousFence):
            raise SnowInputError("fences", f"expected PorousFence items, got {type(item).__name__}",
                                 "[PorousFence(vertices, triangles, porosity=0.5)]")
    return items


#: Sample points of one triangle at most; a larger one is split in four (its edges'
#: midpoints), so one long fence never needs more than about this many points at once.
MAX_TRIANGLE_SAMPLES = 1 << 20


def _triangle_samples(a: np.ndarray, b: np.ndarray, c: np.ndarray, step: float) -> np.ndarray:
    """Points (P, 3) covering triangle abc at most ``step`` m apart along the two edges from
    the vertex opposite its longest edge, pulled a millionth of the way toward its
    centroid in x and y (heights stay exact): a fence that ends on a column boundary stays
    out of the column beyond it."""
    corners = [a, b, c]
    lengths = [np.linalg.norm(corners[(k + 2) % 3] - corners[(k + 1) % 3]) for k in range(3)]
    apex = int(np.argmax(lengths))
    a, b, c = corners[apex], corners[(apex + 1) % 3], corners[(apex + 2) % 3]
    n_b = max(1, int(math.ceil(np.linalg.norm(b - a) / step)))
    n_c = max(1, int(math.ceil(np.linalg.norm(c - a) / step)))
    s, t = np.meshgrid(np.arange(n_b + 1) / n_b, np.arange(n_c + 1) / n_c, indexing="ij")
    keep = s + t <= 1.0 + 1e-12
    s, t = s[keep], t[keep]
    points = a + s[:, None] * (b - a) + t[:, None] * (c - a)
    centroid = (a + b + c) / 3.0
    points[:, :2] = centroid[:2] + (points[:, :2] - centroid[:2]) * (1.0 - 1e-6)
    return points


def _pieces(a, b, c, step, box):
    """Triangles covering abc whose samples fit in MAX_TRIANGLE_SAMPLES, those outside the
    xy ``box`` (xmin, ymin, xmax, ymax) left out."""
    stack = [(a, b, c)]
    while stack:
        a, b, c = stack.pop()
        low, high = np.minimum(np.minimum(a, b), c), np.maximum(np.maximum(a, b), c)
        if high[0] < box[0] or high[1] < box[1] or low[0] > box[2] or low[1] > box[3]:
            continue
        edges = sorted(np.linalg.norm(p - q) for p, q in ((a, b), (b, c), (c, a)))
        # _triangle_samples spans the two shorter edges
        if (edges[0] / step + 2) * (edges[1] / step + 2) / 2 <= MAX_TRIANGLE_SAMPLES:
            yield a, b, c
            continue
        ab, bc, ca = (a + b) / 2, (b + c) / 2, (c + a) / 2
        stack.extend([(a, ab, ca), (ab, b, bc), (ca, bc, c), (ab, bc, ca)])


def fence_columns(fences, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per wind column of ``grid`` (a WindGrid), host float32 arrays: the lowest and the
    highest point (m) of any fence inside the column, (ny, nx) each (-NO_FENCE and NO_FENCE
    where none: a fence's bottom gap stays open), and the drag coefficients (1/m) along x,
    y and z, (3, ny, nx), 0 where none: per axis the largest of the fences in the column,
    each 0.5 k / h times its share along that axis (``axis_shares``). Two fences in one
    column, one above the other, act as one from the lower's bottom to the upper's top. A
    fence counts in every column it passes through: a plane in one, a box thicker than a
    cell, or straddling a column boundary, in two along the wind, with twice its pressure
    loss. Raises SnowInputError naming "fences" for a fence that lies outside the wind
    domain."""
    bottom = np.full((grid.ny, grid.nx), -NO_FENCE, np.float32)
    top = np.full((grid.ny, grid.nx), NO_FENCE, np.float32)
    coefficients = np.zeros((3, grid.ny, grid.nx), np.float32)
    h = float(grid.cell_size)
    box = (grid.x0, grid.y0, grid.x0 + grid.nx * h, grid.y0 + grid.ny * h)
    z_top = grid.z0 + grid.nz * h
    for number, fence in enumerate(check_fences(fences)):
        drag = 0.5 * fence.resistance / h
        v = fence.vertices
        low, high = math.inf, -math.inf          # heights of its points above the domain
        touched = np.zeros((grid.ny, grid.nx), bool)
        # per column the largest share along x and y of its faces that stand up (-1: none)
        shares = np.full((2, grid.ny, grid.nx), -1.0)
        standing, share_sums = 0, np.zeros(2)    # the fence's mean over its standing samples
        for a, b, c in fence.triangles:
            share = axis_shares(np.cross(v[b] - v[a], v[c] - v[a]))
            for piece in _pieces(v[a], v[b], v[c], h / SAMPLES_PER_CELL, box):
                points = _triangle_samples(*piece, h / SAMPLES_PER_CELL)
                i = np.floor((points[:, 0] - grid.x0) / h).astype(np.int64)
                j = np.floor((points[:, 1] - grid.y0) / h).astype(np.int64)
                inside = (i >= 0) & (i < grid.nx) & (j >= 0) & (j < grid.ny)
                if not inside.any():
                    continue
                i, j, z = i[inside], j[inside], points[inside, 2].astype(np.float32)
                low, high = min(low, float(z.min())), max(high, float(z.max()))
                np.minimum.at(bottom, (j, i), z)
                np.maximum.at(top, (j, i), z)
                touched[j, i] = True
                if share is not None:
                    for axis in range(2):
                        np.maximum.at(shares[axis], (j, i), share[axis])
                    standing += i.size
                    share_sums += i.size * np.asarray(share)
        if not (high > grid.z0 and low < z_top):
            raise SnowInputError(
                "fences", f"fence {number + 1} lies outside the wind domain (x {box[0]:.4g}.."
                f"{box[2]:.4g} m, y {box[1]:.4g}..{box[3]:.4g} m, z {grid.z0:.4g}..{z_top:.4g} m)"
                ": it would slow no wind", "a fence standing on the terrain, or none")
        # a column with only the fence's flat faces (a thick box's top) takes the fence's
        # mean shares; a fence with no face standing up (a flat mesh) drags along every axis
        fallback = (share_sums / standing).tolist() + [0.0] if standing else [1.0, 1.0, 1.0]
        flat = touched & (shares[0] < 0)
        for axis in range(3):
            column_share = shares[axis] if axis < 2 else np.zeros(touched.shape)
            share = np.where(flat, fallback[axis], column_share)
            fence_coefficient = np.where(touched, np.float32(drag) * share.astype(np.float32),
                                         0.0).astype(np.float32)
            np.maximum(coefficients[axis], fence_coefficient, out=coefficients[axis])
    return bottom, top, coefficients


def axis_shares(normal) -> tuple[float, float] | None:
    """The shares of a screen's drag 0.5 k / h along x and y for a face with this
    ``normal`` (any length), or None for a face that does not stand up (no horizontal
    part). A screen resists the wind across it, not along it: with (n_x, n_y) the face's
    horizontal unit normal, x takes |n_x|^3 / (|n_x| + |n_y|), y |n_y|^3 / (|n_x| + |n_y|),
    z nothing. A wind u along x then loses 0.5 k (u n_x)^2 n_x per unit of fence area, the x
    part of the screen's normal force, spread over the (|n_x| + |n_y|) / |n_x| columns an
    oblique fence crosses per row: the pressure loss along x is 0.5 k u^2 n_x^2, as across
    a screen at that angle; a fence along the wind takes nothing from it. (The force's
    other part, which would turn the wind toward the fence's normal, is left out.)"""
    nx_, ny_ = abs(float(normal[0])), abs(float(normal[1]))
    length = math.hypot(nx_, ny_)
    if length <= 1e-9 * max(1.0, abs(float(normal[2]))):
        return None
    nx_, ny_ = nx_ / length, ny_ / length
    return nx_ ** 3 / (nx_ + ny_), ny_ ** 3 / (nx_ + ny_)
