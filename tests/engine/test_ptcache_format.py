"""The .bphys writer/reader: Blender's byte layout, exact round trips, in-place time edits."""
import numpy as np
import pytest

from snowfall.snow_addon.formats import ptcache as pf


def _flake_records(count, seed=0):
    rng = np.random.default_rng(seed)
    pos = rng.standard_normal((count, 3)).astype(np.float32)
    vel = rng.standard_normal((count, 3)).astype(np.float32)
    return pf.flake_records(pos, vel, np.zeros(count), np.full(count, 1e7), np.full(count, 1e7))


def test_byte_layout_matches_blender():
    """Header BPHYSICS, typeflag, totpoint, data_types, then per point index (u32),
    location, velocity, times (3 f32 each), little-endian, packed: 40 bytes a point."""
    records = pf.flake_records(np.array([[1.0, 2.0, 3.0]], np.float32),
                               np.array([[4.0, 5.0, 6.0]], np.float32),
                               np.array([7.0]), np.array([8.0]), np.array([9.0]))
    data = pf.encode_frame(records, pf.FLAKE_FRAME_TYPES)
    expected = (b"BPHYSICS" + np.array([1, 1, 0b1000111], "<u4").tobytes()
                + np.array([0], "<u4").tobytes()
                + np.arange(1, 10, dtype="<f4").tobytes())
    assert data == expected
    assert pf.file_size(1, pf.FLAKE_FRAME_TYPES) == len(data) == 20 + 40


def test_round_trip_is_exact(tmp_path):
    records = _flake_records(1000)
    path = str(tmp_path / pf.cache_filename("flakes", 12, 0))
    assert path.endswith("flakes_000012_00.bphys")
    pf.write_frame(path, records, pf.FLAKE_FRAME_TYPES)
    frame = pf.read_frame(path)
    assert frame.cache_type == pf.PTCACHE_TYPE_PARTICLES and frame.flags == 0
    assert frame.data_types == pf.FLAKE_FRAME_TYPES
    assert frame.records.tobytes() == records.tobytes()


def test_set_times_edits_only_the_chosen_particles(tmp_path):
    records = _flake_records(50, seed=1)
    path = str(tmp_path / "f.bphys")
    pf.write_frame(path, records, pf.FLAKE_FRAME_TYPES)
    pf.set_times(path, np.array([3, 17]), pf.TIMES_BIRTH, 42.0)
    after = pf.read_frame(path).records
    expected = records.copy()
    expected["times"][[3, 17], 0] = 42.0
    assert after.tobytes() == expected.tobytes()


def test_bad_files_are_refused(tmp_path):
    with pytest.raises(ValueError):
        pf.decode_frame(b"NOTBPHYS" + bytes(12))
    data = pf.encode_frame(_flake_records(4), pf.FLAKE_FRAME_TYPES)
    with pytest.raises(ValueError):
        pf.decode_frame(data[:-1])                      # truncated
    compressed = bytearray(data)      # claims compression: the fields do not parse
    compressed[8:12] = np.array([1 | pf.PTCACHE_TYPEFLAG_COMPRESS], "<u4").tobytes()
    with pytest.raises(ValueError):
        pf.decode_frame(bytes(compressed))
    with pytest.raises(ValueError):
        pf.encode_frame(_flake_records(4), pf.INFO_FRAME_TYPES)   # records do not match


def test_filter_is_blenders_transpose_delta():
    """BLI_compression.cc: byte b of every item in turn, each stream delta coded mod 256."""
    raw = np.array([1, 2, 3, 5, 7, 11, 250, 4, 9], np.uint8)      # 3 items of 3 bytes
    expected = np.array([1, 4, (250 - 5) % 256, 2, 5, (4 - 7) % 256, 3, 8, (9 - 11) % 256],
                        np.uint8)
    np.testing.assert_array_equal(pf.filter_transpose_delta(raw, 3), expected)
    np.testing.assert_array_equal(pf.unfilter_transpose_delta(expected, 3), raw)


@pytest.mark.parametrize("compression", [pf.COMPRESS_NONE, pf.COMPRESS_LZMA,
                                         pf.COMPRESS_ZSTD_FILTERED, pf.COMPRESS_ZSTD_FAST])
def test_compressed_round_trip_is_exact(compression):
    rng = np.random.default_rng(3)
    count = 1000
    pos = rng.standard_normal((count, 3)).astype(np.float32)
    vel = rng.standard_normal((count, 3)).astype(np.float32)
    times = np.zeros((count, 3), np.float32)
    data = b"".join(pf.encode_compressed({pf.BPHYS_DATA_LOCATION: pos,
                                          pf.BPHYS_DATA_VELOCITY: vel,
                                          pf.BPHYS_DATA_TIMES: times}, count, compression))
    header = np.frombuffer(data[8:20], "<u4")
    assert header[0] == pf.PTCACHE_TYPE_PARTICLES | pf.PTCACHE_TYPEFLAG_COMPRESS
    assert header[1] == count and header[2] == 0b1000110            # no index field
    assert data[20] == compression                                   # first field's mode
    frame = pf.decode_frame(data)
    assert frame.records["location"].tobytes() == pos.tobytes()
    assert frame.records["velocity"].tobytes() == vel.tobytes()
    for cut in (len(data) - 1, len(data) // 2, 21):
        with pytest.raises(ValueError):
            pf.decode_frame(data[:cut])
    with pytest.raises(ValueError):
        pf.decode_frame(data + b"\0")


def test_lzma_field_layout_is_blender_4x():
    """uint8 2, uint32 size, the raw LZMA1 stream, uint32 5, LzmaLib's 5 props bytes."""
    values = np.arange(300, dtype=np.float32)
    chunks = pf.compress_field(values.view(np.uint8), 4, pf.COMPRESS_LZMA)
    assert chunks[0] == b"\x02"
    assert int.from_bytes(chunks[1], "little") == len(chunks[2])
    assert int.from_bytes(chunks[3], "little") == 5 and len(chunks[4]) == 5
    assert chunks[4][0] == (2 * 5 + 2) * 9 + 0          # pb 2, lp 2, lc 0


def test_compression_per_blender_version():
    assert pf.compression_for((4, 2, 0)) == pf.compression_for((4, 5, 3)) == pf.COMPRESS_LZMA
    assert pf.compression_for((5, 0, 1)) == pf.compression_for((5, 2, 0)) == \
        pf.COMPRESS_ZSTD_FILTERED
