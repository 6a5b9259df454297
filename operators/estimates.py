"""Estimates shown before baking: grid sizes and memory from the terrain's bounding box
(no mesh evaluation, cheap enough for a panel), the backend a bake would use, and the time
per frame (measured: by the last bake or by the Measure operator)."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import bpy

from ..snow_addon.backend import select_backend
from ..snow_addon.errors import SnowInputError
from ..snow_addon.grid import HeightmapGrid, WindGrid
from ..properties import terrain_objects, to_snow_settings
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


def measure_seconds_per_frame(context) -> float:
    """Build the real simulation, take one warm-up step (compiles the kernels), then time
    one frame of substeps. Seconds per frame, also stored in ``seconds_per_frame``."""
    from ..snow_addon.simulation import Simulation

    scene = context.scene
    props = scene.snowfall
    objects = terrain_objects(props)
    if not objects:
        raise SnowInputError("terrain", "no terrain is set", "Set Terrain")
    settings = to_snow_settings(props, scene)
    terrain = read_terrain(context, objects)
    sim = Simulation(settings, terrain.vertices, terrain.triangles, backend=props.backend,
                     fences=scene_fences(context, objects))
    sim.step(1)
    sim.backend.synchronize()
    start = time.perf_counter()
    sim.step(int(props.substeps))
    sim.flake_positions()   # a frame also copies the flakes to the host
    sim.backend.synchronize()
    seconds = time.perf_counter() - start
    props.seconds_per_frame = seconds
    return seconds


class SNOWFALL_OT_measure(bpy.types.Operator):
    """Time one frame of the simulation with the current settings (builds it once)"""

    bl_idname = "snowfall.measure"
    bl_label = "Measure Time per Frame"

    def execute(self, context):
        try:
            seconds = measure_seconds_per_frame(context)
        except SnowInputError as error:
            self.report({"ERROR"}, str(error))
            return {"CANCELLED"}
        self.report({"INFO"}, f"Snowfall: {seconds:.3f} s per frame")
        return {"FINISHED"}


CLASSES = (SNOWFALL_OT_measure,)


register, unregister = bpy.utils.register_classes_factory(CLASSES)
