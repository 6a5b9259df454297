"""Named scenes for the command line and the benchmarks: DESIGN.md's benchmark scenes (the
theses' set-ups, extended beyond their sizes) plus CPU-sized ones.

Each preset is a procedural terrain (``scenes.rolling_hills``) and the ``SnowSettings``
sized so that the wind grid has exactly the preset's cells (x by y by z, Z up) and the
heightmap exactly its nodes:

* the terrain is a square of side ``nx * cell_size`` metres, so ``wind_resolution = nx``
  gives cubic cells of ``cell_size`` and ``nx = ny`` cells across;
* the heightmap has ``heightmap_nodes`` nodes along each side;
* ``sky_height`` is chosen from the terrain's height range so that the column from one cell
  below the lowest point to the sky holds ``nz - 0.5`` cells, which ``WindGrid.for_terrain``
  rounds up to ``nz`` (the half cell absorbs the heightmap's range differing from the
  mesh's by less than half a cell).

Building a preset's terrain and grids allocates only the terrain mesh (at most
``MAX_MESH_RESOLUTION`` squared vertices), never the flakes or the wind arrays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .errors import SnowInputError
from .grid import HeightmapGrid, WindGrid
from .settings import SnowSettings

#: Vertices along a side of a preset's terrain mesh at most: the heightmap may be finer
#: (the terrain sweep goes to 4096^2 nodes) without the mesh growing with it.
MAX_MESH_RESOLUTION = 513

#: Share of the wind column (nz cells) the terrain's relief takes.
RELIEF_FRACTION = 0.3

MI = 1 << 20  # flake counts are multiples of 2^20 "M", as in the theses (1024 x 1536 ...)


@dataclass(frozen=True)
class Preset:
    """A benchmark or demo scene: wind cells, flakes, heightmap nodes, cell size (m)."""

    name: str
    wind_cells: tuple[int, int, int]
    """(nx, ny, nz): wind cells along x, y, z (Z up)."""
    flakes: int
    heightmap_nodes: int
    """Heightmap nodes along each side (the heightmap is square)."""
    cell_size: float
    """Edge of the cubic wind cells (m)."""
    group: str
    """"paper" (DESIGN.md's scenes), "sweep" (the sweeps, extended), or "cpu" (sized for a
    2-core machine)."""
    description: str
    seed: int = 0

    @property
    def extent(self) -> float:
        """Side of the square terrain (m)."""
        return self.wind_cells[0] * self.cell_size

    @property
    def relief(self) -> float:
        """Height range of the terrain (m) asked of ``rolling_hills``."""
        return RELIEF_FRACTION * self.wind_cells[2] * self.cell_size

    @property
    def wind_cell_count(self) -> int:
        nx, ny, nz = self.wind_cells
        return nx * ny * nz

    def terrain(self) -> tuple[np.ndarray, np.ndarray]:
        """(vertices float64 (N,3) m, triangles int64 (M,3)) of the preset's terrain."""
        return _terrain(self.extent, self.relief, min(self.heightmap_nodes, MAX_MESH_RESOLUTION),
                        self.seed)

    def settings(self, **overrides) -> SnowSettings:
        """SnowSettings giving exactly this preset's grids; ``overrides`` replace any
        setting (e.g. ``flake_count``, ``seed``) and cannot change the grid sizes unless
        they name a grid setting."""
        vertices, _ = self.terrain()
        z_range = float(vertices[:, 2].max() - vertices[:, 2].min())
        h = self.cell_size
        nz = self.wind_cells[2]
        sky = (nz - 1.5) * h - z_range
        if sky <= 0.0:  # a preset table error, not user input
            raise AssertionError(f"preset {self.name}: terrain relief {z_range:g} m leaves no sky")
        # Open sides and the wrap-around fetch, with which every figure in
        # docs/benchmarks.md was measured (the engine's defaults are side walls and the
        # open snowfield now; walls cost profile-2013 about 5 %: same page)
        values = dict(heightmap_resolution=self.heightmap_nodes, wind_resolution=self.wind_cells[0],
                      wind_cell_size=None, sky_height=sky, flake_count=self.flakes, seed=self.seed,
                      side_walls=False, upwind_fetch="wrap")
        values.update(overrides)
        return SnowSettings(**values)

    def grids(self, settings: SnowSettings | None = None) -> tuple[HeightmapGrid, WindGrid]:
        """The heightmap grid and wind grid a Simulation of this preset will build, from
        the terrain mesh's bounding box and height range (no big arrays)."""
        settings = settings or self.settings()
        vertices, _ = self.terrain()
        lo, hi = vertices.min(axis=0), vertices.max(axis=0)
        heightmap = HeightmapGrid.covering(lo[0], lo[1], hi[0], hi[1],
                                           settings.heightmap_resolution)
        return heightmap, WindGrid.for_terrain(heightmap, float(lo[2]), float(hi[2]), settings)

    def summary(self) -> str:
        nx, ny, nz = self.wind_cells
        n = self.heightmap_nodes
        return (f"{self.name:<20} wind {nx}x{ny}x{nz} ({self.wind_cell_count:,} cells, "
                f"{self.cell_size:g} m), {self.flakes:,} flakes, heightmap {n}x{n}, "
                f"{self.extent:g} m square")


@functools.lru_cache(maxsize=8)
def _terrain(extent: float, relief: float, resolution: int, seed: int):
    from .scenes import rolling_hills

    vertices, triangles = rolling_hills(extent, extent, relief, resolution, seed=seed)
    vertices = np.asarray(vertices, dtype=np.float64)
    triangles = np.asarray(triangles, dtype=np.int64)
    vertices.setflags(write=False)  # cached: shared between callers
    triangles.setflags(write=False)
    return vertices, triangles


def _build() -> dict[str, Preset]:
    presets: list[Preset] = []

    def add(name, cells, flakes, nodes, cell_size, group, description):
        presets.append(Preset(name, cells, flakes, nodes, cell_size, group, description))

    # DESIGN.md's scenes from the theses (Z-up sizes, x by y by z).
    add("profile-2009", (256, 256, 32), 524_288, 512, 4.0, "paper",
        "2009 thesis: 512K flakes, 256x256x32 wind, 512^2 terrain")
    add("profile-2013", (256, 256, 32), 2 * MI, 768, 4.0, "paper",
        "2013 thesis profiling run: 2048*1024 flakes, 256x256x32 wind, 768^2 terrain")
    add("balanced-2013", (128, 128, 32), 1024 * 1536, 768, 4.0, "paper",
        "2013 thesis balanced scene: 1024*1536 flakes, 128x128x32 wind")
    for label, count in (("1M", MI), ("2M", 2 * MI), ("4.7M", 4608 * 1024), ("10M", 10 * MI),
                         ("25M", 25 * MI), ("50M", 50 * MI), ("100M", 100 * MI)):
        add(f"flake-sweep-{label}", (128, 128, 32), count, 768, 4.0, "sweep",
            f"flake sweep: {count:,} flakes on the balanced 128x128x32 wind grid")
    for n, nz in ((64, 32), (128, 32), (256, 32), (512, 32), (1024, 32)):
        add(f"wind-sweep-{n}", (n, n, nz), 1024 * 1536, 768, 4.0, "sweep",
            f"wind sweep: {n}x{n}x{nz} wind with the balanced 1,572,864 flakes")
    add("wind-sweep-512x64", (512, 512, 64), 1024 * 1536, 768, 4.0, "sweep",
        "wind sweep extended: 512x512x64 wind (16.8M cells), 1,572,864 flakes")
    for n in (256, 512, 1024, 2048, 4096):
        add(f"terrain-sweep-{n}", (256, 256, 32), 524_288, n, 4.0, "sweep",
            f"terrain sweep: {n}x{n} heightmap, 256x256x32 wind, 512K flakes")
    add("big-100M", (512, 512, 64), 100 * MI, 1024, 4.0, "sweep",
        "100 x 2^20 flakes in a 512x512x64 wind grid (the GPU target scene)")
    # Sized for a 2-core CPU.
    add("cpu-tiny", (16, 16, 8), 4096, 33, 2.0, "cpu",
        "smoke test: 16x16x8 wind, 4,096 flakes, 33^2 terrain (seconds on any machine)")
    add("cpu-small", (64, 64, 16), 65_536, 256, 2.0, "cpu",
        "small CPU scene: 64x64x16 wind, 65,536 flakes, 256^2 terrain")
    add("cpu-blender", (64, 64, 16), 100_000, 256, 2.0, "cpu",
        "the Blender comparison size: 100,000 flakes, 64x64x16 wind, 256^2 terrain")
    add("cpu-2009", (128, 128, 32), 262_144, 512, 4.0, "cpu",
        "profile-2009 scaled to 2 cores: 128x128x32 wind, 262,144 flakes, 512^2 terrain")
    add("cpu-1M", (128, 128, 32), MI, 512, 4.0, "cpu",
        "a million flakes on 2 cores: 128x128x32 wind, 1,048,576 flakes, 512^2 terrain")
    return {p.name: p for p in presets}


PRESETS: dict[str, Preset] = _build()

#: Scenes the CPU benchmark runs by default, and the GPU benchmark.
CPU_BENCHMARK_SCENES = ("cpu-small", "cpu-blender", "cpu-2009", "cpu-1M")
GPU_BENCHMARK_SCENES = tuple(name for name, p in PRESETS.items() if p.group != "cpu")


def get_preset(name: str) -> Preset:
    """The preset called ``name``; SnowInputError listing the names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SnowInputError("preset", f"unknown preset {name!r}",
                             "one of " + ", ".join(PRESETS)) from None


def command_line_overrides(args) -> dict:
    """The settings a command line overrides: ``args.flakes``, ``args.seed`` and
    ``args.wind_boundary`` (``--flakes``, ``--seed``, ``--wind-boundary``) where given."""
    overrides = {}
    if getattr(args, "flakes", None) is not None:
        overrides["flake_count"] = args.flakes
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = args.seed
    if getattr(args, "wind_boundary", None) is not None:
        overrides["wind_boundary"] = args.wind_boundary
    return overrides


def build_simulation(preset, args, profile: bool):
    """The Simulation of ``preset`` with a command line's overrides
    (``command_line_overrides``) on ``args.backend``: what ``snowfall simulate`` and the
    benchmark harness (benchmarks/harness.py) step."""
    from .simulation import Simulation

    settings = preset.settings(**command_line_overrides(args))
    settings.validate()
    vertices, triangles = preset.terrain()
    return Simulation(settings, vertices, triangles, backend=args.backend, profile=profile)
