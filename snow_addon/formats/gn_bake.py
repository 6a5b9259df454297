"""The flake cache of Blender 4.2 to 4.5 as a Geometry Nodes bake on disk (numpy and the
standard library only, no bpy: it runs on the bake's writer thread).

Blender's Bake node (``bake_mode`` ANIMATION, on disk, a custom folder) reads a folder of
``meta/<frame>.json`` files (format version 3) and the raw little-endian arrays they name in
``blobs/``; the frame is in the file name (``"%011.5f" % frame`` with '.' replaced by '_').
Blender 4.2, 4.5 and 5.2 read this form (docs/particles.md, "Blender 4.2 to 4.5"). A frame
is one point cloud (item "0", Geometry) with, per point:

- ``position``, FLOAT_VECTOR, exact (12 B);
- ``vx``, ``vy``, ``vz``, INT8 each: the velocity divided by a per-frame, per-axis scale and
  rounded (3 B); the scales are three Float items ("1" to "3") stored inline in the JSON;
- ``seed``, INT8, only in camera-culled bakes (which write only the flakes in view, so an
  index is not a flake): the low byte of the flake's number, for its random size (1 B).

15 B per flake-frame (16 when culled) plus about 0.8 KB of JSON per frame. The nodes after
the Bake node (operators/gn_flakes.py) turn the planes into the ``velocity`` attribute
(units/s) that Cycles' motion blur uses.

A frame is written blob first, the JSON last, each under a temporary name renamed into
place (``bake_cache.write_atomic``): Blender lists only ``*.json``, so it never sees a frame
whose blob is not complete. ``read_frame`` and ``check_frame`` validate what they read and
raise ``GnBakeError`` naming the file for a corrupt or foreign one.
"""
from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re

import numpy as np

from .. import bake_cache

#: The only bake file version Blender 4.2 to 5.2 read (bake_items_serialize.cc).
BAKE_FILE_VERSION = 3
META_DIR = "meta"
BLOB_DIR = "blobs"
#: Bake node items, in the order operators/gn_flakes.py creates them (their identifiers).
GEOMETRY_ITEM = ("0", "Geometry")
SCALE_ITEMS = (("1", "Velocity Scale X"), ("2", "Velocity Scale Y"), ("3", "Velocity Scale Z"))
VELOCITY_PLANES = ("vx", "vy", "vz")
SEED_ATTRIBUTE = "seed"
#: Bytes per point of each attribute type the frames use.
_TYPE_SIZES = {"FLOAT_VECTOR": 12, "INT8": 1}
_FRAME_NAME = re.compile(r"-?\d+_\d+")


class GnBakeError(bake_cache.BakeCacheError):
    """A flake frame file that is missing, corrupt or not a Snowfall flake frame; the
    message names the file."""


def frame_name(frame: float) -> str:
    """Blender's name of a bake frame (``frame_to_file_name``): "%011.5f", '.' -> '_'."""
    return ("%011.5f" % float(frame)).replace(".", "_")


def meta_path(root: str, frame: float) -> str:
    return os.path.join(root, META_DIR, frame_name(frame) + ".json")


def blob_name(frame: float) -> str:
    return frame_name(frame) + ".blob"


def blob_path(root: str, frame: float) -> str:
    return os.path.join(root, BLOB_DIR, blob_name(frame))


def velocity_scales(velocities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(planes, scales): the velocities (N,3) float32 as three int8 planes (3,N), each the
    component divided by its scale and rounded, and the three float32 scales (the largest
    magnitude of the component / 127; 1 for a component that is zero everywhere). The
    decoded value ``plane * scale`` (float32) is within scale / 2 of the velocity."""
    columns = np.ascontiguousarray(np.asarray(velocities, np.float32).T)
    planes = np.empty(columns.shape, np.int8)
    scales = np.ones(3, np.float32)
    for axis, column in enumerate(columns):
        if not len(column):
            continue
        largest = max(float(column.max()), -float(column.min()))
        if largest > 0.0 and math.isfinite(largest):
            scales[axis] = np.float32(largest / 127.0)
        column *= np.float32(1.0) / scales[axis]
        np.rint(column, out=column)
        np.clip(column, -127.0, 127.0, out=column)
        planes[axis] = column
    return planes, scales


def decode_velocities(planes: np.ndarray, scales) -> np.ndarray:
    """(N,3) float32 velocities as Blender's nodes decode them (float32 plane x scale)."""
    scales = np.asarray(scales, np.float32)
    return np.ascontiguousarray(planes.T.astype(np.float32) * scales)


def encode_frame(frame: float, positions, velocities, seeds=None) -> tuple[list, bytes]:
    """(blob chunks, meta JSON bytes) of one frame. positions (N,3) float32 (exact),
    velocities (N,3) float32 (quantised), seeds (N,) int8 or None."""
    positions = np.ascontiguousarray(positions, dtype="<f4")
    count = len(positions)
    planes, scales = velocity_scales(velocities)
    blob = blob_name(frame)
    chunks, attributes, offset = [], [], 0

    def add(name, kind, array):
        nonlocal offset
        data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        attributes.append({"name": name, "domain": "POINT", "type": kind,
                           "data": {"name": blob, "start": offset, "size": data.nbytes}})
        chunks.append(data)
        offset += data.nbytes

    add("position", "FLOAT_VECTOR", positions)
    for name, plane in zip(VELOCITY_PLANES, planes):
        add(name, "INT8", plane)
    if seeds is not None:
        add(SEED_ATTRIBUTE, "INT8", np.asarray(seeds, np.int8))
    items = {GEOMETRY_ITEM[0]: {"name": GEOMETRY_ITEM[1], "type": "GEOMETRY", "data": {
        "pointcloud": {"num_points": count, "materials": [], "attributes": attributes}}}}
    for (key, name), scale in zip(SCALE_ITEMS, scales):
        items[key] = {"name": name, "type": "FLOAT", "data": float(scale)}
    meta = json.dumps({"version": BAKE_FILE_VERSION, "items": items}, separators=(",", ":"))
    return chunks, meta.encode()


def write_frame(root: str, frame: int, positions, velocities, seeds=None) -> list:
    """Write one frame into the bake folder ``root`` (blob, then the JSON, each atomically);
    returns the commit record's entry: [blob bytes, blob CRC-32, blob path relative to root,
    JSON bytes]."""
    chunks, meta = encode_frame(frame, positions, velocities, seeds)
    os.makedirs(os.path.join(root, BLOB_DIR), exist_ok=True)
    os.makedirs(os.path.join(root, META_DIR), exist_ok=True)
    size, crc = bake_cache.write_atomic(blob_path(root, frame), chunks)
    bake_cache.write_atomic(meta_path(root, frame), meta)
    return [size, crc, BLOB_DIR + "/" + blob_name(frame), len(meta)]


def cached_frames(root: str) -> list[float]:
    """The frames whose JSON is in ``root``, sorted (as Blender lists them)."""
    folder = os.path.join(root, META_DIR)
    if not os.path.isdir(folder):
        return []
    frames = []
    for name in os.listdir(folder):
        stem, ext = os.path.splitext(name)
        if ext == ".json" and _FRAME_NAME.fullmatch(stem):
            frames.append(float(stem.replace("_", ".")))
    return sorted(frames)


def remove_frame(root: str, frame: float) -> None:
    """Delete a frame: its JSON first (Blender then no longer lists it), then its blob."""
    for path in (meta_path(root, frame), blob_path(root, frame)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def remove_temporaries(root: str) -> None:
    """Delete the temporary files of writes a kill interrupted (``.<name>.<pid>.tmp``)."""
    for sub in (META_DIR, BLOB_DIR):
        for path in glob.glob(os.path.join(glob.escape(os.path.join(root, sub)), ".*.tmp")):
            with contextlib.suppress(OSError):
                os.unlink(path)


def free(root: str) -> None:
    """Remove every frame (and temporary file) of the bake folder ``root``, and the folder
    when nothing else is left in it."""
    for sub in (META_DIR, BLOB_DIR):
        folder = os.path.join(root, sub)
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name.endswith((".json", ".blob", ".tmp")):
                os.unlink(os.path.join(folder, name))
        if not os.listdir(folder):
            os.rmdir(folder)
    if os.path.isdir(root) and not os.listdir(root):
        os.rmdir(root)


# --- reading ------------------------------------------------------------------------------------

class GnFrame:
    """One frame read back: ``positions`` (N,3) float32, ``planes`` (3,N) int8, ``scales``
    (3,) float32, ``seeds`` (N,) int8 or None; ``velocities`` decodes them."""

    def __init__(self, positions, planes, scales, seeds):
        self.positions, self.planes, self.scales, self.seeds = positions, planes, scales, seeds

    @property
    def velocities(self) -> np.ndarray:
        return decode_velocities(self.planes, self.scales)


def _layout(root: str, frame: float):
    """(count, {attribute: (blob path, start, size)}, scales) of a frame's JSON, checked
    against the blobs' sizes; GnBakeError naming the file otherwise."""
    path = meta_path(root, frame)

    def bad(why, where=path):
        return GnBakeError(f"'{where}' is not a Snowfall flake frame ({why})",
                           "baking again (the file is corrupt or from another program)", where)

    try:
        with open(path, "rb") as handle:
            meta = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        raise GnBakeError(f"the flake frame '{path}' is missing", "baking again",
                          path) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise bad(f"{type(error).__name__}: {error}") from None
    try:
        if meta.get("version") != BAKE_FILE_VERSION:
            raise bad(f"bake file version {meta.get('version')!r}, not {BAKE_FILE_VERSION}")
        items = meta["items"]
        cloud = items[GEOMETRY_ITEM[0]]["data"]["pointcloud"]
        count = cloud["num_points"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise bad(f"point count {count!r}")
        scales = [items[key]["data"] for key, _ in SCALE_ITEMS]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                   and abs(v) < 3.0e38 for v in scales):     # finite, and a float32
            raise bad(f"velocity scales {scales!r}")
        scales = np.array(scales, np.float32)
        attributes = {}
        for attribute in cloud["attributes"]:
            name, kind, data = attribute["name"], attribute["type"], attribute["data"]
            blob = data["name"]
            if not isinstance(blob, str) or os.path.basename(blob) != blob or \
                    blob in ("", ".", "..") or "\0" in blob or "\\" in blob:
                raise bad(f"attribute {name!r} names the blob {blob!r}")
            start, size = data["start"], data["size"]
            if not isinstance(name, str) or name in attributes:
                raise bad(f"attribute name {name!r} (not a name, or repeated)")
            if kind not in _TYPE_SIZES:
                raise bad(f"attribute {name!r} has type {kind!r}")
            if not (type(start) is int and type(size) is int and start >= 0
                    and size == _TYPE_SIZES[kind] * count):
                raise bad(f"attribute {name!r} has {size!r} bytes at {start!r} for "
                          f"{count} points")
            attributes[name] = (os.path.join(root, BLOB_DIR, blob), start, size, kind)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise bad(f"{type(error).__name__}: {error}") from None
    wanted = {"position": "FLOAT_VECTOR", **{name: "INT8" for name in VELOCITY_PLANES}}
    for name, kind in wanted.items():
        if name not in attributes or attributes[name][3] != kind:
            raise bad(f"no {kind} attribute {name!r}")
    if not np.isfinite(scales).all():
        raise bad("a velocity scale is not finite")
    for name, (blob, start, size, _kind) in attributes.items():
        try:
            actual = os.path.getsize(blob)
        except OSError:
            raise GnBakeError(f"the flake blob '{blob}' named by '{path}' is missing",
                              "baking again", blob) from None
        if actual < start + size:
            raise GnBakeError(f"the flake blob '{blob}' has {actual} bytes, '{path}' needs "
                              f"{start + size} (truncated or replaced)", "baking again", blob)
    return count, attributes, scales


def check_frame(root: str, frame: float) -> int:
    """Validate a frame's JSON and the sizes of its blobs (no array is read); returns its
    point count. GnBakeError naming the file otherwise."""
    return _layout(root, frame)[0]


def read_frame(root: str, frame: float) -> GnFrame:
    """The arrays of one frame (validated first)."""
    count, attributes, scales = _layout(root, frame)

    def array(name, dtype, shape):
        blob, start, size, _kind = attributes[name]
        try:
            with open(blob, "rb") as handle:      # size: checked against the blob's length
                handle.seek(start)
                data = handle.read(size)
        except OSError as error:
            raise GnBakeError(f"cannot read the flake blob '{blob}' ({error.strerror})",
                              "baking again", blob) from None
        if len(data) != size:
            raise GnBakeError(f"the flake blob '{blob}' ended after {len(data)} of the {size} "
                              f"bytes at {start} that its frame needs (truncated while read)",
                              "baking again", blob)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    positions = array("position", "<f4", (count, 3))
    planes = np.stack([array(name, np.int8, (count,)) for name in VELOCITY_PLANES]) \
        if count else np.zeros((3, 0), np.int8)
    seeds = array(SEED_ATTRIBUTE, np.int8, (count,)) if SEED_ATTRIBUTE in attributes else None
    return GnFrame(positions, planes, scales, seeds)
