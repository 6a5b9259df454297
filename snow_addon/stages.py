"""The names under which a profiled step records its stages (``Simulation.timer``, a
``backend.StageTimer``): one home, used by the engine when it times a stage and by the
benchmark harness (benchmarks/harness.py) when it looks the times up.

The stages nest: ``COVER`` holds ``DEPOSIT``, ``DRIFT`` and ``REDISTRIBUTE`` (and the
drift's surface wind); ``WIND`` is the whole wind step (advection, divergence, pressure
solve, projection), timed as one.
"""

WIND = "wind"
FLAKES = "flakes"
COVER = "cover"
DEPOSIT = "cover.deposit"
DRIFT = "cover.drift"
REDISTRIBUTE = "cover.redistribute"
OBSTACLES = "obstacles"

#: Every stage a step can record.
ALL = (WIND, FLAKES, COVER, DEPOSIT, DRIFT, REDISTRIBUTE, OBSTACLES)
