"""Kernels, gpu build. Domain modules (rng, sampling, heightmap, wind, pressure, flakes,
cover) are imported on demand through Backend.kernel_module(domain), so importing this
package costs nothing and a missing optional dependency only fails the backend that needs it."""
