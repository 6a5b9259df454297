"""Cutting a parallel kernel's work into shares, for a shorter compile.

A kernel written as a serial ``<name>_share(share_index, shares, ...)`` that does one share of
its loops, run by a one-line ``parallel=True`` wrapper ``<name>(*args)`` over Numba's threads,
compiles in a third of the time of the same loops written with ``prange`` in one parallel
function (Numba's parfor passes copy and rewrite the whole loop body): measured on this
project's 2-core machine, the flakes' step 42 s -> 14 s, the wind's advection 18 s -> 9 s,
at the same speed. Only those big kernels are written so: a stencil kernel compiled serially
ran 4-9x slower (its inlined helpers' array references are not propagated away, as the
parfor passes do), so the wind's mixing and the pressure solve keep ``prange``.

Every share's work is independent (as a ``prange`` loop's iterations are), so no result
depends on how the work is shared out.

The share bodies (and the samplers' masked path) compile with ``njit_uncounted``: without
Numba's reference counting. Inlined helpers that take arrays (the samplers) leave, in a
serial function, an atomic increment and decrement of each array's count around every call
site in the loop (the parfor passes remove them from ``prange`` bodies; the refcount
pruning pass does not here): in the wind's advection 4 pairs per face, on counts that both
threads write. These functions allocate nothing, so they need no counting (an allocation
in one fails to compile: no implementation of np.empty without it). Measured on cpu-small
(docs/benchmarks.md; 2 threads, minimum over 150 steps): the advection 2.1 -> 1.5 ms per
step, its correction 3.2 -> 2.6, the flakes' step 4.7 -> 4.0.
"""
import numba
from numba.core import cpu as _numba_cpu


def _without_refcounts() -> dict:
    """Numba's option that compiles a function without reference counting (``_nrt``, an
    undocumented CPU target option; Numba 0.68 has it); none where a Numba lacks it (the
    same code, counted)."""
    return {"_nrt": False} if hasattr(_numba_cpu.CPUTargetOptions, "_nrt") else {}


#: numba.njit for serial functions that allocate nothing (the share bodies): no reference
#: counting.
njit_uncounted = numba.njit(cache=True, nogil=True, **_without_refcounts())

#: Shares per kernel: enough to balance 2-64 threads (Numba hands each thread a run of them).
SHARES = 64


@numba.njit(inline="always", cache=True)
def share(share_index, shares, count):
    """(begin, end) of share ``share_index`` of ``shares`` over range(count)."""
    return share_index * count // shares, (share_index + 1) * count // shares
