"""The command line (simulate, benchmark, presets) and the presets' grid sizes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from snowfall.snow_addon import backend as backend_module
from snowfall.snow_addon.cli import main
from snowfall.snow_addon.grid import WindGrid
from snowfall.snow_addon.presets import PRESETS, get_preset
from snowfall.snow_addon.errors import SnowInputError
from snowfall.snow_addon.threads import cpu_thread_governor

# The sizes DESIGN.md and the issues claim for the named scenes: (wind x, y, z), flakes,
# heightmap nodes per side.
CLAIMED = {
    "profile-2009": ((256, 256, 32), 524_288, 512),
    "profile-2013": ((256, 256, 32), 2_097_152, 768),
    "balanced-2013": ((128, 128, 32), 1_572_864, 768),
    "flake-sweep-1M": ((128, 128, 32), 1_048_576, 768),
    "flake-sweep-4.7M": ((128, 128, 32), 4_718_592, 768),
    "flake-sweep-100M": ((128, 128, 32), 104_857_600, 768),
    "wind-sweep-64": ((64, 64, 32), 1_572_864, 768),
    "wind-sweep-512": ((512, 512, 32), 1_572_864, 768),
    "wind-sweep-512x64": ((512, 512, 64), 1_572_864, 768),
    "terrain-sweep-256": ((256, 256, 32), 524_288, 256),
    "terrain-sweep-2048": ((256, 256, 32), 524_288, 2048),
    "big-100M": ((512, 512, 64), 104_857_600, 1024),
    "cpu-small": ((64, 64, 16), 65_536, 256),
    "cpu-2009": ((128, 128, 32), 262_144, 512),
}


@pytest.mark.parametrize("name", sorted(CLAIMED))
def test_presets_give_the_claimed_sizes(name):
    cells, flakes, nodes = CLAIMED[name]
    preset = get_preset(name)
    settings = preset.settings()
    settings.validate()
    assert settings.flake_count == flakes
    heightmap, wind = preset.grids(settings)  # geometry only: no flake or wind arrays
    assert (heightmap.nx, heightmap.ny) == (nodes, nodes)
    assert (wind.nx, wind.ny, wind.nz) == cells


def test_every_preset_has_valid_settings_and_its_own_grid():
    for preset in PRESETS.values():
        settings = preset.settings().validate()
        heightmap, wind = preset.grids(settings)
        assert (wind.nx, wind.ny, wind.nz) == preset.wind_cells, preset.name
        assert (heightmap.nx, heightmap.ny) == (preset.heightmap_nodes,) * 2, preset.name
        assert wind.cell_size == pytest.approx(preset.cell_size, rel=1e-9)


@pytest.mark.parametrize("name", ["cpu-small", "balanced-2013"])
def test_presets_sizes_hold_with_the_real_heightmap(name):
    """The heightmap the engine builds (its own z range) gives the same wind grid."""
    from snowfall.snow_addon.terrain import build_heightmap

    preset = get_preset(name)
    settings = preset.settings()
    vertices, triangles = preset.terrain()
    heightmap = build_heightmap(vertices, triangles, settings.heightmap_resolution)
    grid = WindGrid.for_terrain(heightmap.grid, heightmap.z_min, heightmap.z_max, settings)
    assert heightmap.grid.shape == (preset.heightmap_nodes,) * 2
    assert (grid.nx, grid.ny, grid.nz) == preset.wind_cells


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(SnowInputError, match="profile-2013"):
        get_preset("profile-2014")


def test_simulate_takes_the_wind_boundary(capsys):
    from snowfall.snow_addon.cli import BadArgument, build_parser
    from snowfall.snow_addon.presets import build_simulation
    from snowfall.snow_addon.presets import get_preset
    args = build_parser().parse_args(["simulate", "--preset", "cpu-tiny", "--backend", "cpu",
                                      "--wind-boundary", "voxels"])
    sim = build_simulation(get_preset("cpu-tiny"), args, profile=False)
    assert sim.settings.wind_boundary == "voxels" and not sim.wind.cut_cells
    with pytest.raises(BadArgument, match="--wind-boundary"):
        build_parser().parse_args(["simulate", "--preset", "cpu-tiny", "--wind-boundary", "x"])


def test_simulate_runs_prints_diagnostics_and_saves(tmp_path, capsys):
    out = tmp_path / "state.npz"
    out.write_bytes(b"an older file that the save must replace whole")
    status = main(["simulate", "--preset", "cpu-tiny", "--steps", "3", "--backend", "cpu",
                   "--flakes", "2000", "--seed", "7", "--profile", "--save", str(out)])
    text = capsys.readouterr().out
    assert status == 0
    for step in (1, 2, 3):
        assert f"step {step:>6}" in text
    assert "converged" in text and "div " in text and "hits " in text
    assert "steps/s" in text and "ns per flake-step" in text and "ns per cell-step" in text
    assert "ms/step" in text  # --profile: per-stage times
    with np.load(out) as data:
        assert int(data["step_index"]) == 3
        positions = [data[k] for k in data.files if k.startswith("flakes.")]
    assert positions and all(np.all(np.isfinite(a)) for a in positions if a.dtype.kind == "f")
    assert sorted(os.listdir(tmp_path)) == ["state.npz"]  # no temporary file left behind

    # The printed volumes are the engine's: deposited == integral of snow depth.
    last = [line for line in text.splitlines() if line.startswith("step      3")][0]
    deposited = float(last.split("deposited ")[1].split(" m^3")[0])
    snow = float(last.split("snow ")[1].split(" m^3")[0])
    assert deposited > 0 and snow == pytest.approx(deposited, rel=1e-4)


def test_a_failed_save_leaves_the_old_file(tmp_path, capsys, monkeypatch):
    from snowfall.snow_addon import simulation

    out = tmp_path / "state.npz"
    out.write_bytes(b"old")

    def broken(self):
        raise RuntimeError("disk full")

    monkeypatch.setattr(simulation.Simulation, "state_dict", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        main(["simulate", "--preset", "cpu-tiny", "--steps", "1", "--backend", "cpu",
              "--flakes", "500", "--save", str(out)])
    assert out.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["state.npz"]


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--preset", "no-such-scene"], ["--preset", "no-such-scene", "cpu-small"]),
    (["simulate"], ["--preset", "--help"]),
    (["simulate", "--preset", "cpu-tiny", "--steps", "-3"], ["--steps", "0 or more", "try 24"]),
    (["simulate", "--preset", "cpu-tiny", "--steps", "many"], ["--steps", "whole number"]),
    (["simulate", "--preset", "cpu-tiny", "--flakes", "0"], ["--flakes", "at least 1", "try"]),
    (["simulate", "--preset", "cpu-tiny", "--backend", "tpu"], ["--backend", "tpu", "cpu"]),
    (["simulate", "--preset", "cpu-tiny", "--seed", str(2**32)], ["--seed", "try 0"]),
    (["simulate", "--preset", "cpu-tiny", "--print-every", "0"], ["--print-every", "try"]),
    (["simulate", "--preset", "cpu-tiny", "--frobnicate"], ["--frobnicate", "--help"]),
    (["benchmark", "--scenes", "cpu-tiny", "bogus"], ["--scenes", "bogus", "try cpu-small"]),
    (["benchmark", "--blender-frames", "1"], ["--blender-frames", "at least 2", "try 12"]),
    (["benchmark", "--min-seconds", "-1"], ["--min-seconds", ">= 0", "try"]),
    (["benchmark", "--min-seconds", "nan"], ["--min-seconds", ">= 0"]),
    (["benchmark", "--steps", "0"], ["--steps", "at least 1", "try 200"]),
    (["benchmark", "--warmup", "x"], ["--warmup", "whole number"]),
    (["benchmark", "--scenes", "cpu-tiny", "--seed", str(2**32)], ["--seed", "cpu-tiny", "try"]),
    (["benchmark", "--bake", "--blender", "--scenes", "cpu-tiny"], ["--blender", "--bake", "try"]),
    (["benchmark", "--bake", "--bake-frames", "1"], ["--bake-frames", "at least 2"]),
    (["benchmark", "--bake-scene", "no_such_scene"], ["--bake-scene", "box_test"]),
    (["render"], ["render", "simulate"]),
    ([], ["COMMAND", "--help"]),
])
def test_bad_arguments_exit_2_with_one_line_naming_them(argv, words, capsys):
    """issue 35: each bad argument is one line on stderr (the argument, what is wrong, what
    to try), exit status 2, and no work started (nothing on stdout)."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


@pytest.mark.parametrize("argv, argument", [
    (["simulate", "--preset", "cpu-tiny", "--steps", "-1", "--save", "{tmp}/state.npz"], "--steps"),
    (["simulate", "--preset", "cpu-tiny", "--seed", "-1", "--save", "{tmp}/state.npz"], "--seed"),
    (["simulate", "--preset", "cpu-tiny", "--seed", str(2**32), "--save", "{tmp}/state.npz"],
     "--seed"),
    (["simulate", "--preset", "cpu-tiny", "--save", "{tmp}/missing/state.npz"], "--save"),
    (["simulate", "--preset", "cpu-tiny", "--save", "{tmp}"], "--save"),
    (["benchmark", "--scenes", "cpu-tiny", "--flakes", "0", "--out", "{tmp}/r.json"], "--flakes"),
    (["benchmark", "--scenes", "cpu-tiny", "--seed", str(2**32), "--out", "{tmp}/r.json"],
     "--seed"),
    (["benchmark", "--scenes", "cpu-tiny", "--out", "{tmp}/missing/r.json"], "--out"),
    (["benchmark", "--bake", "--scenes", "cpu-tiny", "--out", "{tmp}"], "--out"),
])
def test_bad_arguments_write_nothing(argv, argument, tmp_path, capsys):
    """Checked before any work: a bad argument (an output path that cannot be written
    included) leaves the output folder as it was."""
    (tmp_path / "keep.txt").write_text("mine")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and argument in err, err
    assert sorted(os.listdir(tmp_path)) == ["keep.txt"]


def test_blender_arguments_need_bpy(monkeypatch, capsys):
    """--blender and --bake-scene are refused up front where bpy is missing."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "bpy" else real(name, *a))
    for argv, argument in ((["benchmark", "--blender", "--scenes", "cpu-tiny"], "--blender"),
                           (["benchmark", "--bake-scene", "box_test"], "--bake-scene")):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and argument in err and "bpy" in err and "try" in err


def test_bad_settings_exit_2_naming_the_setting(capsys):
    assert main(["simulate", "--preset", "cpu-tiny", "--seed", str(2**32), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "try" in err


def test_a_scene_too_big_for_memory_exits_2_with_what_fits(capsys, monkeypatch):
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: 4 * 1024**2)
    assert main(["simulate", "--preset", "cpu-tiny", "--backend", "cpu", "--flakes",
                 "1000000", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "flake_count" in err and "<=" in err


def test_presets_command_lists_the_scenes(capsys):
    assert main(["presets"]) == 0
    text = capsys.readouterr().out
    for name in ("profile-2009", "profile-2013", "balanced-2013", "big-100M", "cpu-small"):
        assert name in text
    assert "256x256x32" in text and "2,097,152 flakes" in text


def test_benchmark_measures_a_tiny_scene(tmp_path, capsys, monkeypatch):
    out = tmp_path / "results.json"
    assert main(["benchmark", "--scenes", "cpu-tiny", "--backend", "cpu", "--steps", "2",
                 "--warmup", "1", "--profile-steps", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "copy bandwidth" in text and "of copy" in text and "steps/s" in text
    assert "2009 thesis" in text  # the published figures are printed alongside
    results = json.loads(out.read_text())
    assert results["copy_bytes_per_s"] > 0
    (scene,) = results["scenes"]
    assert scene["scene"] == "cpu-tiny" and scene["wind_cells"] == [16, 16, 8]
    assert scene["steps_per_s"] > 0 and scene["ns_per_flake_step"] > 0
    assert {"wind", "flakes", "cover"} <= set(scene["stages"])
    for entry in scene["stages"].values():
        if "bandwidth" in entry:
            assert entry["bandwidth"] > 0 and entry["copy_fraction"] > 0
    assert scene["last_wind"]["converged"]
    assert scene["jacobi25_ms"] > 0  # the pressure solve is compared with 25 Jacobi sweeps


def test_benchmark_times_at_least_min_seconds_in_whole_chunks_of_steps(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["benchmark", "--scenes", "cpu-tiny", "--backend", "cpu", "--steps", "2",
                 "--warmup", "1", "--profile-steps", "1", "--min-seconds", "0.3",
                 "--out", str(out)]) == 0
    (scene,) = json.loads(out.read_text())["scenes"]
    # whole chunks of --steps until 0.3 s have passed (one chunk if the first took that long)
    assert scene["seconds"] >= 0.3 and scene["steps"] >= 2 and scene["steps"] % 2 == 0
    assert scene["steps_per_s"] == pytest.approx(scene["steps"] / scene["seconds"])
    assert "repeated to at least 0.3 s" in capsys.readouterr().out


def test_benchmark_times_the_scene_again_beside_a_busy_process(tmp_path, capsys):
    """--compete: each scene is timed again (median of 3) while another process keeps a core
    busy, and the CPU's threading layer and OpenMP wait setting are recorded."""
    import numba

    out = tmp_path / "results.json"
    assert main(["benchmark", "--scenes", "cpu-tiny", "--backend", "cpu", "--steps", "2",
                 "--warmup", "1", "--profile-steps", "1", "--compete",
                 "--out", str(out)]) == 0
    (scene,) = json.loads(out.read_text())["scenes"]
    runs = scene["steps_per_s_competing_runs"]
    assert len(runs) == 3 and all(rate > 0 for rate in runs)
    assert scene["steps_per_s_competing"] == sorted(runs)[1]
    assert scene["threading"]["layer"] == numba.threading_layer()
    # the thread governor (snow_addon.threads) steps the CPU scenes and the benchmark
    # reports the steps it ran at each count
    if scene["threading"]["adaptive"] and numba.config.NUMBA_NUM_THREADS > 1:
        assert cpu_thread_governor(backend_module.select_backend("cpu")) is not None
        counts = scene["steps_at_threads_competing"]
        assert counts and all(1 <= int(threads) <= numba.config.NUMBA_NUM_THREADS and steps > 0
                              for threads, steps in counts.items())
        assert sum(scene["steps_at_threads"].values()) == scene["steps"]
    # the kernels' package sets the OpenMP threads' spin before Numba starts them
    assert scene["threading"]["GOMP_SPINCOUNT"] == os.environ["GOMP_SPINCOUNT"]
    assert "with another process keeping one core busy" in capsys.readouterr().out


def test_benchmark_reports_a_scene_that_does_not_fit(capsys, monkeypatch):
    monkeypatch.setattr(backend_module, "host_memory_available", lambda: 64 * 1024**2)
    assert main(["benchmark", "--scenes", "cpu-1M", "--backend", "cpu", "--steps", "1"]) == 0
    text = capsys.readouterr().out
    # the message names the setting that dominates the plan and a value that fits
    assert "cpu-1M: does not fit" in text
    assert "flake_count <=" in text or "wind_cell_size >=" in text


def test_every_bandwidth_check_names_a_stage_the_timer_records():
    """The harness's stage tables use the names a profiled step records (snow_addon.stages),
    so each hot stage gets its bandwidth check."""
    from snowfall.benchmarks import harness
    from snowfall.snow_addon import stages
    from snowfall.snow_addon.cli import build_parser
    from snowfall.snow_addon.presets import build_simulation

    args = build_parser().parse_args(["simulate", "--preset", "cpu-tiny", "--backend", "numpy",
                                      "--flakes", "500"])
    sim = build_simulation(get_preset("cpu-tiny"), args, profile=True)
    sim.step(sim.settings.obstacle_refresh_steps)  # through an obstacle refresh
    recorded = set(sim.timer.seconds)
    assert recorded <= set(stages.ALL)
    assert set(harness.HOT_STAGES) <= recorded
    size = harness.SceneSize(500, 16 * 16 * 8, 64 * 64, 2.0)
    for stage in recorded - {stages.DRIFT}:
        assert harness.stage_bytes(stage, size) > 0, stage

    record = {"scene": "cpu-tiny", "backend": "gpu",
              "stages": {stage: {"copy_fraction": 0.5} for stage in recorded}}
    lines = "\n".join(harness.check_targets(record, None))
    for stage in harness.HOT_STAGES:
        assert f"target {stage} bandwidth: 50% of copy" in lines
    del record["stages"][stages.WIND]
    assert f"target {stages.WIND} bandwidth: not measured" in "\n".join(
        harness.check_targets(record, None))


@pytest.mark.blender
def test_blender_particle_benchmark_runs(tmp_path):
    pytest.importorskip("bpy")
    result_file = tmp_path / "blender.json"
    done = subprocess.run([sys.executable, "-m", "snowfall.benchmarks.blender_particles",
                           "--preset", "cpu-tiny", "--particles", "500", "--frames", "4",
                           "--json", str(result_file)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(result_file.read_text())
    assert result["simulated_particles"] == 500
    assert result["us_per_particle_frame"] > 0
    # The particles fell under gravity: all start at or below the emitter's top.
    assert result["z_mean"] < result["emitted_below_z"]


def test_benchmark_bake_reports_output_cost_and_disk_limit(tmp_path, capsys):
    """``benchmark --bake``: a Blender-less bake of a preset through the add-on's own
    writer-thread code reports simulation time, output time, bytes per flake-frame and the
    disk's write limit measured in the same run; the files it wrote are the add-on's."""
    out = tmp_path / "bake.json"
    assert main(["benchmark", "--bake", "--scenes", "cpu-tiny", "--backend", "numpy",
                 "--flakes", "2000", "--bake-frames", "3", "--bake-disk-mib", "8",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bake cpu-tiny: 2,000 flakes x 3 frames" in text
    for words in ("simulation", "ns/flake-frame", "output", "B/flake-frame",
                  "disk write limit", "MB/s"):
        assert words in text, words
    (record,) = json.loads(out.read_text())["bakes"]
    assert record["route"] == "engine (no Blender)" and record["frames"] == 3
    assert record["simulation_s"] > 0 and record["output_s"] > 0
    assert 0 < record["flake_bytes_per_flake_frame"] < 40      # compressed point cache
    assert record["disk_write_bytes_per_s"] > 0 and record["disk_ns_per_flake_frame"] > 0
    assert record["compression"] == 3 and record["checkpoint_bytes"] > 0


def test_benchmark_bake_names_an_unknown_preset(capsys):
    assert main(["benchmark", "--bake", "--scenes", "no-such-scene"]) == 2
    assert "no-such-scene" in capsys.readouterr().err
