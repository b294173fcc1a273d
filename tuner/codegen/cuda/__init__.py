"""The CUDA backend: ``numba.cuda.jit`` kernels (registered for targets of kind "cuda").

Needs numba-cuda (the ``cuda`` extra); without a GPU, ``NUMBA_ENABLE_CUDASIM=1``
runs the same kernels on Numba's simulator.
"""

from .backend import CudaKernel, CudaTimer, NumbaCudaBackend
from .device import SIMULATOR_CAPABILITIES, cuda_target

__all__ = ["SIMULATOR_CAPABILITIES", "CudaKernel", "CudaTimer", "NumbaCudaBackend", "cuda_target"]
