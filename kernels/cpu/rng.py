"""Counter-based random numbers, Numba build (see kernels.reference.rng for the recipe)."""
import numba
import numpy as np

_MASK = np.uint64(0xFFFFFFFF)


@numba.njit(inline="always", cache=True)
def hash_u32(x):
    x = np.uint64(x) & _MASK
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & _MASK
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & _MASK
    x = x ^ (x >> np.uint64(16))
    return x


@numba.njit(inline="always", cache=True)
def random_uniform(seed, index, counter, stream):
    """Uniform float32 in [0, 1); bit-identical to the NumPy and CUDA builds."""
    h = hash_u32((np.uint64(seed) + np.uint64(0x9E3779B9) * np.uint64(stream)) & _MASK)
    h = hash_u32(h ^ (np.uint64(index) & _MASK))
    h = hash_u32(h ^ (np.uint64(counter) & _MASK))
    return np.float32(h >> np.uint64(8)) * np.float32(1.0 / 16777216.0)
