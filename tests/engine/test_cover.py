"""Snow cover: exact deposit volume, conserving redistribution that converges to the repose
slope, the snowfall-rate calibration, resume, and the Numba and CUDA kernels against the
reference (the ``backend`` fixture: cpu, and gpu where CuPy has a device, else skipped with
the reason)."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from snowfall.kernels.contract import (FRESH_LIFTS, GRAIN_COUNT_SLOTS, GRAIN_LANDINGS,
                                       GRAINS_ALOFT, LIFTED_EXITS, UPWIND_SETTLES)
from snowfall.kernels.cpu import cover as cpu_cover
from snowfall.kernels.reference import cover as ref_cover
from snowfall.kernels.reference.cover import WEIGHT_UNITS
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.cover import SnowCover
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.flakes import FlakeSystem
from snowfall.snow_addon.grid import OPEN_HEIGHT, HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings

DT = 1.0 / 24.0


def heightmap_of(height, spacing=0.5, x0=0.0, y0=0.0):
    height = np.asarray(height, np.float32)
    ny, nx = height.shape
    surface = height > -1e29
    return SimpleNamespace(grid=HeightmapGrid(x0, y0, spacing, nx, ny), height=height,
                           has_surface=surface)


def wind_grid_over(hm, cell=1.0, nz=12, z0=-1.0):
    lx, ly = hm.grid.extent
    return WindGrid(hm.grid.x0, hm.grid.y0, z0, cell, int(math.ceil(lx / cell - 1e-6)),
                    int(math.ceil(ly / cell - 1e-6)), nz)


@pytest.mark.parametrize("module", [ref_cover, cpu_cover], ids=["reference", "cpu"])
def test_deposit_adds_exactly_the_hit_volume_at_edges_and_near_open_nodes(module):
    height = np.zeros((9, 11), np.float32)
    height[4:7, 0:3] = OPEN_HEIGHT
    surface = height > -1e29
    volume, area = 0.003, 0.25
    scale = module.deposit_scale(surface, volume, area)
    for node in [(0, 0), (8, 10), (0, 5), (3, 1), (5, 3), (4, 5)]:
        hits = np.zeros(height.shape, np.int32)
        hits[node] = 7
        depth = np.zeros(height.shape, np.float32)
        total = np.zeros(1, np.int64)
        next_hits = np.full(height.shape, 3, np.int32)
        module.deposit_hits(hits, scale, surface, depth, total, next_hits)
        assert total[0] == 7
        assert np.all(next_hits == 0) and hits[node] == 7 and hits.sum() == 7
        assert np.all(depth[~surface] == 0.0) and np.all(depth >= 0.0)
        np.testing.assert_allclose(depth.sum(dtype=np.float64) * area, 7 * volume, rtol=1e-6)
        assert depth[node] == depth.max()                 # the centre weight is the largest
    # far from edges and holes the theses' weights hold (normalised by their sum 1.0048)
    hits = np.zeros(height.shape, np.int32)
    hits[4, 7] = 1
    depth = np.zeros(height.shape, np.float32)
    module.deposit_hits(hits, scale, surface, depth, np.zeros(1, np.int64), np.zeros_like(hits))
    np.testing.assert_allclose(depth[2:7, 5:10] * area / volume, ref_cover.FOOTPRINT / 1.0048, rtol=1e-5)


def test_landing_units_share_each_steps_snowfall_exactly():
    units = ref_cover.WEIGHT_UNITS
    assert ref_cover.landing_units(0, 10 * units, 10) == (units, 0)        # one hit each
    assert ref_cover.landing_units(0, 1000, 3) == (333, 1)                 # remainder owed
    assert ref_cover.landing_units(7, 1000, 0) == (0, 1007)                # nobody landed
    assert ref_cover.landing_units(0, 100 * units, 1) == (                 # one landing: capped
        ref_cover.MAX_LANDING_UNITS, 100 * units - ref_cover.MAX_LANDING_UNITS)
    rng = np.random.default_rng(1)
    owed, deposited, nominal = 0, 0, 12_345
    for landings in rng.integers(0, 9, 500):
        each, owed = ref_cover.landing_units(owed, nominal, landings)
        assert 0 <= owed and (landings == 0 or each == ref_cover.MAX_LANDING_UNITS
                              or owed < landings)
        deposited += each * landings
    assert deposited + owed == 500 * nominal


@pytest.mark.parametrize("module", [ref_cover, cpu_cover], ids=["reference", "cpu"])
def test_imposed_deposit_lays_down_the_snowfall_however_few_flakes_land(module):
    # each step owes the same snowfall; steps with many, few or no hits share it out
    height, surface, _depth, _ = random_cover_input(3)
    volume, area, nominal = 0.002, 0.25, 37 * ref_cover.WEIGHT_UNITS + 5
    scale = module.deposit_scale(surface, volume, area)
    depth = np.zeros(height.shape, np.float32)
    total, weighted = np.zeros(1, np.int64), np.zeros(1, np.int64)
    ledger, spare = np.zeros(2, np.int64), np.zeros(2, np.int64)
    rng = np.random.default_rng(4)
    for step in range(12):
        hits = np.zeros(height.shape, np.int32)
        count = [60, 3, 0, 0, 1, 25][step % 6]
        nodes = rng.choice(np.flatnonzero(surface), count)
        np.add.at(hits.ravel(), nodes, 1)
        before = depth.copy()
        grains = np.array([9], np.int32)
        module.deposit_hits(hits, scale, surface, depth, total, np.ones_like(hits), weighted,
                            ledger, spare, nominal, grains)
        ledger, spare = spare, ledger
        assert ledger[1] == total[0] == spare[1] + count and grains[0] == 0
        each = (weighted[0] - (0 if step == 0 else booked)) // max(count, 1)
        booked = weighted[0]
        np.testing.assert_allclose((depth - before).sum(dtype=np.float64) * area,
                                   count * each / ref_cover.WEIGHT_UNITS * volume, rtol=1e-5)
    assert weighted[0] + ledger[0] == 12 * nominal
    with pytest.raises(ValueError, match="together"):       # half a ledger is refused
        module.deposit_hits(hits, scale, surface, depth, total, np.ones_like(hits), weighted,
                            ledger, None, nominal)
    assert ledger[0] < ref_cover.WEIGHT_UNITS            # less than a hit's worth still owed
    # with the owed snowfall an exact multiple, the plain deposit to the bit
    hits = np.where(surface, rng.integers(0, 3, height.shape), 0).astype(np.int32)
    plain, imposed = np.zeros(height.shape, np.float32), np.zeros(height.shape, np.float32)
    module.deposit_hits(hits, scale, surface, plain, np.zeros(1, np.int64), np.ones_like(hits))
    module.deposit_hits(hits, scale, surface, imposed, np.zeros(1, np.int64), np.ones_like(hits),
                        np.zeros(1, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64),
                        int(hits.sum()) * ref_cover.WEIGHT_UNITS)
    np.testing.assert_array_equal(imposed, plain)


def random_cover_input(seed, shape=(23, 31)):
    rng = np.random.default_rng(seed)
    height = rng.normal(0, 0.6, shape).astype(np.float32)
    height[2:6, 3:9] = OPEN_HEIGHT
    surface = height > -1e29
    depth = np.where(surface, rng.uniform(0, 0.5, shape), 0).astype(np.float32)
    hits = np.where(surface, rng.integers(0, 4, shape), 0).astype(np.int32)
    return height, surface, depth, hits


# the row limit of the GPU's launches (CUDA's on a grid's y size): None, the default; 16,
# the heightmap in several bands of rows. The CPU build has no launch grid.
def _bands(backend, max_grid_rows):
    return {} if max_grid_rows is None or not backend.is_gpu else dict(max_grid_rows=max_grid_rows)


@pytest.mark.parametrize("shape, seed, max_grid_rows", [
    ((23, 31), 0, None), ((23, 31), 1, None), ((37, 53), 4, None),
    pytest.param((70, 600), 4, 16, id="70x600-rows16")])    # rows wider than a block
def test_cover_kernels_match_reference(backend, shape, seed, max_grid_rows):
    """The backend's deposit (plain and imposed, its books) and redistribution against the
    reference; on the GPU also a heightmap launched in several bands of rows."""
    height, surface, depth, hits = random_cover_input(seed, shape)
    kernels, bands = backend.kernel_module("cover"), _bands(backend, max_grid_rows)
    scale = ref_cover.deposit_scale(surface, 0.01, 0.25)
    results = []
    for module, xp, host, options in ((ref_cover, np, np.asarray, {}),
                                      (kernels, backend.xp, backend.to_host, bands)):
        d, total = xp.asarray(depth.copy()), xp.zeros(1, xp.int64)
        device_hits, next_hits = xp.asarray(hits.copy()), xp.ones(shape, xp.int32)
        module.deposit_hits(device_hits, xp.asarray(scale), xp.asarray(surface), d, total,
                            next_hits, **options)
        assert int(next_hits.sum()) == 0 and int(device_hits.sum()) == hits.sum()
        weighted, next_grains = xp.zeros(1, xp.int64), xp.ones(1, xp.int32)
        ledger = xp.asarray(np.array([3, hits.sum()], np.int64))    # booked the first call
        next_ledger, nominal = xp.zeros(2, xp.int64), 5 * ref_cover.WEIGHT_UNITS + 7
        module.deposit_hits(device_hits, xp.asarray(scale), xp.asarray(surface), d, total,
                            next_hits, weighted, ledger, next_ledger, nominal, next_grains,
                            **options)
        units, owed = ref_cover.landing_units(3, nominal, hits.sum())
        assert int(weighted[0]) == hits.sum() * units
        assert [int(x) for x in next_ledger] == [owed, 2 * hits.sum()]
        assert int(next_grains[0]) == 0
        after_deposit = d.copy()
        out = xp.full_like(d, np.nan)
        module.redistribute(xp.asarray(height), xp.asarray(surface), d, np.float32(0.3),
                            np.float32(0.05), np.float32(0.25), out, **options)
        np.testing.assert_array_equal(host(d), host(after_deposit))   # the input is left as is
        results.append([host(after_deposit), host(out), host(total)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert int(results[1][2][0]) == 2 * hits.sum()
    assert np.count_nonzero(results[0][1] != results[0][0]) > 20


_BOOKS_BUILDS = [pytest.param("cpu", None, id="cpu"),
                 pytest.param("gpu", None, marks=pytest.mark.gpu, id="gpu"),
                 pytest.param("gpu", 16, marks=pytest.mark.gpu, id="gpu-rows16")]


@pytest.mark.parametrize("backend, max_grid_rows", _BOOKS_BUILDS, indirect=["backend"])
def test_imposed_deposit_shares_out_steps_without_landings_and_caps(backend, max_grid_rows):
    """Steps with no landing owe their snowfall on; a lone landing takes at most
    MAX_LANDING_UNITS; the books and the depth follow the reference's over every step, on
    the GPU also launched in several bands of rows (the ledger is written once, by the
    first band)."""
    kernels, xp, bands = backend.kernel_module("cover"), backend.xp, _bands(backend, max_grid_rows)
    shape = (70, 90)
    surface = np.ones(shape, bool)
    scale = ref_cover.deposit_scale(surface, 0.01, 0.25)
    nominal = 7 * ref_cover.WEIGHT_UNITS + 3
    counts = [0, 0, 1, 0, 40, 2, 0, 300]
    rng = np.random.default_rng(8)
    steps = []
    for count in counts:
        hits = np.zeros(shape, np.int32)
        np.add.at(hits.ravel(), rng.integers(0, hits.size, count), 1)
        steps.append(hits)
    results = []
    for module, xp, host, options in ((ref_cover, np, np.asarray, {}),
                                      (kernels, xp, backend.to_host, bands)):
        depth, total, weighted = xp.zeros(shape, xp.float32), xp.zeros(1, xp.int64), xp.zeros(1, xp.int64)
        ledger, spare = xp.zeros(2, xp.int64), xp.zeros(2, xp.int64)
        books = []
        for hits in steps:
            module.deposit_hits(xp.asarray(hits), xp.asarray(scale), xp.asarray(surface), depth,
                                total, xp.zeros(shape, xp.int32), weighted, ledger, spare, nominal,
                                **options)
            ledger, spare = spare, ledger
            books.append((int(weighted[0]), int(ledger[0]), int(ledger[1])))
        results.append((host(depth), books))
    assert results[1][1] == results[0][1]
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    books = results[0][1]
    assert books[1] == (0, 2 * nominal, 0)                            # nothing landed yet
    assert books[2][0] == ref_cover.MAX_LANDING_UNITS                 # one landing: capped
    assert books[-1][0] + books[-1][1] == len(counts) * nominal       # all of it, in the end


@pytest.mark.parametrize("backend, max_grid_rows", _BOOKS_BUILDS, indirect=["backend"])
def test_the_suspension_adds_its_net_inflow_and_holds_nothing_back(backend, max_grid_rows):
    """With the step's grain counts the landings share the snowfall and the suspension's
    net inflow (grains from upwind that settled less lifted grains that left, at the
    snowfall's units per fresh touch): in a steady storm (the lifted grains settle or
    leave) each landing weighs the snowfall per fresh touch, so a trap that catches blowing
    snow from upwind gets it on top and leaves each fresh landing its weight; while the
    suspension builds up (fewer settle than are lifted) the landings weigh more, so no
    snow is held back aloft. The books: the snowfall (weighted - suspended, plus what is
    owed) is the nominal in full, the same on every build."""
    kernels, xp, bands = backend.kernel_module("cover"), backend.xp, _bands(backend, max_grid_rows)
    shape = (40, 60)
    surface = np.ones(shape, bool)
    scale = ref_cover.deposit_scale(surface, 0.01, 0.25)
    nominal = 100 * ref_cover.WEIGHT_UNITS
    rng = np.random.default_rng(4)
    # (landings, settled grains among them, fresh lifts, settled grains from upwind, lifted
    # grains that left): 100 fresh touches every step; steady, steady with grains from
    # upwind trapped, building up, lifted grains leaving
    steps = [(100, 0, 0, 0, 0), (150, 50, 0, 50, 0), (80, 0, 20, 0, 0), (130, 60, 30, 10, 40)]
    step_hits = []
    for landings, *_kinds in steps:
        hits = np.zeros(shape, np.int32)
        np.add.at(hits.ravel(), rng.integers(0, hits.size, landings), 1)
        step_hits.append(hits)
    results = []
    for module, xp_, host, options in ((ref_cover, np, np.asarray, {}),
                                       (kernels, xp, backend.to_host, bands)):
        depth, total = xp_.zeros(shape, xp_.float32), xp_.zeros(1, xp_.int64)
        weighted, suspended = xp_.zeros(1, xp_.int64), xp_.zeros(1, xp_.int64)
        ledger, spare = xp_.zeros(2, xp_.int64), xp_.zeros(2, xp_.int64)
        counts = xp_.zeros(GRAIN_COUNT_SLOTS, xp_.int32)
        next_counts = xp_.ones(GRAIN_COUNT_SLOTS, xp_.int32)
        books = []
        for (landings, settled, lifted, from_upwind, left), hits in zip(steps, step_hits):
            step_counts = np.zeros(GRAIN_COUNT_SLOTS, np.int32)
            slots = [GRAINS_ALOFT, GRAIN_LANDINGS, FRESH_LIFTS, UPWIND_SETTLES, LIFTED_EXITS]
            step_counts[slots] = [7, settled, lifted, from_upwind, left]
            counts[...] = xp_.asarray(step_counts)
            next_counts[...] = 1
            module.deposit_hits(xp_.asarray(hits), xp_.asarray(scale), xp_.asarray(surface),
                                depth, total, xp_.zeros(shape, xp_.int32), weighted, ledger,
                                spare, nominal, next_counts, counts, suspended, **options)
            assert not np.asarray(host(next_counts)).any()
            ledger, spare = spare, ledger
            books.append((int(weighted[0]), int(suspended[0]), int(ledger[0])))
        results.append((host(depth), books))
    assert results[1][1] == results[0][1]
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    per_touch = ref_cover.WEIGHT_UNITS                  # nominal / 100 fresh touches, exactly
    weights, before = [], 0
    for (landings, *_kinds), (weighted, _suspended, _owed) in zip(steps, results[0][1]):
        weights.append((weighted - before) / landings)
        before = weighted
    assert weights[0] == weights[1] == per_touch         # steady: trapped grains on top
    assert weights[2] > per_touch                        # building up: nothing held aloft
    assert weights[3] < per_touch                        # the exits took snow out
    weighted, suspended, owed = results[0][1][-1]
    assert weighted - suspended + owed == len(steps) * nominal      # the snowfall in full
    net_inflow = sum(per_touch * (from_upwind - left) for *_, from_upwind, left in steps)
    assert abs(suspended - net_inflow) <= sum(landings for landings, *_ in steps)
    with pytest.raises(ValueError, match="together"):       # half the grains' books
        kernels.deposit_hits(xp.zeros(shape, xp.int32), xp.asarray(scale), xp.asarray(surface),
                             xp.zeros(shape, xp.float32), xp.zeros(1, xp.int64),
                             xp.zeros(shape, xp.int32), xp.zeros(1, xp.int64),
                             xp.zeros(2, xp.int64), xp.zeros(2, xp.int64), nominal,
                             xp.zeros(3, xp.int32), xp.zeros(3, xp.int32), None, **bands)


def test_redistribution_conserves_and_never_goes_negative():
    height, surface, depth, _ = random_cover_input(5)
    before = depth.sum(dtype=np.float64)
    spare = np.zeros_like(depth)
    for _ in range(300):
        cpu_cover.redistribute(height, surface, depth, np.float32(0.2), np.float32(0.0),
                               np.float32(0.25), spare)
        depth, spare = spare, depth
        assert depth.min() >= 0.0
    assert np.all(depth[~surface] == 0.0)
    np.testing.assert_allclose(depth.sum(dtype=np.float64), before, rtol=1e-6)


def test_single_pass_redistribution_moves_exactly_what_a_pair_rule_says():
    """Two surface nodes on a flat plane: 1 m of snow next to none, threshold 0.2 m,
    fraction 0.25: the pair moves 0.25 * min(1 - 0, 1 - 0.2) = 0.2 m from high to low."""
    height = np.zeros((1, 2), np.float32)
    surface = np.ones((1, 2), bool)
    depth = np.array([[1.0, 0.0]], np.float32)
    for module in (ref_cover, cpu_cover):
        out = np.zeros_like(depth)
        module.redistribute(height, surface, depth, np.float32(0.2), np.float32(0.0),
                            np.float32(0.25), out)
        np.testing.assert_allclose(out, [[0.8, 0.2]], rtol=1e-6)


@pytest.mark.parametrize("min_depth", [0.0, 0.05])
def test_tall_pile_spreads_to_the_angle_of_repose(min_depth):
    n, spacing = 41, 0.5
    settings = SnowSettings(angle_of_repose=30.0, redistribution_fraction=0.25,
                            redistribution_min_depth=min_depth, snowfall_rate=0.0)
    hm = heightmap_of(np.zeros((n, n), np.float32), spacing)
    cover = SnowCover(settings, hm, wind_grid_over(hm), select_backend("cpu"))
    cover.snow_depth[n // 2, n // 2] = 40.0               # a 40 m column on one node
    volume = cover.snow_volume()
    for _ in range(3000):
        cover.step(DT)
    depth = cover.snow_depth
    np.testing.assert_allclose(cover.snow_volume(), volume, rtol=1e-6)
    slope_x = np.abs(np.diff(depth, axis=1)) / spacing
    slope_y = np.abs(np.diff(depth, axis=0)) / spacing
    steepest = max(slope_x.max(), slope_y.max())
    repose = math.tan(math.radians(30.0))
    assert steepest <= repose * 1.02 + min_depth / spacing     # stable everywhere
    assert steepest >= repose * 0.9                            # but still a pile at the repose slope
    assert depth.max() < 10.0 and depth.min() >= 0.0
    if min_depth > 0:
        # snow thinner than the minimum depth stays put: the pile's rim is no thinner
        assert depth[depth > 0].min() >= 0.0


def test_deposited_volume_equals_snow_volume_after_thousands_of_steps():
    rng = np.random.default_rng(8)
    xs = np.arange(25) * 0.5
    terrain = (0.8 * np.sin(xs[None, :] * 0.9) + 0.6 * np.cos(xs[:, None] * 1.3)).astype(np.float32)
    terrain[:5, :4] = OPEN_HEIGHT
    hm = heightmap_of(terrain)
    grid = wind_grid_over(hm, 1.0, 10, -1.5)
    settings = SnowSettings(flake_count=2000, seed=1, snowfall_rate=20.0, angle_of_repose=25.0,
                            redistribution_fraction=0.2, redistribution_min_depth=0.001,
                            upwind_fetch="wrap")
    backend = select_backend("cpu")
    cover = SnowCover(settings, hm, grid, backend)
    flakes = FlakeSystem(settings, grid, hm.grid, backend)
    nz, ny, nx = grid.shape
    wind = SimpleNamespace(u=(1.5 + rng.normal(0, 0.5, (nz, ny, nx + 1))).astype(np.float32),
                           v=rng.normal(0, 0.5, (nz, ny + 1, nx)).astype(np.float32),
                           w=rng.normal(0, 0.1, (nz + 1, ny, nx)).astype(np.float32))
    flakes.initialize(wind, cover.height, cover.snow_depth)
    for step in range(2000):
        flakes.step(wind, cover.height, cover.snow_depth, cover.hit_counts, step * DT, DT)
        cover.step(DT)
    assert cover.hits() > 5_000
    assert not cover.hit_counts.any()
    assert np.all(cover.snow_depth[~hm.has_surface] == 0.0) and cover.snow_depth.min() >= 0.0
    np.testing.assert_allclose(cover.snow_volume(), cover.deposited_volume(), rtol=1e-5)


def test_snowfall_rate_gives_the_mean_depth_on_a_flat_plane():
    hm = heightmap_of(np.zeros((33, 33), np.float32), 0.5)      # 16 x 16 m
    grid = wind_grid_over(hm, 1.0, 12, -1.0)                    # spawn ~10.5 m up
    settings = SnowSettings(flake_count=4000, seed=3, snowfall_rate=2.0, snow_type="dry",
                            redistribution_fraction=0.0, upwind_fetch="wrap")
    backend = select_backend("cpu")
    cover = SnowCover(settings, hm, grid, backend)
    flakes = FlakeSystem(settings, grid, hm.grid, backend)
    wind = SimpleNamespace(u=np.full((12, 16, 17), 2.0, np.float32), v=np.zeros((12, 17, 16), np.float32),
                           w=np.zeros((13, 16, 16), np.float32))
    flakes.initialize(wind, cover.height, cover.snow_depth)
    seconds = 60.0
    steps = int(seconds / DT)
    for step in range(steps):
        flakes.step(wind, cover.height, cover.snow_depth, cover.hit_counts, step * DT, DT)
        cover.step(DT)
    expected = settings.snowfall_rate * steps * DT / 3600.0
    hits = cover.hits()
    assert hits > 10_000
    # the snowfall is imposed: the mean depth is the rate's, up to float32 sums and the
    # part of a hit still owed
    assert cover.snow_depth.mean() == pytest.approx(expected, rel=1e-4)
    assert cover.deposited_volume() == pytest.approx(expected * 16.5 * 16.5, rel=1e-4)
    # and volume_per_hit is calibrated so that a landing weighs about one hit in steady
    # fall (about 1/sqrt(hits) statistical spread, plus the start-up; 4 % is several sigma)
    units = int(np.asarray(cover.weighted_total)[0])
    assert units / (hits * WEIGHT_UNITS) == pytest.approx(1.0, abs=0.04)


def test_state_dict_round_trip_and_bad_input():
    height, surface, depth, hits = random_cover_input(2)
    hm = heightmap_of(height)
    settings = SnowSettings(flake_count=100)
    cover = SnowCover(settings, hm, wind_grid_over(hm), select_backend("cpu"))
    cover.snow_depth[...] = depth
    cover.hit_counts[...] = hits
    state = cover.state_dict()
    twin = SnowCover(settings, hm, wind_grid_over(hm), select_backend("cpu"))
    twin.load_state_dict(state)
    for c in (cover, twin):
        for _ in range(20):
            c.step(DT)
    np.testing.assert_array_equal(cover.snow_depth, twin.snow_depth)
    assert cover.deposited_volume() == twin.deposited_volume() > 0
    with pytest.raises(SnowInputError, match="snow_depth"):
        twin.load_state_dict({**state, "snow_depth": depth[:-1]})
    with pytest.raises(SnowInputError, match="terrain"):
        SnowCover(settings, heightmap_of(np.full((5, 5), OPEN_HEIGHT)), wind_grid_over(hm),
                  select_backend("cpu"))
