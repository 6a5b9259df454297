"""Not part of the add-on: run in a copy of the package's root, it inserts into
snow_addon/drift.py an experimental exposure factor on the surface wind (env EXPOSURE=a:r:b):
every column's surface wind times clip(1 + a * relief / (r * spacing) + b * slope, 0.5, 2) at
the heightmap node nearest its centre, relief the surface (terrain + snow) minus its mean
over +-r nodes, slope its gradient along the storm's heading (collapse_variants.py)."""
p = "snow_addon/drift.py"
s = open(p).read()
anchor = "        self.eddy_floor = np.float32(float(self.ustar_per_speed) * speed)\n"
hack = anchor + '''        import os as _os
        spec = _os.environ.get("EXPOSURE", "")
        if spec:
            a, r, b = (float(v) for v in spec.split(":"))
            r = int(r)
            xp = self.backend.xp if hasattr(self.backend, "xp") else np
            c, hm, g = self.cover, self.cover.heightmap_grid, self.grid
            surf = (c.height + c.snow_depth).astype(xp.float64)
            acc = xp.zeros_like(surf); n = 0
            for dj in range(-r, r + 1):
                for di in range(-r, r + 1):
                    acc += xp.roll(xp.roll(surf, dj, 0), di, 1); n += 1
            relief = surf - acc / n
            hx, hy = self.heading
            gx = (xp.roll(surf, -1, 1) - xp.roll(surf, 1, 1)) / (2 * hm.spacing)
            gy = (xp.roll(surf, -1, 0) - xp.roll(surf, 1, 0)) / (2 * hm.spacing)
            slope = gx * hx + gy * hy
            factor = xp.clip(1.0 + a * relief / (r * hm.spacing) + b * slope, 0.5, 2.0)
            ci = ((g.x0 + (np.arange(g.nx) + 0.5) * g.cell_size - hm.x0) / hm.spacing).round().astype(int)
            cj = ((g.y0 + (np.arange(g.ny) + 0.5) * g.cell_size - hm.y0) / hm.spacing).round().astype(int)
            ci = np.clip(ci, 0, surf.shape[1] - 1); cj = np.clip(cj, 0, surf.shape[0] - 1)
            f = factor[xp.asarray(cj)[:, None], xp.asarray(ci)[None, :]].astype(xp.float32)
            self.wind_x *= f
            self.wind_y *= f
'''
assert anchor in s
s = s.replace(anchor, hack)
open(p, "w").write(s)
