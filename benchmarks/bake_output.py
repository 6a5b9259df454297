"""What a Blender bake spends on output, against the disk's own write speed in the same run.

Two bakes, one report:

* ``--scene box_test|mountain_valley`` (needs bpy): builds a sample scene
  (sample_scenes/build.py) and bakes it with the add-on's BakeJob (the Bake button's code,
  CPU backend unless told otherwise) into a temporary cache folder.
* ``--preset NAME`` (no Blender; what ``snowfall benchmark --bake`` runs): the engine on a
  command-line preset, each frame handed to the add-on's own writer-thread code
  (snow_addon/formats/frame_store.FrameStore on a bake_cache.BakeWriter: the same flake files, depth
  files, checkpoints and commits); only Blender's side (the .blend's snow, the particle
  system) is missing.

It reports:

* simulation time (inside ``Simulation.step``) and output time: the bake thread's time
  spent on output (host copies, the .blend's snow attributes, handing the frame to the
  writer thread, waiting for it when it falls behind, the final flush);
* the writer thread's busy time (encoding and writing flakes, snow depth, checkpoints);
* bytes per flake-frame of the flake cache, and per frame of snow depth and checkpoint;
* the disk's write speed measured in the same run in the same folder (256 MiB of random
  bytes in 8 MiB writes, then fsync), and what writing the flake bytes at that speed costs
  per flake-frame (the disk limit), for the compact files and for the uncompressed 40 B.

    python benchmarks/bake_output.py --scene box_test --flakes 100000 --frames 24
    python benchmarks/bake_output.py --preset cpu-small --flakes 100000 --frames 24
    python benchmarks/bake_output.py --scene mountain_valley --flakes 1000000 --frames 12 --json out.json

Prints one ``RESULT {json}`` line at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blender_particles import print_result  # noqa: E402  (a script beside this one)

UNCOMPRESSED_BYTES_PER_FLAKE = 40      # index + location + velocity + times, float32


def disk_write_speed(folder: str, total: int = 256 << 20, chunk: int = 8 << 20) -> float:
    """Bytes per second of a sequential write of random bytes, fsync included."""
    data = np.random.default_rng(0).integers(0, 256, chunk, dtype=np.uint8).tobytes()
    path = os.path.join(folder, "disk_speed.tmp")
    started = time.perf_counter()
    with open(path, "wb") as handle:
        for _ in range(total // chunk):
            handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    seconds = time.perf_counter() - started
    os.unlink(path)
    return total / seconds


def bake(scene_name: str, flakes: int, frames: int, backend: str, folder: str,
         snow: str = "surface") -> dict:
    import bpy

    import snowfall
    from snowfall.operators.bake import BakeJob
    from snowfall.sample_scenes.build import build

    if not hasattr(bpy.types.Scene, "snowfall"):
        snowfall.register()
    build(scene_name, frames=frames, flakes=flakes)
    scene = bpy.context.scene
    scene.snowfall.backend = backend
    scene.snowfall.cache_folder = folder
    job = BakeJob(bpy.context, vertex_frames=snow == "vertex")
    sim = job.sim
    simulate = {"seconds": 0.0}
    step = sim.step

    def timed_step(count=1):
        started = time.perf_counter()
        try:
            return step(count)
        finally:
            simulate["seconds"] += time.perf_counter() - started

    sim.step = timed_step
    started = time.perf_counter()
    job.run()
    wall = time.perf_counter() - started
    return _result(scene_name, sim, snow, wall, simulate["seconds"], job.output_seconds,
                   job.flush_seconds, job.writer.busy_seconds, job.record, job.compression,
                   job.velocity_step, "Blender (the add-on's BakeJob)")


def engine_bake(preset_name: str, flakes: int | None, frames: int, backend: str, folder: str,
                substeps: int = 1, flake_format: str = "ptcache") -> dict:
    """A Blender-less bake of a preset through the add-on's writer-thread code: the bake
    thread's side as in BakeJob._write_frame (host copies, a checkpoint when one is due,
    one hand-off per frame), the writer's in FrameStore. Flake files are written in the
    compressed layout Blender 5.x reads (``flake_format`` "gn_bake": the Geometry Nodes
    bake Blender 4.2-4.5 read)."""
    from snowfall.snow_addon.formats import frame_store, ptcache
    from snowfall.snow_addon import bake_cache
    from snowfall.snow_addon.presets import get_preset
    from snowfall.snow_addon.simulation import Simulation

    preset = get_preset(preset_name)
    settings = preset.settings(**({"flake_count": flakes} if flakes else {}))
    settings.validate()
    vertices, triangles = preset.terrain()
    sim = Simulation(settings, vertices, triangles, backend=backend)
    fps = 1.0 / (settings.time_step * substeps)
    compression = ptcache.compression_for((5, 0, 0))
    step = frame_store.velocity_step_for(fps)
    if flake_format == frame_store.GN_BAKE:
        compression, step = None, None
    bake = bake_cache.BakeFolder(os.path.join(folder, preset_name))
    bake.start({"scene": preset_name, "frame_start": 1, "frame_end": frames,
                "substeps": substeps, "fps": fps, "blender": None})
    record = bake_cache.CommitRecord()
    respawns = flake_format != frame_store.GN_BAKE
    store = frame_store.FrameStore(bake, bake.flake_dir, compression, step,
                                   sim.heightmap.height.astype(np.float32), record,
                                   flake_format=flake_format,
                                   respawn_counts=sim.flake_respawn_counts() if respawns
                                   else None)
    copier = frame_store.FlakeCopier(sim.flakes, respawns=respawns)
    writer = bake_cache.BakeWriter()
    seconds = {"simulation": 0.0, "output": 0.0, "flush": 0.0}
    checkpoint = {"time": time.perf_counter(), "frame": None}

    def snapshot(frame):
        checkpoint["time"], checkpoint["frame"] = time.perf_counter(), frame
        return {key: np.array(value, copy=True) for key, value in sim.state_dict().items()}

    def hand_off(frame):
        started = time.perf_counter()
        depth = sim.snow_depth()
        flakes = copier.copy()
        state = snapshot(frame) if frame == 1 or time.perf_counter() - checkpoint["time"] \
            >= 1.0 else None
        writer.submit(store.store_host_frame, frame, flakes, depth, state, "")
        seconds["output"] += time.perf_counter() - started

    started_all = time.perf_counter()
    try:
        hand_off(1)
        for frame in range(2, frames + 1):
            started = time.perf_counter()
            sim.step(substeps)
            seconds["simulation"] += time.perf_counter() - started
            hand_off(frame)
        started = time.perf_counter()
        if checkpoint["frame"] != frames:
            writer.submit(store.commit, frames, snapshot(frames), "")
        writer.submit(store.flush_pending)
        writer.flush()
        seconds["flush"] = time.perf_counter() - started
        seconds["output"] += seconds["flush"]
    finally:
        writer.close()
    wall = time.perf_counter() - started_all
    return _result(preset_name, sim, "surface (depth files)", wall, seconds["simulation"],
                   seconds["output"], seconds["flush"], writer.busy_seconds, record,
                   compression, step, "engine (no Blender)")


def _result(scene, sim, snow, wall, simulation, output, flush, writer_busy, record,
            compression, step, route) -> dict:
    frames_written = len(record.flakes)
    # [bytes, crc, name] per frame; a Geometry Nodes bake adds its JSON's bytes.
    flake_bytes = sum(v[0] + (v[3] if len(v) > 3 else 0) for v in record.flakes.values())
    snow_bytes = sum(v[0] for v in record.snow.values())
    count = sim.settings.flake_count
    flake_frames = frames_written * count
    return {"scene": scene, "route": route, "flakes": count, "frames": frames_written,
            "snow": snow, "backend": sim.backend.name, "wall_s": wall,
            "simulation_s": simulation, "output_s": output, "final_flush_s": flush,
            "writer_busy_s": writer_busy,
            "flake_bytes_per_flake_frame": flake_bytes / flake_frames,
            "snow_bytes_per_frame": snow_bytes / max(1, len(record.snow)),
            "checkpoint_bytes": (record.checkpoint or {}).get("bytes", 0),
            "output_ns_per_flake_frame": output * 1e9 / flake_frames,
            "simulation_ns_per_flake_frame": simulation * 1e9 / flake_frames,
            "writer_ns_per_flake_frame": writer_busy * 1e9 / flake_frames,
            "compression": compression, "velocity_step": step,
            "flake_format": "gn_bake" if compression is None else "ptcache"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", default="box_test", choices=("box_test", "mountain_valley"),
                        help="sample scene baked in Blender (needs bpy)")
    parser.add_argument("--preset", help="bake this command-line preset without Blender "
                        "instead (snowfall presets lists them)")
    parser.add_argument("--substeps", type=int, default=1, help="steps per frame (--preset)")
    parser.add_argument("--flake-format", default="ptcache", choices=("ptcache", "gn_bake"),
                        help="flake files of --preset: the Zstd point cache of Blender 5.x, or "
                        "the Geometry Nodes bake of 4.2-4.5 (--scene: the Blender running it "
                        "decides)")
    parser.add_argument("--flakes", type=int, default=None,
                        help="flake count (default: 100000, or the preset's)")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--backend", default="cpu", choices=("auto", "cpu", "gpu", "numpy"))
    parser.add_argument("--snow", default="surface", choices=("surface", "vertex"),
                        help="snow shown by the OpenEXR surface, or per-frame vertex attributes")
    parser.add_argument("--folder", help="cache folder (default: a temporary one)")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--disk-mib", type=int, default=256,
                        help="MiB written to measure the disk's speed (default 256)")
    args = parser.parse_args(argv)
    folder = args.folder or tempfile.mkdtemp(prefix="snowfall_bake_output_")
    try:
        if args.preset:
            result = engine_bake(args.preset, args.flakes, args.frames, args.backend, folder,
                                 args.substeps, args.flake_format)
        else:
            result = bake(args.scene, args.flakes or 100_000, args.frames, args.backend,
                          folder, args.snow)
        speed = disk_write_speed(folder, total=max(8, args.disk_mib) << 20)
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)
    result["disk_write_bytes_per_s"] = speed
    result["disk_ns_per_flake_frame"] = result["flake_bytes_per_flake_frame"] / speed * 1e9
    result["disk_ns_per_flake_frame_uncompressed"] = UNCOMPRESSED_BYTES_PER_FLAKE / speed * 1e9
    result["cpus"] = os.cpu_count()
    print(f"bake_output: {result['scene']}, {result['flakes']:,} flakes x {result['frames']} "
          f"frames on {result['backend']} ({result['cpus']} CPUs), snow as {result['snow']}; "
          f"{result['route']}")
    print(f"  wall {result['wall_s']:.2f} s: simulation {result['simulation_s']:.2f} s "
          f"({result['simulation_ns_per_flake_frame']:.0f} ns/flake-frame), output on the bake "
          f"thread {result['output_s']:.2f} s ({result['output_ns_per_flake_frame']:.1f} "
          f"ns/flake-frame, of which {result['final_flush_s']:.2f} s waiting for the writer at the "
          f"end); writer thread busy {result['writer_busy_s']:.2f} s "
          f"({result['writer_ns_per_flake_frame']:.0f} ns/flake-frame, in the background)")
    print(f"  flake cache ({result['flake_format']}) {result['flake_bytes_per_flake_frame']:.2f} "
          f"B/flake-frame (uncompressed point cache: "
          f"{UNCOMPRESSED_BYTES_PER_FLAKE}); snow {result['snow_bytes_per_frame'] / 1e3:.1f} KB/"
          f"frame; checkpoint {result['checkpoint_bytes'] / 1e6:.2f} MB (one kept)")
    print(f"  disk write speed (same folder, same run, fsync): {speed / 1e6:.0f} MB/s: the flake "
          f"bytes alone take {result['disk_ns_per_flake_frame']:.1f} ns/flake-frame at that "
          f"speed ({result['disk_ns_per_flake_frame_uncompressed']:.1f} uncompressed)")
    return print_result(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
