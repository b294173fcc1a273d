"""Test-only operators whose candidates fail in each way a measurement must survive.

Imported by the measurement workers through ``MeasureOptions.plugins``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from search_spaces import Operator, Param, register_operator
from tuner import te
from tuner.space import ConfigSpace
from tuner.target import Target


def _space(_: Mapping[str, Any], target: Target) -> ConfigSpace:
    sp = ConfigSpace()
    sp.define_knob("split", [1, 2, 4])
    return sp.freeze()


def _schedule(cfg: Mapping[str, Any], args: Mapping[str, Any], target: Target):  # type: ignore[no-untyped-def]
    X = te.placeholder((args["N"],), "float32", name="X")
    Y = te.compute((args["N"],), lambda i: X[i] * 2.0, name="Y")
    s = te.create_schedule(Y)
    s[Y].split(s[Y].op.axis[0], factor=int(cfg["split"]))
    return s, [X, Y]


def _hang(x: np.ndarray) -> np.ndarray:
    time.sleep(600)
    return x


def _crash(x: np.ndarray) -> np.ndarray:
    os._exit(3)


def _make(name: str, reference) -> None:  # type: ignore[no-untyped-def]
    register_operator(
        Operator(
            name=name,
            doc="test operator",
            params=(Param("N", int, 16),),
            space=_space,
            schedule=_schedule,
            default_config=lambda a, target: {"split": 2},
            reference=reference,
            flops=lambda a: float(a["N"]),
        )
    )


_make("t_double", lambda x: x * 2)
_make("t_wrong", lambda x: x * 3)
_make("t_hang", _hang)
_make("t_crash", _crash)
# Right only where BLAS was told to use one thread (as the runner tells it for threads=1).
_make("t_blas1", lambda x: x * 2 if os.environ.get("OPENBLAS_NUM_THREADS") == "1" else x)


def _own_threads(x: np.ndarray) -> np.ndarray:
    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        os._exit(4)  # the runner's thread limit leaked into a process that should not have it
    return x * 2


# Runs only where BLAS keeps its own thread count (the fresh process of the NumPy baseline).
_make("t_own_threads", _own_threads)
