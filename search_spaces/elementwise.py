"""The elementwise chain ``Y = relu(X * a + b) * c + tanh(X)`` over ``n`` elements.

The stages are what an unfused framework runs one by one::

    T_act[i]  = max(X[i] * a[0] + b[0], 0) * c[0]
    T_tanh[i] = tanh(X[i])
    Y[i]      = T_act[i] + T_tanh[i]

Each stage alone moves 8 to 12 bytes per element for one or two flops, so
the chain is memory-bound; fused (``fuse``, the default: both stages inlined
into ``Y``) it reads ``X`` once and writes ``Y`` once, 8 bytes per element,
with the tanh (an inlined rational approximation) computed in registers::

    for t in n / task:                    # parallel across cores if chosen
      for v in task / vector:
        for l in vector:                  # vectorized
          Y[i] = max(X[i] * a + b, 0) * c + tanh(X[i])

``a``, ``b`` and ``c`` are one-element input arrays, not operator arguments:
in a model they are parameters whose values change without the schedule
changing, so one compiled kernel (and one tuning record) serves every value,
and the workload key stays the shape. As compile-time constants they would
save one broadcast load per call, nothing per element.

``task`` sets how much one parallel chunk covers (big chunks: fewer thread
hand-offs; small: better balance when n is small), ``vector`` the constant
inner loop that LLVM turns into SIMD code.

>>> space = config_space(1 << 24)
>>> s, tensors = schedule(space.sample(np.random.default_rng(0)), 1 << 24)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner import te
from tuner.schedule import Schedule
from tuner.space import ConfigSpace
from tuner.target import Target
from tuner.te import Tensor

from ._cuda import elementwise as gpu
from ._cuda import is_gpu
from ._target import resolve

__all__ = [
    "bytes_moved",
    "config_space",
    "default_config",
    "define",
    "flops",
    "numpy_best",
    "reference",
    "schedule",
]

_TASKS = [1024, 4096, 16384, 65536, 262144, 1048576]


def _stages(n: int, dtype: str = "float32") -> tuple[list[Tensor], Tensor, Tensor, Tensor]:
    """The inputs ``X, a, b, c``, the two stages and ``Y``."""
    X = te.placeholder((n,), dtype, name="X")
    a = te.placeholder((1,), dtype, name="a")
    b = te.placeholder((1,), dtype, name="b")
    c = te.placeholder((1,), dtype, name="c")
    zero = te.const(0.0, dtype)
    act = te.compute((n,), lambda i: te.maximum(X[i] * a[0] + b[0], zero) * c[0], name="T_act")
    th = te.compute((n,), lambda i: te.tanh(X[i]), name="T_tanh")
    Y = te.compute((n,), lambda i: act[i] + th[i], name="Y")
    return [X, a, b, c], act, th, Y


def define(n: int, dtype: str = "float32") -> tuple[list[Tensor], Tensor]:
    """The inputs ``[X, a, b, c]`` and the output ``Y``."""
    inputs, _, _, Y = _stages(n, dtype)
    return inputs, Y


def reference(x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (np.maximum(x64 * a[0] + b[0], 0) * c[0] + np.tanh(x64)).astype(x.dtype)


def numpy_best(
    x: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    out: np.ndarray | None = None,
    tmp: np.ndarray | None = None,
) -> np.ndarray:
    """NumPy's fastest formulation (what benchmarks compare with): in-place ``out=`` passes."""
    out = np.empty_like(x) if out is None else out
    tmp = np.empty_like(x) if tmp is None else tmp
    np.multiply(x, a[0], out=tmp)
    np.add(tmp, b[0], out=tmp)
    np.maximum(tmp, 0, out=tmp)
    np.multiply(tmp, c[0], out=tmp)
    np.tanh(x, out=out)
    np.add(out, tmp, out=out)
    return out


def bytes_moved(n: int) -> float:
    """Compulsory traffic: ``X`` read once, ``Y`` written once, three scalars (float32)."""
    return 4.0 * (2 * n + 3)


def flops(n: int) -> float:
    """Per element: multiply, add, max, multiply, tanh (counted as one), add."""
    return 6.0 * n


def config_space(n: int, target: Target | None = None) -> ConfigSpace:
    """Chunk per parallel task, the vector loop (1 to 16 vectors of the target's lanes),
    parallelism, and fusion of the stages."""
    lanes = resolve(target).lanes("float32")
    sp = ConfigSpace()
    sp.define_knob("task", _TASKS)
    sp.define_knob("vector", [1, *(lanes * f for f in (1, 2, 4, 8, 16))])
    sp.define_knob("parallel", [True, False])
    sp.define_knob("fuse", [True, False])
    sp.add_constraint(
        lambda c: c["task"] <= max(n, _TASKS[0]), "a task covers no more than n elements"
    )
    sp.add_constraint(lambda c: c["vector"] <= c["task"], "the vector loop fits in a task")
    return sp.freeze()


def default_config(n: int, target: Target | None = None) -> dict[str, Any]:
    """Fused; 64K-element tasks (256 KiB of X, in L2) where n allows; 64-element vectors.

    64 over 32 by a little (16M elements, loaded machine: 23.6 against 27.4 ms
    on one thread; NumPy's out= passes 173 ms), and the best of 24 tuning trials.
    """
    return {
        "task": max(t for t in _TASKS if t <= max(n, _TASKS[0]) and t <= 65536),
        "vector": min(64, 16 * resolve(target).lanes("float32")),
        "parallel": True,
        "fuse": True,
    }


def _split_loop(s: Schedule, T: Tensor, cfg: Mapping[str, Any]) -> None:
    (i,) = s[T].op.axis
    to, ti = s[T].split(i, factor=int(cfg["task"]))
    if int(cfg["vector"]) > 1:
        _, vi = s[T].split(ti, factor=int(cfg["vector"]))
        s[T].vectorize(vi)
    if cfg["parallel"]:
        s[T].parallel(to)


def schedule(
    cfg: Mapping[str, Any], n: int, dtype: str = "float32"
) -> tuple[Schedule, list[Tensor]]:
    """The schedule for ``cfg`` (validate configs from outside against config_space first).

    Unfused, each stage is its own pass over memory with the same loop shape.
    """
    inputs, act, th, Y = _stages(n, dtype)
    s = te.create_schedule(Y)
    stages = [Y]
    if cfg["fuse"]:
        s[act].compute_inline()
        s[th].compute_inline()
    else:
        stages += [act, th]
    for T in stages:
        _split_loop(s, T, cfg)
    return s, [*inputs, Y]


def _space(a: Mapping[str, Any], target: Target) -> ConfigSpace:
    if is_gpu(target):
        return gpu.config_space(a["n"], target)
    return config_space(a["n"], target)


def _schedule(
    cfg: Mapping[str, Any], a: Mapping[str, Any], target: Target
) -> tuple[Schedule, list[Tensor]]:
    if is_gpu(target):
        inputs, act, th, Y = _stages(a["n"])
        return gpu.schedule(cfg, inputs, [act, th], Y)
    return schedule(cfg, a["n"])


def _default(a: Mapping[str, Any], target: Target) -> dict[str, Any]:
    if is_gpu(target):
        return gpu.default_config(a["n"], target)
    return default_config(a["n"], target)


def _register() -> None:
    from . import Operator, Param, register_operator

    register_operator(
        Operator(
            name="elementwise_chain",
            doc="Y = relu(X * a + b) * c + tanh(X) over n elements; a, b, c are 1-element arrays",
            params=(Param("n", int, doc="elements", pad=0.0),),
            space=_space,
            schedule=_schedule,
            default_config=_default,
            reference=reference,
            flops=lambda a: flops(a["n"]),
            bytes_moved=lambda a: bytes_moved(a["n"]),
        )
    )


_register()
