"""Blender's own particle system on the snowfall scenes: the figure the engine competes with.

Runs with the ``bpy`` module (Blender as a Python module, e.g. bpy 5.0.1 from PyPI):

    python benchmarks/blender_particles.py --preset cpu-blender --frames 12
    python benchmarks/blender_particles.py --preset cpu-small --particles 1000000 --json out.json

It builds the preset's terrain (the same mesh the engine uses) as a collision object,
emits the same number of particles at once, spread through the air column above the
terrain (a box emitter from the highest terrain point to the top of the wind domain),
adds a Wind force field blowing along +X at the engine's default wind speed (5 m/s) and
a Turbulence field, with gravity and air drag, and steps the scene frame by frame (no cache
baked beforehand, so every ``frame_set`` simulates one frame). It prints microseconds per
particle-frame: the median wall time of the frames after the first (the first one emits),
divided by the particle count. Blender runs its particle step on as many threads as it
likes; the machine's core count is printed with the figure.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np


def build_scene(bpy, vertices, triangles, particles, top, extent, x0, y0, wind_speed, frames):
    """Terrain (collision), emitter plane (``particles`` at frame 1), wind + turbulence."""
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    scene.render.fps = 24
    scene.use_gravity = True
    scene.gravity = (0.0, 0.0, -9.81)

    mesh = bpy.data.meshes.new("terrain")
    mesh.vertices.add(len(vertices))
    mesh.vertices.foreach_set("co", vertices.astype(np.float32).ravel())
    mesh.loops.add(3 * len(triangles))
    mesh.loops.foreach_set("vertex_index", triangles.astype(np.int32).ravel())
    mesh.polygons.add(len(triangles))
    mesh.polygons.foreach_set("loop_start", np.arange(0, 3 * len(triangles), 3, dtype=np.int32))
    mesh.update()
    mesh.validate()
    terrain = bpy.data.objects.new("terrain", mesh)
    scene.collection.objects.link(terrain)
    terrain.modifiers.new("Collision", "COLLISION")
    terrain.collision.damping_factor = 1.0   # snow sticks: no bounce
    terrain.collision.friction_factor = 1.0

    # The emitter is a box filling the air column above the terrain's highest point, so
    # the particles start spread through the column, as the engine's flakes do.
    half = 0.5 * extent
    bottom = float(vertices[:, 2].max())
    box = bpy.data.meshes.new("emitter")
    corners = [(x, y, z) for z in (bottom, top) for y in (-half, half) for x in (-half, half)]
    box.from_pydata(corners, [], [(0, 2, 3, 1), (4, 5, 7, 6), (0, 1, 5, 4), (2, 6, 7, 3),
                                  (0, 4, 6, 2), (1, 3, 7, 5)])
    box.update()
    emitter = bpy.data.objects.new("emitter", box)
    emitter.location = (x0 + half, y0 + half, 0.0)
    emitter.display_type = "WIRE"
    scene.collection.objects.link(emitter)
    modifier = emitter.modifiers.new("snow", "PARTICLE_SYSTEM")
    psys = modifier.particle_system
    ps = psys.settings
    ps.count = particles
    ps.frame_start = 1.0
    ps.frame_end = 1.0           # every particle is born on the first frame
    ps.lifetime = 100000.0
    ps.emit_from = "VOLUME"
    ps.distribution = "RAND"
    ps.physics_type = "NEWTON"
    ps.normal_factor = 0.0
    ps.object_align_factor = (0.0, 0.0, -1.5)   # start falling at a flake's terminal speed
    ps.factor_random = 1.0       # plus a random velocity, as the flakes' +-1 m/s
    ps.mass = 1.0               # Blender divides effector forces by the mass
    ps.particle_size = 0.01
    ps.drag_factor = 1.0         # air drag (Physics > Forces > Drag)
    ps.use_rotations = False
    ps.render_type = "NONE"
    ps.display_method = "DOT"
    ps.effector_weights.gravity = 1.0
    psys.point_cache.frame_start = 1
    psys.point_cache.frame_end = frames

    def field_empty(name, kind):
        bpy.ops.object.effector_add(type=kind)   # an empty carrying the force field
        empty = bpy.context.active_object
        empty.name = name
        return empty

    wind = field_empty("wind", "WIND")
    wind.location = (x0, y0 + half, top - 0.5 * top)
    wind.rotation_euler = (0.0, math.pi / 2, 0.0)   # a wind field blows along its local +Z
    wind.field.strength = wind_speed
    wind.field.flow = 1.0        # drag toward the wind speed, like the flakes
    turbulence = field_empty("turbulence", "TURBULENCE")
    turbulence.location = (x0 + half, y0 + half, top)
    turbulence.field.strength = 0.5 * wind_speed
    turbulence.field.size = 0.1 * extent
    turbulence.field.flow = 1.0
    bpy.context.view_layer.update()
    return scene, emitter


def run(preset_name, particles, frames, wind_speed=5.0):
    import bpy

    from snowfall.snow_addon.presets import get_preset

    preset = get_preset(preset_name)
    particles = particles or preset.flakes
    vertices, triangles = preset.terrain()
    settings = preset.settings()
    heightmap_grid, grid = preset.grids(settings)
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene, emitter = build_scene(bpy, vertices, triangles, particles, grid.top - grid.cell_size,
                                 preset.extent, heightmap_grid.x0, heightmap_grid.y0,
                                 wind_speed, frames)
    frame_seconds = []
    for frame in range(1, frames + 1):
        start = time.perf_counter()
        scene.frame_set(frame)
        frame_seconds.append(time.perf_counter() - start)
        print(f"frame {frame}: {frame_seconds[-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    psys = emitter.evaluated_get(depsgraph).particle_systems[0]
    locations = np.empty(3 * len(psys.particles), dtype=np.float32)
    psys.particles.foreach_get("location", locations)
    locations = locations.reshape(-1, 3)
    ground = float(vertices[:, 2].min())
    stepped = frame_seconds[1:] if frames > 1 else frame_seconds
    median = statistics.median(stepped)
    return {
        "preset": preset.name,
        "particles": int(particles),
        "simulated_particles": int(len(locations)),
        "frames": frames,
        "blender": bpy.app.version_string,
        "cpu_count": os.cpu_count(),
        "first_frame_s": frame_seconds[0],
        "median_frame_s": median,
        "us_per_particle_frame": median / particles * 1e6,
        "z_min": float(locations[:, 2].min()) if len(locations) else float("nan"),
        "z_mean": float(locations[:, 2].mean()) if len(locations) else float("nan"),
        "emitted_below_z": grid.top - grid.cell_size,
        "terrain_z_min": ground,
        "below_terrain_min": int((locations[:, 2] < ground - 1e-3).sum()),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-blender", help="snowfall preset (terrain, extent)")
    parser.add_argument("--particles", type=int, default=0, help="particle count (default: the preset's flakes)")
    parser.add_argument("--frames", type=int, default=12, help="frames to simulate (>= 2)")
    parser.add_argument("--wind-speed", type=float, default=5.0, help="wind field strength (m/s)")
    parser.add_argument("--json", default="", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    if args.frames < 2 or args.particles < 0:
        parser.error("--frames must be >= 2 and --particles >= 0")
    try:
        import bpy  # noqa: F401
    except ImportError as exc:
        print(f"blender-particles: bpy is not installed ({exc})", file=sys.stderr)
        return 3
    result = run(args.preset, args.particles, args.frames, args.wind_speed)
    print(f"blender {result['blender']} particles: {result['particles']:,} on {result['preset']}, "
          f"{result['frames']} frames, median frame {result['median_frame_s'] * 1e3:.1f} ms "
          f"(first frame {result['first_frame_s'] * 1e3:.1f} ms) -> "
          f"{result['us_per_particle_frame']:.3f} us per particle-frame "
          f"({result['cpu_count']} CPUs); z {result['z_min']:.1f}..{result['z_mean']:.1f} (min..mean), "
          f"emitted below {result['emitted_below_z']:.1f}")
    return print_result(result, args.json)


def print_result(result: dict, json_path: str | None) -> int:
    """The ``RESULT {json}`` line the command line parses, and the file ``--json`` asks for."""
    print("RESULT " + json.dumps(result))
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
