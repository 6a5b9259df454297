"""Blender point-cache files (.bphys) for particle systems: a pure-Python writer and reader.

No bpy here: the engine, tests and a farm script can write or inspect a flake cache without
Blender. The layout follows Blender's ``blenkernel/intern/pointcache.cc`` (unchanged since
2.5x and still what Blender 5.0 reads):

    char[8]  "BPHYSICS"
    uint32   typeflag      PTCACHE_TYPE_* in the low 16 bits, PTCACHE_TYPEFLAG_* above
    uint32   totpoint      number of records in this file
    uint32   data_types    bit i set = BPHYS_DATA i present
    records  uncompressed (no PTCACHE_TYPEFLAG_COMPRESS): totpoint records, each holding the
             present BPHYS_DATA fields in index order, interleaved per point
    fields   compressed (PTCACHE_TYPEFLAG_COMPRESS): per present BPHYS_DATA field, in index
             order, one array of all points:
               uint8  compression   0 none, 1 LZO, 2 LZMA, 3 Zstd on filtered bytes
               if 0:  the raw array (totpoint * field size bytes)
               else:  uint32 size, size bytes; for LZMA then uint32 props size, props

Which compression a Blender reads (``ptcache_file_compressed_read``): 4.2 to 4.5 read LZO (1)
and LZMA (2, LzmaLib: raw LZMA1 stream, 5-byte props); 5.0 removed both and reads Zstd (3:
the bytes "transposed" (byte 0 of every item, then byte 1, ...) and each byte stream delta
coded, ``BLI_compression.hh`` ``filter_transpose_delta``, then Zstd; plus 4 and 8, unfiltered
Zstd, from the 5.0 alphas). Every version reads uncompressed files. ``compression_for``
picks the format a given Blender version reads; this module writes and reads 0, 2, 3, 4, 8.

Numbers are little-endian (Blender writes native order; every platform it ships on is
little-endian). File names: ``<name>_<frame:06d>_<index:02d>.bphys``; frame 0 is the
"info" file that holds only BPHYS_DATA_TIMES for every particle. Without BPHYS_DATA_INDEX
the i-th point of a file is particle i.
"""
from __future__ import annotations

import lzma
import os
from dataclasses import dataclass

import numpy as np

from ..snow_addon.bake_cache import write_atomic

MAGIC = b"BPHYSICS"
EXTENSION = ".bphys"

PTCACHE_TYPE_PARTICLES = 1
PTCACHE_TYPEFLAG_COMPRESS = 1 << 16
PTCACHE_TYPEFLAG_EXTRADATA = 1 << 17
PTCACHE_TYPEFLAG_TYPEMASK = 0x0000FFFF

COMPRESS_NONE = 0
COMPRESS_LZO = 1            # Blender <= 4.5 (not written or read here: no LZO in Python)
COMPRESS_LZMA = 2           # Blender <= 4.5
COMPRESS_ZSTD_FILTERED = 3  # Blender >= 5.0
COMPRESS_ZSTD_FAST = 4      # 5.0 alphas; 5.0 still reads it
COMPRESS_ZSTD_SLOW = 8      # 5.0 alphas; 5.0 still reads it
_ZSTD = (COMPRESS_ZSTD_FILTERED, COMPRESS_ZSTD_FAST, COMPRESS_ZSTD_SLOW)
#: Zstd level of the filtered format (Blender itself writes level 3).
ZSTD_LEVEL = 3

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


def field_dtype(bit: int) -> np.dtype:
    """numpy type of one point's BPHYS data ``bit`` (e.g. (3,) float32 for a location)."""
    _name, base, count = _FIELDS[bit]
    return np.dtype(base) if count == 1 else np.dtype((base, (count,)))


def present_fields(data_types: int) -> list[int]:
    """The BPHYS data bits set in ``data_types``, in file order."""
    bits = [bit for bit in range(8) if data_types & (1 << bit)]
    for bit in bits:
        if bit not in _FIELDS:
            raise ValueError(f"BPHYS data type {bit} (boids) is not supported")
    return bits


def compression_for(blender_version) -> int:
    """The compressed format the Blender ``blender_version`` (a tuple like (4, 2, 0)) reads:
    Zstd on filtered bytes from 5.0 on, LZMA before."""
    return COMPRESS_ZSTD_FILTERED if tuple(blender_version) >= (5, 0, 0) else COMPRESS_LZMA


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
    """Write one uncompressed .bphys file (replaced atomically: written beside, then renamed)."""
    write_atomic(path, encode_frame(records, data_types, cache_type))


# --- compressed files ------------------------------------------------------------------------

def filter_transpose_delta(raw: np.ndarray, item_size: int) -> np.ndarray:
    """Blender's ``filter_transpose_delta``: byte b of every item, for b = 0 .. item_size-1,
    each byte stream delta coded (uint8, wrapping). ``raw``: uint8 array of items."""
    items = raw.reshape(-1, item_size).T
    out = np.empty(items.shape, np.uint8)
    if items.shape[1]:
        out[:, 0] = items[:, 0]
        np.subtract(items[:, 1:], items[:, :-1], out=out[:, 1:])
    return out.reshape(-1)


def unfilter_transpose_delta(filtered: np.ndarray, item_size: int) -> np.ndarray:
    """Inverse of ``filter_transpose_delta``: uint8 items, interleaved again."""
    streams = filtered.reshape(item_size, -1)
    return np.cumsum(streams, axis=1, dtype=np.uint8).T.reshape(-1)


def _lzma_filters(props: bytes) -> list:
    """liblzma filter chain of LzmaLib's 5-byte props (lc/lp/pb byte, dictionary size)."""
    if len(props) != 5 or props[0] >= 9 * 5 * 5:
        raise ValueError("bad LZMA properties")
    lc, rest = props[0] % 9, props[0] // 9
    lp, pb = rest % 5, rest // 5
    dict_size = max(int.from_bytes(props[1:5], "little"), 4096)
    return [{"id": lzma.FILTER_LZMA1, "lc": lc, "lp": lp, "pb": pb, "dict_size": dict_size}]


#: LZMA settings for float arrays: literal coding by byte position in a 4-byte word.
_LZMA_LC, _LZMA_LP, _LZMA_PB, _LZMA_DICT = 0, 2, 2, 1 << 22


def compress_field(raw: np.ndarray, item_size: int, compression: int) -> list:
    """The byte chunks of one field of a compressed file (``raw``: uint8 array of all
    points' values of the field)."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if compression == COMPRESS_NONE:
        return [b"\x00", raw.tobytes()]
    if compression in _ZSTD:
        import zstandard

        data = filter_transpose_delta(raw, item_size) if compression == COMPRESS_ZSTD_FILTERED \
            else raw
        payload = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
        return [bytes([compression]), np.uint32(len(payload)).astype("<u4").tobytes(), payload]
    if compression == COMPRESS_LZMA:
        props = bytes([(_LZMA_PB * 5 + _LZMA_LP) * 9 + _LZMA_LC]) + \
            _LZMA_DICT.to_bytes(4, "little")
        payload = lzma.compress(raw.tobytes(), format=lzma.FORMAT_RAW,
                                filters=_lzma_filters(props))
        return [bytes([compression]), np.uint32(len(payload)).astype("<u4").tobytes(), payload,
                np.uint32(len(props)).astype("<u4").tobytes(), props]
    raise ValueError(f"point-cache compression {compression} is not supported here")


def encode_compressed(fields: dict, totpoint: int, compression: int,
                      cache_type: int = PTCACHE_TYPE_PARTICLES) -> list:
    """Byte chunks of a compressed .bphys file. ``fields``: BPHYS data bit -> array of
    ``totpoint`` values of ``field_dtype(bit)`` (e.g. (N, 3) float32 locations)."""
    data_types = 0
    for bit in fields:
        data_types |= 1 << bit
    chunks = [MAGIC, np.array([cache_type | PTCACHE_TYPEFLAG_COMPRESS, totpoint, data_types],
                              dtype="<u4").tobytes()]
    for bit in present_fields(data_types):
        dtype = field_dtype(bit)
        values = np.ascontiguousarray(fields[bit], dtype=dtype.base)
        if values.size != totpoint * max(1, int(np.prod(dtype.shape))):
            raise ValueError(f"field {_FIELDS[bit][0]} has {values.size} values for "
                             f"{totpoint} points")
        chunks.extend(compress_field(values.view(np.uint8), dtype.itemsize, compression))
    return chunks


def _decompress_field(data, offset: int, totpoint: int, bit: int):
    """(uint8 array of the field, offset after it) from a compressed file's bytes."""
    size = totpoint * field_dtype(bit).itemsize
    name = _FIELDS[bit][0]
    if offset >= len(data):
        raise ValueError(f"truncated point-cache file: field {name} is missing")
    mode = data[offset]
    offset += 1
    if mode == COMPRESS_NONE:
        if offset + size > len(data):
            raise ValueError(f"truncated point-cache file: field {name} needs {size} bytes")
        return np.frombuffer(data, np.uint8, size, offset), offset + size
    if offset + 4 > len(data):
        raise ValueError(f"truncated point-cache file: field {name} has no size")
    length = int.from_bytes(data[offset:offset + 4], "little")
    offset += 4
    if offset + length > len(data):
        raise ValueError(f"truncated point-cache file: field {name} needs {length} bytes, "
                         f"{len(data) - offset} left")
    payload = bytes(data[offset:offset + length])
    offset += length
    try:
        if mode in _ZSTD:
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
        elif mode == COMPRESS_LZMA:
            props_len = int.from_bytes(data[offset:offset + 4], "little")
            if offset + 4 + props_len > len(data):
                raise ValueError("truncated LZMA properties")
            props = bytes(data[offset + 4:offset + 4 + props_len])
            offset += 4 + props_len
            decompressor = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=_lzma_filters(props))
            raw = decompressor.decompress(payload, max_length=size)
        else:
            raise ValueError(f"compression {mode} is not supported")
    except (lzma.LZMAError, ValueError, RuntimeError) as error:
        raise ValueError(f"field {name} does not decompress ({error})") from None
    except Exception as error:   # zstandard.ZstdError
        raise ValueError(f"field {name} does not decompress ({error})") from None
    if len(raw) != size:
        raise ValueError(f"field {name} decompresses to {len(raw)} bytes, need {size}")
    raw = np.frombuffer(raw, np.uint8)
    if mode == COMPRESS_ZSTD_FILTERED:
        raw = unfilter_transpose_delta(raw, field_dtype(bit).itemsize)
    return raw, offset


def decode_frame(data: bytes) -> CacheFrame:
    """Parse the bytes of a .bphys file (uncompressed, or compressed with LZMA or Zstd).
    Raises ValueError for anything that is not a complete point-cache file."""
    if len(data) < _HEADER_BYTES or data[:8] != MAGIC:
        raise ValueError("not a Blender point-cache file (no BPHYSICS header)")
    typeflag, totpoint, data_types = np.frombuffer(data, dtype="<u4", count=3, offset=8)
    typeflag, totpoint, data_types = int(typeflag), int(totpoint), int(data_types)
    flags = typeflag & ~PTCACHE_TYPEFLAG_TYPEMASK
    if flags & PTCACHE_TYPEFLAG_EXTRADATA:
        raise ValueError("point-cache files with extra data are not supported")
    dtype = record_dtype(data_types)
    if flags & PTCACHE_TYPEFLAG_COMPRESS:
        records = np.empty(totpoint, dtype=dtype)
        offset = _HEADER_BYTES
        for bit in present_fields(data_types):
            raw, offset = _decompress_field(data, offset, totpoint, bit)
            records[_FIELDS[bit][0]] = raw.view(field_dtype(bit).base).reshape(
                records[_FIELDS[bit][0]].shape)
        if offset != len(data):
            raise ValueError(f"point-cache file has {len(data) - offset} bytes after its data")
        return CacheFrame(typeflag & PTCACHE_TYPEFLAG_TYPEMASK, flags, data_types, records)
    need = _HEADER_BYTES + totpoint * dtype.itemsize
    if len(data) != need:
        raise ValueError(f"truncated point-cache file: {len(data)} bytes, need {need}"
                         if len(data) < need else
                         f"point-cache file has {len(data) - need} bytes after its data")
    records = np.frombuffer(data, dtype=dtype, count=totpoint, offset=_HEADER_BYTES).copy()
    return CacheFrame(typeflag & PTCACHE_TYPEFLAG_TYPEMASK, flags, data_types, records)


def read_frame(path: str) -> CacheFrame:
    """Read one .bphys file (any format ``decode_frame`` reads)."""
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
