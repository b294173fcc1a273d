"""The CPU install: without numba-cuda the tuner imports and builds for the CPU, and asking
for the cuda target is one clear sentence (numba-cuda hidden in a fresh process)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
sys.modules["numba.cuda"] = None  # as if numba-cuda were not installed
import tuner, search_spaces, tuner.codegen
from tuner import te
from tuner.target import Target, TargetError
X = te.placeholder((4,), "float32", name="X")
Y = te.compute((4,), lambda i: X[i] + 1.0, name="Y")
tuner.build(te.create_schedule(Y), [X, Y], target="cpu")
try:
    Target.from_name("cuda")
except TargetError as exc:
    print(exc)
"""


def test_no_numba_cuda_means_one_clear_error_and_a_working_cpu() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.startswith("the cuda target needs numba-cuda (pip install -e '.[cuda]')")
