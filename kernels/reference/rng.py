"""Counter-based random numbers: a stateless hash of (seed, index, counter, stream).

The same integer recipe runs in NumPy, Numba and CUDA, so a draw is bit-identical on
every backend and never depends on thread order. ``counter`` is the flake's respawn
count; ``stream`` separates the quantities drawn for one event (x, y, speed, ...).
"""
import numpy as np

MASK32 = np.uint64(0xFFFFFFFF)
GOLDEN32 = np.uint64(0x9E3779B9)
INV_2_24 = np.float32(1.0 / 16777216.0)


def hash_u32(x):
    """Low-bias 32-bit integer hash (Wellons' lowbias32) on uint64 arrays holding uint32."""
    x = np.asarray(x, dtype=np.uint64) & MASK32
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & MASK32
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & MASK32
    x = x ^ (x >> np.uint64(16))
    return x


def random_uniform(seed, index, counter, stream):
    """Uniform float32 in [0, 1) (multiples of 2^-24) for each (seed, index, counter, stream)."""
    seed = np.asarray(seed, dtype=np.uint64)
    h = hash_u32((seed + GOLDEN32 * np.asarray(stream, dtype=np.uint64)) & MASK32)
    h = hash_u32(h ^ (np.asarray(index, dtype=np.uint64) & MASK32))
    h = hash_u32(h ^ (np.asarray(counter, dtype=np.uint64) & MASK32))
    return (h >> np.uint64(8)).astype(np.float32) * INV_2_24
