"""Each top-level package imports on its own, first, in a fresh process (no import cycles)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["tuner", "records", "search_spaces", "cost_models", "tuner.cli"]
)
def test_imports_first_in_a_fresh_process(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)


def test_compiling_a_model_does_not_load_pandas(tmp_path) -> None:
    """pandas is for studying logs (``records.to_dataframe``, ``Module.profile``): a cached
    compile of ResNet-50 spent a fifth of its time importing it when ``records`` did."""
    code = (
        "import sys, numpy as np, onnx\n"
        "from onnx import TensorProto, helper\n"
        "import tuner\n"
        "x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 3])\n"
        "y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [2, 3])\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g', [x], [y])\n"
        f"onnx.save(helper.make_model(g), {str(tmp_path / 'm.onnx')!r})\n"
        f"m = tuner.compile_model({str(tmp_path / 'm.onnx')!r})\n"
        "out = m.run({'x': -np.ones((2, 3), np.float32)})\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    env = {**os.environ, "TUNER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
