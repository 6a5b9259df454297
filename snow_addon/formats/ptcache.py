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

from ..bake_cache import BakeCacheError, write_atomic

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

#: Largest ratio of decompressed to compressed bytes a field may claim (Zstd: one 128 KiB
#: RLE block in 4 bytes, 32768:1; LZMA about 7000:1), with room to spare. A header whose
#: point count needs more than this from the bytes in the file is refused before anything
#: is decompressed or allocated.
MAX_COMPRESSION_RATIO = 1 << 16
#: Every BPHYS data bit this module knows (boids, bit 7, are refused by name).
_KNOWN_BITS = 0xFF


class PointCacheError(BakeCacheError):
    """Bytes that are not a complete point-cache file this module reads (truncated,
    corrupt, a header that does not match the file, or a format it does not read). The
    message names the file (or "the point-cache data" for bytes with no file)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"'{where}' is not a readable point-cache file ({problem})"
                         if where else f"the point-cache data is not readable ({problem})",
                         "baking again (the file is corrupt, truncated or from another "
                         "program)", where)


#: What a flake frame holds: index, location, velocity and (birth, death, lifetime) times.
FLAKE_FRAME_TYPES = (1 << BPHYS_DATA_INDEX) | (1 << BPHYS_DATA_LOCATION) | \
    (1 << BPHYS_DATA_VELOCITY) | (1 << BPHYS_DATA_TIMES)
#: What Blender's info file (frame 0) holds: the times of every particle.
INFO_FRAME_TYPES = 1 << BPHYS_DATA_TIMES


def record_dtype(data_types: int) -> np.dtype:
    """Packed numpy record type of one point for a ``data_types`` bit mask."""
    names, formats = [], []
    if data_types & ~_KNOWN_BITS:
        raise ValueError(f"BPHYS data types {data_types:#x} name unknown fields")
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


def _lzma_filters(props: bytes, output_size: int | None = None) -> list:
    """liblzma filter chain of LzmaLib's 5-byte props (lc/lp/pb byte, dictionary size).
    ``output_size``: the bytes the stream may decode to; the dictionary (which liblzma
    allocates whole) is no larger, whatever the props claim (no match reaches further
    back than the output)."""
    if len(props) != 5 or props[0] >= 9 * 5 * 5:
        raise ValueError("bad LZMA properties")
    lc, rest = props[0] % 9, props[0] // 9
    lp, pb = rest % 5, rest // 5
    dict_size = max(int.from_bytes(props[1:5], "little"), 4096)
    if output_size is not None:
        dict_size = min(dict_size, max(output_size, 4096))
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


def _zstd_decompress(payload: bytes, size: int) -> bytes:
    """At most ``size`` + 1 bytes of a Zstd frame, read as a stream (the frame's own
    content size is not trusted for an allocation)."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=False)
    chunks, total = [], 0
    with reader:
        while total <= size:
            chunk = reader.read(min(size + 1 - total, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    return b"".join(chunks)


def _decompress_field(data, offset: int, totpoint: int, bit: int, where: str = ""):
    """(uint8 array of the field, offset after it) from a compressed file's bytes. Sizes
    are checked against the bytes left before anything is decompressed; a field never
    decompresses to more than its ``totpoint`` values."""
    size = totpoint * field_dtype(bit).itemsize
    name = _FIELDS[bit][0]

    def bad(problem):
        return PointCacheError(where, f"field {name}: {problem}")

    if offset >= len(data):
        raise bad("missing (truncated file)")
    mode = data[offset]
    offset += 1
    if mode == COMPRESS_NONE:
        if offset + size > len(data):
            raise bad(f"{totpoint} points need {size} bytes, {len(data) - offset} left "
                      "(truncated file, or a header that does not match it)")
        return np.frombuffer(data, np.uint8, size, offset), offset + size
    if mode not in _ZSTD and mode != COMPRESS_LZMA:
        raise bad(f"compression {mode} is not read here")
    if offset + 4 > len(data):
        raise bad("no compressed size (truncated file)")
    length = int.from_bytes(data[offset:offset + 4], "little")
    offset += 4
    if offset + length > len(data):
        raise bad(f"claims {length} compressed bytes, {len(data) - offset} left (truncated)")
    if size > max(length, 1) * MAX_COMPRESSION_RATIO:
        raise bad(f"{totpoint} points ({size:,} bytes) cannot come from {length} compressed "
                  "bytes (a header that does not match the file)")
    payload = bytes(data[offset:offset + length])
    offset += length
    try:
        if mode in _ZSTD:
            raw = _zstd_decompress(payload, size)
        else:
            if offset + 4 > len(data):
                raise bad("no LZMA properties (truncated file)")
            props_len = int.from_bytes(data[offset:offset + 4], "little")
            if offset + 4 + props_len > len(data):
                raise bad("truncated LZMA properties")
            props = bytes(data[offset + 4:offset + 4 + props_len])
            offset += 4 + props_len
            decompressor = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=_lzma_filters(props, size))
            raw = decompressor.decompress(payload, max_length=size)
    except PointCacheError:
        raise
    except MemoryError:
        raise
    except Exception as error:   # lzma.LZMAError, zstandard.ZstdError, bad LZMA properties
        raise bad(f"does not decompress ({type(error).__name__}: {error})") from None
    if len(raw) != size:
        raise bad(f"decompresses to {len(raw)} bytes, {totpoint} points need {size}")
    raw = np.frombuffer(raw, np.uint8)
    if mode == COMPRESS_ZSTD_FILTERED:
        raw = unfilter_transpose_delta(raw, field_dtype(bit).itemsize)
    return raw, offset


def _header(data, where: str) -> tuple[int, int, int, np.dtype]:
    """(typeflag, totpoint, data_types, record dtype) of a file's first 20 bytes."""
    if len(data) < _HEADER_BYTES or bytes(data[:8]) != MAGIC:
        raise PointCacheError(where, "no BPHYSICS header")
    typeflag, totpoint, data_types = (int(v) for v in np.frombuffer(data, "<u4", 3, 8))
    if typeflag & PTCACHE_TYPEFLAG_EXTRADATA:
        raise PointCacheError(where, "point-cache files with extra data are not read here")
    try:
        dtype = record_dtype(data_types)
    except ValueError as error:
        raise PointCacheError(where, str(error)) from None
    if dtype.itemsize == 0:
        raise PointCacheError(where, "the header names no data fields")
    return typeflag, totpoint, data_types, dtype


def decode_frame(data: bytes, path: str = "") -> CacheFrame:
    """Parse the bytes of a .bphys file (uncompressed, or compressed with LZMA or Zstd).
    The header's point count is checked against the file's length before any array is
    allocated. Raises PointCacheError (a ValueError naming ``path``) for anything that is
    not a complete point-cache file."""
    typeflag, totpoint, data_types, dtype = _header(data, path)
    flags = typeflag & ~PTCACHE_TYPEFLAG_TYPEMASK
    if flags & PTCACHE_TYPEFLAG_COMPRESS:
        offset, fields = _HEADER_BYTES, []
        for bit in present_fields(data_types):
            raw, offset = _decompress_field(data, offset, totpoint, bit, path)
            fields.append((bit, raw))
        if offset != len(data):
            raise PointCacheError(path, f"{len(data) - offset} bytes after its data")
        records = np.empty(totpoint, dtype=dtype)   # no more than the fields just read
        for bit, raw in fields:
            column = records[_FIELDS[bit][0]]
            column[...] = raw.view(field_dtype(bit).base).reshape(column.shape)
        return CacheFrame(typeflag & PTCACHE_TYPEFLAG_TYPEMASK, flags, data_types, records)
    need = _HEADER_BYTES + totpoint * dtype.itemsize
    if len(data) != need:
        raise PointCacheError(path, f"{len(data)} bytes, its header's {totpoint} points "
                              f"need {need}" + (" (truncated)" if len(data) < need else ""))
    records = np.frombuffer(data, dtype=dtype, count=totpoint, offset=_HEADER_BYTES).copy()
    return CacheFrame(typeflag & PTCACHE_TYPEFLAG_TYPEMASK, flags, data_types, records)


def read_frame(path: str) -> CacheFrame:
    """Read one .bphys file (any format ``decode_frame`` reads); PointCacheError naming the
    file when it is missing, unreadable or not such a file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise PointCacheError(path, "the file is missing") from None
    except OSError as error:
        raise PointCacheError(path, f"cannot be read: {error.strerror}") from None
    return decode_frame(data, path)


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
    TIMES_LIFETIME, in frames) for particles ``indices`` of an existing uncompressed
    flake-frame file whose records are one per particle in index order. PointCacheError
    naming the file when its header does not match its size."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEADER_BYTES)
        actual = os.path.getsize(path)
    except OSError as error:
        raise PointCacheError(path, f"cannot be read: {error.strerror}") from None
    typeflag, totpoint, data_types, dtype = _header(head, path)
    if typeflag & PTCACHE_TYPEFLAG_COMPRESS:
        raise PointCacheError(path, "compressed files cannot be edited in place")
    if not data_types & (1 << BPHYS_DATA_TIMES):
        raise PointCacheError(path, "the records hold no times")
    if actual != _HEADER_BYTES + totpoint * dtype.itemsize:
        raise PointCacheError(path, f"{actual} bytes, its header's {totpoint} points need "
                              f"{_HEADER_BYTES + totpoint * dtype.itemsize}")
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= totpoint):
        raise ValueError(f"{path}: particle indices must lie in [0, {totpoint})")
    if totpoint == 0:
        return
    mapped = np.memmap(path, dtype=dtype, mode="r+", offset=_HEADER_BYTES, shape=(totpoint,))
    try:
        if data_types & (1 << BPHYS_DATA_INDEX) and \
                not (mapped["index"][indices] == indices).all():
            raise PointCacheError(path, "records are not one per particle in index order")
        mapped["times"][indices, column] = value
        mapped.flush()
    finally:
        del mapped
