"""The snowfall engine: terrain -> heightmap, wind solver, flakes, snow cover, stepping.

Imports NumPy (and Numba or CuPy through ``kernels``), never bpy. Typical use::

    from snowfall.snow_addon import SnowSettings, Simulation
    sim = Simulation(SnowSettings(flake_count=50_000), vertices, triangles)
    sim.step(24)
    depth = sim.snow_depth()
"""
from .errors import SnowInputError, SnowMemoryError
from .settings import SnowSettings


def __getattr__(name):
    # Simulation pulls in every stage; import it on first use so that settings and errors
    # stay cheap to import (the Blender UI reads them at registration).
    if name in ("Simulation", "StepDiagnostics", "WindField"):
        from . import simulation
        return getattr(simulation, name)
    raise AttributeError(name)


__all__ = ["SnowSettings", "SnowInputError", "SnowMemoryError", "Simulation", "StepDiagnostics",
           "WindField"]
