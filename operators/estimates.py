"""Estimates shown before baking: grid sizes and memory from the terrain's bounding box
(no mesh evaluation, cheap enough for a panel), the backend a bake would use, and the time
per frame (measured: by the last bake or by the Measure operator)."""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import bpy
import numpy as np

from ..snow_addon.backend import select_backend
from ..snow_addon.errors import SnowInputError
from ..snow_addon.grid import HeightmapGrid, WindGrid
from ..properties import terrain_objects, to_snow_settings
from .background import BackgroundOperator
from .scene_io import read_terrain, scene_fences, world_bounds


@dataclass
class Estimate:
    heightmap: HeightmapGrid
    wind: WindGrid
    flakes: int
    wind_bytes: int
    flake_bytes: int
    cover_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.wind_bytes + self.flake_bytes + self.cover_bytes


def estimate(context) -> Estimate:
    """Grid sizes and memory of a bake with the current settings (SnowInputError when the
    settings or the terrain are not usable)."""
    from ..snow_addon.cover import SnowCover
    from ..snow_addon.flakes import FlakeSystem
    from ..snow_addon.wind import WindSolver

    scene = context.scene
    props = scene.snowfall
    objects = terrain_objects(props)
    if not objects:
        raise SnowInputError("terrain", "no terrain is set", "Set Terrain")
    settings = to_snow_settings(props, scene)
    low, high = world_bounds(context, objects)
    heightmap = HeightmapGrid.covering(low[0], low[1], high[0], high[1],
                                       settings.heightmap_resolution)
    wind = WindGrid.for_terrain(heightmap, float(low[2]), float(high[2]), settings)
    return Estimate(heightmap, wind, settings.flake_count,
                    WindSolver.estimate_bytes(settings, wind),
                    FlakeSystem.estimate_bytes(settings),
                    SnowCover.estimate_bytes(settings, heightmap))


#: Set Terrain's cost per heightmap node: the heightmap, its preview mesh (a Blender mesh
#: with a vertex and a quad per node) and the arrays that build them. Measured with bpy 5.2
#: on this project's 2-core machine (a 100 x 80 m grid terrain, resolution 2048: 3.4 M
#: nodes, 292 B and 2.1 us per node at the peak; 1024: 2.5 us), rounded up.
SET_TERRAIN_BYTES_PER_NODE = 320
SET_TERRAIN_SECONDS_PER_NODE = 2.5e-6
#: Share of the available memory an estimate may use before it is refused (the rest is
#: Blender's, the viewport's and the estimate's error).
MEMORY_SHARE = 0.8
#: A bake's files: flakes at most 16 B per flake-frame (docs/bake_cache.md: 13-15), snow
#: depth at most 8 B per heightmap node and frame (two float32 channels, ZIP), and the
#: checkpoint (about 36 B per flake plus the wind grid) twice while the newest replaces
#: the one before.
DISK_BYTES_PER_FLAKE_FRAME = 16
DISK_BYTES_PER_NODE_FRAME = 8
CHECKPOINT_BYTES_PER_FLAKE = 40


def available_memory() -> int:
    """Bytes of RAM this process can still use (/proc/meminfo's MemAvailable, else the
    physical pages the system reports)."""
    from ..snow_addon.backend import host_memory_available

    return int(host_memory_available())


def _grid_nodes(low, high, resolution: int) -> tuple:
    grid = HeightmapGrid.covering(float(low[0]), float(low[1]), float(high[0]),
                                  float(high[1]), int(resolution))
    return grid.nx, grid.ny


def check_set_terrain(context, objects) -> tuple:
    """Memory and time Set Terrain will take for ``objects`` at the scene's heightmap
    resolution, from their bounding boxes (no mesh evaluation). Raises SnowInputError
    naming heightmap_resolution (with the largest that fits) when the memory would pass
    ``MEMORY_SHARE`` of what is available; returns (bytes, seconds) otherwise."""
    scene = context.scene
    resolution = int(scene.snowfall.heightmap_resolution)
    objects = [obj for obj in objects if obj is not None and obj.type == "MESH"]
    if not objects:
        return 0, 0.0           # Set Terrain's own check names the problem
    low, high = world_bounds(context, objects)
    nx, ny = _grid_nodes(low, high, resolution)
    nodes = nx * ny
    needed = nodes * SET_TERRAIN_BYTES_PER_NODE
    seconds = nodes * SET_TERRAIN_SECONDS_PER_NODE
    available = available_memory()
    if needed > MEMORY_SHARE * available:
        fits = int(resolution * math.sqrt(MEMORY_SHARE * available / needed))
        raise SnowInputError(
            "heightmap_resolution", f"a {nx} x {ny} heightmap ({nodes / 1e6:.1f} M nodes) "
            f"needs about {_gb(needed)} and {_duration(seconds)} to build and show, and "
            f"{_gb(available)} of memory are available",
            f"heightmap_resolution <= {max(fits, 2)}")
    return needed, seconds


def bake_disk_bytes(settings, frames: int, vertex_arrays=()) -> int:
    """Upper estimate of a bake's files (bytes) over ``frames`` frames: flakes, snow depth
    on the heightmap of the terrain's vertices (``vertex_arrays``, metres), checkpoints."""
    nodes = int(settings.heightmap_resolution) ** 2
    arrays = [np.asarray(v) for v in vertex_arrays if len(v)]
    if arrays:
        points = np.concatenate(arrays)
        nx, ny = _grid_nodes(points.min(axis=0), points.max(axis=0),
                             settings.heightmap_resolution)
        nodes = nx * ny
    frames = max(1, int(frames))
    flakes = int(settings.flake_count)
    return (frames * (flakes * DISK_BYTES_PER_FLAKE_FRAME + nodes * DISK_BYTES_PER_NODE_FRAME)
            + 2 * flakes * CHECKPOINT_BYTES_PER_FLAKE)


def _gb(count: float) -> str:
    return f"{count / 1024**3:.1f} GiB" if count >= 1024**3 else f"{count / 1024**2:.0f} MiB"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@functools.lru_cache(maxsize=8)
def backend_choice(requested: str) -> tuple:
    """(name, reason) of the backend ``requested`` resolves to, or ("unavailable", why).
    Cached: probing CUDA is too slow for every panel redraw."""
    try:
        backend = select_backend(requested)
    except SnowInputError as error:
        return ("unavailable", error.problem)
    where = f" on {backend.device_name}" if backend.device_name else ""
    return (backend.name + where, backend.reason)


def read_measure(context):
    """Blender's half of Measure: a function (no Blender data: any thread) that builds the
    real simulation, takes one warm-up step (compiles the kernels), then times one frame
    of substeps and returns its seconds."""
    from ..snow_addon.simulation import Simulation

    scene = context.scene
    props = scene.snowfall
    objects = terrain_objects(props)
    if not objects:
        raise SnowInputError("terrain", "no terrain is set", "Set Terrain")
    settings = to_snow_settings(props, scene)
    terrain = read_terrain(context, objects)
    fences = scene_fences(context, objects)
    backend, substeps = props.backend, int(props.substeps)

    def measure(task=None):
        if task is not None:
            task.report(0.1, "building the simulation")
        sim = Simulation(settings, terrain.vertices, terrain.triangles, backend=backend,
                         fences=fences)
        sim.step(1)
        sim.backend.synchronize()
        if task is not None:
            task.report(0.5, "timing a frame")
        start = time.perf_counter()
        sim.step(substeps)
        sim.flake_positions()   # a frame also copies the flakes to the host
        sim.backend.synchronize()
        return time.perf_counter() - start

    return measure


def measure_seconds_per_frame(context) -> float:
    """Seconds per frame of the scene's simulation (measured now, on this thread), also
    stored in ``seconds_per_frame``."""
    seconds = read_measure(context)()
    context.scene.snowfall.seconds_per_frame = seconds
    return seconds


class SNOWFALL_OT_measure(BackgroundOperator, bpy.types.Operator):
    """Time one frame of the simulation with the current settings (builds it once)"""

    bl_idname = "snowfall.measure"
    bl_label = "Measure Time per Frame"

    def prepare(self, context):
        measure = read_measure(context)

        def apply(context, seconds):
            context.scene.snowfall.seconds_per_frame = seconds
            self.report({"INFO"}, f"Snowfall: {seconds:.3f} s per frame")
            return {"FINISHED"}

        return measure, apply


CLASSES = (SNOWFALL_OT_measure,)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
