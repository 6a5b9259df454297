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


def _triangle_samples(a: np.ndarray, b: np.ndarray, c: np.ndarray, step: float) -> np.ndarray:
    """Points (P, 3) covering triangle abc at most ``step`` m apart along its edges, pulled
    a millionth of the way toward its centroid: a fence that ends on a column boundary
    stays out of the column beyond it."""
    longest = max(np.linalg.norm(b - a), np.linalg.norm(c - a), np.linalg.norm(c - b))
    n = max(1, int(math.ceil(longest / step)))
    s, t = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = s + t <= n
    s, t = s[keep] / n, t[keep] / n
    points = a + s[:, None] * (b - a) + t[:, None] * (c - a)
    centroid = (a + b + c) / 3.0
    return centroid + (points - centroid) * (1.0 - 1e-6)


def fence_columns(fences, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per wind column of ``grid`` (a WindGrid), host float32 (ny, nx) arrays: the lowest
    and the highest point (m) of any fence inside the column (NO_FENCE and -NO_FENCE where
    none: a fence's bottom gap stays open), and the drag coefficient 0.5 k / h (1/m) of
    the most resistant fence in it (0 where none). A fence counts in every column it
    passes through: one thicker than a cell, or one on a column boundary, counts in two
    along the wind and takes twice its pressure loss."""
    bottom = np.full((grid.ny, grid.nx), -NO_FENCE, np.float32)
    top = np.full((grid.ny, grid.nx), NO_FENCE, np.float32)
    resistance = np.zeros((grid.ny, grid.nx), np.float32)
    h = float(grid.cell_size)
    for fence in check_fences(fences):
        drag = np.float32(0.5 * fence.resistance / h)
        v = fence.vertices
        for a, b, c in fence.triangles:
            points = _triangle_samples(v[a], v[b], v[c], h / SAMPLES_PER_CELL)
            i = np.floor((points[:, 0] - grid.x0) / h).astype(np.int64)
            j = np.floor((points[:, 1] - grid.y0) / h).astype(np.int64)
            inside = (i >= 0) & (i < grid.nx) & (j >= 0) & (j < grid.ny)
            i, j, z = i[inside], j[inside], points[inside, 2].astype(np.float32)
            np.minimum.at(bottom, (j, i), z)
            np.maximum.at(top, (j, i), z)
            np.maximum.at(resistance, (j, i), drag)
    return bottom, top, resistance
