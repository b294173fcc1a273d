"""The CUDA backend: ``numba.cuda.jit`` kernels (registered for targets of kind "cuda").

Needs numba-cuda (the ``cuda`` extra); without a GPU, ``NUMBA_ENABLE_CUDASIM=1``
runs the same kernels on Numba's simulator.
"""

from .backend import CudaKernel, CudaTimer, NumbaCudaBackend

__all__ = ["CudaKernel", "CudaTimer", "NumbaCudaBackend"]
