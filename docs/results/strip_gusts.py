"""A flat open strip with gusts (docs/drift.md, "Gusts and the suspension's inflow"):
python strip_gusts.py VARIANT SPEED SEED CELL GUST SECONDS FLAKES [BACKEND [RATE]] with the
snowfall package on PYTHONPATH (BACKEND cpu, the default, or gpu; RATE the snowfall in m/h,
6 by default). VARIANT base (the engine), follow (the suspension's inflow
at the gusted inflow speed), lagN (at the mean gusted speed of the last N s) or qN (the
entering grains' weight 2^k with the smallest k for which at most N grains enter per
snowfall flake that respawns, instead of 1: lighter grains, more of them). Not part of
the add-on (cpu-strip-gusts-20261207.log, gpu-h100-strip-weights-20261207.log)."""
import sys, time, math
import numpy as np
from snowfall.snow_addon import SnowSettings, Simulation, scenes, drift, wind as windmod
variant, speed, seed, cell, gust, seconds, flakes = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
backend = sys.argv[8] if len(sys.argv) > 8 else "cpu"
rate = float(sys.argv[9]) if len(sys.argv) > 9 else 6.0
if variant.startswith("q"):
    from snowfall.snow_addon import suspension
    most = float(variant[1:])
    def entering_share(grains_per_flake):
        if not grains_per_flake > 0.0:
            return 0.0, 0
        exponent = 0
        while exponent < 7 and grains_per_flake / float(1 << exponent) > most:
            exponent += 1
        q = min(grains_per_flake / float(1 << exponent), most)
        return q / (1.0 + q), exponent
    suspension.entering_share = entering_share
if "follow" in variant or "lag" in variant:
    orig = drift.SnowDrift.blowing_snow
    window = float(variant[3:]) if variant.startswith("lag") else 0.0
    def blowing(self, step_index, inflow=None):
        if inflow is not None and self.suspension is not None:
            if window > 0:
                ts = [self.time - window * (k + 0.5) / 30 for k in range(30)]
                sp = np.mean([math.hypot(*windmod.inflow_at(self.settings, max(t_, 0.0))) for t_ in ts])
                vx, vy = sp, 0.0
            else:
                vx, vy = windmod.inflow_at(self.settings, self.time)
            inflow = inflow._replace(wind_x=np.float32(vx), wind_y=np.float32(vy))
        return orig(self, step_index, inflow)
    drift.SnowDrift.blowing_snow = blowing
size_x, size_y = 80 * cell, 40 * cell
res = int(round(size_x / (cell / 2))) + 1
v, t = scenes.snow_fence(size_x=size_x, size_y=size_y, fence_height=1e-4, fence_length=cell, thickness=cell, fence_x=0.0, resolution=res)
s = SnowSettings(heightmap_resolution=res, wind_cell_size=cell, sky_height=12 * cell, side_walls=True, wind_speed=speed, gust_strength=gust,
                 gust_direction_jitter=0.0, flake_count=flakes, snowfall_rate=rate, upwind_fetch="open_snowfield", seed=seed)
sim = Simulation(s, v, t, backend=backend)
started = time.time()
chunks = int(round(seconds / 10))
for c in range(chunks):
    d = sim.step(240)
    try:
        sim.check_health()
    except Exception as error:      # SnowSimulationError: the run left the model's range
        print(f"{variant:10s} {speed:4.0f} m/s gust {gust} seed {seed} cell {cell} rate {rate:g} t {sim.time:5.1f}: STOPPED {error}", flush=True)
        break
    depth = sim.snow_depth().astype(np.float64)
    fallen = s.snowfall_rate / 3600 * sim.time
    prof = depth.mean(0) / fallen
    bins = [float(b.mean()) for b in np.array_split(prof, 10)]
    print(f"{variant:10s} {speed:4.0f} m/s gust {gust} seed {seed} cell {cell} rate {rate:g} t {sim.time:5.1f}: mean {depth.mean()/fallen:.2f} cv {depth.std()/depth.mean():.2f} bins {' '.join(f'{b:.2f}' for b in bins)} ({time.time()-started:.0f} s)", flush=True)
