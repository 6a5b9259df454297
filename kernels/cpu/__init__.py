"""Kernels, cpu build. Domain modules (rng, sampling, heightmap, wind, pressure, flakes,
cover) are imported on demand through Backend.kernel_module(domain), so importing this
package costs nothing and a missing optional dependency only fails the backend that needs it.

Importing it sets how long Numba's OpenMP threads spin when they wait for the next parallel
loop (``GOMP_SPINCOUNT``, unless already set; read by the OpenMP runtime when Numba starts
its threads, after this). libgomp's default, 300,000 spins, lets a waiting thread take the
core the working thread needs when another process is busy: measured on this project's
2-core machine with another process keeping one core busy (docs/benchmarks.md, "A busy
machine"), cpu-small fell from 28.1 to 1.4 steps/s. 3,000 spins kept the idle rate
(31.8 steps/s) and held 12.9 with the competitor; ``OMP_WAIT_POLICY=passive`` (no spin)
held 15.2 but lost a third of the idle rate (17.7)."""
import os

#: Spins of an OpenMP thread waiting for work before it sleeps (see above).
OPENMP_SPIN_COUNT = "3000"
os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)
