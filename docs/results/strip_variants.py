"""Flat open strip, open snowfield, 60 s at 6 m/h: variants of the suspension inflow."""
import sys, json
import numpy as np
from snowfall.snow_addon import SnowSettings, Simulation, scenes, suspension, drift
variant, speed, seed, cell = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
orig_share = suspension.entering_share
if "k2" in variant:
    def capped(grains_per_flake):
        if not grains_per_flake > 0.0:
            return 0.0, 0
        k = 0
        while k < 2 and grains_per_flake > float(1 << k):
            k += 1
        q = grains_per_flake / float(1 << k)
        return q / (1.0 + q), k
    suspension.entering_share = capped
if "terrainbubble" in variant:
    orig = drift.SnowDrift.update_shelter
    def shelter(self, time):
        saved = self.cover.snow_depth
        self.cover.snow_depth = self.backend.xp.zeros_like(saved)
        try:
            orig(self, time)
        finally:
            self.cover.snow_depth = saved
    drift.SnowDrift.update_shelter = shelter
size_x, size_y = 80 * cell, 40 * cell
res = int(round(size_x / (cell / 2))) + 1
v, t = scenes.snow_fence(size_x=size_x, size_y=size_y, fence_height=1e-4, fence_length=cell, thickness=cell, fence_x=0.0, resolution=res)
fetch = "wrap" if "wrap" in variant else "open_snowfield"
s = SnowSettings(heightmap_resolution=res, wind_cell_size=cell, sky_height=12 * cell, side_walls=True, wind_speed=speed, gust_strength=0.0,
                 gust_direction_jitter=0.0, flake_count=100000, snowfall_rate=6.0, upwind_fetch=fetch, seed=seed)
sim = Simulation(s, v, t, backend="gpu")
d = sim.step(1440)
depth = sim.snow_depth().astype(np.float64)
fallen = s.snowfall_rate / 3600 * sim.time
prof = depth.mean(0) / fallen
bins = [float(b.mean()) for b in np.array_split(prof, 8)]
rough = float(depth.std() / depth.mean())
print(f"{variant:22s} {speed:4.0f} m/s seed {seed} cell {cell}: mean {depth.mean()/fallen:.2f} cv {rough:.2f} bins {np.round(bins, 2)} susp {d.suspended_volume:.1f} of {d.snowfall_volume:.1f}", flush=True)
