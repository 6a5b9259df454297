"""Minimal OpenEXR writer and reader for float32 heightmaps (numpy and zlib only).

Writes single-part scanline files with FLOAT channels and ZIP compression (16 scanlines a
block: bytes split into even and odd halves, delta predictor, zlib), the layout every
OpenEXR reader (Blender's image loader included) reads. The reader reads what the writer
writes (NONE, ZIPS or ZIP compression, FLOAT channels) and refuses anything else with
ExrError (a ValueError): every size and count in a file is checked against the file's
length before an array is allocated. Row 0 of an array is the image's bottom row (Blender's convention: v = 0), so
a heightmap ``[j, i]`` with j growing along +Y shows the right way up.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

MAGIC = b"\x76\x2f\x31\x01"
NO_COMPRESSION, ZIPS_COMPRESSION, ZIP_COMPRESSION = 0, 2, 3
_LINES = {NO_COMPRESSION: 1, ZIPS_COMPRESSION: 1, ZIP_COMPRESSION: 16}
FLOAT = 2
#: zlib's largest compression ratio (deflate: 258-byte matches at about 2 bits each),
#: with room to spare: no ZIP block inflates to more than this times its size.
_ZLIB_MAX_RATIO = 1100


class ExrError(ValueError):
    """Bytes that are not an OpenEXR file this module reads (truncated, corrupt, lying
    sizes, or features it does not read)."""


def _attribute(name: str, kind: str, value: bytes) -> bytes:
    return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) + value


def _zip_encode(raw: bytes) -> bytes:
    data = np.frombuffer(raw, np.uint8)
    split = np.concatenate([data[0::2], data[1::2]])
    predicted = split.copy()
    predicted[1:] = (split[1:].astype(np.int16) - split[:-1] + 128).astype(np.uint8)
    return zlib.compress(predicted.tobytes(), 4)


def _zip_decode(data: bytes, size: int) -> bytes:
    """The ``size`` raw bytes of one ZIP block; ExrError when it does not decompress to
    exactly that many (never inflates more than ``size`` + 1 bytes)."""
    inflater = zlib.decompressobj()
    try:
        predicted = inflater.decompress(data, size + 1)
    except zlib.error as error:
        raise ExrError(f"a ZIP block does not decompress ({error})") from None
    if len(predicted) != size or not inflater.eof:
        raise ExrError(f"a ZIP block does not hold the {size} bytes its rows need")
    # undo the predictor: running sum of (byte - 128), + 128, all mod 256 (xor 0x80 is
    # +-128 mod 256)
    split = np.cumsum(np.frombuffer(predicted, np.uint8) ^ np.uint8(0x80), dtype=np.uint8)
    split ^= np.uint8(0x80)
    raw = np.empty_like(split)
    half = (size + 1) // 2
    raw[0::2] = split[:half]
    raw[1::2] = split[half:]
    return raw.tobytes()


def encode(channels: dict, compression: int = ZIP_COMPRESSION) -> bytes:
    """The bytes of an EXR file. ``channels``: name -> (height, width) float32 array, all
    the same shape; row 0 is the bottom row."""
    names = sorted(channels)                     # EXR stores channels in name order
    arrays = [np.flipud(np.asarray(channels[n], dtype="<f4")) for n in names]
    height, width = arrays[0].shape
    if any(a.shape != (height, width) for a in arrays):
        raise ValueError("every channel must have the same shape")
    chlist = b"".join(n.encode() + b"\0" + struct.pack("<iB3xii", FLOAT, 0, 1, 1)
                      for n in names) + b"\0"
    box = struct.pack("<iiii", 0, 0, width - 1, height - 1)
    header = (MAGIC + struct.pack("<i", 2)
              + _attribute("channels", "chlist", chlist)
              + _attribute("compression", "compression", bytes([compression]))
              + _attribute("dataWindow", "box2i", box)
              + _attribute("displayWindow", "box2i", box)
              + _attribute("lineOrder", "lineOrder", b"\0")
              + _attribute("pixelAspectRatio", "float", struct.pack("<f", 1.0))
              + _attribute("screenWindowCenter", "v2f", struct.pack("<ff", 0.0, 0.0))
              + _attribute("screenWindowWidth", "float", struct.pack("<f", 1.0)) + b"\0")
    lines = _LINES[compression]
    stacked = np.stack(arrays, axis=1)          # (height, channels, width): a scanline's layout
    blocks = []
    for y in range(0, height, lines):
        raw = stacked[y:y + lines].tobytes()
        data = _zip_encode(raw) if compression != NO_COMPRESSION else raw
        if len(data) >= len(raw):
            data = raw                           # EXR: a block that does not shrink is raw
        blocks.append(struct.pack("<ii", y, len(data)) + data)
    offset = len(header) + 8 * len(blocks)
    table = []
    for block in blocks:
        table.append(struct.pack("<Q", offset))
        offset += len(block)
    return header + b"".join(table) + b"".join(blocks)


def _header(data: bytes) -> tuple[dict, int]:
    """(attribute name -> value bytes, offset after the header) of a scanline file."""
    if len(data) < 8 or data[:4] != MAGIC:
        raise ExrError("not an OpenEXR file")
    version = struct.unpack_from("<i", data, 4)[0]
    if version & ~0xFF != 0 or version & 0xFF != 2:
        raise ExrError("only single-part scanline OpenEXR 2 files are read")
    pos, attributes = 8, {}
    try:
        while data[pos] != 0:
            end = data.index(b"\0", pos)
            name = data[pos:end].decode()
            end2 = data.index(b"\0", end + 1)
            size = struct.unpack_from("<i", data, end2 + 1)[0]
            start = end2 + 5
            if size < 0 or start + size > len(data):
                raise ExrError(f"the header attribute {name!r} claims {size} bytes, "
                               f"{len(data) - start} left in the file")
            attributes[name] = data[start:start + size]
            pos = start + size
    except (IndexError, ValueError, struct.error) as error:   # UnicodeDecodeError too
        if isinstance(error, ExrError):
            raise
        raise ExrError(f"truncated OpenEXR header ({type(error).__name__}: {error})") from None
    return attributes, pos + 1


def _channels(chlist: bytes) -> list:
    """The channel names of a chlist attribute: FLOAT, unsampled (1, 1), distinct."""
    names, cpos = [], 0
    try:
        while chlist[cpos] != 0:
            end = chlist.index(b"\0", cpos)
            name = chlist[cpos:end].decode()
            kind, _linear, xsampling, ysampling = struct.unpack_from("<iB3xii", chlist, end + 1)
            if kind != FLOAT:
                raise ExrError(f"channel {name!r} is not FLOAT (only FLOAT channels are read)")
            if (xsampling, ysampling) != (1, 1) or not name or name in names:
                raise ExrError(f"channel {name!r} is empty, repeated or subsampled")
            names.append(name)
            cpos = end + 17
    except (IndexError, ValueError, struct.error) as error:
        if isinstance(error, ExrError):
            raise
        raise ExrError(f"the channel list is truncated ({type(error).__name__}: {error})") \
            from None
    if not names:
        raise ExrError("the file has no channels")
    return names


def decode(data: bytes) -> dict:
    """name -> (height, width) float32 array (row 0 the bottom row) of an EXR file written
    by ``encode`` (or any scanline file with FLOAT channels and NONE/ZIPS/ZIP whose blocks
    come in increasing y). Every size in the file is checked against the file's length
    before anything is allocated: the arrays never take more than the pixels the file can
    hold (its length, times zlib's largest ratio for compressed blocks). ExrError (a
    ValueError) for anything else."""
    data = bytes(data)
    attributes, pos = _header(data)
    try:
        compression = attributes["compression"][0]
        xmin, ymin, xmax, ymax = struct.unpack("<iiii", attributes["dataWindow"])
        chlist = attributes["channels"]
    except (KeyError, IndexError, struct.error):
        raise ExrError("OpenEXR header without channels, compression or dataWindow") from None
    if compression not in _LINES:
        raise ExrError(f"OpenEXR compression {compression} is not read here")
    names = _channels(chlist)
    width, height = xmax - xmin + 1, ymax - ymin + 1
    if width < 1 or height < 1:
        raise ExrError(f"the data window ({xmin}, {ymin}) - ({xmax}, {ymax}) is empty")
    row_bytes = len(names) * width * 4
    ratio = 1 if compression == NO_COMPRESSION else _ZLIB_MAX_RATIO
    if height * row_bytes > len(data) * ratio:
        raise ExrError(f"the header claims {width} x {height} pixels of {len(names)} channels "
                       f"({height * row_bytes:,} bytes), more than the file's {len(data):,} "
                       "bytes can hold")
    lines = _LINES[compression]
    count = (height + lines - 1) // lines
    if pos + 8 * count > len(data):
        raise ExrError(f"truncated OpenEXR offset table ({count} blocks)")
    offsets = struct.unpack_from(f"<{count}Q", data, pos)
    blocks = []
    for index, offset in enumerate(offsets):
        if offset + 8 > len(data):
            raise ExrError(f"block {index} lies past the end of the file (truncated)")
        y, size = struct.unpack_from("<ii", data, offset)
        if y != ymin + index * lines:
            raise ExrError(f"block {index} holds row {y}, not {ymin + index * lines}")
        rows = min(lines, height - index * lines)
        need = rows * row_bytes
        if size < 0 or offset + 8 + size > len(data):
            raise ExrError(f"block {index} claims {size} bytes, {len(data) - offset - 8} left "
                           "(truncated)")
        if size > need or (size < need and (compression == NO_COMPRESSION
                                            or need > size * _ZLIB_MAX_RATIO + 64)):
            raise ExrError(f"block {index} has {size} bytes for {need} bytes of pixels")
        blocks.append((offset + 8, size, rows, need))
    out = np.empty((height, len(names), width), "<f4")
    row = 0
    for start, size, rows, need in blocks:
        block = data[start:start + size]
        raw = block if size == need else _zip_decode(block, need)
        out[row:row + rows] = np.frombuffer(raw, "<f4").reshape(rows, len(names), width)
        row += rows
    return {name: np.ascontiguousarray(np.flipud(out[:, k, :])) for k, name in enumerate(names)}
