"""The cache folder is the bake: a headless bake killed (SIGKILL) at random moments resumes
from the folder alone, the .blend never saved, and ends bit for bit where an uninterrupted
bake ends; corrupt or foreign files are reported by name and never unpickled; a full or
read-only disk stops the bake with the space it needs and keeps the finished frames."""
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import bpy
import numpy as np
import pytest

from snowfall.operators import bake as bake_module
from snowfall.operators import gn_flakes, particle_output, snow_surface
from snowfall.operators.bake import BakeJob, scene_cache_folder
from snowfall.snow_addon import bake_cache
from snowfall.snow_addon.formats import gn_bake

FRAMES = 32
KILLS = 10
#: Flakes in the killed bake: enough that a frame takes a while to simulate and write.
FLAKES = 20_000


def _headless(blend, *extra):
    return [sys.executable, "-u", "-m", "snowfall.operators.headless", blend, *extra]


def _folder_files(folder, temporaries=False):
    """Relative path -> bytes of every file a bake leaves (temporary files excluded unless
    ``temporaries``)."""
    files = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            if name.startswith(".") and name.endswith(".tmp") and not temporaries:
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, folder)] = handle.read()
    if "bake.json" in files:       # its owner names the .blend that baked (another file here)
        meta = json.loads(files["bake.json"])
        meta.pop("owner", None)
        files["bake.json"] = json.dumps(meta, sort_keys=True).encode()
    return files


def _save_scene(tools, scene, cache, path):
    tools.small_settings(scene, cache, frames=FRAMES)
    scene.snowfall.flake_count = FLAKES
    bpy.ops.wm.save_as_mainfile(filepath=str(path), copy=True)


def test_kills_at_random_moments_resume_bit_for_bit(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path / "ref_cache", frames=FRAMES)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    reference_blend, crash_blend = tmp_path / "reference.blend", tmp_path / "crash.blend"
    _save_scene(tools, scene, tmp_path / "ref_cache", reference_blend)
    _save_scene(tools, scene, tmp_path / "crash_cache", crash_blend)

    started = time.perf_counter()
    done = subprocess.run(_headless(str(reference_blend), "--output",
                                    str(tmp_path / "reference_baked.blend")),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    whole_run = time.perf_counter() - started
    bake_seconds = float(done.stdout.split("baked up to frame")[1].split(" in ")[1].split()[0])
    reference = _folder_files(tmp_path / "ref_cache" / "Scene")

    folder = bake_cache.BakeFolder(str(tmp_path / "crash_cache" / "Scene"))
    frame_seconds = bake_seconds / FRAMES
    env = dict(os.environ, SNOWFALL_CHECKPOINT_SECONDS="0.05")  # checkpoints every few frames
    rng = random.Random(12)
    kills, mid_bake, attempts, resumes = 0, 0, 0, 0
    while kills < KILLS:
        attempts += 1
        assert attempts < 4 * KILLS, f"only {kills} kills landed in {attempts} runs"
        record = folder.read_progress() if folder.exists() else None
        resume = record is not None and not (record.frame == FRAMES and FRAMES in record.flakes)
        resumes += resume
        process = subprocess.Popen(_headless(str(crash_blend), "--output",
                                             str(tmp_path / "crash_baked.blend"),
                                             *(["--resume"] if resume else [])),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env)
        launched = time.perf_counter()
        frames_seen = 0
        if attempts % 3:      # after a random number of frames, at a random moment in a frame
            wanted = rng.randint(0, FRAMES // 3)
            for line in process.stdout:
                frames_seen += line.lstrip().lower().startswith("snowfall: frame")
                if frames_seen > wanted:
                    break
            time.sleep(rng.uniform(0.0, frame_seconds))
        else:                 # any moment of the process, start-up included
            time.sleep(max(0.0, rng.uniform(0.2, 1.0) * whole_run
                           - (time.perf_counter() - launched)))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
            mid_bake += frames_seen > 0
        process.wait(timeout=60)
        process.stdout.close()
    assert mid_bake >= 5 and resumes >= 5, (mid_bake, resumes, kills)

    # Finish: resume (or bake, when no frame was ever committed) to the end.
    record = folder.read_progress() if folder.exists() else None
    extra = ["--resume"] if record is not None else []
    done = subprocess.run(_headless(str(crash_blend), "--output",
                                    str(tmp_path / "crash_baked.blend"), *extra),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or "already reaches" in done.stderr, done.stderr[-2000:]
    resumed = _folder_files(folder.path)
    assert sorted(resumed) == sorted(reference)
    assert sorted(resumed) == sorted(_folder_files(folder.path, temporaries=True))
    for name, data in reference.items():
        assert resumed[name] == data, name

    if done.returncode == 0:   # the resumed, saved .blend shows the whole bake
        bpy.ops.wm.open_mainfile(filepath=str(tmp_path / "crash_baked.blend"))
        scene = bpy.context.scene
        assert scene.snowfall.has_bake and scene.snowfall.baked_frame_end == FRAMES
        assert snow_surface.baked_frames() == list(range(1, FRAMES + 1))
        emitter = scene.snowfall.flake_emitter
        got = particle_output.read_flake_frame(emitter, FRAMES)
        if gn_flakes.is_gn_flakes(emitter):      # Blender 4.2-4.5: a Geometry Nodes bake
            stored = gn_bake.read_frame(folder.flake_dir, FRAMES).positions
        else:
            stored = folder.flake_dir + os.sep + bake_module.particle_output_frame_name(FRAMES)
            from snowfall.snow_addon.formats import ptcache
            stored = ptcache.read_frame(stored).records["location"]
        np.testing.assert_array_equal(got, stored)


def _stopped_bake(tools, scene, tmp_path, frames=6, stop_after=3):
    tools.small_settings(scene, tmp_path / "cache", frames=frames)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    job = BakeJob(bpy.context)
    for _ in range(stop_after - 1):
        job.advance_frame()
    job.cancel()
    return bake_cache.BakeFolder(scene_cache_folder(str(tmp_path / "cache"), scene))


class _Payload:
    """Unpickling this creates a marker folder: the test sees whether anything unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_foreign_checkpoint_is_named_and_never_unpickled(addon, tools, tmp_path):
    scene = addon
    folder = _stopped_bake(tools, scene, tmp_path)
    record = folder.read_progress()
    path = os.path.join(folder.path, record.checkpoint["file"])
    marker = str(tmp_path / "unpickled")
    with open(path, "wb") as handle:      # a pickled object array, with a matching record
        np.savez(handle, step_index=np.array([_Payload(marker)], dtype=object))
    with open(path, "rb") as handle:
        data = handle.read()
    progress = json.loads(open(folder.progress_path).read())
    import hashlib
    progress["checkpoint"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    bake_cache.write_json_atomic(folder.progress_path, progress)
    with pytest.raises(RuntimeError, match="is not a Snowfall checkpoint") as error:
        bpy.ops.snowfall.resume()
    assert path in str(error.value) and "Traceback" not in str(error.value)
    assert not os.path.exists(marker)
    assert scene.snowfall.baked_frame_end == 3


@pytest.mark.parametrize("damage, message", [
    ("checkpoint", "does not match its SHA-256"),
    ("progress", "is not a readable progress record"),
    ("bake", "is not a readable bake description"),
    ("flakes", "the bake wrote"),
    ("snow", "the bake wrote"),
])
def test_corrupt_cache_files_are_named(addon, tools, tmp_path, damage, message):
    scene = addon
    folder = _stopped_bake(tools, scene, tmp_path)
    record = folder.read_progress()
    path = {"checkpoint": os.path.join(folder.path, record.checkpoint["file"]),
            "progress": folder.progress_path, "bake": folder.meta_path,
            "flakes": os.path.join(folder.flake_dir, record.flakes[2][2]),
            "snow": folder.depth_path(2)}[damage]
    with open(path, "r+b") as handle:
        handle.seek(os.path.getsize(path) // 2)
        handle.write(b"\x00garbage\xff" * 3)
        if damage in ("flakes", "snow"):
            handle.truncate(os.path.getsize(path) - 7)
    with pytest.raises(RuntimeError, match=message) as error:
        bpy.ops.snowfall.resume()
    assert path in str(error.value)
    assert scene.snowfall.baked_frame_end == 3


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_full_or_read_only_disk_stops_with_the_space_needed(addon, tools, tmp_path,
                                                             monkeypatch, code):
    scene = addon
    tools.small_settings(scene, tmp_path / "cache", frames=8)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    assert bpy.ops.snowfall.bake() == {"FINISHED"}
    full = {f: snow_surface.read_depth_frame(f) for f in range(1, 9)}
    folder = bake_cache.BakeFolder(scene_cache_folder(str(tmp_path / "cache"), scene))
    reference = _folder_files(folder.path)
    bpy.ops.snowfall.free()

    real_write = bake_cache.write_atomic
    calls = {"n": 0}

    def failing_write(path, chunks, durable=False):
        calls["n"] += 1
        if calls["n"] > 14:             # a few frames in, the disk fills up
            raise OSError(code, os.strerror(code), bake_cache.final_name(path) + "")
        return real_write(path, chunks, durable)

    monkeypatch.setattr(bake_cache, "write_atomic", failing_write)
    with pytest.raises(RuntimeError) as error:
        bpy.ops.snowfall.bake()
    text = str(error.value)
    assert os.strerror(code) in text and "needs about" in text and "are kept" in text
    assert "Traceback" not in text
    kept = scene.snowfall.baked_frame_end
    assert 1 <= kept < 8 and snow_surface.baked_frames() == list(range(1, kept + 1))
    monkeypatch.setattr(bake_cache, "write_atomic", real_write)

    assert bpy.ops.snowfall.resume() == {"FINISHED"}
    assert scene.snowfall.baked_frame_end == 8
    for frame in range(1, 9):
        np.testing.assert_array_equal(snow_surface.read_depth_frame(frame), full[frame])
    assert _folder_files(folder.path) == reference
