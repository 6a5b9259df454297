"""The .bphys writer/reader: Blender's byte layout, exact round trips, in-place time edits."""
import numpy as np
import pytest

from snowfall.operators import ptcache_format as pf


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
    compressed = bytearray(data)
    compressed[8:12] = np.array([1 | pf.PTCACHE_TYPEFLAG_COMPRESS], "<u4").tobytes()
    with pytest.raises(ValueError):
        pf.decode_frame(bytes(compressed))
    with pytest.raises(ValueError):
        pf.encode_frame(_flake_records(4), pf.INFO_FRAME_TYPES)   # records do not match
