"""Numeric kernels, one home per kernel and one build per backend.

* ``kernels.reference``: plain NumPy, slow and obvious: the test oracle.
* ``kernels.cpu``: Numba (parallel) builds of the same functions.
* ``kernels.gpu``: CUDA kernels launched through CuPy over CuPy arrays.

Every backend package exposes the same function names with the same signatures
(arrays in, explicit output arrays, SI scalars); ``snow_addon`` picks one and never
branches on which. Nothing here knows about bpy, scenes or settings objects.
"""
