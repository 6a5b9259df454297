"""How the engine runs its solvers: one validated options object passed in
(``Simulation(..., options=)``, ``WindSolver(..., options=)``), not module globals.

The artist's settings (``settings.SnowSettings``) say what is simulated; these options say
how the solvers go about it. ``read_ahead`` and ``prefetch_wind`` change only when the host
waits for the device: the results are the same bits either way (tests/engine/test_pressure.py,
test_wind_kernels.py and test_simulation.py run both). ``smoothing_pairs`` and
``extrapolate_pressure`` change the pressure solve's iterations and so its last bits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..kernels.contract import COARSE_VCYCLE_CELLS
from .errors import SnowInputError


@dataclass(frozen=True)
class SolverOptions:
    """The solvers' choices. None: the backend's own (on for a GPU, off elsewhere)."""

    #: Multigrid V-cycle: red-black Gauss-Seidel pairs before and after the coarse
    #: correction. 3, not 2: cut cells' CG took 336 iterations with 2 pairs in profile-2013's
    #: 66 timed solves, 232 with 3, the run 1028-1038 against 1155-1165 steps/s on the H100.
    smoothing_pairs: int = 3
    #: Warm start of the "mgpcg" solve: 2 p_n - p_(n-1) (True) or p_n (False).
    extrapolate_pressure: bool = True
    #: Queue several CG iterations before each read of the solve's scalars (each read
    #: synchronises a GPU; on the CPU a read costs nothing, so one at a time).
    read_ahead: bool | None = None
    #: Solves whose CG counts set how many iterations are queued before the first read
    #: (the fewest of them: on profile-2013 (mostly 3, some 4-6) the latest count alone
    #: queued 0.125 iterations per step too many, a V-cycle each; the fewest of 8, 0.005,
    #: with 1.3 reads).
    read_ahead_history: int = 8
    #: Simulation.step begins a wind step's solve ahead, while the flakes and the snow of
    #: the steps before are still to be queued (the GPU: its reads stall it otherwise).
    prefetch_wind: bool | None = None
    #: The multigrid levels (below the finest) with at most this many cells run as one
    #: ``coarse_vcycle`` call (one launch on the GPU); 0: every level its own kernels. The
    #: levels above it restrict and prolong with renormalised transfers, so it changes the
    #: solve's last bits (docs/wind_solver.md).
    coarse_vcycle_cells: int = COARSE_VCYCLE_CELLS

    def validate(self) -> "SolverOptions":
        """Self, after checking every option (SnowInputError names the one to change)."""
        for name, low, high, example in (("smoothing_pairs", 1, 16, "3"),
                                         ("read_ahead_history", 1, 1000, "8"),
                                         # the GPU's one-block V-cycle: levels below 2^16 cells
                                         ("coarse_vcycle_cells", 0, 65535,
                                          str(COARSE_VCYCLE_CELLS))):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise SnowInputError(name, f"must be a whole number from {low} to {high}, got "
                                     f"{value!r}", example)
        for name in ("extrapolate_pressure", "read_ahead", "prefetch_wind"):
            value = getattr(self, name)
            if not (isinstance(value, bool) or (value is None and name != "extrapolate_pressure")):
                allowed = "True or False" + ("" if name == "extrapolate_pressure" else
                                             " (None: the backend's own)")
                raise SnowInputError(name, f"must be {allowed}, got {value!r}", "True")
        return self

    def for_backend(self, backend) -> "SolverOptions":
        """These options with each None replaced by ``backend``'s own choice."""
        own = bool(backend.is_gpu)
        return replace(self,
                       read_ahead=own if self.read_ahead is None else self.read_ahead,
                       prefetch_wind=own if self.prefetch_wind is None else self.prefetch_wind)
