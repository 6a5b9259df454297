"""The Snowfall panel guides: the preset menu in its header, Bake / Resume / Free and the
running bake's progress at the top, one sub-panel per topic in both places it shows, the
cache's size on disk computed without walking the folder on every redraw, and the
viewport arrow pointing where the wind blows."""
import math
import os
import time

import bpy
import numpy as np
import pytest

from snowfall.panels import main as panel
from snowfall.panels.wind_overlay import wind_arrow

SUB_PANELS = ["Terrain", "Wind", "Snowfall", "Drift", "Flakes", "Cache", "Simulation"]


class Recorder:
    """Collects what a panel draws (a stand-in for a UILayout)."""

    def __init__(self):
        self.labels, self.props, self.operators, self.bars = [], [], [], []
        self.use_property_split = self.use_property_decorate = False
        self.active = self.enabled = True

    def __getattr__(self, name):
        return lambda *args, **kwargs: self._call(name, args, kwargs)

    def _call(self, name, args, kwargs):
        if name == "label":
            self.labels.append(kwargs.get("text", ""))
        elif name == "prop":
            assert hasattr(args[0], args[1]), args[1]
            self.props.append(args[1])
        elif name == "operator":
            self.operators.append(args[0])
        elif name == "progress":
            self.bars.append(kwargs)
        return self


def test_sub_panels_in_the_physics_tab_and_the_sidebar(addon):
    """Both top panels carry the same sub-panels, in order, and a preset menu header."""
    for parent in ("PHYSICS_PT_snowfall", "VIEW3D_PT_snowfall"):
        children = [cls for cls in panel.CLASSES
                    if getattr(cls, "bl_parent_id", None) == parent]
        assert [cls.bl_label for cls in children] == SUB_PANELS
        for cls in children:
            assert hasattr(bpy.types, cls.bl_idname)
        assert hasattr(getattr(bpy.types, parent), "draw_header_preset")
    assert hasattr(bpy.types, "SNOWFALL_MT_presets")


def test_top_shows_bake_resume_free_and_every_part_draws(addon, tools, tmp_path):
    scene = addon
    tools.small_settings(scene, tmp_path)
    tools.grid_object()
    bpy.ops.snowfall.set_terrain()
    top = Recorder()
    panel.draw_bake_controls(top, bpy.context)
    assert top.operators == ["snowfall.bake", "snowfall.resume", "snowfall.free"]
    layout = Recorder()
    panel.draw_snowfall(layout, bpy.context)
    text = "\n".join(layout.labels)
    assert {"camera_only", "camera_margin", "snowfall_mode", "wind_from",
            "use_auto_wind_cell_size", "cache_folder"} <= set(layout.props)
    assert "snowfall.setup_render" in layout.operators
    assert "From the west, toward the east" in text
    assert "by frame 4" in text               # small_settings sets a rate: By Rate
    assert "(automatic)" in text


def test_top_shows_the_running_bakes_progress_and_stage(addon, monkeypatch):
    """While a bake runs: its progress as a bar with a percentage and its status, and the
    stage it reports when it has one (the first use's compile)."""
    from snowfall.operators import bake

    class Job:
        progress = 0.4

        def status_text(self):
            return "frame 11/25, ETA 8 s"

    job = Job()
    monkeypatch.setattr(bake, "running_job", lambda scene: job)
    layout = Recorder()
    panel.draw_bake_controls(layout, bpy.context)
    assert layout.operators == []                      # no Bake while one runs
    (bar,) = layout.bars
    assert bar["factor"] == pytest.approx(0.4) and "40%" in bar["text"]
    assert "frame 11/25" in bar["text"]
    job.stage = "Preparing the simulation for first use"
    layout = Recorder()
    panel.draw_bake_controls(layout, bpy.context)
    assert "Preparing the simulation for first use" in layout.labels


def test_depth_mode_shows_the_real_world_rate_and_rate_mode_the_depth(addon):
    scene = addon
    props = scene.snowfall
    layout = Recorder()
    panel.draw_amount(layout, bpy.context)
    text = "\n".join(layout.labels)
    assert "Rate 34.7 m/h over 10.4 s (frames 1-250)" in text, text
    props.snowfall_mode = "RATE"
    props.snowfall_rate = 36.0
    layout = Recorder()
    panel.draw_amount(layout, bpy.context)
    text = "\n".join(layout.labels)
    assert "About 10.4 cm by frame 250" in text, text


def test_cache_size_is_cached_until_the_bake_commits(tmp_path):
    """Size on disk: walked once, then reused until progress.json changes (and not more
    often than every MIN_INTERVAL seconds)."""
    folder = tmp_path / "bake"
    (folder / "snow").mkdir(parents=True)
    (folder / "progress.json").write_bytes(b"{}")
    (folder / "snow" / "a.exr").write_bytes(b"x" * 1000)
    assert panel.FolderSize.size(str(folder)) == 1002
    (folder / "snow" / "b.exr").write_bytes(b"x" * 500)
    assert panel.FolderSize.size(str(folder)) == 1002          # cached: no new commit
    stamp = time.time() + 5
    os.utime(folder / "progress.json", (stamp, stamp))
    panel.FolderSize._cache[str(folder)] = panel.FolderSize._cache[str(folder)][:2] + (0.0,)
    assert panel.FolderSize.size(str(folder)) == 1502          # a commit: walked again
    assert panel.FolderSize.size(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("source, downwind", [(270.0, (1.0, 0.0)), (0.0, (0.0, -1.0)),
                                              (90.0, (-1.0, 0.0)), (225.0, (0.7071, 0.7071))])
def test_wind_arrow_points_downwind(source, downwind):
    """The viewport arrow over the terrain points where the wind blows: from the side Wind
    From names (clockwise from +Y) across the terrain's middle, above its top."""
    low, high = np.array([-10.0, 0.0, 0.0]), np.array([30.0, 20.0, 5.0])
    segments = wind_arrow(low, high, math.radians(source))
    tail, tip = segments[0], segments[1]
    shaft = (tip - tail)[:2]
    assert np.linalg.norm(shaft) == pytest.approx(0.4 * 40.0)
    np.testing.assert_allclose(shaft / np.linalg.norm(shaft), downwind, atol=1e-4)
    np.testing.assert_allclose(0.5 * (tail + tip)[:2], [10.0, 10.0])
    assert (segments[:, 2] > high[2]).all()
    for start, end in (segments[2:4], segments[4:6]):
        np.testing.assert_allclose(start, tip)
        assert np.dot((end - tip)[:2], shaft) < 0.0             # barbs point back


def test_compass_names():
    assert [panel.compass_name(d) for d in (0, 44, 46, 90, 180, 270, 359, -90)] == \
        ["north", "north-east", "north-east", "east", "south", "west", "north", "west"]
