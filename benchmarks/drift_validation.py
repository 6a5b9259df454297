"""Drift validation: bake the solid snow fence, the cube on flat ground and the 2D ridge
with the engine alone (no bpy) and print snow depths by zone, in obstacle heights H and in
metres, next to what the literature says for each pattern (docs/drift_validation.md).

    python benchmarks/drift_validation.py                       # all three, Numba CPU
    python benchmarks/drift_validation.py --scene snow_fence --steps 240 --json out.json
    python benchmarks/drift_validation.py --backend gpu --set drift_strength=0.5
    python benchmarks/drift_validation.py --maps out/maps     # + a top-view PNG per scene
    python benchmarks/drift_validation.py --seeds 1 2 3       # each zone's range over seeds

Wind blows along +x in every scene. Each scene's terrain comes from
``snowfall.snow_addon.scenes`` (``snow_fence``, ``box_test`` with a cubic block,
``ridge``), with domains large enough for the zones measured (the fence's lee to 35 H,
the cube's far field beyond 4 H). The snowfall is a time-lapse (60 m/h, the sample scenes'
rate, so a few seconds of bake show centimetres of snow); the drift runs at the same
time-lapse (docs/drift.md). ``--set name=value`` changes any SnowSettings field of every
scene (new physics switches included) without editing this file.

Numbers are means of the snow depth (m, printed in cm) over ground nodes of each zone;
obstacle nodes (the fence, the cube) are left out. ``ratio`` is the zone's mean over the
scene's reference (far upstream for the fence and the ridge, the far field for the cube):
1 = as on open level ground, > 1 deposition, < 1 erosion or shelter from the snowfall.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sys
import time

import numpy as np

from snowfall.snow_addon import Simulation, SnowSettings  # noqa: E402
from snowfall.snow_addon import scenes  # noqa: E402
from snowfall.snow_addon.fences import PorousFence  # noqa: E402

#: Settings shared by the three scenes (a storm across +x at 10 m/s, time-lapse snowfall).
COMMON = dict(wind_speed=10.0, wind_direction=0.0, gust_strength=0.2, gust_period=2.0,
              gust_direction_jitter=5.0, snow_type="dry", snowfall_rate=60.0, seed=1)


@dataclasses.dataclass
class Scene:
    name: str
    terrain: dict              # keyword arguments of the scenes.py function
    settings: dict             # SnowSettings fields on top of COMMON
    steps: int                 # default number of steps (time_step 1/24 s)
    height: float              # the obstacle height H (m) that distances are measured in
    describe: str
    porosity: float | None = None   # a porous fence (scenes.porous_fence) of this porosity


SCENES = {
    # A solid fence 2 m high spanning a 90 x 12 m strip across the wind (2D, as Tabler's long
    # fences; flakes wrap periodically across y, the wind has free-slip side walls: open
    # sides let the air the fence holds back escape sideways, 2-3 m/s of the lee's wind
    # gone): 10 H of fetch upwind, 35 H of lee.
    # Heightmap 0.25 m, wind cells 0.5 m (4 per H). The fence is 0.6 m thick and centred
    # on a wind cell's centre, as before thin obstacles were solid to the wind (kept so the
    # figures stay comparable with the "before" run).
    "snow_fence": Scene(
        "snow_fence",
        dict(size_x=90.0, size_y=12.0, fence_height=2.0, fence_length=12.0, thickness=0.6,
             fence_x=-24.75, resolution=361),
        dict(heightmap_resolution=361, wind_cell_size=0.5, sky_height=8.0,
             flake_count=100_000, side_walls=True),
        steps=240, height=2.0,
        describe="solid fence H = 2 m (0.6 m thick) spanning a 90 x 12 m strip at x = "
                 "-24.75 m; wind 10 m/s along +x"),
    # The same strip with a half-open (50 % porous) fence instead of the solid one: Tabler's
    # slatted snow fences. A vertical plane in the solid fence's wind column, down to the
    # ground (their bottom gap, 10-15 % of H, is half a wind cell here and not resolved:
    # --fence-gap 0.25 tries it, docs/drift_validation.md); only the wind feels it
    # (snow_addon/fences.py).
    "porous_fence": Scene(
        "porous_fence",
        dict(size_x=90.0, size_y=12.0, fence_height=2.0, fence_length=12.0, fence_x=-24.75,
             bottom_gap=0.0, resolution=361),
        dict(heightmap_resolution=361, wind_cell_size=0.5, sky_height=8.0,
             flake_count=100_000, side_walls=True),
        steps=240, height=2.0, porosity=0.5,
        describe="porous fence H = 2 m (a plane) spanning a 90 x 12 m strip at x = -24.75 m; "
                 "wind 10 m/s along +x"),
    # A 2 m cube (box_test with block = block_height) in the middle of a 30 m plane: its
    # faces 7 H from the domain's edges. Heightmap 0.25 m, wind cells 0.5 m.
    "box_test": Scene(
        "box_test",
        dict(size=30.0, block=2.0, block_height=2.0, resolution=121),
        dict(heightmap_resolution=121, wind_cell_size=0.5, sky_height=8.0,
             flake_count=100_000),
        steps=240, height=2.0,
        describe="cube B = H = 2 m centred on a 30 x 30 m plane; wind 10 m/s along +x"),
    # The Agnesi ridge of scenes.ridge (H = 20 m, half-width a = 30 m) across y, on a
    # 240 x 40 m strip (the ridge is 2D, side walls as the fence's; a narrower strip than
    # the default saves time).
    "ridge": Scene(
        "ridge",
        dict(size_x=240.0, size_y=40.0, height=20.0, half_width=30.0, resolution=241),
        dict(heightmap_resolution=241, wind_cell_size=2.5, sky_height=30.0,
             flake_count=100_000, side_walls=True),
        steps=480, height=20.0,
        describe="Witch of Agnesi ridge H = 20 m, half-width a = 30 m, on a 240 x 40 m "
                 "strip; wind 10 m/s along +x"),
}
ALIASES = {"fence": "snow_fence", "cube": "box_test", "box": "box_test",
           "porous": "porous_fence"}


# --- measuring ----------------------------------------------------------------------------
def _over(value, reference):
    """value / reference, None when the reference is not positive."""
    return value / reference if reference > 0 else None


def _mean(depth, mask):
    count = int(np.count_nonzero(mask))
    return (float(depth[mask].mean()) if count else float("nan")), count


def _zone(rows, name, depth, mask, reference, span_h, span_m):
    mean, count = _mean(depth, mask)
    rows.append({"zone": name, "span_H": span_h, "span_m": span_m, "mean_depth_m": mean,
                 "nodes": count,
                 "ratio": mean / reference if reference and reference > 0 else float("nan")})
    return mean


def _profile(depth, mask, coordinate, start, stop, width):
    """Mean depth per bin of ``width`` along ``coordinate`` (heightmap-shaped) over
    ``mask``, bins [start, stop): list of (bin centre, mean or nan)."""
    edges = np.arange(start, stop + 1e-9, width)
    out = []
    for low, high in zip(edges[:-1], edges[1:]):
        out.append((0.5 * (low + high), _mean(depth, mask & (coordinate >= low)
                                              & (coordinate < high))[0]))
    return out


def _grids(sim):
    hm = sim.heightmap
    g = hm.grid
    x = g.x0 + g.spacing * np.arange(g.nx)
    y = g.y0 + g.spacing * np.arange(g.ny)
    xx, yy = np.meshgrid(x, y)
    return xx, yy, np.asarray(hm.height, dtype=np.float64), np.asarray(hm.has_surface), g.spacing


def lee_drift(centres, values, smooth, reference):
    """The fence's lee drift behind its scoured gap, from the depth profile (bin
    ``centres`` in H downwind of the lee face, ``values`` m, ``smooth`` the same smoothed):
    the gap is the shallowest bin within 3 H of the fence, the drift's peak the deepest
    bin beyond it (to 30 H), and its end the first bin past the peak where the depth falls
    to the far lee's level (the mean from 30 H on, the undisturbed lee of these strips;
    ``reference`` when the strip is shorter) plus a tenth of the drift's height over it.
    Returns (gap index, peak index, far-lee level m, end H or nan)."""
    index = np.arange(smooth.size)
    gap = int(np.argmin(np.where(centres <= 3.0, smooth, np.inf)))
    drift_peak = int(np.argmax(np.where((centres <= 30.0) & (index > gap), smooth, -np.inf)))
    far_lee = values[(centres >= 30.0) & np.isfinite(values)]
    baseline = float(far_lee.mean()) if far_lee.size else float(reference)
    level = baseline + 0.1 * (smooth[drift_peak] - baseline)
    ends = np.nonzero((index > drift_peak) & (smooth <= level))[0]
    return gap, drift_peak, baseline, float(centres[ends[0]]) if ends.size else float("nan")


def drift_cross_sections(position_h, depth, reference, spacing, height,
                         windward_span=5.0, lee_span=30.0):
    """The windward and the lee drift as Tabler measures drifts, by their cross-section:
    the snow above the fetch's depth summed across the fence. ``position_h`` (n,) is each
    node row's distance from the fence in H, negative upwind of the windward face, >= 0
    downwind of the lee face (nan on the fence), ``depth`` (n,) the rows' mean depth (m),
    ``reference`` the fetch's depth (m), ``spacing`` the node spacing (m), ``height`` H (m).
    Returns (windward, lee) in H^2 over [-windward_span, 0) and [0, lee_span) H: net of
    scoured ground (a bare gap behind the fence counts against the lee)."""
    position_h, depth = np.asarray(position_h, float), np.asarray(depth, float)
    excess = np.where(np.isfinite(depth), depth - reference, 0.0) * spacing / height ** 2
    windward = (position_h >= -windward_span) & (position_h < 0.0)
    lee = (position_h >= 0.0) & (position_h < lee_span)
    return float(excess[windward].sum()), float(excess[lee].sum())


def measure_fence(sim, scene):
    t = scene.terrain
    H = t["fence_height"]
    depth = sim.snow_depth().astype(np.float64)
    xx, yy, height, surface, spacing = _grids(sim)
    ground = surface & (height < 1e-3)
    if t["fence_length"] < t["size_y"]:      # the middle half of a fence with two ends
        strip = ground & (np.abs(yy) < 0.25 * t["fence_length"])
    else:                                   # a fence across the whole strip: 1 H off its sides
        strip = ground & (np.abs(yy) < 0.5 * t["size_y"] - H)
    windward_face = t["fence_x"] - 0.5 * t.get("thickness", 0.0)
    lee_face = t["fence_x"] + 0.5 * t.get("thickness", 0.0)
    up = (windward_face - xx) / H     # distance upwind of the windward face, in H
    down = (xx - lee_face) / H        # distance downwind of the lee face, in H
    fetch_h = (windward_face + 0.5 * t["size_x"]) / H
    lee_h = (0.5 * t["size_x"] - lee_face) / H
    far_up = (5.0, min(10.0, fetch_h - 1.0))     # keep 1 H off the inflow edge
    reference, _ = _mean(depth, strip & (up >= far_up[0]) & (up < far_up[1]))
    rows = []

    def zone(name, mask, span_h):
        return _zone(rows, name, depth, strip & mask, reference, span_h,
                     [round(span_h[0] * H, 2), round(span_h[1] * H, 2)])

    zone(f"far upstream {far_up[0]:g}-{far_up[1]:g} H", (up >= far_up[0]) & (up < far_up[1]),
         list(far_up))
    windward = zone("windward 0-5 H", (up >= 0) & (up < 5), [0, 5])
    lee = zone("lee 0-5 H", (down >= 0) & (down < 5), [0, 5])
    zone("lee 5-15 H", (down >= 5) & (down < 15), [5, 15])
    zone("lee 15-30 H", (down >= 15) & (down < 30), [15, 30])
    if lee_h > 31:
        zone(f"lee 30-{lee_h - 1:.0f} H", (down >= 30) & (down < lee_h - 1), [30, lee_h - 1])

    # lee drift length: from the lee maximum (smoothed over 1 H) downwind to where the
    # depth falls back to the upstream mean
    bins = _profile(depth, strip, down, 0.0, math.floor(lee_h - 1.0), 0.5)
    centres = np.array([c for c, _ in bins])
    values = np.array([v for _, v in bins])
    smooth = np.convolve(np.nan_to_num(values, nan=0.0), np.ones(2) / 2.0, mode="same")
    within = centres <= 30.0
    peak = int(np.argmax(np.where(within, smooth, -np.inf)))
    if not smooth[peak] > reference:
        drift_length, note = 0.0, "no lee drift: the lee never rises above the upstream mean"
    else:
        beyond = np.nonzero((np.arange(smooth.size) > peak) & (smooth <= reference))[0]
        if beyond.size:
            drift_length, note = float(centres[beyond[0]]), ""
        else:
            drift_length, note = float(centres[-1]), "still above the upstream mean at the outflow"
    gap, drift_peak, baseline, drift_end = lee_drift(centres, values, smooth, reference)
    bare = np.nonzero(smooth >= 0.5 * reference)[0]
    rows_x = xx[0]
    row_depth = np.array([depth[:, i][strip[:, i]].mean() if strip[:, i].any() else np.nan
                          for i in range(rows_x.size)])
    row_h = np.where(rows_x >= lee_face, (rows_x - lee_face) / H,
                     np.where(rows_x < windward_face, (rows_x - windward_face) / H, np.nan))
    windward_area, lee_area = drift_cross_sections(row_h, row_depth, reference, spacing, H,
                                                   far_up[0], min(30.0, lee_h - 1.0))
    wind_bins = _profile(depth, strip, up, 0.0, math.floor(fetch_h - 1.0), 0.5)
    wvalues = np.array([v for _, v in wind_bins])
    wpeak = int(np.nanargmax(wvalues)) if np.isfinite(wvalues).any() else 0
    fallen = float(sim.settings.snowfall_rate) / 3600.0 * float(sim.time)
    open_up = (5.0, min(15.0, fetch_h - 1.0))
    upwind_open, _ = _mean(depth, strip & (up >= open_up[0]) & (up < open_up[1]))
    derived = {
        "H_m": H,
        "reference_m": reference,
        "fallen_m": fallen,
        "upwind_5_15H_over_fallen": _over(upwind_open, fallen),
        "lee_over_windward_0_5H": lee / windward if windward > 0 else float("nan"),
        "windward_drift_H2": windward_area,
        "lee_drift_H2": lee_area,
        "lee_over_windward_drift": lee_area / windward_area if windward_area > 0
        else float("nan"),
        "lee_drift_length_H": drift_length,
        "lee_drift_length_m": drift_length * H,
        "lee_drift_note": note,
        "lee_peak_at_H": float(centres[peak]),
        "lee_gap_at_H": float(centres[gap]),
        "lee_drift_peak_at_H": float(centres[drift_peak]),
        "lee_drift_peak_m": float(smooth[drift_peak]),
        "far_lee_m": baseline,
        "lee_drift_end_H": drift_end,
        "lee_peak_over_reference": float(smooth[peak] / reference) if reference > 0 else None,
        "lee_below_half_reference_until_H": float(centres[bare[0]]) if bare.size else None,
        "windward_peak_at_H": float(wind_bins[wpeak][0]),
        "windward_peak_over_reference": float(wvalues[wpeak] / reference)
        if reference > 0 else None,
        "literature": ("Tabler 1980, 50 % porous fences at equilibrium: lee drift 30 H long, "
                       "1.2 H deep, cross-section 19.3 H^2; windward drift 12 H, 0.5 H deep"
                       if scene.porosity else
                       "Tabler: solid fence lee drift ~12-15 H (docs/drift_validation.md); "
                       "lee/windward > 1, the main drift (cross-section) in the lee"),
    }
    profile = _profile(depth, strip, (xx - lee_face) / H, -math.floor(fetch_h - 1.0),
                       math.floor(lee_h - 1.0), 1.0)
    return rows, derived, {"axis": "x from the fence's lee face, H", "bins": profile}


def measure_cube(sim, scene):
    t = scene.terrain
    H, B, half_size = t["block_height"], t["block"], 0.5 * t["size"]
    depth = sim.snow_depth().astype(np.float64)
    xx, yy, height, surface, spacing = _grids(sim)
    ground = surface & (height < 1e-3)
    b = 0.5 * B
    ax, ay = np.abs(xx), np.abs(yy)
    ring = np.maximum(np.maximum(ax - b, 0.0), np.maximum(ay - b, 0.0)) / H   # max-norm, H
    inner = (half_size - np.maximum(ax, ay)) / H                             # to the edge, H
    far = ground & (ring >= 4.0) & (inner >= 0.5)
    reference, _ = _mean(depth, far)
    rows = []

    def zone(name, mask, span_h, span_m):
        return _zone(rows, name, depth, ground & mask, reference, span_h, span_m)

    up = (-b - xx) / H       # upwind of the windward face, H
    down = (xx - b) / H      # downwind of the lee face, H
    side = (ay - b) / H      # outward of the side faces, H
    zone("far field (>= 4 H from the cube)", far, [4, None], [4 * H, None])
    front = zone("windward face 0-0.5 H, |y| <= B/2", (up >= 0) & (up < 0.5) & (ay <= b),
                 [0, 0.5], [0, 0.5 * H])
    zone("windward 0.5-1.5 H, |y| <= B/2", (up >= 0.5) & (up < 1.5) & (ay <= b), [0.5, 1.5],
         [0.5 * H, 1.5 * H])
    corners = zone("windward corners (1 H squares on them)",
                   (np.abs(xx + b) <= 0.5 * H) & (np.abs(ay - b) <= 0.5 * H), [-0.5, 0.5],
                   [-0.5 * H, 0.5 * H])
    sides = zone("sides 0-0.5 H out, along the block", (side >= 0) & (side < 0.5)
                 & (xx >= -b + 0.5 * H) & (xx <= b), [0, 0.5], [0, 0.5 * H])
    # the same corners and sides split as the field's pattern is: a scoop next to the
    # block, drifts further out (Oikawa et al.); the corner squares without their quarter
    # in front of the windward face, which is the face's deposit zone
    outside = zone("windward corners, outside the block's width", (np.abs(xx + b) <= 0.5 * H)
                   & (ay > b) & (ay - b <= 0.5 * H), [-0.5, 0.5], [-0.5 * H, 0.5 * H])
    scoop = zone("sides 0-0.25 H out, along the block", (side >= 0) & (side < 0.25)
                 & (xx >= -b + 0.5 * H) & (xx <= b), [0, 0.25], [0, 0.25 * H])
    beside = zone("sides 0.25-0.75 H out, along the block", (side >= 0.25) & (side < 0.75)
                  & (xx >= -b + 0.5 * H) & (xx <= b), [0.25, 0.75], [0.25 * H, 0.75 * H])
    zone("lee 0-1 H, |y| <= B/2", (down >= 0) & (down < 1) & (ay <= b), [0, 1], [0, H])
    lee = zone("lee 1-3 H, |y| <= B/2", (down >= 1) & (down < 3) & (ay <= b), [1, 3],
               [H, 3 * H])
    zone("lee 3-6 H, |y| <= B/2", (down >= 3) & (down < 6) & (ay <= b), [3, 6],
         [3 * H, 6 * H])
    # the fetch in line with the cube and beside it: the cube's drift wake must not come
    # back around the grid onto the ground upwind of it (both about 1)
    in_line = zone("upwind 4-6.5 H, in line (|y| <= B/2)", (up >= 4) & (up < 6.5) & (ay <= b),
                   [4, 6.5], [4 * H, 6.5 * H])
    zone("upwind 4-6.5 H, beside (2-4 H out)", (up >= 4) & (up < 6.5) & (side >= 2)
         & (side < 4), [4, 6.5], [4 * H, 6.5 * H])
    fallen = float(sim.settings.snowfall_rate) / 3600.0 * float(sim.time)
    lee_near = next(r["mean_depth_m"] for r in rows if r["zone"].startswith("lee 0-1 H"))
    derived = {
        "H_m": H, "B_m": B, "reference_m": reference, "fallen_m": fallen,
        "far_over_fallen": _over(reference, fallen),
        "upwind_in_line_over_fallen": _over(in_line, fallen),
        "lee_0_1H_over_far": _over(lee_near, reference),
        "upwind_in_line_over_far": _over(in_line, reference),
        "windward_face_over_far": _over(front, reference),
        "corners_over_far": _over(corners, reference),
        "sides_over_far": _over(sides, reference),
        "corners_outside_over_far": _over(outside, reference),
        "sides_0_025H_over_far": _over(scoop, reference),
        "sides_025_075H_over_far": _over(beside, reference),
        "lee_1_3H_over_far": _over(lee, reference),
        "literature": "Oikawa et al. 2007, Beyers et al. 2004, Tominaga et al. 2011: erosion "
                      "around the windward corners and along the sides (< 1), deposition "
                      "behind (> 1) and in front of the windward face",
    }
    centre_line = ground & (ay <= b)
    profile = _profile(depth, centre_line, xx / H, -math.floor(half_size / H),
                       math.floor(half_size / H), 0.5)
    return rows, derived, {"axis": "x along the centre line (|y| <= B/2), H", "bins": profile}


def measure_ridge(sim, scene):
    t = scene.terrain
    H, a = t["height"], t["half_width"]
    depth = sim.snow_depth().astype(np.float64)
    xx, yy, height, surface, spacing = _grids(sim)
    strip = surface & (np.abs(yy) < 0.25 * t["size_y"])
    edge = 0.5 * t["size_x"]
    far_up_mask = (xx <= -3.0 * a) & (xx >= -edge + 0.1 * a)
    reference, _ = _mean(depth, strip & far_up_mask)
    rows = []

    def zone(name, lo, hi):
        mask = strip & (xx >= lo * a) & (xx < hi * a)
        return _zone(rows, name, depth, mask, reference, [round(lo * a / H, 2),
                                                          round(hi * a / H, 2)],
                     [lo * a, hi * a])

    zone("far upstream x <= -3 a", -edge / a + 0.1, -3.0)
    windward = zone("windward slope -2 a .. -0.5 a", -2.0, -0.5)
    crest = zone("crest |x| < 0.25 a", -0.25, 0.25)
    crest_windward = zone("crest, windward half -0.25 a .. 0", -0.25, 0.0)
    crest_lee = zone("crest, lee half 0 .. 0.25 a (the cornice edge)", 0.0, 0.25)
    zone("lee shoulder 0.25 a .. 0.75 a (cornice zone)", 0.25, 0.75)
    lee = zone("lee slope 0.5 a .. 2 a", 0.5, 2.0)
    zone("far downstream x >= 3 a", 3.0, edge / a - 0.1)
    # the fetch upstream is scoured bare, so the snow that fell is the other yardstick
    fallen = float(sim.settings.snowfall_rate) / 3600.0 * float(sim.time)
    derived = {
        "H_m": H, "a_m": a, "reference_m": reference, "fallen_m": fallen,
        "windward_over_fallen": _over(windward, fallen),
        "crest_windward_half_over_fallen": _over(crest_windward, fallen),
        "crest_lee_half_over_fallen": _over(crest_lee, fallen),
        "lee_over_fallen": _over(lee, fallen),
        "windward_over_far": _over(windward, reference),
        "crest_over_far": _over(crest, reference),
        "lee_over_far": _over(lee, reference),
        "lee_over_windward": _over(lee, windward),
        "literature": "Gauer 2001, Lehning et al. 2008, Mott and Lehning 2010: windward "
                      "slope and crest scoured (< 1 of the snow that fell), lee slope loaded "
                      "(> 1), cornice at the crest's lee edge",
    }
    profile = _profile(depth, strip, xx / a, -math.floor(edge / a), math.floor(edge / a), 0.25)
    return rows, derived, {"axis": "x in half-widths a (crest at 0)", "bins": profile}


MEASURE = {"snow_fence": measure_fence, "porous_fence": measure_fence, "box_test": measure_cube,
           "ridge": measure_ridge}


# --- running ------------------------------------------------------------------------------
def _parse_set(items):
    fields = {f.name: f for f in dataclasses.fields(SnowSettings)}
    out = {}
    for item in items or ():
        if "=" not in item:
            raise SystemExit(f"--set {item!r}: expected name=value")
        name, text = item.split("=", 1)
        if name not in fields:
            raise SystemExit(f"--set {name}: not a SnowSettings field")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if text in ("True", "False"):
            value = text == "True"
        out[name] = value
    return out


def write_depth_map(path: str, depth: np.ndarray, repeat_y: int = 1) -> None:
    """Top view of ``depth`` (ny, nx) m as an RGB PNG, +x to the right (the wind) and +y up:
    dark blue = no snow over the 99th percentile's white, brown = bare ground (< 0.1 mm).
    ``repeat_y`` tiles a strip that is periodic across y (the 2D fence) so it can be seen."""
    import struct
    import zlib

    d = np.tile(np.asarray(depth, np.float64)[::-1], (repeat_y, 1))
    top = max(float(np.percentile(d, 99)), 1e-6)
    t = np.clip(d / top, 0.0, 1.0)
    rgb = np.stack([30 + 225 * t, 30 + 225 * t, 90 + 165 * t], axis=-1)
    rgb[d < 1e-4] = (120, 70, 30)
    scale = max(1, -(-480 // d.shape[1]))
    rgb = np.repeat(np.repeat(rgb.astype(np.uint8), scale, 0), scale, 1)
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                                         8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def run_scene(scene: Scene, backend: str, steps: int | None, flakes: int | None,
              overrides: dict, maps: str | None = None) -> dict:
    fences = []
    if scene.porosity is None:
        vertices, triangles = getattr(scenes, scene.name)(**scene.terrain)
    else:
        (vertices, triangles), fence = scenes.porous_fence(**scene.terrain)
        fences.append(PorousFence(*fence, porosity=scene.porosity))
    values = dict(COMMON, **scene.settings)
    if flakes:
        values["flake_count"] = flakes
    values.update(overrides)
    settings = SnowSettings(**values)
    steps = steps or scene.steps
    started = time.perf_counter()
    sim = Simulation(settings, vertices, triangles, backend=backend, fences=fences)
    setup = time.perf_counter() - started
    g = sim.grid
    solid = sim.solid_mask()
    levels = np.nonzero(solid.any(axis=(1, 2)))[0]
    solid_top = float(g.z0 + (levels.max() + 1) * g.cell_size) if levels.size else float("nan")
    print(f"\n== {scene.name}: {scene.describe}", flush=True)
    print(f"   {sim.backend.describe()}; heightmap {sim.heightmap.grid.nx}x"
          f"{sim.heightmap.grid.ny} ({sim.heightmap.grid.spacing:.3g} m), wind "
          f"{g.nx}x{g.ny}x{g.nz} cells of {g.cell_size:.3g} m, {settings.flake_count:,} "
          f"flakes, {steps} steps of {settings.time_step:.4g} s = {steps * settings.time_step:.1f}"
          f" s at {settings.snowfall_rate:g} m/h", flush=True)
    print(f"   the wind sees solid cells up to z = {solid_top:.3g} m (obstacle H = "
          f"{scene.height:g} m)", flush=True)
    if sim.wind.fence_resistance is not None:
        columns = np.asarray(sim.backend.to_host(sim.wind.fence_resistance)).max(axis=0) > 0
        top = np.asarray(sim.backend.to_host(sim.wind.fence_top))[columns]
        print(f"   porous fence: porosity {scene.porosity:g} (loss coefficient k = "
              f"{fences[0].resistance:.2f}), bottom gap {scene.terrain.get('bottom_gap', 0.0):g} m,"
              f" in {int(columns.sum())} wind columns, up to z = {float(top.max()):.3g} m",
              flush=True)
    started = time.perf_counter()
    done, chunk = 0, max(1, steps // 4)
    while done < steps:
        n = min(chunk, steps - done)
        diag = sim.step(n)
        done += n
        print(f"   step {done}/{steps}: {time.perf_counter() - started:.1f} s", flush=True)
    seconds = time.perf_counter() - started
    rows, derived, profile = MEASURE[scene.name](sim, scene)
    if maps:
        os.makedirs(maps, exist_ok=True)
        depth = sim.snow_depth()
        write_depth_map(os.path.join(maps, f"{scene.name}.png"), depth,
                        repeat_y=max(1, depth.shape[1] // (3 * depth.shape[0])))
    books = {f.name: getattr(diag, f.name) for f in dataclasses.fields(diag)
             if isinstance(getattr(diag, f.name), (int, float)) and f.name not in ("step",)}
    deposited = books.get("deposited_volume", 0.0)
    accounted = books.get("snow_volume", 0.0)
    books["unaccounted_volume"] = deposited - accounted
    books["unaccounted_relative"] = (deposited - accounted) / deposited if deposited else None
    return {"scene": scene.name, "describe": scene.describe, "terrain": scene.terrain,
            "settings": settings.to_dict(), "backend": sim.backend.describe(), "steps": steps,
            "wind_solid_top_m": solid_top, "setup_seconds": setup, "step_seconds": seconds, "zones": rows,
            "derived": derived, "books": books, "profile": profile}


def _cm(value):
    return "   nan" if value is None or not math.isfinite(value) else f"{100.0 * value:6.2f}"


def report(result: dict) -> None:
    d = result["derived"]
    print(f"   simulated in {result['step_seconds']:.1f} s (+{result['setup_seconds']:.1f} s "
          f"setup); H = {d['H_m']:g} m; reference depth {_cm(d['reference_m']).strip()} cm")
    print(f"   {'zone':48s} {'H':>12s} {'m':>14s} {'depth cm':>9s} {'ratio':>6s}")
    for row in result["zones"]:
        span_h = "..".join("inf" if v is None else f"{v:g}" for v in row["span_H"])
        span_m = "..".join("inf" if v is None else f"{v:g}" for v in row["span_m"])
        ratio = row["ratio"]
        ratio = f"{ratio:6.2f}" if ratio is not None and math.isfinite(ratio) else "   nan"
        print(f"   {row['zone']:48s} {span_h:>12s} {span_m:>14s} {_cm(row['mean_depth_m']):>9s}"
              f" {ratio}")
    for key, value in d.items():
        if key in ("H_m", "reference_m"):
            continue
        if isinstance(value, float):
            value = f"{value:.3g}"
        print(f"   {key}: {value}")
    b = result["books"]
    print(f"   books (m^3): deposited {b.get('deposited_volume', 0):.4g} = snow "
          f"{b.get('snow_volume', 0):.4g} + unaccounted {b['unaccounted_volume']:.3g} (relative "
          f"{(b['unaccounted_relative'] or 0):.2e})")
    extra = {k: v for k, v in b.items() if k not in ("deposited_volume", "snow_volume",
                                                      "unaccounted_volume",
                                                      "unaccounted_relative", "time", "hits")}
    if extra:
        print("   other diagnostics: " + ", ".join(f"{k} {v:.4g}" for k, v in extra.items()))
    p = result["profile"]
    cells = " ".join("." if not math.isfinite(v) else f"{100 * v:.1f}" for _, v in p["bins"])
    first, last = p["bins"][0][0], p["bins"][-1][0]
    print(f"   profile, depth cm per bin, {p['axis']}, bin centres {first:g} .. {last:g}:")
    print(f"     {cells}")


def _span(values) -> str:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "nan"
    return f"{min(finite):.3g}..{max(finite):.3g}"


def spread(runs: list) -> dict:
    """Each zone's depth (m) and ratio, and each numeric derived value, as (min, max) over
    ``runs`` (results of run_scene for the same scene with different seeds)."""
    zones = {}
    for index, row in enumerate(runs[0]["zones"]):
        depths = [run["zones"][index]["mean_depth_m"] for run in runs]
        ratios = [run["zones"][index]["ratio"] for run in runs]
        zones[row["zone"]] = {"depth_m": depths, "ratio": ratios}
    derived = {key: [run["derived"][key] for run in runs]
               for key, value in runs[0]["derived"].items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)}
    return {"zones": zones, "derived": derived}


def report_spread(runs: list, seeds: list) -> dict:
    """Print and return ``spread(runs)``: single short storms scatter (blowing snow builds
    different dunes in each), so only what holds over several seeds is a property of the
    model."""
    table = spread(runs)
    print(f"\n   over seeds {' '.join(str(s) for s in seeds)} (min..max):")
    for name, values in table["zones"].items():
        depths = [None if v is None else 100.0 * v for v in values["depth_m"]]
        print(f"   {name:48s} depth {_span(depths):>13s} cm   ratio {_span(values['ratio'])}")
    for key, values in table["derived"].items():
        print(f"   {key}: {_span(values)}")
    return table


# --- the sweep (issue 36): wind speed, obstacle size, distance from the upwind edge -------
#: The figures the sweep tabulates per scene kind (keys of the measure functions' derived).
SWEEP_FIGURES = {
    "fence": ("upwind_5_15H_over_fallen", "lee_over_windward_0_5H", "windward_drift_H2",
              "lee_drift_H2", "lee_over_windward_drift", "lee_drift_peak_at_H",
              "lee_drift_end_H"),
    "cube": ("far_over_fallen", "upwind_in_line_over_fallen", "windward_face_over_far",
             "sides_0_025H_over_far", "sides_over_far", "corners_outside_over_far",
             "lee_0_1H_over_far", "lee_1_3H_over_far"),
    "ridge": ("windward_over_fallen", "crest_windward_half_over_fallen",
              "crest_lee_half_over_fallen", "lee_over_fallen"),
}


def fence_scene(H: float, distance: float, porosity: float | None = None,
                lee: float = 31.0) -> Scene:
    """A fence H m high across a strip 6 H wide, its windward face ``distance`` H from the
    upwind edge, ``lee`` H of ground behind it; heightmap H / 8, wind cells H / 4 (the
    validation's fence at H = 2 m), flakes in proportion to the nodes (100,000 on the
    validation's strip)."""
    cell = 0.25 * H
    size_x, size_y = (distance + lee) * H, 6.0 * H
    resolution = int(round(size_x / (H / 8.0))) + 1
    nodes = resolution * (int(round(size_y / (H / 8.0))) + 1)
    flakes = int(round(100_000 * nodes / (361 * 49), -3))
    settings = dict(heightmap_resolution=resolution, wind_cell_size=cell, sky_height=4.0 * H,
                    flake_count=flakes, side_walls=True)
    # the fence on a wind cell's centre
    fence_x = -0.5 * size_x + distance * H + 1.5 * cell
    if porosity is None:
        terrain = dict(size_x=size_x, size_y=size_y, fence_height=H, fence_length=size_y,
                       thickness=0.3 * H, fence_x=fence_x, resolution=resolution)
        return Scene("snow_fence", terrain, settings, 1440, H,
                     f"solid fence H = {H:g} m, {distance:g} H from the upwind edge")
    terrain = dict(size_x=size_x, size_y=size_y, fence_height=H, fence_length=size_y,
                   fence_x=fence_x, bottom_gap=0.0, resolution=resolution)
    return Scene("porous_fence", terrain, settings, 1440, H,
                 f"porous fence ({porosity:g}) H = {H:g} m, {distance:g} H from the upwind edge",
                 porosity=porosity)


def cube_scene(H: float, distance: float) -> Scene:
    """A cube of side H centred on a square plane, its windward face ``distance`` H from
    the upwind edge; heightmap H / 8, wind cells H / 4 (the validation's cube at H = 2 m)."""
    size = (2.0 * distance + 1.0) * H
    resolution = int(round(size / (H / 8.0))) + 1
    flakes = int(round(100_000 * resolution ** 2 / 121 ** 2, -3))
    return Scene("box_test", dict(size=size, block=H, block_height=H, resolution=resolution),
                 dict(heightmap_resolution=resolution, wind_cell_size=0.25 * H,
                      sky_height=4.0 * H, flake_count=flakes),
                 1440, H, f"cube H = {H:g} m, {distance:g} H from the upwind edge")


def sweep_cases(args):
    """(kind, label, scene) of the sweep, the first seed of every case first."""
    cases = []
    for H in args.fence_heights:
        for distance in args.distances:
            if H != args.fence_heights[0] and distance != args.distances[0]:
                continue                   # sizes at the first distance, distances at the first size
            cases.append(("fence", f"solid fence H {H:g} m at {distance:g} H",
                          fence_scene(H, distance)))
    for distance in args.distances[:1]:
        cases.append(("fence", f"porous fence H 2 m at {distance:g} H",
                      fence_scene(2.0, distance, porosity=0.5)))
    for H in args.cube_heights:
        cases.append(("cube", f"cube H {H:g} m at {args.cube_distance:g} H",
                      cube_scene(H, args.cube_distance)))
    if args.with_ridge:
        cases.append(("ridge", "ridge H 20 m", SCENES["ridge"]))
    return cases


def run_sweep(args, overrides) -> dict:
    """Bake every case at every wind speed and seed (seed by seed, so that a run cut short
    by ``--budget`` still covers the sweep) and print each figure's range per case and
    wind speed, and over all of them."""
    started = time.perf_counter()
    results = []
    cases = sweep_cases(args)
    skipped = 0
    for seed in args.seeds or [1]:
        for kind, label, scene in cases:
            for speed in args.winds:
                if args.budget and time.perf_counter() - started > args.budget:
                    skipped += 1
                    continue
                values = dict(overrides, seed=seed, wind_speed=speed)
                result = run_scene(scene, args.backend, args.steps or scene.steps, args.flakes,
                                   values)
                d = result["derived"]
                books = result["books"]
                figures = {k: d.get(k) for k in SWEEP_FIGURES[kind]}
                print(f"   SWEEP {label} | {speed:g} m/s | seed {seed} | "
                      + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in figures.items())
                      + f" | books: snowfall {books.get('snowfall_volume', 0):.4g}, in "
                      f"{books.get('inflow_volume', 0):.4g}, out {books.get('outflow_volume', 0):.4g},"
                      f" suspended {books.get('suspended_volume', 0):.4g},"
                      f" unaccounted {books['unaccounted_relative'] or 0:.1e}", flush=True)
                results.append({"kind": kind, "case": label, "wind": speed, "seed": seed,
                                "figures": figures, "books": books,
                                "step_seconds": result["step_seconds"]})
    print(f"\n== sweep ranges (min..max over seeds; {len(results)} runs, {skipped} skipped by "
          f"the budget, {time.perf_counter() - started:.0f} s)")
    for kind, label, _scene in cases:
        for speed in args.winds:
            runs = [r for r in results if r["case"] == label and r["wind"] == speed]
            if not runs:
                continue
            cells = ", ".join(f"{k} {_span([r['figures'][k] for r in runs])}"
                              for k in SWEEP_FIGURES[kind])
            print(f"   {label} | {speed:g} m/s | {len(runs)} seeds | {cells}")
    for kind in SWEEP_FIGURES:
        runs = [r for r in results if r["kind"] == kind]
        if runs:
            print(f"   ALL {kind} ({len(runs)} runs): " + ", ".join(
                f"{k} {_span([r['figures'][k] for r in runs])}" for k in SWEEP_FIGURES[kind]))
    return {"runs": results, "skipped": skipped}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "gpu", "numpy", "auto"))
    parser.add_argument("--scene", default="all",
                        help="snow_fence (fence), porous_fence (porous), box_test (cube), ridge, "
                             "or all")
    parser.add_argument("--steps", type=int, help="steps per scene (default: the scene's, 240)")
    parser.add_argument("--flakes", type=int, help="flake count (default: the scene's)")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="override a SnowSettings field in every scene (repeatable)")
    parser.add_argument("--json", help="write every number to this JSON file")
    parser.add_argument("--maps", metavar="FOLDER",
                        help="write a top-view depth map per scene, FOLDER/<scene>.png")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                        help="bake every scene once per seed and print each zone's range "
                             "over them (maps: the first seed's)")
    parser.add_argument("--porosity", type=float,
                        help="the porous fence's porosity (default: the scene's, 0.5)")
    parser.add_argument("--fence-gap", type=float, metavar="M",
                        help="the porous fence's bottom gap in m (default: the scene's)")
    parser.add_argument("--sweep", action="store_true",
                        help="issue 36's sweep: fences and cubes of several sizes and distances "
                             "from the upwind edge at several wind speeds (with --seeds)")
    parser.add_argument("--winds", type=float, nargs="+", default=[8.0, 12.0, 16.0],
                        help="sweep: wind speeds, m/s")
    parser.add_argument("--fence-heights", type=float, nargs="+", default=[2.0, 1.0, 4.0],
                        help="sweep: solid fence heights, m (the first at every distance)")
    parser.add_argument("--distances", type=float, nargs="+", default=[20.0, 10.0, 40.0],
                        help="sweep: fence distances from the upwind edge, H (the first for "
                             "every height)")
    parser.add_argument("--cube-heights", type=float, nargs="+", default=[2.0, 4.0, 6.0],
                        help="sweep: cube sides, m")
    parser.add_argument("--cube-distance", type=float, default=10.0,
                        help="sweep: the cubes' distance from the upwind edge, H")
    parser.add_argument("--with-ridge", action="store_true", help="sweep: the ridge too")
    parser.add_argument("--budget", type=float, help="sweep: start no run after this many s")
    args = parser.parse_args(argv)
    if args.sweep:
        overrides = dict(_parse_set(args.set), gust_strength=0.0, gust_direction_jitter=0.0)
        print("drift_validation --sweep: " + " ".join(sys.argv[1:]), flush=True)
        out = run_sweep(args, overrides)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(out, handle, indent=1,
                          default=lambda o: o.item() if hasattr(o, "item") else str(o))
        return 0
    table = dict(SCENES)         # this run's scenes, the porous fence as the options say
    scene = table["porous_fence"]
    if args.porosity is not None:
        scene = dataclasses.replace(scene, porosity=args.porosity)
    if args.fence_gap is not None:
        scene = dataclasses.replace(scene, terrain=dict(scene.terrain, bottom_gap=args.fence_gap))
    table["porous_fence"] = scene
    name = ALIASES.get(args.scene, args.scene)
    if name != "all" and name not in SCENES:
        parser.error(f"--scene {args.scene!r}: one of {', '.join(SCENES)}, all")
    names = list(SCENES) if name == "all" else [name]
    overrides = _parse_set(args.set)
    print("drift_validation: " + " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    print(f"python {platform.python_version()}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs; overrides {overrides or 'none'}", flush=True)
    results, spreads = [], {}
    for n in names:
        runs = []
        for index, seed in enumerate(args.seeds or [None]):
            values = dict(overrides) if seed is None else dict(overrides, seed=seed)
            if seed is not None:
                print(f"\n-- seed {seed}", flush=True)
            result = run_scene(table[n], args.backend, args.steps, args.flakes, values,
                               args.maps if index == 0 else None)
            report(result)
            runs.append(result)
        results.extend(runs)
        if len(runs) > 1:
            spreads[n] = report_spread(runs, args.seeds)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"argv": sys.argv, "results": results, "spread": spreads}, handle, indent=1,
                      default=lambda o: o.item() if hasattr(o, "item") else str(o))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
