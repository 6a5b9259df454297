"""Blender point-cache files (.bphys) for particle systems: a pure-Python writer and reader.

No bpy here: the engine, tests and a farm script can write or inspect a flake cache without
Blender. The layout follows Blender's ``blenkernel/intern/pointcache.cc`` (unchanged since
2.5x and still what Blender 5.0 reads):

    char[8]  "BPHYSICS"
    uint32   typeflag      PTCACHE_TYPE_* in the low 16 bits, PTCACHE_TYPEFLAG_* above
    uint32   totpoint      number of records in this file
    uint32   data_types    bit i set = BPHYS_DATA i present
    records  totpoint records, each holding the present BPHYS_DATA fields in index order
             (uncompressed files interleave per point; compressed ones are not written here)

Numbers are little-endian (Blender writes native order; every platform it ships on is
little-endian). File names: ``<name>_<frame:06d>_<index:02d>.bphys``; frame 0 is the
"info" file that holds only BPHYS_DATA_TIMES for every particle.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

MAGIC = b"BPHYSICS"
EXTENSION = ".bphys"

PTCACHE_TYPE_PARTICLES = 1
PTCACHE_TYPEFLAG_COMPRESS = 1 << 16
PTCACHE_TYPEFLAG_EXTRADATA = 1 << 17
PTCACHE_TYPEFLAG_TYPEMASK = 0x0000FFFF

BPHYS_DATA_INDEX = 0
BPHYS_DATA_LOCATION = 1
BPHYS_DATA_VELOCITY = 2
BPHYS_DATA_ROTATION = 3
BPHYS_DATA_AVELOCITY = 4
BPHYS_DATA_SIZE = 5
BPHYS_DATA_TIMES = 6
BPHYS_DATA_BOIDS = 7

# (field name, numpy dtype, components) per BPHYS_DATA index, in Blender's ptcache_data_size
# order. Boids (a 20-byte struct) are never written by this module.
_FIELDS = {
    BPHYS_DATA_INDEX: ("index", "<u4", 1),
    BPHYS_DATA_LOCATION: ("location", "<f4", 3),
    BPHYS_DATA_VELOCITY: ("velocity", "<f4", 3),
    BPHYS_DATA_ROTATION: ("rotation", "<f4", 4),
    BPHYS_DATA_AVELOCITY: ("angular_velocity", "<f4", 3),
    BPHYS_DATA_SIZE: ("size", "<f4", 1),
    BPHYS_DATA_TIMES: ("times", "<f4", 3),
}
_HEADER_BYTES = 8 + 4 + 4 + 4

#: What a flake frame holds: index, location, velocity and (birth, death, lifetime) times.
FLAKE_FRAME_TYPES = (1 << BPHYS_DATA_INDEX) | (1 << BPHYS_DATA_LOCATION) | \
    (1 << BPHYS_DATA_VELOCITY) | (1 << BPHYS_DATA_TIMES)
#: What Blender's info file (frame 0) holds: the times of every particle.
INFO_FRAME_TYPES = 1 << BPHYS_DATA_TIMES


def record_dtype(data_types: int) -> np.dtype:
    """Packed numpy record type of one point for a ``data_types`` bit mask."""
    names, formats = [], []
    for bit in range(8):
        if data_types & (1 << bit):
            if bit not in _FIELDS:
                raise ValueError(f"BPHYS data type {bit} (boids) is not supported")
            name, base, count = _FIELDS[bit]
            names.append(name)
            formats.append(base if count == 1 else (base, (count,)))
    return np.dtype({"names": names, "formats": formats})  # packed: no padding, as Blender


def field_offset(data_types: int, bit: int) -> int:
    """Byte offset of BPHYS data ``bit`` inside one record."""
    dtype = record_dtype(data_types)
    return dtype.fields[_FIELDS[bit][0]][1]


def file_size(totpoint: int, data_types: int) -> int:
    """Bytes of an uncompressed .bphys file of ``totpoint`` records."""
    return _HEADER_BYTES + totpoint * record_dtype(data_types).itemsize


def cache_filename(name: str, frame: int, index: int = 0) -> str:
    """Blender's file name for one cached frame: ``<name>_<frame:06d>_<index:02d>.bphys``."""
    return f"{name}_{frame:06d}_{index:02d}{EXTENSION}"


@dataclass
class CacheFrame:
    """One .bphys file: its point-cache type, flags and records (a numpy structured array)."""
    cache_type: int
    flags: int
    data_types: int
    records: np.ndarray


def encode_frame(records: np.ndarray, data_types: int,
                 cache_type: int = PTCACHE_TYPE_PARTICLES) -> bytes:
    """Bytes of an uncompressed .bphys file holding ``records`` (dtype record_dtype(data_types))."""
    if records.dtype != record_dtype(data_types):
        raise ValueError("records do not match data_types")
    header = np.array([cache_type, len(records), data_types], dtype="<u4").tobytes()
    return MAGIC + header + records.tobytes()


def write_frame(path: str, records: np.ndarray, data_types: int,
                cache_type: int = PTCACHE_TYPE_PARTICLES) -> None:
    """Write one .bphys file (replaced atomically: written beside, then renamed)."""
    temp_path = path + ".tmp"
    with open(temp_path, "wb") as handle:
        handle.write(encode_frame(records, data_types, cache_type))
    os.replace(temp_path, path)


def decode_frame(data: bytes) -> CacheFrame:
    """Parse the bytes of an uncompressed .bphys file."""
    if len(data) < _HEADER_BYTES or data[:8] != MAGIC:
        raise ValueError("not a Blender point-cache file (no BPHYSICS header)")
    typeflag, totpoint, data_types = np.frombuffer(data, dtype="<u4", count=3, offset=8)
    typeflag, totpoint, data_types = int(typeflag), int(totpoint), int(data_types)
    flags = typeflag & ~PTCACHE_TYPEFLAG_TYPEMASK
    if flags & PTCACHE_TYPEFLAG_COMPRESS:
        raise ValueError("compressed point-cache files are not supported; bake uncompressed")
    dtype = record_dtype(data_types)
    need = _HEADER_BYTES + totpoint * dtype.itemsize
    if len(data) < need:
        raise ValueError(f"truncated point-cache file: {len(data)} bytes, need {need}")
    records = np.frombuffer(data, dtype=dtype, count=totpoint, offset=_HEADER_BYTES).copy()
    return CacheFrame(typeflag & PTCACHE_TYPEFLAG_TYPEMASK, flags, data_types, records)


def read_frame(path: str) -> CacheFrame:
    """Read one uncompressed .bphys file."""
    with open(path, "rb") as handle:
        return decode_frame(handle.read())


def flake_records(positions: np.ndarray, velocities: np.ndarray, birth: np.ndarray,
                  death: np.ndarray, lifetime: np.ndarray) -> np.ndarray:
    """Records of a flake frame: every particle, index order. Positions (N,3) m, velocities
    (N,3) in the cache's velocity unit, birth/death/lifetime (N,) frames."""
    count = len(positions)
    records = np.empty(count, dtype=record_dtype(FLAKE_FRAME_TYPES))
    records["index"] = np.arange(count, dtype=np.uint32)
    records["location"] = positions
    records["velocity"] = velocities
    records["times"][:, 0] = birth
    records["times"][:, 1] = death
    records["times"][:, 2] = lifetime
    return records


TIMES_BIRTH, TIMES_DEATH, TIMES_LIFETIME = 0, 1, 2


def set_times(path: str, indices: np.ndarray, column: int, value: float) -> None:
    """Overwrite, in place, one column of BPHYS_DATA_TIMES (TIMES_BIRTH, TIMES_DEATH or
    TIMES_LIFETIME, in frames) for particles ``indices`` of an existing flake-frame file whose
    records are one per particle in index order."""
    header = np.fromfile(path, dtype="<u4", count=5, offset=0)
    if header[:2].tobytes() != MAGIC:
        raise ValueError(f"{path}: not a Blender point-cache file")
    totpoint, data_types = int(header[3]), int(header[4])
    if not data_types & (1 << BPHYS_DATA_TIMES):
        raise ValueError(f"{path}: the records hold no times")
    indices = np.asarray(indices, dtype=np.int64)
    mapped = np.memmap(path, dtype=record_dtype(data_types), mode="r+", offset=_HEADER_BYTES,
                       shape=(totpoint,))
    try:
        if data_types & (1 << BPHYS_DATA_INDEX) and \
                not (mapped["index"][indices] == indices).all():
            raise ValueError(f"{path}: records are not one per particle in index order")
        mapped["times"][indices, column] = value
        mapped.flush()
    finally:
        del mapped
