"""Measure the two ways of putting baked flake frames into a Blender particle point cache.

Route A, "velocity driving": Blender keeps its own (in-memory) cache. Before each frame the
evaluated particles get the previous frame's position and the velocity that carries them to
the next one; Blender steps (no forces) and caches the frame; at the end
``bpy.ops.ptcache.bake_from_cache`` marks the cache baked (stored inside the .blend).
Route B, "direct files" (operators/particle_output.py): the .bphys files are written with
numpy and Blender reads them as an external cache.

For each route and flake count: seconds per frame, nanoseconds per flake-frame, and the
largest difference between what was written and what Blender evaluates back.

    python benchmarks/particle_routes.py [--counts 10000 100000] [--frames 5]
"""
import argparse
import os
import tempfile
import time

import bpy
import numpy as np

from snowfall.operators import particle_output


def engine_frames(count, frames, fps, seed=0):
    """Plausible flake frames: positions in a 100 m box, falling at about 1 m/s."""
    rng = np.random.default_rng(seed)
    position = rng.uniform(0.0, 100.0, (count, 3)).astype(np.float32)
    velocity = np.zeros((count, 3), np.float32)
    velocity[:, 2] = -rng.uniform(0.5, 1.5, count)
    velocity[:, :2] = rng.uniform(-1.0, 1.0, (count, 2))
    positions, velocities = [], []
    for _ in range(frames):
        positions.append(position.copy())
        velocities.append(velocity.copy())
        position = position + velocity / np.float32(fps)
    return positions, velocities


def fresh_scene(folder):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    bpy.ops.wm.save_as_mainfile(filepath=os.path.join(folder, "bench.blend"))
    return bpy.context.scene


def evaluated_locations(emitter, frame):
    bpy.context.scene.frame_set(frame)
    particles = emitter.evaluated_get(bpy.context.evaluated_depsgraph_get()) \
        .particle_systems[0].particles
    locations = np.empty(len(particles) * 3, np.float32)
    particles.foreach_get("location", locations)
    return locations.reshape(-1, 3)


def route_velocity_driving(folder, count, positions, velocities):
    scene = fresh_scene(folder)
    fps = scene.render.fps / scene.render.fps_base
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count,
                                                  cache_dir=os.path.join(folder, "unused"))
    psys = emitter.particle_systems[0]
    cache = psys.point_cache
    cache.use_external = False
    cache.use_disk_cache = False                  # Blender's memory cache, saved in the .blend
    psys.settings.frame_start = psys.settings.frame_end = 1
    frames = len(positions)
    cache.frame_start, cache.frame_end = 1, frames + 1
    scene.frame_set(1)                            # emission: flakes born at the emitter
    start = time.perf_counter()
    for index in range(frames):
        # state at frame index+1 := engine frame index, velocity carrying it to the next one
        particles = emitter.evaluated_get(bpy.context.evaluated_depsgraph_get()) \
            .particle_systems[0].particles
        if index + 1 < frames:
            drive = (positions[index + 1] - positions[index]) * np.float32(fps)
        else:
            drive = velocities[index]
        particles.foreach_set("location", positions[index].ravel())
        particles.foreach_set("velocity", drive.ravel())
        scene.frame_set(index + 2)                # Blender steps and caches frame index+2
    with bpy.context.temp_override(point_cache=cache, object=emitter):
        bpy.ops.ptcache.bake_from_cache()
    seconds = time.perf_counter() - start
    errors = [np.abs(evaluated_locations(emitter, index + 2) - positions[index + 1]).max()
              for index in range(frames - 1)]
    return seconds, max(errors), cache.is_baked


def route_direct_files(folder, count, positions, velocities):
    scene = fresh_scene(folder)
    emitter = particle_output.ensure_flake_system(scene, "Flakes", count)
    respawned = np.zeros(count, bool)
    start = time.perf_counter()
    for index, (pos, vel) in enumerate(zip(positions, velocities)):
        particle_output.write_flake_frame(emitter, index + 1, pos, vel, respawned)
    particle_output.finish_flake_bake(emitter, 1, len(positions))
    seconds = time.perf_counter() - start
    errors = [np.abs(evaluated_locations(emitter, index + 1) - positions[index]).max()
              for index in range(len(positions))]
    return seconds, max(errors), particle_output.flake_particle_system(emitter) \
        .point_cache.is_baked


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--frames", type=int, default=5)
    args = parser.parse_args()
    print(f"Blender {bpy.app.version_string}; {args.frames} frames per run")
    print(f"{'route':<18}{'flakes':>10}{'s/frame':>10}{'ns/flake-frame':>16}"
          f"{'max |error| m':>15}{'baked':>7}")
    for count in args.counts:
        positions, velocities = engine_frames(count, args.frames, 24.0)
        for name, route in [("velocity driving", route_velocity_driving),
                            ("direct files", route_direct_files)]:
            with tempfile.TemporaryDirectory() as folder:
                seconds, error, baked = route(folder, count, positions, velocities)
            frames = args.frames
            print(f"{name:<18}{count:>10}{seconds / frames:>10.4f}"
                  f"{1e9 * seconds / (frames * count):>16.1f}{error:>15.3g}{str(baked):>7}")


if __name__ == "__main__":
    main()
