"""What the bake's writer thread does with a frame, without Blender (no bpy here): encode the
flakes in Blender's point-cache layout, the snow depth as OpenEXR, the engine state as a
checkpoint, write each atomically into the bake folder and commit progress.json.

``FrameStore`` is the writer-thread half of ``operators/bake.BakeJob``; the Blender-less
bake of ``benchmarks/bake_output.py`` (``snowfall benchmark --bake``) drives the same class,
so the benchmark measures the add-on's own output path. Flake frame f is written once frame
f+1 is known: flakes that respawn at f+1 (or leave the camera's view then) get birth time
f+1 in frame f's records, so Blender hides them through (f, f+1) and motion blur draws no
streak (docs/particles.md). Bakes for Blender 4.2 to 4.5 write the flakes as a Geometry
Nodes bake instead (``flake_format`` GN_BAKE, gn_bake.py): every frame holds its
velocities, which Cycles blurs along, so the respawn marks are not needed there.
"""
from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np

from .. import bake_cache
from ..flakes import COUNT_BITS
from . import gn_bake, ptcache

CACHE_NAME = "snowfall_flakes"
CACHE_INDEX = 0
#: Birth time of every flake, frames: before any bake frame (frames start at 1).
BIRTH_FRAME = 0.0
#: Death time and lifetime, frames: never within a bake.
NEVER_FRAME = 1.0e7
#: Bound on the position error the velocity quantisation causes between frames (Blender
#: units; metres at unit scale 1). Positions at whole frames are stored exactly.
SUBFRAME_ERROR = 0.5e-3
#: max over s in [0, 1] of |h10(s)| + |h11(s)| of Blender's Hermite interpolation
#: (2 x 4/27), times sqrt(3) for a vector whose components each round by half a step.
_HERMITE_GAIN = 2.0 * 4.0 / 27.0 * 3.0 ** 0.5
#: FrameStore flake formats (blender_compat.FLAKE_CACHE, bake.json ``flakes.format``).
PTCACHE = "ptcache"
GN_BAKE = "gn_bake"


def velocity_step_for(fps: float) -> float:
    """Quantisation step of the stored velocities (units/s, a power of two) at ``fps``: the
    largest one whose effect on Blender's interpolation between two frames stays under
    SUBFRAME_ERROR (sub-frame error <= _HERMITE_GAIN * step / 2 / fps)."""
    return float(2.0 ** math.floor(math.log2(2.0 * SUBFRAME_ERROR * fps / _HERMITE_GAIN)))


def flake_file_name(frame: int) -> str:
    return ptcache.cache_filename(CACHE_NAME, frame, CACHE_INDEX)


def encode_flake_frame(positions, velocities, births, compression: int,
                       step: float | None) -> list:
    """Byte chunks of one flake frame file: positions exact, velocities rounded to a
    multiple of ``step`` (None: exact), ``births`` (N,) the birth frame of every record
    (BIRTH_FRAME, or the next frame for a flake that respawns then)."""
    count = len(positions)
    velocities = np.asarray(velocities, np.float32)
    if step:
        inverse = np.float32(1.0 / step)
        velocities = np.rint(velocities * inverse)
        velocities *= np.float32(step)
    times = np.empty((count, 3), np.float32)
    times[:, 0] = births
    times[:, 1:] = NEVER_FRAME
    if compression == ptcache.COMPRESS_NONE:
        records = ptcache.flake_records(positions, velocities, times[:, 0], times[:, 1],
                                               times[:, 2])
        return [ptcache.encode_frame(records, ptcache.FLAKE_FRAME_TYPES)]
    return ptcache.encode_compressed(
        {ptcache.BPHYS_DATA_LOCATION: positions,
         ptcache.BPHYS_DATA_VELOCITY: velocities,
         ptcache.BPHYS_DATA_TIMES: times}, count, compression)


#: FlakeSystem arrays a frame's host copy holds, one row each (respawn_count as uint32).
_PLANES = ("pos_x", "pos_y", "pos_z", "vel_x", "vel_y", "vel_z", "respawn_count")


class HostFlakes:
    """One frame's flakes copied to the host by the bake thread, for the writer thread: the
    engine's planar arrays in a buffer of a pool that ``take`` returns it to (``planes``), or
    finished arrays in flake-id order (``arrays``: where the engine does not hold its flakes
    on the host, a GPU, which orders them before the copy)."""

    __slots__ = ("planes", "arrays", "pool")

    def __init__(self, planes=None, arrays=None, pool=None):
        self.planes, self.arrays, self.pool = planes, arrays, pool

    def take(self):
        """(positions (N,3) float32, velocities (N,3) float32, respawn counts (N,) uint32 or
        None): new arrays; the buffer goes back to its pool (writer thread)."""
        if self.planes is None:
            return self.arrays
        planes = self.planes
        positions = np.stack((planes[0], planes[1], planes[2]), axis=-1)
        velocities = np.stack((planes[3], planes[4], planes[5]), axis=-1)
        # a lifted grain keeps its count: the engine's flag bit is not a respawn
        counts = planes[6].view(np.uint32) & COUNT_BITS if len(planes) > 6 else None
        self.planes = None
        self.pool.append(planes)      # list.append: atomic; the bake thread pops
        return positions, velocities, counts


class FlakeCopier:
    """The bake thread's copy of a frame's flakes (``copy``): one copy of each engine array
    into a reused host buffer, in flake-id order (the CPU build stores its flakes by wind
    cell); stacking into (N,3), scaling and the respawn comparison are the writer's
    (``FrameStore.store_host_frame``). ``respawns``: copy the respawn counts (the point
    cache marks respawned flakes; the Geometry Nodes bake does not need them)."""

    def __init__(self, flakes, respawns: bool = True):
        self.flakes = flakes
        self.rows = len(_PLANES) if respawns else len(_PLANES) - 1
        #: Buffers the writer has finished with (it appends, this thread pops).
        self.pool: list = []

    def copy(self) -> HostFlakes:
        flakes = self.flakes
        if flakes.backend.is_gpu:
            counts = flakes.respawn_counts() if self.rows > 6 else None
            return HostFlakes(arrays=(flakes.positions(), flakes.velocities(), counts))
        try:
            planes = self.pool.pop()
        except IndexError:
            planes = np.empty((self.rows, flakes.count), np.float32)
        for row, name in zip(planes, _PLANES):
            value = getattr(flakes, name)
            flakes.copy_in_id_order(value, row.view(value.dtype))
        return HostFlakes(planes=planes, pool=self.pool)


#: Multiplier of the flakes' fixed hash (Knuth's multiplicative hash, 2^32 / golden ratio).
_HASH = np.uint32(2654435761)


def flake_hash(count: int) -> np.ndarray:
    """(count,) float32 in [0, 1): a fixed, well-spread number per flake index (the same
    every frame and every bake), which decides whether a far flake is written."""
    index = np.arange(count, dtype=np.uint32)
    return ((index * _HASH) >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))


def in_camera_view(positions, view: dict) -> np.ndarray:
    """(N,) bool: which positions (N,3), scene units, lie in ``view`` (camera_view). With a
    ``falloff`` distance (perspective cameras), a flake deeper than it is kept only when its
    fixed hash is below (falloff / depth)^2: as many flakes per metre of depth far away as
    at the falloff distance, so the far ones thin out instead of covering the image like
    noise; the same flakes are kept every frame (a flake near that depth may come and go
    as it moves)."""
    matrix = np.asarray(view["matrix"], dtype=np.float64)
    local = positions @ matrix[:3, :3].T.astype(np.float32) + matrix[:3, 3].astype(np.float32)
    x, y, z = local[:, 0], local[:, 1], local[:, 2]
    xmin, xmax, ymin, ymax = view["bounds"]
    if view["perspective"]:
        depth = np.maximum(-z, np.float32(1e-6))
        x, y = x / depth, y / depth
        ahead = z < 0.0
    else:
        ahead = np.ones(len(positions), bool)
    inside = ahead & (x >= xmin) & (x <= xmax) & (y >= ymin) & (y <= ymax)
    falloff = view.get("falloff")
    if falloff and view["perspective"]:
        keep = np.square(np.float32(falloff) / depth)
        inside &= flake_hash(len(positions)) < keep
    return inside


class FrameStore:
    """Writes frames into a bake folder; every method runs on the writer thread, in order.

    ``folder``: the BakeFolder; ``flake_dir``: where the flake files go; ``ground``: the
    heightmap's ground heights (float32, written beside each frame's depth); ``record``:
    the CommitRecord this store keeps up to date (its ``complete`` is the last frame whose
    files are all on disk); ``view``: a camera view (write only the flakes in it) or None;
    ``flake_format``: PTCACHE (``compression`` and ``velocity_step`` apply) or GN_BAKE;
    ``unit_scale`` and ``velocity_scale``: what ``store_host_frame`` divides positions and
    multiplies velocities by; ``respawn_counts``: the flakes' respawn counts at the frame
    before the first that ``store_host_frame`` gets (None: no respawn marks)."""

    def __init__(self, folder, flake_dir: str, compression: int, velocity_step,
                 ground, record, view=None, flake_format: str = PTCACHE,
                 unit_scale: float = 1.0, velocity_scale: float = 1.0, respawn_counts=None):
        self.folder, self.flake_dir, self.flake_format = folder, flake_dir, flake_format
        self.compression, self.velocity_step = compression, velocity_step
        self.ground, self.record, self.view = ground, record, view
        self.unit_scale = np.float32(unit_scale)
        self.velocity_scale = np.float32(velocity_scale)
        self.respawn_counts = respawn_counts
        #: The newest frame's flakes (frame, positions, velocities, visible), written once
        #: the next frame says which of them respawn.
        self.pending = None

    def visible(self, positions):
        """Which flakes the written frame shows (None: all)."""
        return None if self.view is None else in_camera_view(positions, self.view)

    def write_flakes(self, frame: int, positions, velocities, births, visible=None) -> None:
        if self.flake_format == GN_BAKE:
            seeds = None
            if visible is not None:
                # Only the flakes in view; each keeps its size through its number's low
                # byte (a point's index is no longer its flake).
                seeds = np.flatnonzero(visible).astype(np.uint8).view(np.int8)
                positions, velocities = positions[visible], velocities[visible]
            self.record.flakes[frame] = gn_bake.write_frame(
                self.flake_dir, frame, positions, velocities, seeds)
            return
        if visible is not None and not visible.all():
            # Culled flakes: unborn in this frame's record (Blender draws nothing), and
            # parked at the origin with no velocity (constant bytes: they compress away).
            hidden = ~visible
            positions, velocities = positions.copy(), velocities.copy()
            positions[hidden] = 0.0
            velocities[hidden] = 0.0
            births[hidden] = NEVER_FRAME
        name = flake_file_name(frame)
        chunks = encode_flake_frame(positions, velocities, births, self.compression,
                                    self.velocity_step)
        size, crc = bake_cache.write_atomic(os.path.join(self.flake_dir, name), chunks)
        self.record.flakes[frame] = [size, crc, name]

    def store_host_frame(self, frame, flakes: HostFlakes, depth, state, fingerprint) -> None:
        """``store_frame`` of a frame the bake thread copied with a FlakeCopier: scaled, and
        the respawns found against the previous frame's counts, here on the writer thread."""
        positions, velocities, counts = flakes.take()
        if self.unit_scale != 1.0:
            positions /= self.unit_scale
        if self.velocity_scale != 1.0:
            velocities *= self.velocity_scale
        respawned = None
        if counts is not None and self.respawn_counts is not None:
            respawned = counts != self.respawn_counts
        self.respawn_counts = counts
        self.store_frame(frame, positions, velocities, respawned, depth, state, fingerprint)

    def store_frame(self, frame, positions, velocities, respawned, depth, state,
                    fingerprint) -> None:
        """Frame ``frame``: the previous frame's flakes (now that ``respawned`` is known),
        this frame's snow depth, its checkpoint when ``state`` is given, then the commit."""
        record = self.record
        visible = self.visible(positions)
        if self.pending is not None:
            previous, old_positions, old_velocities, old_visible = self.pending
            births = np.full(len(old_positions), BIRTH_FRAME, np.float32)
            if previous == frame - 1:
                # Hidden from f-1 until f (no streak under motion blur): flakes that respawn
                # at f, and flakes that leave the camera's view at f.
                if respawned is not None:
                    births[respawned] = float(frame)
                if visible is not None:
                    births[~visible] = float(frame)
            self.write_flakes(previous, old_positions, old_velocities, births, old_visible)
        size, crc = bake_cache.write_atomic(self.folder.depth_path(frame),
                                            bake_cache.encode_depth(depth, self.ground))
        record.snow[frame] = [size, crc]
        record.complete = frame
        self.pending = (frame, positions, velocities, visible)
        self.commit(frame, state, fingerprint)

    def commit(self, frame: int, state, fingerprint: str) -> None:
        """Write the checkpoint of ``frame`` (when ``state`` is given), then progress.json."""
        folder, record = self.folder, self.record
        if state is None:
            bake_cache.write_atomic(folder.progress_path, json.dumps(
                record.to_json(), indent=1, sort_keys=True).encode())
            return
        data = bake_cache.encode_state(state)
        name = bake_cache.checkpoint_name(frame)
        bake_cache.write_atomic(os.path.join(folder.path, name), data, durable=True)
        record.frame, record.fingerprint = frame, fingerprint
        record.checkpoint = {"file": name, "bytes": len(data),
                             "sha256": hashlib.sha256(data).hexdigest()}
        bake_cache.write_json_atomic(folder.progress_path, record.to_json())
        folder.remove_checkpoints(keep=name)   # older ones (a kill may have left several)

    def flush_pending(self) -> None:
        """Write the newest frame's flakes (nothing follows it to mark respawns)."""
        if self.pending is None:
            return
        frame, positions, velocities, visible = self.pending
        self.write_flakes(frame, positions, velocities,
                          np.full(len(positions), BIRTH_FRAME, np.float32), visible)
        bake_cache.write_json_atomic(self.folder.progress_path, self.record.to_json())
        self.pending = None
