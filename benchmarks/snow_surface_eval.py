"""How long Blender takes to build the snow surface of one frame (needs bpy).

Bakes a 100 x 100 m plane with a 20 x 20 x 10 m block (two frames, CPU, with the add-on's
Bake operator) at a heightmap of ``--size`` nodes a side, optionally overwrites both
frames' depth files with ``--cover`` metres of snow on every node (the worst case: no face
is dropped), and times the evaluation of the "Snowfall Snow Surface" object (its Geometry
Nodes modifier: image sampling, the deletions, the wall cut) over alternating frame
changes. This is what scrubbing the timeline or rendering a frame costs on top of
Blender's own work.

    python benchmarks/snow_surface_eval.py --size 1024 --cover 0.1

Prints the surface's vertex and face counts and the median evaluation time.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import bpy
import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="heightmap nodes a side")
    parser.add_argument("--cover", type=float, help="snow depth (m) put on every node")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)

    import snowfall
    from snowfall.operators import snow_surface
    from snowfall.operators.bake import scene_cache_folder
    from snowfall.sample_scenes.build import mesh_object
    from snowfall.snow_addon import bake_cache, exr, scenes

    bpy.ops.wm.read_factory_settings(use_empty=True)
    snowfall.register()
    scene = bpy.context.scene
    terrain = mesh_object("Terrain", *scenes.box_test(size=100.0, block=20.0,
                                                     block_height=10.0, resolution=65))
    terrain.select_set(True)
    bpy.context.view_layer.objects.active = terrain
    props = scene.snowfall
    props.heightmap_resolution, props.wind_resolution = args.size, 16
    props.flake_count, props.sky_height, props.snowfall_rate = 100_000, 1.0, 3000.0
    props.backend = "cpu"
    props.cache_folder = tempfile.mkdtemp(prefix="snow_surface_eval_")
    scene.frame_start, scene.frame_end = 1, 2
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    if args.cover is not None:
        folder = bake_cache.BakeFolder(scene_cache_folder(props.cache_folder, scene))
        for frame in (1, 2):
            with open(folder.depth_path(frame), "rb") as handle:
                ground = exr.decode(handle.read())["G"]
            bake_cache.write_atomic(folder.depth_path(frame), [bake_cache.encode_depth(
                np.full_like(ground, args.cover), ground)])
        for image in bpy.data.images:
            image.reload()
    surface = bpy.data.objects[snow_surface.OBJECT_NAME]
    times = []
    for repeat in range(args.repeats):
        scene.frame_set(1 + repeat % 2)
        surface.update_tag()
        started = time.perf_counter()
        depsgraph = bpy.context.evaluated_depsgraph_get()
        depsgraph.update()
        evaluated = surface.evaluated_get(depsgraph)
        mesh = evaluated.to_mesh()
        counts = len(mesh.vertices), len(mesh.polygons)
        evaluated.to_mesh_clear()
        times.append(time.perf_counter() - started)
    print(f"snow surface of a {args.size} x {args.size} heightmap"
          f"{'' if args.cover is None else f' under {args.cover} m of snow'}: {counts[0]:,} "
          f"vertices, {counts[1]:,} faces; evaluation {1000 * np.median(times):.0f} ms "
          f"(median of {args.repeats}; bpy {bpy.app.version_string}, {os.cpu_count()} CPUs)")
    snowfall.unregister()
    return 0


if __name__ == "__main__":
    from snowfall.blender_compat import exit_process   # a plain exit crashes the 4.2/4.5 bpy module

    exit_process(main(sys.argv[1:]))
