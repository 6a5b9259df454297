"""The bake folder on disk: everything a bake needs to be resumed, rendered or checked,
with no .blend file (numpy, json and the standard library only; never bpy, never pickle).

Layout of one scene's folder (``<cache folder>/<scene>/``)::

    bake.json                 what was baked: settings, terrain digest, frame range, formats
    progress.json             the commit record: the last frame complete on disk, the newest
                              checkpoint, size and CRC-32 of every file
    checkpoint_<frame>.npz    the engine state after <frame> (Simulation.state_dict); the
                              newest one is kept
    snow/depth_<frame>.exr    snow depth (metres, float32, the heightmap's (ny, nx) grid) as an
                              OpenEXR image Blender reads: R = depth, G = ground height
    flakes/*.bphys            the particle point cache (written by the caller's encoder)

Every file is written under a temporary name and renamed into place (``os.replace``), so a
file under its final name is always complete. ``progress.json`` is rewritten last, after the
frame's files (and its checkpoint, when it has one) are on disk: a process killed at any
moment leaves the previous commit, and everything it names, intact. Checkpoints are the
largest writes (the whole engine state), so the bake writes one when CHECKPOINT_SECONDS
have passed since the last, and at the end; Resume continues from the newest and rewrites
the frames after it (the same bytes: the bake is deterministic). Reading checks sizes (every file), CRC-32
(the last frames) and the checkpoint's SHA-256; a file that fails any check is reported by
name (``BakeCacheError``), never parsed further. Sizes and counts inside a file are checked
against the file before anything is allocated; checkpoints are read member by member from
their .npy headers (never unpickled); json files with ``json.load``.

``BakeWriter`` runs the writes on a background thread, in order, while the caller simulates
the next frames; the first error (a full disk, a read-only folder) stops it and is raised
to the caller with the space the bake still needs.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from . import exr
from .errors import SnowInputError

BAKE_FORMAT = "snowfall-bake"
BAKE_VERSION = 1
META_NAME = "bake.json"
PROGRESS_NAME = "progress.json"
SNOW_DIR = "snow"
FLAKE_DIR = "flakes"
#: bake.json's record of the .blend that made the bake (``owner_record``).
OWNER_KEY = "owner"
#: Frames (from the last one back) whose files get a full CRC check on resume; older frames
#: get a size check.
CRC_CHECK_FRAMES = 2


class BakeCacheError(SnowInputError):
    """A bake folder that cannot be used (missing, corrupt or foreign files) or written
    (full disk, read-only folder). The message names the file."""

    def __init__(self, problem: str, suggestion: str = "", path: str = ""):
        super().__init__("cache_folder", problem, suggestion)
        self.path = path


def checkpoint_name(frame: int) -> str:
    return f"checkpoint_{int(frame):06d}.npz"


def depth_name(frame: int) -> str:
    return f"depth_{int(frame):06d}.exr"


def _crc(chunks) -> int:
    value = 0
    for chunk in chunks:
        value = zlib.crc32(chunk, value)
    return value


def write_atomic(path: str, chunks, durable: bool = False) -> tuple[int, int]:
    """Write byte ``chunks`` to ``path`` through a temporary name and ``os.replace``;
    returns (bytes, CRC-32). ``durable`` flushes to the disk before the rename. On failure
    the temporary file is removed and ``path`` is unchanged."""
    if isinstance(chunks, (bytes, bytearray, memoryview)):
        chunks = [chunks]
    folder, name = os.path.split(path)
    temp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")   # no cache scan matches it
    size, crc = 0, 0
    try:
        with open(temp, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
                crc = zlib.crc32(chunk, crc)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    return size, crc


def final_name(path: str) -> str:
    """The file a temporary name of ``write_atomic`` stands for."""
    folder, name = os.path.split(str(path))
    match = re.fullmatch(r"\.(.+)\.\d+\.tmp", name)
    return os.path.join(folder, match.group(1)) if match else str(path)


def write_json_atomic(path: str, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode(), durable=True)


def read_json(path: str, what: str) -> dict:
    """A json object from ``path``; BakeCacheError naming the file when it is unreadable."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        raise BakeCacheError(f"'{path}' is missing", "baking again", path) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise BakeCacheError(f"'{path}' is not a readable {what} ({type(error).__name__}: "
                             f"{error})", "baking again (the file is corrupt)", path) from None
    if not isinstance(data, dict):
        raise BakeCacheError(f"'{path}' is not a {what}", "baking again", path)
    return data


# --- checkpoints --------------------------------------------------------------------------------

def encode_state(state: dict) -> bytes:
    """An uncompressed .npz of plain numeric arrays (no objects: loadable without pickle)."""
    arrays = {}
    for key, value in state.items():
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise ValueError(f"state entry {key!r} is not a numeric array")
        arrays[key] = array
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def read_state(path: str, sha256: str | None = None, size: int | None = None) -> dict:
    """The arrays of a checkpoint. Checks the size and SHA-256 recorded at commit (when
    given) before parsing; never unpickles. BakeCacheError naming the file otherwise."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise BakeCacheError(f"the checkpoint '{path}' is missing", "baking again",
                             path) from None
    except OSError as error:
        raise BakeCacheError(f"cannot read the checkpoint '{path}' ({error.strerror})",
                             "baking again", path) from None
    if size is not None and len(data) != size:
        raise BakeCacheError(f"the checkpoint '{path}' has {len(data)} bytes, the bake wrote "
                             f"{size} (truncated or replaced)", "baking again", path)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise BakeCacheError(f"the checkpoint '{path}' does not match its SHA-256 (corrupt or "
                             "replaced)", "baking again", path)
    try:
        return _load_checkpoint(data, path)
    except (BakeCacheError, MemoryError):
        raise
    except Exception as error:   # not a zip, bad CRC, truncated member, ...
        raise BakeCacheError(f"'{path}' is not a Snowfall checkpoint ({type(error).__name__}:"
                             f" {error})", "baking again", path) from None


def _load_checkpoint(data: bytes, path: str) -> dict:
    """The arrays of a checkpoint's bytes: an .npz whose members are stored (uncompressed,
    as ``encode_state`` writes them) plain numeric .npy arrays. Every member's header is
    checked against the bytes it has before its array is allocated, so nothing takes more
    memory than the file's own length; object arrays are refused (never unpickled)."""
    import zipfile

    from numpy.lib import format as npy

    def bad(problem):
        return BakeCacheError(f"'{path}' is not a Snowfall checkpoint ({problem})",
                              "baking again", path)

    state = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            key = info.filename[:-4]
            if not info.filename.endswith(".npy") or not key or key in state:
                raise bad(f"member {info.filename!r} is not one array")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data) or \
                    info.compress_size != info.file_size:
                raise bad(f"member {info.filename!r} is compressed or claims "
                          f"{info.file_size} bytes")
            with archive.open(info) as member:
                version = npy.read_magic(member)
                if version == (1, 0):
                    shape, fortran, dtype = npy.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, fortran, dtype = npy.read_array_header_2_0(member)
                else:
                    raise bad(f"member {info.filename!r} is .npy version {version}")
                if dtype.hasobject or any(n < 0 for n in shape):
                    raise bad(f"member {info.filename!r} holds {dtype} {shape}")
                count = 1
                for n in shape:
                    count *= n
                nbytes = count * dtype.itemsize
                if member.tell() + nbytes != info.file_size:
                    raise bad(f"member {info.filename!r} claims {shape} {dtype} ({nbytes} "
                              f"bytes), it holds {info.file_size - member.tell()}")
                raw = member.read(nbytes)     # at most the member's bytes; checks its CRC
                if len(raw) != nbytes:
                    raise bad(f"member {info.filename!r} is truncated")
            array = np.frombuffer(raw, dtype=dtype, count=count)
            state[key] = array.reshape(shape, order="F" if fortran else "C").copy()
    return state


# --- snow depth ---------------------------------------------------------------------------------

def encode_depth(depth: np.ndarray, ground: np.ndarray) -> bytes:
    """One frame's snow as OpenEXR: R = depth (m), G = ground height (m), B = 0."""
    depth = np.asarray(depth, dtype=np.float32)
    return exr.encode({"R": depth, "G": ground, "B": np.zeros_like(depth)})


def read_depth(path: str, shape: tuple | None = None) -> np.ndarray:
    """Snow depth (float32 (ny, nx), metres) of one frame file; BakeCacheError naming the
    file when it is missing, not such an OpenEXR file, or of another shape."""
    try:
        with open(path, "rb") as handle:
            channels = exr.decode(handle.read())
        depth = channels["R"]
    except FileNotFoundError:
        raise BakeCacheError(f"the snow depth file '{path}' is missing", "baking again",
                             path) from None
    except (OSError, ValueError, KeyError, IndexError) as error:
        raise BakeCacheError(f"'{path}' is not a snow depth file ({type(error).__name__}: "
                             f"{error})", "baking again", path) from None
    if shape is not None and depth.shape != tuple(shape):
        raise BakeCacheError(f"'{path}' holds a {depth.shape} grid, not the bake's "
                             f"{tuple(shape)}", "baking again", path)
    return depth


def fingerprint(settings, terrain_digest: str, frame_start: int, substeps: int,
                frame: int) -> str:
    """What the baked state of ``frame`` depends on (the progress record's ``fingerprint``,
    which Resume compares): the settings (a ``SnowSettings``; animated wind only up to
    that frame's time, so extending the scene's end frame keeps Resume possible), the
    terrain and the porous fences (``terrain_digest``), the start frame and the substeps."""
    values = settings.to_dict()
    seconds = (frame - frame_start) * substeps * settings.time_step
    values["wind_keys"] = [k for k in settings.wind_keys if k[0] <= seconds + 1e-9]
    digest = hashlib.sha256()
    digest.update(json.dumps(values, sort_keys=True, default=str).encode())
    digest.update(json.dumps([int(frame_start), int(substeps), terrain_digest]).encode())
    return digest.hexdigest()


def terrain_digest(vertices, triangles, fences=()) -> str:
    """SHA-256 of the terrain's world-space arrays and of the porous fences (snow_addon.
    fences.PorousFence: porosity, vertices, triangles), so that a resume refuses a changed
    fence as it does a changed terrain. Without fences it is the terrain's digest alone, as
    bakes made before fences recorded it."""
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(vertices, dtype=np.float64).tobytes())
    digest.update(np.ascontiguousarray(triangles, dtype=np.int64).tobytes())
    for fence in fences:
        digest.update(json.dumps(["porous fence", float(fence.porosity), len(fence.vertices),
                                  len(fence.triangles)]).encode())
        digest.update(np.ascontiguousarray(fence.vertices, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(fence.triangles, dtype=np.int64).tobytes())
    return digest.hexdigest()


# --- the folder ---------------------------------------------------------------------------------

@dataclass
class ResumePoint:
    """Where a bake can continue: the last frame complete on disk and its checkpoint."""
    frame: int
    state: dict
    fingerprint: str
    progress: dict


def _is_count(value) -> bool:
    return type(value) is int and value >= 0


def _is_relative_name(name) -> bool:
    """A file name (or "sub/name") inside the bake folder: no absolute path, no "..", no
    NUL (what a progress record may name)."""
    if not isinstance(name, str) or not name or "\0" in name or os.path.isabs(name):
        return False
    parts = re.split(r"[\\/]", name)
    return all(part not in ("", ".", "..") for part in parts)


def _record_problem(record) -> str | None:
    """What is wrong with a CommitRecord read from a file (None: nothing): every size a
    count, every CRC an int, every name a file inside the folder."""
    checkpoint = record.checkpoint
    if not isinstance(checkpoint.get("file"), str) or \
            os.path.basename(checkpoint["file"]) != checkpoint["file"] or \
            not _is_relative_name(checkpoint["file"]):
        return f"checkpoint file {checkpoint.get('file')!r}"
    if not (checkpoint.get("bytes") is None or _is_count(checkpoint["bytes"])) or \
            not (checkpoint.get("sha256") is None or isinstance(checkpoint["sha256"], str)):
        return f"checkpoint size or SHA-256 {checkpoint.get('bytes')!r}"
    for frame, entry in record.flakes.items():
        if len(entry) < 3 or not _is_count(entry[0]) or \
                not (entry[1] is None or _is_count(entry[1])) or not _is_relative_name(entry[2]):
            return f"flake file entry {entry!r} of frame {frame}"
    for frame, entry in record.snow.items():
        if len(entry) < 2 or not _is_count(entry[0]) or \
                not (entry[1] is None or _is_count(entry[1])):
            return f"snow depth entry {entry!r} of frame {frame}"
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        abs(value) < float("inf")


def _meta_problem(meta: dict) -> str | None:
    """What is wrong with the parts of a bake.json that Resume uses (None: nothing)."""
    for key in ("frame_start", "frame_end", "substeps"):
        if key in meta and type(meta[key]) is not int:
            return f"{key} {meta[key]!r} is not a whole number"
    flakes, snow = meta.get("flakes"), meta.get("snow")
    if not isinstance(flakes, dict) or not isinstance(snow, dict):
        return "no flakes or snow section"
    if flakes.get("compression") is not None and type(flakes["compression"]) is not int:
        return f"flake compression {flakes['compression']!r}"
    if flakes.get("velocity_step") is not None and not _is_number(flakes["velocity_step"]):
        return f"flake velocity step {flakes['velocity_step']!r}"
    if not isinstance(flakes.get("format", ""), str):
        return f"flake format {flakes['format']!r}"
    view = flakes.get("camera_view")
    if view is not None:
        try:
            matrix, bounds = view["matrix"], view["bounds"]
            good = len(matrix) == 4 and all(len(row) == 4 and all(map(_is_number, row))
                                            for row in matrix) \
                and len(bounds) == 4 and all(map(_is_number, bounds)) \
                and isinstance(view["perspective"], bool)
        except (KeyError, TypeError):
            good = False
        if not good:
            return "camera view"
    return None


@dataclass
class CommitRecord:
    """What progress.json says, kept in memory by the writer thread. ``frame``: the frame
    of the newest checkpoint (where Resume continues); ``complete``: the last frame whose
    files are all on disk (flakes up to the frame before, snow depth)."""
    frame: int | None = None
    checkpoint: dict | None = None
    fingerprint: str = ""
    flakes: dict = field(default_factory=dict)    # frame -> [bytes, crc32, file name]
    snow: dict = field(default_factory=dict)      # frame -> [bytes, crc32]
    complete: int | None = None

    def to_json(self) -> dict:
        return {"format": BAKE_FORMAT + "-progress", "version": BAKE_VERSION,
                "frame": self.frame, "complete": self.complete,
                "checkpoint": self.checkpoint, "fingerprint": self.fingerprint,
                "flakes": {str(k): v for k, v in sorted(self.flakes.items())},
                "snow": {str(k): v for k, v in sorted(self.snow.items())}}

    @classmethod
    def from_json(cls, data: dict, path: str) -> "CommitRecord":
        try:
            record = cls(int(data["frame"]), dict(data["checkpoint"]), str(data["fingerprint"]),
                         {int(k): list(v) for k, v in dict(data["flakes"]).items()},
                         {int(k): list(v) for k, v in dict(data["snow"]).items()},
                         int(data["complete"]))
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise BakeCacheError(f"'{path}' is not a Snowfall progress record ({error})",
                                 "baking again", path) from None
        if data.get("format") != BAKE_FORMAT + "-progress":
            raise BakeCacheError(f"'{path}' is not a Snowfall progress record",
                                 "baking again", path)
        problem = _record_problem(record)
        if problem is not None:
            raise BakeCacheError(f"'{path}' is not a Snowfall progress record (its {problem} "
                                 "is not a size, CRC or file of the folder)", "baking again",
                                 path)
        return record


class BakeFolder:
    """One scene's bake folder (see the module docstring)."""

    def __init__(self, path: str):
        self.path = path
        self.snow_dir = os.path.join(path, SNOW_DIR)
        self.flake_dir = os.path.join(path, FLAKE_DIR)

    # paths
    @property
    def meta_path(self) -> str:
        return os.path.join(self.path, META_NAME)

    @property
    def progress_path(self) -> str:
        return os.path.join(self.path, PROGRESS_NAME)

    def depth_path(self, frame: int) -> str:
        return os.path.join(self.snow_dir, depth_name(frame))

    def exists(self) -> bool:
        return os.path.exists(self.meta_path)

    # bake.json
    def start(self, meta: dict) -> None:
        """Begin a new bake: remove this module's files of an older bake, write bake.json.
        BakeCacheError (naming the file, nothing left half written: no bake.json) when the
        folder cannot be written."""
        self.check_writable()
        self.free(keep_folder=True)
        try:
            os.makedirs(self.snow_dir, exist_ok=True)
            os.makedirs(self.flake_dir, exist_ok=True)
            write_json_atomic(self.meta_path, dict(meta, format=BAKE_FORMAT,
                                                   version=BAKE_VERSION))
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(self.meta_path)
            raise disk_error(error, self.meta_path, "the bake did not start") from None

    def set_owner(self, owner: dict) -> None:
        """Record ``owner`` (``owner_record``) in bake.json (adopting a bake made before
        owners were recorded, or by a file that moved, or taking one over)."""
        meta = read_json(self.meta_path, "bake description")
        meta[OWNER_KEY] = dict(owner)
        try:
            write_json_atomic(self.meta_path, meta)
        except OSError as error:
            raise disk_error(error, self.meta_path, "its owner was not changed") from None

    def owner_status(self, owner_id: str, blend_path: str, by_setting: bool = False):
        """``owner_status`` of this folder."""
        return owner_status(self.path, owner_id, blend_path, by_setting)

    def files(self) -> list:
        """Every file of this module's in the folder (what ``free`` deletes)."""
        found = []
        if os.path.isdir(self.path):
            for name in os.listdir(self.path):
                if name in (META_NAME, PROGRESS_NAME) or (
                        name.startswith(("checkpoint_", "state_")) and ".npz" in name) \
                        or (name.startswith(".") and name.endswith(".tmp")):
                    found.append(os.path.join(self.path, name))
        for folder, suffixes in ((self.snow_dir, (".npy", ".exr")),
                                 (self.flake_dir, (".bphys",))):
            if os.path.isdir(folder):
                for name in os.listdir(folder):
                    if name.endswith(suffixes) or name.endswith(".tmp"):
                        found.append(os.path.join(folder, name))
        return found

    def check_writable(self) -> None:
        """BakeCacheError unless files can be created and deleted in the folder and its
        snow/ and flakes/ folders (those that exist; the nearest existing parent of those
        that do not): a read-only folder is refused before anything is deleted."""
        for folder in (self.path, self.snow_dir, self.flake_dir):
            probe = folder
            while not os.path.exists(probe):
                parent = os.path.dirname(probe)
                if parent == probe:
                    break
                probe = parent
            if not os.path.isdir(probe):
                raise BakeCacheError(f"'{probe}' is a file, not a folder", "another cache "
                                     "folder", probe)
            problem = None
            if not os.access(probe, os.W_OK | os.X_OK):
                problem = "permission denied"
            else:
                try:   # access() passes for root and on read-only mounts: really try
                    with tempfile.TemporaryFile(dir=probe):
                        pass
                except OSError as error:
                    problem = error.strerror or str(error)
            if problem is not None:
                raise BakeCacheError(f"cannot change the bake folder '{probe}' ({problem}); "
                                     "nothing was changed", "making it writable, or another "
                                     "cache folder", probe)

    def read_meta(self) -> dict:
        meta = read_json(self.meta_path, "bake description")
        if meta.get("format") != BAKE_FORMAT:
            raise BakeCacheError(f"'{self.meta_path}' is not a Snowfall bake description",
                                 "baking again", self.meta_path)
        if meta.get("version") != BAKE_VERSION:
            raise BakeCacheError(f"'{self.meta_path}' is bake format version "
                                 f"{meta.get('version')}; this add-on reads {BAKE_VERSION}",
                                 "baking again", self.meta_path)
        problem = _meta_problem(meta)
        if problem is not None:
            raise BakeCacheError(f"'{self.meta_path}' is not a readable bake description "
                                 f"({problem})", "baking again (the file is corrupt)",
                                 self.meta_path)
        return meta

    def read_progress(self) -> CommitRecord | None:
        if not os.path.exists(self.progress_path):
            return None
        return CommitRecord.from_json(read_json(self.progress_path, "progress record"),
                                      self.progress_path)

    # checks
    def _check_file(self, path: str, size: int, crc: int | None, what: str) -> None:
        try:
            actual = os.path.getsize(path)
        except OSError:
            raise BakeCacheError(f"the {what} '{path}' is missing", "baking again from the "
                                 "start (files of the bake were deleted)", path) from None
        if actual != size:
            raise BakeCacheError(f"the {what} '{path}' has {actual} bytes, the bake wrote {size}"
                                 " (truncated or replaced)", "baking again", path)
        if crc is not None:
            with open(path, "rb") as handle:
                if _crc(iter(lambda: handle.read(1 << 22), b"")) != crc:
                    raise BakeCacheError(f"the {what} '{path}' does not match its CRC-32 "
                                         "(corrupt)", "baking again", path)

    def resume_point(self, first_frame: int) -> ResumePoint:
        """The last committed frame with its checkpoint loaded, after checking that every
        file the commit names is there and intact. BakeCacheError naming the first bad file."""
        record = self.read_progress()
        if record is None or record.frame is None:
            raise BakeCacheError(f"'{self.path}' holds no finished frame to resume from",
                                 "Bake", self.progress_path)
        last = record.frame
        if last < first_frame or record.complete < last:
            raise BakeCacheError(f"'{self.progress_path}' names frame {last} (complete to "
                                 f"{record.complete}), outside the bake from frame "
                                 f"{first_frame}", "baking again", self.progress_path)
        for frame in range(first_frame, last + 1):
            snow = record.snow.get(frame)
            if snow is None:
                raise BakeCacheError(f"'{self.progress_path}' lists no snow depth for frame "
                                     f"{frame}", "baking again", self.progress_path)
            self._check_file(self.depth_path(frame), snow[0],
                             snow[1] if frame > last - CRC_CHECK_FRAMES else None,
                             "snow depth file")
            flakes = record.flakes.get(frame)
            if flakes is None:
                if frame < last:
                    raise BakeCacheError(f"'{self.progress_path}' lists no flake file for "
                                         f"frame {frame}", "baking again", self.progress_path)
                continue
            self._check_file(os.path.join(self.flake_dir, flakes[2]), flakes[0],
                             flakes[1] if frame > last - 1 - CRC_CHECK_FRAMES else None,
                             "flake cache file")
        checkpoint = record.checkpoint or {}
        path = os.path.join(self.path, str(checkpoint.get("file", "")))
        state = read_state(path, checkpoint.get("sha256"), checkpoint.get("bytes"))
        return ResumePoint(last, state, record.fingerprint, record)

    # removal
    def remove_checkpoints(self, keep: str) -> None:
        """Delete every checkpoint but ``keep`` (a file name)."""
        for name in os.listdir(self.path):
            if name.startswith("checkpoint_") and name.endswith(".npz") and name != keep:
                try:
                    os.unlink(os.path.join(self.path, name))
                except OSError:
                    pass

    def remove_temporaries(self) -> None:
        """Delete the temporary files of writes a kill interrupted."""
        for folder in (self.path, self.snow_dir, self.flake_dir):
            if os.path.isdir(folder):
                for name in os.listdir(folder):
                    if name.startswith(".") and name.endswith(".tmp"):
                        try:
                            os.unlink(os.path.join(folder, name))
                        except OSError:
                            pass

    def free(self, keep_folder: bool = False) -> None:
        """Remove this module's files (and the folder when it is left empty). A folder that
        vanished is nothing to free; a read-only one raises BakeCacheError before any file
        is deleted (``check_writable``)."""
        if not os.path.isdir(self.path):
            return
        files = self.files()
        if files:
            self.check_writable()
        # progress.json first: a free stopped half way leaves no commit naming missing files
        files.sort(key=lambda path: os.path.basename(path) != PROGRESS_NAME)
        try:
            for path in files:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            for folder in (self.snow_dir, self.flake_dir):
                if os.path.isdir(folder) and not os.listdir(folder) and not keep_folder:
                    os.rmdir(folder)
            if not keep_folder and os.path.isdir(self.path) and not os.listdir(self.path):
                os.rmdir(self.path)
        except OSError as error:
            raise disk_error(error, self.path, "freeing stopped part way") from None


#: progress.json path -> (its (inode, mtime, size), what resume_available needs of it):
#: a record is parsed again only when the file changed (a panel asks on every redraw).
_PROGRESS_SEEN: dict = {}


def resume_available(path: str, frame_end: int) -> bool:
    """Whether the bake folder ``path`` holds a bake Resume can continue up to
    ``frame_end``: a committed checkpoint before ``frame_end``, or one at the end whose
    frame's flakes were not written yet (BakeJob refuses the rest: "already reaches").
    False for no folder, no checkpoint, or a record that cannot be read. Cheap enough for a
    panel's draw: one stat, and a json read only when progress.json changed."""
    progress = os.path.join(path, PROGRESS_NAME)
    try:
        stat = os.stat(progress)
        if not os.path.isfile(os.path.join(path, META_NAME)):
            return False
    except OSError:
        return False
    key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)   # replaced, never rewritten in place
    seen = _PROGRESS_SEEN.get(progress)
    if seen is None or seen[0] != key:
        try:
            record = CommitRecord.from_json(read_json(progress, "progress record"), progress)
            seen = (key, (record.frame, record.frame in record.flakes))
        except BakeCacheError:
            seen = (key, None)
        if len(_PROGRESS_SEEN) > 64:
            _PROGRESS_SEEN.clear()
        _PROGRESS_SEEN[progress] = seen
    if seen[1] is None:
        return False
    frame, flakes_written = seen[1]
    return frame < frame_end or not flakes_written


def free_space(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000.0
    return f"{count:.1f} TB"


# --- the background writer ----------------------------------------------------------------------

class BakeWriter:
    """Runs ``submit``ted callables on one background thread, in order. At most
    ``max_pending`` wait in the queue (``submit`` blocks beyond that, which bounds memory).
    The first exception stops the thread; ``submit``, ``flush`` and ``check`` raise it.

    ``wait_seconds``: time the submitting thread spent blocked (queue full, flush);
    ``busy_seconds``: time the writer thread spent running tasks."""

    #: Python's thread switch interval while a writer runs (seconds; Python's default is
    #: 0.005). Handing a frame to the writer wakes it; with the default the submitting
    #: thread could wait up to 5 ms for the interpreter lock each time.
    SWITCH_INTERVAL = 0.0005

    def __init__(self, max_pending: int = 2, name: str = "snowfall-bake-writer"):
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, self.SWITCH_INTERVAL))
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self.error: BaseException | None = None
        self.wait_seconds = 0.0
        self.busy_seconds = 0.0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                if task is None:
                    return
                if self.error is None:
                    started = time.perf_counter()
                    try:
                        task[0](*task[1])
                    except BaseException as error:   # reported to the submitting thread
                        self.error = error
                    self.busy_seconds += time.perf_counter() - started
            finally:
                self._queue.task_done()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def submit(self, function, *args) -> None:
        self.check()
        if self._closed:
            raise RuntimeError("the bake writer is closed")
        started = time.perf_counter()
        self._queue.put((function, args))
        self.wait_seconds += time.perf_counter() - started

    def flush(self) -> None:
        started = time.perf_counter()
        self._queue.join()
        self.wait_seconds += time.perf_counter() - started
        self.check()

    def close(self) -> None:
        """Finish the queued tasks and stop the thread (errors stay in ``error``)."""
        if self._closed:
            return
        self._closed = True
        started = time.perf_counter()
        self._queue.put(None)
        self._thread.join()
        self.wait_seconds += time.perf_counter() - started
        sys.setswitchinterval(self._switch_interval)


def disk_error(error: OSError, path: str, what: str) -> BakeCacheError:
    """A BakeCacheError for an OSError writing or deleting under the bake folder: the file,
    the reason, what became of the bake (``what``), and what to try."""
    path = final_name(getattr(error, "filename", None) or path)
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = "freeing disk space, or another cache folder"
    elif error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint = "making the folder writable, or another cache folder"
    else:
        hint = "checking the cache folder"
    return BakeCacheError(f"cannot write '{path}' ({reason}); {what}", hint, path)


# --- who made the bake ----------------------------------------------------------------------------

def owner_record(owner_id: str, blend_path: str, folder: str) -> dict:
    """What bake.json records of the .blend that made the bake: its id (kept in the
    .blend), its path, and that path relative to the bake folder (so that a project folder
    copied or moved as a whole still finds its own file)."""
    record = {"id": str(owner_id), "blend": os.path.abspath(blend_path) if blend_path else ""}
    if blend_path:
        with contextlib.suppress(ValueError):      # another drive (Windows)
            record["blend_relative"] = os.path.relpath(os.path.abspath(blend_path), folder)
    return record


def _same_file(a: str, b: str) -> bool:
    if not a or not b:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def owner_blends(folder: str, owner: dict) -> list:
    """The .blend paths an owner record names: its path, and its path relative to the
    folder (they differ when the folder was moved with its file)."""
    paths = []
    if owner.get("blend"):
        paths.append(str(owner["blend"]))
    relative = owner.get("blend_relative")
    if relative:
        paths.append(os.path.normpath(os.path.join(folder, str(relative))))
    return paths


def owner_status(folder: str, owner_id: str, blend_path: str,
                 by_setting: bool = False) -> tuple:
    """Whose bake the folder holds, for the .blend ``blend_path`` whose id is ``owner_id``:
    (status, owner record or None). status:

    - "none": no bake.json (nothing of a bake, or not a Snowfall folder);
    - "own": bake.json names this .blend (by path, or relative to the folder);
    - "moved": it names this .blend's id and a path where no other file is (this file was
      renamed or moved, or was not saved when it baked): this file's bake;
    - "legacy": a bake made before owners were recorded (or in a session whose file was
      never saved), in the folder this file's Cache
      Folder setting names (``by_setting``): adopted as this file's (elsewhere, e.g. the
      folder a Save As copy's flakes still point at: "foreign");
    - "foreign": another file's bake (a copy made by Save As or on disk, or another file
      sharing an explicit cache folder);
    - "unreadable": bake.json exists but cannot be read.
    """
    meta_path = os.path.join(folder, META_NAME)
    if not os.path.isfile(meta_path):
        return "none", None
    try:
        meta = read_json(meta_path, "bake description")
    except BakeCacheError:
        return "unreadable", None
    owner = meta.get(OWNER_KEY)
    if not isinstance(owner, dict):
        return ("legacy" if by_setting else "foreign"), None
    paths = owner_blends(folder, owner)
    if blend_path and any(_same_file(path, blend_path) for path in paths):
        return "own", owner
    if owner_id and owner.get("id") == owner_id and not any(
            os.path.isfile(path) and not _same_file(path, blend_path) for path in paths):
        return "moved", owner
    if not paths:     # made in a session never saved: as a bake that records no owner
        return ("legacy" if by_setting else "foreign"), owner
    return "foreign", owner


def is_own(status: str) -> bool:
    """Whether a folder of ``owner_status`` may be written and freed by the asking file."""
    return status in ("none", "own", "moved", "legacy")


def describe_owner(owner: dict | None) -> str:
    """The file a bake belongs to, for messages."""
    if not owner:
        return "another .blend file (the bake records none)"
    blend = owner.get("blend") or ""
    return f"'{blend}'" if blend else "an unsaved .blend file"
