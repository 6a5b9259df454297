"""Fuzzing the readers of the bake folder: the flake point cache (.bphys), the Geometry Nodes
flake bake (meta JSON + blob), the snow depth (.exr), the checkpoint (.npz) and the
progress/description JSON. Every case is a small valid file cut at every byte, flipped at
random bytes, replaced by random bytes, or given a header that lies (huge or negative
counts, wrong sizes, names outside the folder). Each case must either read data that
agrees with the file or raise the bake cache's one error type (BakeCacheError, whose
message names the file), and never allocate more than a few MiB (traced by tracemalloc:
numpy's allocations are traced too). Deterministic: fixed seeds."""
import io
import json
import os
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

from snowfall.snow_addon.formats import gn_bake, ptcache as pf
from snowfall.snow_addon import bake_cache, exr
from snowfall.snow_addon.bake_cache import BakeCacheError

#: Most memory one case may take (the valid files are a few hundred bytes; a reader that
#: sizes an array from a lying header asks for GiB).
PEAK_LIMIT = 8 << 20


class Fuzz:
    """Runs cases under tracemalloc and collects what went wrong."""

    def __init__(self):
        self.cases = 0
        self.read = 0
        self.failures = []

    def case(self, name, read, check=None, errors=(BakeCacheError,), path=None):
        """``read()`` must return a value ``check`` accepts or raise one of ``errors``
        (whose message names ``path``, when given)."""
        self.cases += 1
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            result = read()
        except errors as error:
            if path is not None and path not in str(error):
                self.failures.append(f"{name}: the message does not name the file: {error}")
            result = None
        except Exception as error:     # anything else is a bug
            self.failures.append(f"{name}: {type(error).__name__}: {error}")
            return
        peak = tracemalloc.get_traced_memory()[1] - base
        if peak > PEAK_LIMIT:
            self.failures.append(f"{name}: took {peak / 2**20:.0f} MiB")
        if result is not None:
            self.read += 1
            if check is not None:
                problem = check(result)
                if problem:
                    self.failures.append(f"{name}: read, but {problem}")

    def assert_clean(self):
        assert not self.failures, f"{len(self.failures)} of {self.cases} cases failed:\n" + \
            "\n".join(self.failures[:20])


@pytest.fixture
def fuzz():
    tracemalloc.start()
    try:
        yield Fuzz()
    finally:
        tracemalloc.stop()


def mutations(data: bytes, rng, flips: int, randoms: int):
    """(name, bytes): every truncation, ``flips`` single-byte changes, ``randoms`` random
    buffers (half of them behind the valid file's first 8 bytes), and the file with a
    byte too many."""
    for cut in range(len(data)):
        yield f"cut at {cut}", data[:cut]
    for index in range(flips):
        where = int(rng.integers(len(data)))
        changed = bytearray(data)
        changed[where] ^= int(rng.integers(1, 256))
        yield f"flip {index} at byte {where}", bytes(changed)
    for index in range(randoms):
        noise = rng.integers(0, 256, int(rng.integers(0, 2 * len(data))), np.uint8).tobytes()
        yield f"random {index}", (data[:8] + noise) if index % 2 else noise
    yield "a byte too many", data + b"\0"


# --- flakes: the point cache ---------------------------------------------------------------

def _flake_files():
    rng = np.random.default_rng(1)
    count = 4
    pos = rng.standard_normal((count, 3)).astype(np.float32)
    vel = rng.standard_normal((count, 3)).astype(np.float32)
    times = np.zeros((count, 3), np.float32)
    plain = pf.encode_frame(pf.flake_records(pos, vel, times[:, 0], times[:, 1], times[:, 2]),
                            pf.FLAKE_FRAME_TYPES)
    fields = {pf.BPHYS_DATA_LOCATION: pos, pf.BPHYS_DATA_VELOCITY: vel,
              pf.BPHYS_DATA_TIMES: times}
    files = {"plain": plain}
    for compression in (pf.COMPRESS_ZSTD_FILTERED, pf.COMPRESS_LZMA, pf.COMPRESS_NONE):
        files[f"compressed {compression}"] = b"".join(
            pf.encode_compressed(fields, count, compression))
    return files


def _check_flakes(data):
    def check(frame):
        header = np.frombuffer(data, "<u4", 3, 8)
        if len(frame.records) != header[1]:
            return f"{len(frame.records)} records, the header says {header[1]}"
        if not header[0] & pf.PTCACHE_TYPEFLAG_COMPRESS and \
                frame.records.nbytes != len(data) - 20:
            return f"{frame.records.nbytes} bytes of records from a {len(data)}-byte file"
        if frame.records.nbytes > len(data) * pf.MAX_COMPRESSION_RATIO:
            return "more records than the file can hold"
        return None
    return check


def _lying_flake_headers(files):
    """Headers whose counts, fields or flags do not match the bytes after them."""
    plain, zstd = files["plain"], files[f"compressed {pf.COMPRESS_ZSTD_FILTERED}"]
    for base_name, base in (("plain", plain), ("zstd", zstd)):
        typeflag, _count, data_types = np.frombuffer(base, "<u4", 3, 8)
        for count in (0, 1, 3, 5, 1000, 2**31 - 1, 2**31, 4_000_000_000, 2**32 - 1):
            yield f"{base_name} claims {count} points", _with_header(base, typeflag, count,
                                                                      data_types)
        for types in (0, 0xFF, 1 << 7, 1 << 8, 1 << 20, 0xFFFFFFFF, 1 << pf.BPHYS_DATA_SIZE,
                      pf.INFO_FRAME_TYPES, pf.FLAKE_FRAME_TYPES | (1 << 3)):
            yield f"{base_name} claims fields {types:#x}", _with_header(base, typeflag, 4, types)
        for flags in (pf.PTCACHE_TYPEFLAG_COMPRESS, pf.PTCACHE_TYPEFLAG_EXTRADATA, 0, 0xFFFF0000,
                      1 << 30):
            yield f"{base_name} typeflag {flags:#x}", _with_header(base, 1 | flags, 4, data_types)
    # compressed fields whose sizes lie: the Zstd length, then a 4e9-point header over them
    first = 20 + 1
    for length in (0, 1, 2**31, 2**32 - 1):
        changed = bytearray(zstd)
        changed[first:first + 4] = struct.pack("<I", length)
        yield f"zstd field claims {length} bytes", bytes(changed)
    for mode in (1, 5, 9, 255):
        changed = bytearray(zstd)
        changed[20] = mode
        yield f"compression mode {mode}", bytes(changed)
    # Zstd frames that are real but far larger than the header's points
    import zstandard
    for size in (1 << 20, 1 << 24):
        payload = zstandard.ZstdCompressor().compress(bytes(size))
        fields = b"".join(bytes([pf.COMPRESS_ZSTD_FAST]) + struct.pack("<I", len(payload))
                          + payload for _ in range(3))
        for count in (4, 4_000_000_000):
            yield (f"zstd bomb of {size} bytes under {count} points",
                   pf.MAGIC + struct.pack("<III", 1 | pf.PTCACHE_TYPEFLAG_COMPRESS, count,
                                          0b1000110) + fields)
    # LZMA properties that claim a 4 GiB dictionary
    lzma_file = files[f"compressed {pf.COMPRESS_LZMA}"]
    props_at = len(lzma_file) - 5
    changed = bytearray(lzma_file)
    changed[props_at + 1:props_at + 5] = struct.pack("<I", 0xFFFFFFFF)
    # the dictionary of the last field only; the file still decodes
    yield "lzma claims a 4 GiB dictionary", bytes(changed)


def _with_header(data, typeflag, count, data_types):
    return data[:8] + struct.pack("<III", int(typeflag), int(count), int(data_types)) + data[20:]


def test_flake_reader_fuzz(fuzz, tmp_path):
    rng = np.random.default_rng(1234)
    files = _flake_files()
    for name, data in files.items():
        fuzz.case(f"{name} valid", lambda d=data: pf.decode_frame(d, "f.bphys"),
                  _check_flakes(data))
        assert fuzz.read == 1 or name != "plain"
        for what, changed in mutations(data, rng, flips=60, randoms=20):
            fuzz.case(f"{name} {what}", lambda d=changed: pf.decode_frame(d, "f.bphys"),
                      _check_flakes(changed) if len(changed) >= 20 else None, path="f.bphys")
    for what, changed in _lying_flake_headers(files):
        fuzz.case(what, lambda d=changed: pf.decode_frame(d, "f.bphys"), _check_flakes(changed),
                  path="f.bphys")
    # through a file: the message names it; a missing one too
    path = str(tmp_path / "snowfall_flakes_000003_00.bphys")
    for what, changed in list(_lying_flake_headers(files))[:12]:
        with open(path, "wb") as handle:
            handle.write(changed)
        fuzz.case(f"file: {what}", lambda: pf.read_frame(path), _check_flakes(changed),
                  path=path)
    fuzz.case("missing file", lambda: pf.read_frame(path + ".gone"), path=path + ".gone")
    fuzz.assert_clean()
    assert fuzz.cases >= 800
    assert fuzz.read >= len(files)    # the valid files read (and some flips of float bytes)


def test_a_header_claiming_4e9_flakes_is_refused_by_name(tmp_path):
    """issue 35: such a header made the reader allocate 144 GiB."""
    files = _flake_files()
    path = str(tmp_path / "snowfall_flakes_000007_00.bphys")
    for data in (files["plain"], files[f"compressed {pf.COMPRESS_ZSTD_FILTERED}"]):
        typeflag, _count, types = np.frombuffer(data, "<u4", 3, 8)
        with open(path, "wb") as handle:
            handle.write(_with_header(data, typeflag, 4_000_000_000, types))
        with pytest.raises(pf.PointCacheError, match="4000000000 points") as error:
            pf.read_frame(path)
        assert path in str(error.value) and "baking again" in str(error.value)


def test_set_times_refuses_a_header_that_does_not_match(tmp_path):
    path = str(tmp_path / "f.bphys")
    plain = _flake_files()["plain"]
    typeflag, _count, types = np.frombuffer(plain, "<u4", 3, 8)
    for count in (5, 4_000_000_000):
        with open(path, "wb") as handle:
            handle.write(_with_header(plain, typeflag, count, types))
        with pytest.raises(pf.PointCacheError, match="points need"):
            pf.set_times(path, np.array([0]), pf.TIMES_BIRTH, 3.0)
    with open(path, "wb") as handle:
        handle.write(plain)
    with pytest.raises(ValueError, match="indices"):
        pf.set_times(path, np.array([4]), pf.TIMES_BIRTH, 3.0)
    pf.set_times(path, np.array([3]), pf.TIMES_BIRTH, 3.0)
    assert pf.read_frame(path).records["times"][3, 0] == 3.0


# --- snow depth: OpenEXR -------------------------------------------------------------------

def _depth_files():
    rng = np.random.default_rng(2)
    depth = np.maximum(rng.standard_normal((5, 3)), 0).astype(np.float32)
    ground = rng.uniform(-5, 5, (5, 3)).astype(np.float32)
    zipped = bake_cache.encode_depth(depth, ground)
    plain = exr.encode({"R": depth, "G": ground, "B": np.zeros_like(depth)},
                       exr.NO_COMPRESSION)
    # a larger, compressible grid: its blocks really are ZIP blocks
    smooth = np.tile(np.linspace(0, 1, 40, dtype=np.float32), (20, 1))
    big = bake_cache.encode_depth(smooth, smooth)
    return {"zip": zipped, "none": plain, "zip 40x20": big}


def _header_end(data):
    """Offset of the offset table (after the header's terminating NUL)."""
    pos = 8
    while data[pos] != 0:
        end2 = data.index(b"\0", data.index(b"\0", pos) + 1)
        pos = end2 + 5 + struct.unpack_from("<i", data, end2 + 1)[0]
    return pos + 1


def _replace_attribute(data, name, value):
    key = name.encode() + b"\0"
    at = data.index(key)
    end2 = data.index(b"\0", at + len(key))
    size_at = end2 + 1
    size = struct.unpack_from("<i", data, size_at)[0]
    return data[:size_at] + struct.pack("<i", len(value)) + value + \
        data[size_at + 4 + size:]


def _lying_depth_headers(files):
    data = files["zip"]
    for box in ((0, 0, 2_000_000_000, 4), (0, 0, 2, 2_000_000_000), (0, 0, -5, 4),
                (5, 0, 0, 4), (0, 0, 2, 3), (0, 0, 2, 5), (0, 0, 3, 4), (-2**31, 0, 2**31 - 1, 4),
                (0, -2**31, 2, 2**31 - 1), (0, 1, 2, 5)):
        yield f"data window {box}", _replace_attribute(data, "dataWindow",
                                                       struct.pack("<iiii", *box))
    yield "compression 99", _replace_attribute(data, "compression", b"\x63")
    yield "compression empty", _replace_attribute(data, "compression", b"")
    yield "no channels", _replace_attribute(data, "channels", b"\0")
    half = struct.pack("<iB3xii", 1, 0, 1, 1)
    yield "HALF channel", _replace_attribute(data, "channels", b"R\0" + half + b"\0")
    sub = struct.pack("<iB3xii", exr.FLOAT, 0, 2, 2)
    yield "subsampled channel", _replace_attribute(data, "channels", b"R\0" + sub + b"\0")
    flt = struct.pack("<iB3xii", exr.FLOAT, 0, 1, 1)
    yield "repeated channel", _replace_attribute(data, "channels", b"R\0" + flt + b"R\0" + flt
                                                 + b"\0")
    yield "many channels", _replace_attribute(
        data, "channels", b"".join(f"c{i:04d}\0".encode() + flt for i in range(200)) + b"\0")
    yield "truncated channel list", _replace_attribute(data, "channels", b"R\0" + flt[:5])
    # an attribute size that walks backwards (an endless loop for a naive parser)
    at = data.index(b"compression\0compression\0") + len(b"compression\0compression\0")
    for size in (-1, -30, -2**31, 2**31 - 1, 10_000):
        changed = bytearray(data)
        changed[at:at + 4] = struct.pack("<i", size)
        yield f"attribute size {size}", bytes(changed)
    table = _header_end(data)
    for offset in (0, 8, len(data), len(data) - 4, 2**63, 2**64 - 1):
        changed = bytearray(data)
        changed[table:table + 8] = struct.pack("<Q", offset)
        yield f"block offset {offset}", bytes(changed)
    first = struct.unpack_from("<Q", data, table)[0]
    for y in (-1, 1, 16, 2**31 - 1):
        changed = bytearray(data)
        changed[first:first + 4] = struct.pack("<i", y)
        yield f"block row {y}", bytes(changed)
    for size in (-1, 0, 1, 2**31 - 1):
        changed = bytearray(data)
        changed[first + 4:first + 8] = struct.pack("<i", size)
        yield f"block size {size}", bytes(changed)
    # a ZIP block that inflates far beyond its rows (a zlib bomb)
    bomb = zlib.compress(bytes(1 << 24), 9)
    header = data[:table]
    block = struct.pack("<ii", 0, len(bomb)) + bomb
    yield "zlib bomb", header + struct.pack("<Q", table + 8) + block


def _check_depth(data, grid=None):
    def check(depth):
        if depth.dtype != np.float32 or depth.ndim != 2:
            return f"a {depth.dtype} {depth.shape} array"
        if grid is not None and depth.shape != grid:
            return f"a {depth.shape} grid, the file holds {grid}"
        if depth.nbytes > len(data) * 1100:
            return "more pixels than the file can hold"
        return None
    return check


def test_depth_reader_fuzz(fuzz, tmp_path):
    rng = np.random.default_rng(99)
    path = str(tmp_path / "depth_000001.exr")

    def read_file(data, shape=None):
        with open(path, "wb") as handle:
            handle.write(data)
        return bake_cache.read_depth(path, shape)

    for name, data in _depth_files().items():
        grid = (20, 40) if "40x20" in name else (5, 3)
        fuzz.case(f"{name} valid", lambda d=data, g=grid: read_file(d, g),
                  _check_depth(data, grid))
        for what, changed in mutations(data, rng, flips=40, randoms=15):
            fuzz.case(f"{name} {what}", lambda d=changed: read_file(d), _check_depth(changed),
                      path=path)
            if what.startswith(("flip", "random")):       # the bytes alone: ExrError
                fuzz.case(f"{name} {what} (bytes)", lambda d=changed: exr.decode(d),
                          lambda c: None if isinstance(c, dict) else "not channels",
                          errors=(exr.ExrError,))
    for what, changed in _lying_depth_headers(_depth_files()):
        fuzz.case(what, lambda d=changed: read_file(d), _check_depth(changed), path=path)
        fuzz.case(f"{what} (bytes)", lambda d=changed: exr.decode(d),
                  lambda c: None if isinstance(c, dict) else "not channels",
                  errors=(exr.ExrError,))
    fuzz.assert_clean()
    assert fuzz.cases >= 800
    assert fuzz.read >= 3


def test_a_depth_file_claiming_2e9_columns_is_refused_by_name(tmp_path):
    """issue 35: such a header made the reader allocate 480 GiB."""
    data = _replace_attribute(_depth_files()["zip"], "dataWindow",
                              struct.pack("<iiii", 0, 0, 2_000_000_000 - 1, 4))
    path = str(tmp_path / "depth_000004.exr")
    with open(path, "wb") as handle:
        handle.write(data)
    tracemalloc.start()
    try:
        with pytest.raises(BakeCacheError, match="2000000000 x 5 pixels") as error:
            bake_cache.read_depth(path)
        assert tracemalloc.get_traced_memory()[1] < PEAK_LIMIT
    finally:
        tracemalloc.stop()
    assert path in str(error.value)


# --- checkpoints ---------------------------------------------------------------------------

def _state():
    return {"format_version": np.int64(1), "step_index": np.int64(12),
            "flakes.pos_x": np.linspace(0, 1, 6, dtype=np.float32),
            "wind.u": np.arange(12, dtype=np.float64).reshape(3, 4)}


def _npy(header: dict, payload: bytes, version=(1, 0)) -> bytes:
    """A .npy member whose header says what ``header`` says (true or not)."""
    text = repr(header).encode("latin1")
    major = version[0]
    prefix = 10 if major == 1 else 12
    pad = (-(prefix + len(text) + 1)) % 64
    text += b" " * pad + b"\n"
    size = struct.pack("<H" if major == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes(version) + size + text + payload


def _npz(members: dict, compression=zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _lying_checkpoints():
    good = np.arange(6, dtype="<f8").tobytes()
    for shape in ((10**9,), (2**62,), (6, 10**9), (-6,), (-2, -3), (7,), (5,), (0,), (3, 2),
                  (2**31, 2**31, 2**31)):
        member = _npy({"descr": "<f8", "fortran_order": False, "shape": shape}, good)
        yield f"member claims shape {shape}", _npz({"a.npy": member}), shape == (3, 2)
    for descr in ("|O", "<f16", "|V0", "|S0", [("a", "<f8"), ("b", "|O")], "<U2"):
        member = _npy({"descr": descr, "fortran_order": False, "shape": (6,)}, good)
        yield f"member claims dtype {descr}", _npz({"a.npy": member}), descr == "<U2"
    member = _npy({"descr": "<f8", "fortran_order": True, "shape": (2, 3)}, good)
    yield "fortran order", _npz({"a.npy": member}), True
    yield "npy version 3", _npz({"a.npy": _npy({"descr": "<f8", "fortran_order": False,
                                                "shape": (6,)}, good, (3, 0))}), None
    yield "npy version 9", _npz({"a.npy": _npy({"descr": "<f8", "fortran_order": False,
                                                "shape": (6,)}, good, (9, 0))}), False
    yield "not an npy", _npz({"a.npy": b"hello"}), False
    yield "not .npy", _npz({"a.txt": good}), False
    yield "empty name", _npz({".npy": _npy({"descr": "<f8", "fortran_order": False,
                                            "shape": (6,)}, good)}), False
    yield "header 100 kB", _npz({"a.npy": _npy({"descr": "<f8", "fortran_order": False,
                                               "shape": (6,), "x": "y" * 100_000}, good,
                                              (2, 0))}), False
    bomb = _npy({"descr": "<f8", "fortran_order": False, "shape": (2**22,)}, bytes(2**25))
    yield "deflated 32 MiB member", _npz({"a.npy": bomb}, zipfile.ZIP_DEFLATED), None
    yield "empty archive", _npz({}), True
    yield "not a zip", b"PK\x03\x04" + bytes(100), False


def _check_state(data, reads=True):
    """``reads``: False for a file that must be refused (a header that does not match its
    bytes), None where reading or refusing are both right."""
    def check(state):
        if reads is False:
            return "a file that should be refused was read"
        total = sum(np.asarray(v).nbytes for v in state.values())
        if total > len(data):
            return f"{total} bytes of arrays from a {len(data)}-byte file"
        if any(np.asarray(v).dtype.hasobject for v in state.values()):
            return "object arrays"
        return None
    return check


def test_checkpoint_reader_fuzz(fuzz, tmp_path):
    rng = np.random.default_rng(7)
    path = str(tmp_path / "checkpoint_000003.npz")
    data = bake_cache.encode_state(_state())

    def read_file(blob, **checks):
        with open(path, "wb") as handle:
            handle.write(blob)
        return bake_cache.read_state(path, **checks)

    fuzz.case("valid", lambda: read_file(data), _check_state(data))
    assert fuzz.read == 1
    for what, changed in mutations(data, rng, flips=150, randoms=30):
        fuzz.case(what, lambda d=changed: read_file(d), _check_state(changed), path=path)
    for what, changed, reads in _lying_checkpoints():
        fuzz.case(what, lambda d=changed: read_file(d), _check_state(changed, reads), path=path)
    # with the commit's size and SHA-256, a changed file is refused before it is parsed
    import hashlib
    digest = hashlib.sha256(data).hexdigest()
    for what, changed in mutations(data, np.random.default_rng(8), flips=20, randoms=0):
        if changed != data:
            fuzz.case(f"{what} (checked)",
                      lambda d=changed: read_file(d, sha256=digest, size=len(data)),
                      lambda _state: "a changed file passed its SHA-256", path=path)
    fuzz.assert_clean()
    assert fuzz.cases >= 900


def test_a_checkpoint_claiming_a_billion_values_is_refused_by_name(tmp_path):
    member = _npy({"descr": "<f8", "fortran_order": False, "shape": (10**9,)}, bytes(48))
    path = str(tmp_path / "checkpoint_000009.npz")
    with open(path, "wb") as handle:
        handle.write(_npz({"step_index.npy": member}))
    with pytest.raises(BakeCacheError, match="holds 48") as error:
        bake_cache.read_state(path)
    assert path in str(error.value)


def test_checkpoint_round_trip_keeps_every_array(tmp_path):
    state = dict(_state(), fortran=np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                 empty=np.zeros((0, 3), np.float32), flags=np.array([True, False]))
    path = str(tmp_path / "checkpoint_000001.npz")
    with open(path, "wb") as handle:
        handle.write(bake_cache.encode_state(state))
    back = bake_cache.read_state(path)
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        assert back[key].dtype == np.asarray(value).dtype, key
        np.testing.assert_array_equal(back[key], value)


# --- the Geometry Nodes flake bake ---------------------------------------------------------

def _gn_root(tmp_path, seeds=True):
    root = str(tmp_path / "gn")
    rng = np.random.default_rng(5)
    pos = rng.standard_normal((4, 3)).astype(np.float32)
    vel = rng.standard_normal((4, 3)).astype(np.float32)
    gn_bake.write_frame(root, 3, pos, vel,
                               np.arange(4, dtype=np.int8) if seeds else None)
    return root


def _check_gn(frame):
    count = len(frame.positions)
    if frame.positions.shape != (count, 3) or frame.planes.shape != (3, count) or \
            frame.scales.shape != (3,) or not np.isfinite(frame.scales).all():
        return f"shapes {frame.positions.shape} {frame.planes.shape} {frame.scales.shape}"
    if frame.seeds is not None and frame.seeds.shape != (count,):
        return f"seeds {frame.seeds.shape}"
    return None


def _lying_gn_metas(meta):
    def changed(edit):
        copy = json.loads(json.dumps(meta))
        edit(copy)
        return json.dumps(copy).encode()

    cloud = ("items", "0", "data", "pointcloud")

    def at(copy, keys):
        for key in keys:
            copy = copy[key]
        return copy

    for count in (-1, 0, 5, 10**12, 2**63, 10**40, 1.5, True, "4", None):
        yield f"num_points {count!r}", changed(
            lambda c, n=count: at(c, cloud).__setitem__("num_points", n))
    for count in (10**12, 2**40):
        def consistent(c, n=count):     # counts and sizes that agree, a blob that does not
            at(c, cloud)["num_points"] = n
            for attribute in at(c, cloud)["attributes"]:
                attribute["data"]["size"] = n * (12 if attribute["type"] == "FLOAT_VECTOR"
                                                 else 1)
        yield f"{count} points, sizes to match", changed(consistent)
    for key, value in (("start", -1), ("start", 2**62), ("start", 1.0), ("size", -12),
                       ("size", 2**62), ("name", "../../etc/passwd"), ("name", "/etc/passwd"),
                       ("name", ""), ("name", ".."), ("name", 7), ("name", "a\0b")):
        yield f"position {key} {value!r}", changed(
            lambda c, k=key, v=value: at(c, cloud)["attributes"][0]["data"].__setitem__(k, v))
    for value in ("BOOLEAN", "FLOAT", None, 3):
        yield f"position type {value!r}", changed(
            lambda c, v=value: at(c, cloud)["attributes"][0].__setitem__("type", v))
    yield "no attributes", changed(lambda c: at(c, cloud).__setitem__("attributes", []))
    yield "attributes a string", changed(lambda c: at(c, cloud).__setitem__("attributes", "x"))
    yield "repeated attribute", changed(
        lambda c: at(c, cloud)["attributes"].append(at(c, cloud)["attributes"][1]))
    for value in (float("nan"), float("inf"), 1e39, "1", [1, 2], None, True):
        yield f"scale {value!r}", changed(
            lambda c, v=value: c["items"]["1"].__setitem__("data", v))
    for version in (2, 4, None, "3"):
        yield f"version {version!r}", changed(lambda c, v=version: c.__setitem__("version", v))
    yield "a list", b"[1, 2, 3]"
    yield "deeply nested", b"[" * 100_000 + b"]" * 100_000
    yield "not utf-8", b"\xff\xfe{}"


def test_gn_bake_reader_fuzz(fuzz, tmp_path):
    rng = np.random.default_rng(11)
    root = _gn_root(tmp_path)
    meta_path = gn_bake.meta_path(root, 3)
    blob_path = gn_bake.blob_path(root, 3)
    meta, blob = open(meta_path, "rb").read(), open(blob_path, "rb").read()

    def read(meta_bytes=meta, blob_bytes=blob):
        with open(meta_path, "wb") as handle:
            handle.write(meta_bytes)
        with open(blob_path, "wb") as handle:
            handle.write(blob_bytes)
        return gn_bake.read_frame(root, 3)

    fuzz.case("valid", read, _check_gn)
    assert fuzz.read == 1
    for what, changed in mutations(meta, rng, flips=120, randoms=20):
        fuzz.case(f"meta {what}", lambda d=changed: read(meta_bytes=d), _check_gn,
                  path=meta_path)
    for what, changed in mutations(blob, rng, flips=20, randoms=10):
        # a blob of another length than the meta says, or other bytes (which read: the
        # blob's values are not checked, only its size)
        fuzz.case(f"blob {what}", lambda d=changed: read(blob_bytes=d), _check_gn,
                  path=root)
    for what, changed in _lying_gn_metas(json.loads(meta)):
        fuzz.case(what, lambda d=changed: read(meta_bytes=d), _check_gn, path=root)
        fuzz.case(f"{what} (check_frame)", lambda d=changed: (
            read(meta_bytes=d), gn_bake.check_frame(root, 3))[1],
            lambda n: None if type(n) is int and n >= 0 else f"count {n!r}", path=root)
    fuzz.assert_clean()
    assert fuzz.cases >= 900


# --- progress.json, bake.json and resume_point ---------------------------------------------

def _bake_folder(tmp_path):
    """A two-frame bake folder written the way FrameStore writes it (point-cache flakes)."""
    folder = bake_cache.BakeFolder(str(tmp_path / "bake" / "Scene"))
    folder.start({"scene": "Scene", "frame_start": 1, "frame_end": 2, "substeps": 2,
                  "fps": 24.0, "flakes": {"count": 4, "format": "ptcache", "compression": 3,
                                          "velocity_step": 0.25, "camera_view": None},
                  "snow": {"format": "exr", "vertex_frames": True, "nx": 3, "ny": 5}})
    record = bake_cache.CommitRecord()
    files = _flake_files()
    depth = _depth_files()["zip"]
    for frame in (1, 2):
        name = f"snowfall_flakes_{frame:06d}_00.bphys"
        record.flakes[frame] = list(bake_cache.write_atomic(
            os.path.join(folder.flake_dir, name), files["plain"])) + [name]
        record.snow[frame] = list(bake_cache.write_atomic(folder.depth_path(frame), depth))
    data = bake_cache.encode_state(_state())
    name = bake_cache.checkpoint_name(2)
    bake_cache.write_atomic(os.path.join(folder.path, name), data)
    import hashlib
    record.frame = record.complete = 2
    record.fingerprint = "f"
    record.checkpoint = {"file": name, "bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()}
    bake_cache.write_json_atomic(folder.progress_path, record.to_json())
    return folder


def _lying_progress(progress):
    def changed(edit):
        copy = json.loads(json.dumps(progress))
        edit(copy)
        return json.dumps(copy).encode()

    for key, value in (("frame", 1e400), ("frame", -(10**30)), ("frame", 10**30),
                       ("frame", None), ("frame", "x"), ("complete", [1]), ("flakes", []),
                       ("flakes", "x"), ("snow", {"1": 5}), ("checkpoint", None),
                       ("checkpoint", {"file": "../../../etc/passwd"}),
                       ("checkpoint", {"file": "/etc/passwd"}),
                       ("checkpoint", {"file": "a\0b"}), ("checkpoint", {"file": 3})):
        yield f"{key} {value!r}", changed(lambda c, k=key, v=value: c.__setitem__(k, v))
    for entry in ([-1, 0, "snowfall_flakes_000001_00.bphys"], [10**30, 0, "x.bphys"],
                  [180, 0, "../escape.bphys"], [180, 0, "/abs.bphys"], [180, 0, 5],
                  [180, 0], [], [180, -5, "x.bphys"], [180, 1.5, "x.bphys"],
                  [True, 0, "x.bphys"], "abc", {"a": 1}):
        yield f"flake entry {entry!r}", changed(
            lambda c, e=entry: c["flakes"].__setitem__("1", e))
    for entry in ([-1, 0], [1], [2**70, None], ["1", 0]):
        yield f"snow entry {entry!r}", changed(lambda c, e=entry: c["snow"].__setitem__("2", e))
    for value in (-1, 10**20, "12", None):
        yield f"checkpoint bytes {value!r}", changed(
            lambda c, v=value: c["checkpoint"].__setitem__("bytes", v))


def _lying_metas(meta):
    def changed(edit):
        copy = json.loads(json.dumps(meta))
        edit(copy)
        return json.dumps(copy).encode()

    for key, value in (("frame_start", "1"), ("frame_start", 1.5), ("substeps", None),
                       ("flakes", None), ("flakes", []), ("snow", "exr"), ("version", 2),
                       ("format", "other")):
        yield f"meta {key} {value!r}", changed(lambda c, k=key, v=value: c.__setitem__(k, v))
    for key, value in (("compression", "zstd"), ("compression", 1.5),
                       ("velocity_step", float("inf")), ("velocity_step", "0.25"),
                       ("format", 3), ("camera_view", {"matrix": [[0] * 4] * 3}),
                       ("camera_view", {"matrix": [[0] * 4] * 4, "bounds": [0, 1, 0, "x"],
                                        "perspective": True}),
                       ("camera_view", "front")):
        yield f"meta flakes {key} {value!r}", changed(
            lambda c, k=key, v=value: c["flakes"].__setitem__(k, v))
    yield "meta deeply nested", b'{"a":' * 50_000 + b"1" + b"}" * 50_000


def test_progress_and_description_fuzz(fuzz, tmp_path):
    rng = np.random.default_rng(21)
    folder = _bake_folder(tmp_path)
    progress = open(folder.progress_path, "rb").read()
    meta = open(folder.meta_path, "rb").read()

    def resume(data):
        with open(folder.progress_path, "wb") as handle:
            handle.write(data)
        bake_cache._PROGRESS_SEEN.clear()
        bake_cache.resume_available(folder.path, 5)       # never raises
        return folder.resume_point(1)

    def check_point(point):
        if point.frame != 2 or sorted(point.state) != sorted(_state()):
            return f"resumed at {point.frame} with {sorted(point.state)}"
        return None

    fuzz.case("valid", lambda: resume(progress), check_point)
    assert fuzz.read == 1
    for what, changed in mutations(progress, rng, flips=150, randoms=10):
        fuzz.case(f"progress {what}", lambda d=changed: resume(d), check_point,
                  path=folder.path)
    for what, changed in _lying_progress(json.loads(progress)):
        fuzz.case(what, lambda d=changed: resume(d), check_point, path=folder.path)
    resume(progress)

    def describe(data):
        with open(folder.meta_path, "wb") as handle:
            handle.write(data)
        return folder.read_meta()

    def check_meta(value):
        return None if isinstance(value["flakes"], dict) and isinstance(value["snow"], dict) \
            else "flakes or snow not a section"

    fuzz.case("meta valid", lambda: describe(meta), check_meta)
    for what, changed in mutations(meta, rng, flips=100, randoms=10):
        fuzz.case(f"meta {what}", lambda d=changed: describe(d), check_meta,
                  path=folder.meta_path)
    for what, changed in _lying_metas(json.loads(meta)):
        fuzz.case(what, lambda d=changed: describe(d), check_meta, path=folder.meta_path)
    fuzz.assert_clean()
    assert fuzz.cases >= 900

