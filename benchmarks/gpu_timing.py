"""Timing on the GPU for the benchmark scripts in this folder (run as scripts, so this
folder is on sys.path): the median of CUDA-event timings after a warm-up."""
import cupy as cp
import numpy as np


def timed(fn, reps=50, warm=5):
    """Median seconds of fn() over ``reps`` runs after ``warm`` untimed ones (CUDA events)."""
    for _ in range(warm):
        fn()
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))
