"""Heightmap kernels of the GPU build: the CPU build's (Numba). The terrain is rasterised
once on the host before the simulation starts, and the per-vertex snow depth is read on the
host from a depth map already copied there; neither is worth a device round trip."""
from ..cpu.heightmap import rasterize_top_surface, vertex_snow_depth  # noqa: F401
