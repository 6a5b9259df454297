"""CUDA build of the flake kernels against the NumPy reference, and whole CPU-vs-GPU runs
of the flakes and the cover with the documented tolerances (docs/flakes_and_cover.md; the
cover kernels against the reference: tests/engine/test_cover.py, over the backends):

* respawn counts and hit counts: identical (the same random stream, the same float32
  operation order, --fmad=false; only sin/cos of the spiral phase are computed in double
  by different libraries and rounded to float32);
* positions 1e-4 m, velocities 1e-4 m/s, phase 1e-5 rad, after 200 steps;
* snow depth 1e-6 m + 1e-5 relative; snow volume = deposited volume to 1e-6 relative.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from snowfall.kernels.reference import flakes as ref_flakes
from snowfall.snow_addon.backend import select_backend
from snowfall.snow_addon.cover import SnowCover
from snowfall.snow_addon.flakes import STATE_NAMES, FlakeSystem
from snowfall.snow_addon.grid import OPEN_HEIGHT, HeightmapGrid, WindGrid
from snowfall.snow_addon.settings import SnowSettings

pytestmark = pytest.mark.gpu

GRID = WindGrid(0.0, 0.0, -1.0, 1.0, 8, 6, 12)
HEIGHTMAP = HeightmapGrid(0.0, 0.0, 0.5, 17, 13)
DT = np.float32(1.0 / 24.0)


def noisy_wind(seed=0, grid=GRID):
    rng = np.random.default_rng(seed)
    nz, ny, nx = grid.shape
    return SimpleNamespace(u=(2.0 + rng.normal(0, 1, (nz, ny, nx + 1))).astype(np.float32),
                           v=rng.normal(0, 1, (nz, ny + 1, nx)).astype(np.float32),
                           w=rng.normal(0, 0.3, (nz + 1, ny, nx)).astype(np.float32))


def rough_ground(seed=0):
    rng = np.random.default_rng(seed)
    height = rng.uniform(0.0, 1.5, HEIGHTMAP.shape).astype(np.float32)
    height[:4, :5] = OPEN_HEIGHT
    snow = rng.uniform(0.0, 0.2, HEIGHTMAP.shape).astype(np.float32)
    snow[:4, :5] = 0.0
    return height, snow


def on_device(namespace):
    import cupy
    return SimpleNamespace(**{k: cupy.asarray(v) for k, v in vars(namespace).items()})


def test_gpu_flake_kernels_match_reference(gpu_backend):
    import cupy
    from snowfall.kernels.gpu import flakes as gpu_flakes

    rng = np.random.default_rng(1)
    n = 5000
    flake_id = (rng.permutation(n).astype(np.uint32) * np.uint32(3))
    state = [rng.uniform(-0.5, 8.5, n), rng.uniform(-0.5, 6.5, n), rng.uniform(-1.2, 11.0, n),
             rng.normal(0, 2, n), rng.normal(0, 2, n), rng.normal(-1, 1, n), rng.uniform(0, 6.28, n)]
    state = [a.astype(np.float32) for a in state] + [rng.integers(0, 50, n).astype(np.uint32)]
    wind = noisy_wind(1)
    height, snow = rough_ground(1)
    args = lambda W, H, S, hits: (W.u, W.v, W.w, np.float32(0.0), np.float32(0.0), np.float32(-1.0),  # noqa: E731
                                  np.float32(1.0), H, S, np.float32(0.0), np.float32(0.0),
                                  np.float32(0.5), hits, 9, np.float32(0.5), np.float32(1.5),
                                  np.float32(0.5), np.float32(9.81), DT)
    ref_state = [a.copy() for a in state]
    ref_hits = np.zeros(HEIGHTMAP.shape, np.int32)
    gpu_state = [cupy.asarray(a) for a in state]
    gpu_hits = cupy.zeros(HEIGHTMAP.shape, cupy.int32)
    gpu_wind, gpu_height, gpu_snow = on_device(wind), cupy.asarray(height), cupy.asarray(snow)
    for _ in range(5):
        ref_flakes.step_flakes(flake_id, *ref_state, *args(wind, height, snow, ref_hits))
        gpu_flakes.step_flakes(cupy.asarray(flake_id), *gpu_state,
                               *args(gpu_wind, gpu_height, gpu_snow, gpu_hits))
    got = [cupy.asnumpy(a) for a in gpu_state]
    np.testing.assert_array_equal(got[7], ref_state[7])
    np.testing.assert_array_equal(cupy.asnumpy(gpu_hits), ref_hits)
    assert ref_hits.sum() > 100
    for g, r in zip(got[:7], ref_state[:7]):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-5)

    # blowing snow, the separation bubble and the eddies
    ny, nx = GRID.shape[1:]
    lift = {"surface_x": (8 * rng.standard_normal((ny, nx))).astype(np.float32),
            "surface_y": (8 * rng.standard_normal((ny, nx))).astype(np.float32),
            "ustar_per_speed": 0.06, "threshold": 0.2, "heading_x": 0.6, "heading_y": 0.8,
            "lift_strength": 1.5, "bubble_top": rng.uniform(-1.0, 2.5, (ny, nx)).astype(np.float32),
            "eddy_scale": 0.41, "mixing_height": 2.5, "eddy_steps": 3,      # and eddies
            "eddy_floor": 0.25,                                   # with a u* floor
            "grain_speed": 0.3}                                               # lifted grains
    device_lift = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in lift.items()}
    lifted_ref = [a.copy() for a in state]
    lifted_gpu = [cupy.asarray(a) for a in state]
    plain_hits = int(ref_hits.sum())
    ref_hits[...] = 0
    gpu_hits.fill(0)
    ref_grains, gpu_grains = np.zeros(1, np.int32), cupy.zeros(1, cupy.int32)
    for step in range(5):
        ref_flakes.step_flakes(flake_id, *lifted_ref, *args(wind, height, snow, ref_hits),
                               step_index=step + 11, grain_count=ref_grains, **lift)
        gpu_flakes.step_flakes(cupy.asarray(flake_id), *lifted_gpu,
                               *args(gpu_wind, gpu_height, gpu_snow, gpu_hits),
                               step_index=step + 11, grain_count=gpu_grains, **device_lift)
    got = [cupy.asnumpy(a) for a in lifted_gpu]
    np.testing.assert_array_equal(got[7], lifted_ref[7])
    np.testing.assert_array_equal(cupy.asnumpy(gpu_hits), ref_hits)
    assert 0 < ref_hits.sum() < plain_hits          # some landings were lifted
    assert (lifted_ref[7] & ref_flakes.BLOWING).any()
    assert int(gpu_grains[0]) == ref_grains[0] > 0       # grains aloft, summed over the steps
    for g, r in zip(got[:7], lifted_ref[:7]):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-5)

    # initialisation, keys, counting sort and scatter
    init_ref = [np.zeros(n, np.float32) for _ in range(7)] + [np.ones(n, np.uint32)]
    init_gpu = [cupy.asarray(a) for a in init_ref]
    common = lambda W, H, S: (W.u, W.v, W.w, 0.0, 0.0, -1.0, 1.0, H, S, 0.0, 0.0, 0.5, 6,  # noqa: E731
                              np.float32(1.0), np.float32(2.0), np.float32(0.3))
    ref_flakes.initialize_flakes(flake_id, *init_ref, *common(wind, height, snow))
    gpu_flakes.initialize_flakes(cupy.asarray(flake_id), *init_gpu, *common(gpu_wind, gpu_height, gpu_snow))
    for g, r in zip(init_gpu, init_ref):
        np.testing.assert_allclose(cupy.asnumpy(g), r, rtol=1e-6, atol=1e-6)
    keys_ref = np.zeros(n, np.uint32)
    ref_flakes.cell_keys(init_ref[0], init_ref[1], init_ref[2], 0.0, 0.0, -1.0, 1.0, 8, 6, 12, keys_ref)
    keys = cupy.zeros(n, cupy.uint32)
    gpu_flakes.cell_keys(init_gpu[0], init_gpu[1], init_gpu[2], 0.0, 0.0, -1.0, 1.0, 8, 6, 12, keys)
    np.testing.assert_array_equal(cupy.asnumpy(keys), keys_ref)
    counts = cupy.zeros(GRID.cell_count, cupy.uint32)
    gpu_flakes.sort_permutation(keys, counts, keys)            # in place, as FlakeSystem does
    destination = cupy.asnumpy(keys)
    assert sorted(destination.tolist()) == list(range(n))      # a permutation
    sorted_keys = np.empty(n, np.uint32)
    sorted_keys[destination] = keys_ref
    assert np.all(np.diff(sorted_keys.astype(np.int64)) >= 0)
    np.testing.assert_array_equal(cupy.asnumpy(counts), np.bincount(keys_ref, minlength=GRID.cell_count))
    out = cupy.zeros(n, cupy.uint32)
    gpu_flakes.scatter(cupy.asarray(flake_id), keys, out)
    expected = np.empty(n, np.uint32)
    expected[destination] = flake_id
    np.testing.assert_array_equal(cupy.asnumpy(out), expected)


def run_bake(backend_name, steps, sort_interval=None, resume_at=None):
    """Flakes + cover on a small rough terrain with a noisy wind; returns host results."""
    backend = select_backend(backend_name)
    height, _snow = rough_ground(2)
    heightmap = SimpleNamespace(grid=HEIGHTMAP, height=height, has_surface=height > -1e29)
    settings = SnowSettings(flake_count=6000, seed=7, snowfall_rate=30.0, angle_of_repose=30.0,
                            redistribution_fraction=0.2, redistribution_min_depth=0.001)
    wind = noisy_wind(2)
    if backend.is_gpu:
        wind = on_device(wind)

    def build():
        cover = SnowCover(settings, heightmap, GRID, backend)
        flakes = FlakeSystem(settings, GRID, HEIGHTMAP, backend)
        if sort_interval is not None:
            flakes.sort_interval = sort_interval
        return cover, flakes

    cover, flakes = build()
    flakes.initialize(wind, cover.height, cover.snow_depth)
    for step in range(steps):
        if step == resume_at:
            flake_state, cover_state = flakes.state_dict(), cover.state_dict()
            cover, flakes = build()
            flakes.load_state_dict(flake_state)
            cover.load_state_dict(cover_state)
        flakes.step(wind, cover.height, cover.snow_depth, cover.hit_counts, step * DT, DT)
        cover.step(DT)
    result = flakes.state_dict()
    result["snow_depth"] = np.asarray(backend.to_host(cover.snow_depth))
    result["snow_volume"], result["deposited"] = cover.snow_volume(), cover.deposited_volume()
    return result


def test_gpu_bake_matches_cpu_and_sorting_and_resume_change_nothing(gpu_backend):
    steps = 200
    cpu = run_bake("cpu", steps)
    gpu = run_bake("gpu", steps, sort_interval=0)
    gpu_sorted = run_bake("gpu", steps, sort_interval=3)
    gpu_resumed = run_bake("gpu", steps, sort_interval=3, resume_at=101)
    np.testing.assert_array_equal(gpu["respawn_count"], cpu["respawn_count"])
    assert cpu["respawn_count"].sum() > 1000
    for name in ("pos_x", "pos_y", "pos_z", "vel_x", "vel_y", "vel_z"):
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=0, atol=1e-4)
    np.testing.assert_allclose(gpu["phase"], cpu["phase"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(gpu["snow_depth"], cpu["snow_depth"], rtol=1e-5, atol=1e-6)
    assert gpu["deposited"] == cpu["deposited"]
    for result in (cpu, gpu, gpu_sorted, gpu_resumed):
        np.testing.assert_allclose(result["snow_volume"], result["deposited"], rtol=1e-6)
    # storage order (sorting) and a resume do not change a single bit
    for other in (gpu_sorted, gpu_resumed):
        for name in STATE_NAMES + ("snow_depth",):
            np.testing.assert_array_equal(other[name], gpu[name])
