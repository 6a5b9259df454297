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
"""
import numba

#: Shares per kernel: enough to balance 2-64 threads (Numba hands each thread a run of them).
SHARES = 64


@numba.njit(inline="always", cache=True)
def share(share_index, shares, count):
    """(begin, end) of share ``share_index`` of ``shares`` over range(count)."""
    return share_index * count // shares, (share_index + 1) * count // shares
