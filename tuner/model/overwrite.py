"""Kernels that compute their output into an input's buffer: a residual added in place.

A ResNet block ends in ``relu(conv(x) + shortcut)``, one kernel whose epilogue reads
the shortcut at each output element. As two buffers, the kernel reads one image and
writes another of the same size, which it must first bring into the cache too: a
1 x 1 convolution of 64 to 256 channels at 56 x 56 with its residual ran in 0.548 ms
from buffers out of the cache, 0.388 ms writing over the shortcut (Xeon with AVX-512,
2 threads, 1.41x; 1.18x at 28 x 28). onnxruntime's convolution with a ``Sum`` input
does the same.

A kernel's output takes over the buffer of one of its inputs when:

- the input is the output of an earlier kernel of the plan (not the caller's array, a
  constant, a graph output, a view or a slice written in place), of the output's dtype
  and size, and this kernel is its last reader, reading it once;
- the output is planned too (not a graph output, a view or a slice in place);
- the kernel's loop nest reads each element of the input only to compute the element of
  the output that replaces it, and writes each element once
  (``tuner.lower.access.updates_in_place``, on the nest the kernel was built from).

The plan then stores the output as a view of the input's buffer, whose lifetime runs on
to the output's last reader. Only CPU kernels: a GPU kernel's threads are not proved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph.ir import Value
from ..target import Target
from .spec import KernelSpec

__all__ = ["overwritten_inputs"]


def overwritten_inputs(
    specs: Sequence[KernelSpec],
    kernels: Sequence[Any],
    values: Mapping[str, Value],
    outputs: Sequence[str],
    kept: set[str],
    target: Target,
) -> dict[str, str]:
    """``{output: input}`` for each kernel of ``specs`` that computes its output into an
    input's buffer (the module's docstring). ``kept``: values whose buffers are not the
    plan's to give away (views and their sources, slices written in place)."""
    from search_spaces._cuda import is_gpu

    if is_gpu(target):
        return {}
    writer = {s.output: k for k, s in enumerate(specs)}
    last_read: dict[str, int] = {}
    for k, s in enumerate(specs):
        for name in s.inputs:
            last_read[name] = k
    taken = set(outputs) | kept
    found: dict[str, str] = {}
    for k, (spec, kernel) in enumerate(zip(specs, kernels, strict=True)):
        out = values[spec.output]
        if spec.output in taken or not _planned(out):
            continue
        for j, name in enumerate(spec.inputs):
            v = values[name]
            if (
                name in taken
                or writer.get(name, k) >= k
                or last_read.get(name) != k
                or spec.inputs.count(name) != 1
                or not _planned(v)
                or (v.dtype, v.size) != (out.dtype, out.size)
            ):
                continue
            if _overwrites(kernel, j):
                found[spec.output] = name
                break
    return found


def _planned(v: Value) -> bool:
    return v.data is None and v.static


def _overwrites(kernel: Any, j: int) -> bool:
    """Whether a model's kernel may compute its output into its input ``j``'s buffer: the
    compiled CPU kernel's answer (``CpuKernel.overwrites``, kept with a cached kernel);
    False for a kernel that has none to give."""
    compiled: Any = getattr(kernel, "kernel", None)
    return hasattr(compiled, "overwrites") and bool(compiled.overwrites(j))
