"""Grid geometry shared by every stage: the heightmap nodes and the staggered wind cells.

Array layout (C order, the last index varies fastest, x fastest):

* heightmap arrays: shape ``(ny, nx)``; node ``[j, i]`` sits at
  ``(x0 + i * spacing, y0 + j * spacing)``.
* wind cells: shape ``(nz, ny, nx)``; cell ``[k, j, i]`` has its centre at
  ``(x0 + (i + .5) h, y0 + (j + .5) h, z0 + (k + .5) h)``.
* MAC face velocities: ``u`` shape ``(nz, ny, nx + 1)`` at x-faces
  ``(x0 + i h, y0 + (j + .5) h, z0 + (k + .5) h)``; ``v`` shape ``(nz, ny + 1, nx)``;
  ``w`` shape ``(nz + 1, ny, nx)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import SnowInputError

#: Height (m) stored at heightmap nodes with no surface under them ("open" nodes):
#: low enough that nothing ever collides with it, finite so float32 arithmetic stays clean.
OPEN_HEIGHT = -1.0e30


@dataclass(frozen=True)
class HeightmapGrid:
    """Regular XY grid of heightmap nodes (square spacing, metres)."""

    x0: float
    y0: float
    spacing: float
    nx: int
    ny: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.ny, self.nx)

    @property
    def node_area(self) -> float:
        """Ground area (m^2) one node stands for."""
        return self.spacing * self.spacing

    @property
    def extent(self) -> tuple[float, float]:
        return ((self.nx - 1) * self.spacing, (self.ny - 1) * self.spacing)

    @classmethod
    def covering(cls, xmin: float, ymin: float, xmax: float, ymax: float,
                 resolution: int) -> "HeightmapGrid":
        """Grid with ``resolution`` nodes along the longer side covering the XY box."""
        lx, ly = xmax - xmin, ymax - ymin
        longer = max(lx, ly)
        if not (longer > 0.0) or not math.isfinite(longer):
            raise SnowInputError("terrain", f"has no XY extent ({lx:g} x {ly:g} m)",
                                 "a mesh whose faces cover some ground area")
        spacing = longer / (resolution - 1)
        nx = max(2, int(math.ceil(lx / spacing - 1e-6)) + 1)
        ny = max(2, int(math.ceil(ly / spacing - 1e-6)) + 1)
        return cls(float(xmin), float(ymin), float(spacing), nx, ny)


@dataclass(frozen=True)
class WindGrid:
    """Uniform grid of cubic wind cells (edge ``cell_size`` in metres), Z up."""

    x0: float
    y0: float
    z0: float
    cell_size: float
    nx: int
    ny: int
    nz: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.nz, self.ny, self.nx)

    @property
    def cell_count(self) -> int:
        return self.nx * self.ny * self.nz

    @property
    def size(self) -> tuple[float, float, float]:
        h = self.cell_size
        return (self.nx * h, self.ny * h, self.nz * h)

    @property
    def top(self) -> float:
        return self.z0 + self.nz * self.cell_size

    @classmethod
    def for_terrain(cls, heightmap: HeightmapGrid, z_min: float, z_max: float,
                    settings) -> "WindGrid":
        """The wind domain over the heightmap's XY extent, one cell below the lowest
        terrain point up to ``sky_height`` above the highest."""
        lx, ly = heightmap.extent
        longer = max(lx, ly)
        h = settings.wind_cell_size or longer / settings.wind_resolution
        nx = max(4, int(math.ceil(lx / h - 1e-6)))
        ny = max(4, int(math.ceil(ly / h - 1e-6)))
        sky = settings.sky_height if settings.sky_height is not None else max(0.25 * longer, 8 * h)
        z0 = z_min - h
        nz = max(4, int(math.ceil((z_max + sky - z0) / h - 1e-6)))
        return cls(heightmap.x0, heightmap.y0, z0, float(h), nx, ny, nz)
