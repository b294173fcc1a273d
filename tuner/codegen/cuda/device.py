"""The cuda target: the current CUDA device's capabilities, read through numba-cuda.

Registered as target "cuda" (``Target.from_name("cuda")`` imports this module
on first use, so the target-neutral layers never import numba-cuda). On
Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) the capabilities are fixed
(``SIMULATOR_CAPABILITIES``); without a GPU or the simulator, one
``TargetError`` says so.
"""

from __future__ import annotations

import os
from typing import Any

from ...target import CapValue, Target, TargetError, register_target

__all__ = ["SIMULATOR_CAPABILITIES", "cuda_simulator_requested", "cuda_target"]

#: What the CUDA simulator is taken to be: the per-block limits of every GPU since compute
#: capability 3.0 (1024 threads, 48 KiB of static shared memory, 64 Ki registers, warps of
#: 32, grids of 2**31 - 1 x 65535 x 65535 blocks), one multiprocessor, and the compute capability the simulator itself reports.
#: Timings on it measure Python threads, not a GPU.
SIMULATOR_CAPABILITIES: dict[str, CapValue] = {
    "model": "CUDA simulator",
    "max_threads_per_block": 1024,
    "max_block_dim_x": 1024,
    "max_block_dim_y": 1024,
    "max_block_dim_z": 64,
    "max_grid_dim_x": 2**31 - 1,
    "max_grid_dim_y": 65535,
    "max_grid_dim_z": 65535,
    "max_shared_memory_per_block": 48 * 1024,
    "max_registers_per_block": 64 * 1024,
    "multiprocessors": 1,
    "warp_size": 32,
    "compute_capability": "5.2",
    "simulator": True,
}

#: Device attributes (``CU_DEVICE_ATTRIBUTE_<NAME>``) read into capabilities.
_ATTRIBUTES = {
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_block_dim_x": "MAX_BLOCK_DIM_X",
    "max_block_dim_y": "MAX_BLOCK_DIM_Y",
    "max_block_dim_z": "MAX_BLOCK_DIM_Z",
    "max_grid_dim_x": "MAX_GRID_DIM_X",
    "max_grid_dim_y": "MAX_GRID_DIM_Y",
    "max_grid_dim_z": "MAX_GRID_DIM_Z",
    "max_shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "multiprocessors": "MULTIPROCESSOR_COUNT",
    "warp_size": "WARP_SIZE",
}


def cuda_simulator_requested() -> bool:
    """Whether Numba runs CUDA kernels on its simulator (``NUMBA_ENABLE_CUDASIM=1``).

    Numba reads the variable when it is first imported; its setting then is what counts.
    """
    try:
        from numba.core import config
    except ImportError:
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    return bool(getattr(config, "ENABLE_CUDASIM", 0))


def numba_cuda() -> Any:
    """``numba.cuda``, or one clear TargetError naming what is missing."""
    try:
        from numba import cuda
    except ImportError as exc:
        raise TargetError(
            f"the cuda target needs numba-cuda (pip install -e '.[cuda]'): {exc}"
        ) from None
    return cuda


@register_target("cuda")
def cuda_target(num_threads: int | None = None) -> Target:
    """The current CUDA device, or the simulator's fixed capabilities.

    Capabilities: ``max_threads_per_block`` (and the per-dimension limits of a
    block, ``max_block_dim_*``, and of the grid, ``max_grid_dim_*``),
    ``max_shared_memory_per_block`` (bytes), ``max_registers_per_block``,
    ``multiprocessors``, ``warp_size``, ``compute_capability``, ``model`` and
    ``simulator``; the fingerprint covers them all. ``num_threads`` (host
    threads) means nothing to a GPU and is ignored.
    """
    cuda = numba_cuda()
    if cuda_simulator_requested():
        return Target.make("cuda", None, **SIMULATOR_CAPABILITIES)  # type: ignore[arg-type]
    try:
        available = bool(cuda.is_available())
    except Exception:  # a broken driver install raises instead of answering
        available = False
    if not available:
        raise TargetError(
            "no CUDA GPU is available on this machine (numba.cuda.is_available() is False);"
            " set NUMBA_ENABLE_CUDASIM=1 to run CUDA kernels on Numba's simulator"
        )
    dev = cuda.get_current_device()
    caps: dict[str, CapValue] = {n: int(getattr(dev, a)) for n, a in _ATTRIBUTES.items()}
    major, minor = dev.compute_capability
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    caps.update({"compute_capability": f"{major}.{minor}", "model": name, "simulator": False})
    return Target.make("cuda", None, **caps)  # type: ignore[arg-type]
