"""The OpenEXR heightmap writer/reader of the bake folder (Blender reading the files is
tested in tests/addon/test_snow_surface.py)."""
import struct

import numpy as np
import pytest

from snowfall.snow_addon import exr


@pytest.mark.parametrize("compression", [exr.NO_COMPRESSION, exr.ZIP_COMPRESSION])
def test_round_trip_is_exact(compression):
    rng = np.random.default_rng(1)
    depth = np.maximum(rng.standard_normal((37, 53)), 0).astype(np.float32)
    ground = rng.uniform(-50, 50, (37, 53)).astype(np.float32)
    ground[0, :3] = -1e30
    data = exr.encode({"R": depth, "G": ground}, compression)
    back = exr.decode(data)
    assert sorted(back) == ["G", "R"]
    np.testing.assert_array_equal(back["R"], depth)
    np.testing.assert_array_equal(back["G"], ground)


def test_header_is_a_scanline_exr():
    data = exr.encode({"R": np.zeros((3, 4), np.float32)})
    assert data[:4] == b"\x76\x2f\x31\x01" and struct.unpack("<i", data[4:8])[0] == 2
    for name in (b"channels\0chlist\0", b"compression\0compression\0", b"dataWindow\0box2i\0",
                 b"displayWindow\0box2i\0", b"lineOrder\0lineOrder\0"):
        assert name in data


def test_rows_start_at_the_bottom():
    """Row 0 of the array is the last scanline of the file (EXR's y grows downward)."""
    values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    data = exr.encode({"R": values}, exr.NO_COMPRESSION)
    floats = np.frombuffer(data[-2 * (8 + 8):], np.uint8)
    first_block = np.frombuffer(floats[8:16].tobytes(), "<f4")
    np.testing.assert_array_equal(first_block, [3.0, 4.0])


def test_damaged_files_are_refused():
    data = exr.encode({"R": np.ones((40, 30), np.float32)})
    with pytest.raises(ValueError):
        exr.decode(b"not an exr" + data)
    for cut in (len(data) - 5, len(data) // 2, 60):
        with pytest.raises(ValueError):
            exr.decode(data[:cut])
