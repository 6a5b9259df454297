"""Minimal OpenEXR writer and reader for float32 heightmaps (numpy and zlib only).

Writes single-part scanline files with FLOAT channels and ZIP compression (16 scanlines a
block: bytes split into even and odd halves, delta predictor, zlib), the layout every
OpenEXR reader (Blender's image loader included) reads. The reader reads what the writer
writes (NONE, ZIPS or ZIP compression, FLOAT channels) and refuses anything else with
ValueError. Row 0 of an array is the image's bottom row (Blender's convention: v = 0), so
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


def _attribute(name: str, kind: str, value: bytes) -> bytes:
    return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) + value


def _zip_encode(raw: bytes) -> bytes:
    data = np.frombuffer(raw, np.uint8)
    split = np.concatenate([data[0::2], data[1::2]])
    predicted = split.copy()
    predicted[1:] = (split[1:].astype(np.int16) - split[:-1] + 128).astype(np.uint8)
    return zlib.compress(predicted.tobytes(), 4)


def _zip_decode(data: bytes, size: int) -> bytes:
    try:
        predicted = np.frombuffer(zlib.decompress(data), np.uint8)
    except zlib.error as error:
        raise ValueError(f"a ZIP block does not decompress ({error})") from None
    if len(predicted) != size:
        raise ValueError(f"a ZIP block holds {len(predicted)} bytes, need {size}")
    running = np.cumsum(predicted.astype(np.int64) - 128) + 128     # undo the predictor
    split = (running % 256).astype(np.uint8)
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


def decode(data: bytes) -> dict:
    """name -> (height, width) float32 array (row 0 the bottom row) of an EXR file written
    by ``encode`` (or any scanline file with FLOAT channels and NONE/ZIPS/ZIP)."""
    if data[:4] != MAGIC:
        raise ValueError("not an OpenEXR file")
    if struct.unpack_from("<i", data, 4)[0] & ~0xFF != 0:
        raise ValueError("only single-part scanline OpenEXR files are read")
    pos, attributes = 8, {}
    try:
        while data[pos] != 0:
            end = data.index(b"\0", pos)
            name = data[pos:end].decode()
            end2 = data.index(b"\0", end + 1)
            size = struct.unpack_from("<i", data, end2 + 1)[0]
            start = end2 + 5
            attributes[name] = data[start:start + size]
            pos = start + size
    except (IndexError, ValueError, struct.error) as error:
        raise ValueError(f"truncated OpenEXR header ({error})") from None
    pos += 1
    try:
        compression = attributes["compression"][0]
        xmin, ymin, xmax, ymax = struct.unpack("<iiii", attributes["dataWindow"])
        chlist = attributes["channels"]
    except (KeyError, struct.error):
        raise ValueError("OpenEXR header without channels, compression or dataWindow") from None
    if compression not in _LINES:
        raise ValueError(f"OpenEXR compression {compression} is not read here")
    names, cpos = [], 0
    while chlist[cpos] != 0:
        end = chlist.index(b"\0", cpos)
        names.append(chlist[cpos:end].decode())
        if struct.unpack_from("<i", chlist, end + 1)[0] != FLOAT:
            raise ValueError("only FLOAT OpenEXR channels are read here")
        cpos = end + 17
    width, height = xmax - xmin + 1, ymax - ymin + 1
    lines = _LINES[compression]
    count = (height + lines - 1) // lines
    if pos + 8 * count > len(data):
        raise ValueError("truncated OpenEXR offset table")
    offsets = struct.unpack_from(f"<{count}Q", data, pos)
    out = np.empty((height, len(names), width), "<f4")
    for index, offset in enumerate(offsets):
        if offset + 8 > len(data):
            raise ValueError("truncated OpenEXR file")
        y, size = struct.unpack_from("<ii", data, offset)
        rows = min(lines, height - (y - ymin))
        need = rows * len(names) * width * 4
        block = data[offset + 8:offset + 8 + size]
        if len(block) != size:
            raise ValueError("truncated OpenEXR file")
        raw = block if size == need else _zip_decode(block, need)
        start = y - ymin
        out[start:start + rows] = np.frombuffer(raw, "<f4").reshape(rows, len(names), width)
    return {name: np.ascontiguousarray(np.flipud(out[:, k, :])) for k, name in enumerate(names)}
