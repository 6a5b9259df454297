"""benchmarks/drift_validation.py --seeds: one bake per seed and each zone's range over
them (single short storms scatter, docs/drift_validation.md)."""
import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "drift_validation.py"


@pytest.fixture(scope="module")
def validation():
    spec = importlib.util.spec_from_file_location("drift_validation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_spread_gives_every_zone_and_number_per_seed(validation):
    runs = [{"zones": [{"zone": "lee", "mean_depth_m": depth, "ratio": ratio}],
             "derived": {"H_m": 2.0, "note": "text", "length_H": length}}
            for depth, ratio, length in ((0.1, 0.5, 13.8), (0.3, 1.5, 1.25))]
    table = validation.spread(runs)
    assert table["zones"]["lee"] == {"depth_m": [0.1, 0.3], "ratio": [0.5, 1.5]}
    assert table["derived"] == {"H_m": [2.0, 2.0], "length_H": [13.8, 1.25]}
    assert validation._span([13.8, 1.25, float("nan")]) == "1.25..13.8"


def test_seeds_bake_once_each_and_report_the_range(validation, tmp_path, capsys):
    out = tmp_path / "seeds.json"
    assert validation.main(["--scene", "cube", "--steps", "4", "--flakes", "2000",
                            "--seeds", "4", "5", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["settings"]["seed"] for r in data["results"]] == [4, 5]
    lee = data["spread"]["box_test"]["zones"]["lee 1-3 H, |y| <= B/2"]
    assert lee["depth_m"] == [r["zones"][6]["mean_depth_m"] for r in data["results"]]
    assert "over seeds 4 5 (min..max)" in capsys.readouterr().out


def test_lee_drift_is_measured_behind_the_scoured_gap(validation):
    # a deposit at the fence's foot, a scoured gap at 1.5 H, a drift peaking at 7 H and
    # ending at 12.5 H, then a far lee at 8 cm (above a scoured fetch of 4 cm)
    centres = np.arange(0.25, 34.0, 0.5)
    values = np.full(centres.size, 0.08)
    values[centres < 1.0] = 0.24
    values[(centres >= 1.0) & (centres < 2.0)] = 0.03
    rise = (centres >= 2.0) & (centres < 7.0)
    values[rise] = 0.03 + (centres[rise] - 2.0) / 5.0 * 0.20
    fall = (centres >= 7.0) & (centres < 12.5)
    values[fall] = 0.23 - (centres[fall] - 7.0) / 5.5 * 0.15
    gap, peak, baseline, end = validation.lee_drift(centres, values, values, 0.04)
    assert 1.0 <= centres[gap] < 2.0 and 6.5 <= centres[peak] <= 7.25
    assert baseline == pytest.approx(0.08)
    assert 11.5 <= end <= 12.75


def test_drift_cross_sections_sum_the_snow_above_the_fetch_on_each_side(validation):
    # 0.25 m rows of a 2 m fence: windward 1 m of snow over its last 2 m (8 rows) on a
    # fetch of 0.1 m; a lee with a bare gap 0-1 H and 0.3 m from 1 to 6 H, the fetch's
    # depth beyond; the fence's own rows (nan) count on neither side, a row with no
    # ground (nan depth) counts as nothing, and snow outside the spans (a bank 5-6 H
    # upwind, a drift from 30 H on) not at all
    spacing, height, reference = 0.25, 2.0, 0.1
    position = np.concatenate([np.arange(-48, 0) * spacing / height, [np.nan] * 3,
                               np.arange(0, 260) * spacing / height])
    depth = np.full(position.size, reference)
    depth[(position >= -1.0) & (position < 0.0)] = 1.0
    depth[(position >= 0.0) & (position < 1.0)] = 0.0
    depth[(position >= 1.0) & (position < 6.0)] = 0.3
    depth[(position >= -6.0) & (position < -5.0)] = 2.0
    depth[position >= 30.0] = 2.0
    depth[np.isnan(position)] = np.nan
    depth[np.nonzero(position >= 10.0)[0][0]] = np.nan
    windward, lee = validation.drift_cross_sections(position, depth, reference, spacing,
                                                    height)
    assert windward == pytest.approx(0.9 * 2.0 / 4.0)             # 0.9 m over 2 m, in H^2
    assert lee == pytest.approx((-0.1 * 2.0 + 0.2 * 10.0) / 4.0)   # the gap counts against it
