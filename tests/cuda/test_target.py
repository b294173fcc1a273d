"""The cuda target: the simulator's capabilities, identity, and one clear line without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba.cuda", reason="the cuda extra (numba-cuda) is not installed")

from tuner.codegen.cuda.device import SIMULATOR_CAPABILITIES
from tuner.target import Target


def test_simulator_capabilities_are_the_documented_ones(gpu: Target) -> None:
    if not gpu.get("simulator", False):
        pytest.skip("a real GPU: its capabilities are the device's")
    assert dict(gpu.capabilities) == SIMULATOR_CAPABILITIES
    assert gpu.kind == "cuda" and gpu.threads == 0
    assert gpu.key == f"cuda:{gpu.fingerprint}"
    assert Target.from_name("cuda") == gpu  # the same fingerprint every time


def test_capabilities_are_data_and_round_trip(gpu: Target) -> None:
    for name in (
        "max_threads_per_block",
        "max_shared_memory_per_block",
        "max_registers_per_block",
        "multiprocessors",
        "warp_size",
    ):
        assert int(gpu.cap(name)) > 0
    assert str(gpu.cap("compute_capability")).count(".") == 1
    back = Target.from_json(json.loads(json.dumps(gpu.to_json())))
    assert back == gpu and back.key == gpu.key


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_without_gpu_or_simulator_the_cli_says_so_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    probe = "from numba import cuda; print(cuda.is_available())"
    has_gpu = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "NUMBA_ENABLE_CUDASIM": "0"},
    ).stdout.strip()
    if has_gpu == "True":
        pytest.skip("this machine has a GPU")
    log = tmp_path / "t.jsonl"
    out = _cli(
        "tune",
        "matmul",
        "M=4",
        "N=4",
        "K=4",
        "--target",
        "cuda",
        "--log",
        str(log),
        NUMBA_ENABLE_CUDASIM="0",
    )
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "no CUDA GPU" in lines[0] and "NUMBA_ENABLE_CUDASIM=1" in lines[0]
    assert not log.exists()


def test_the_cpu_side_never_imports_numba_cuda() -> None:
    code = (
        "import sys, tuner, search_spaces, tuner.codegen, tuner.lower.gpu\n"
        "from tuner.target import Target\n"
        "import numpy as np\n"
        "f = tuner.build(*__import__('search_spaces').get_operator('softmax').schedule(\n"
        "    {'rows_per_task': 1, 'parallel': False, 'col_split': 1, 'lanes': 1,\n"
        "     'exp_inline': True, 'reductions_at_row': True}, {'M': 2, 'N': 3},\n"
        "    Target.from_name('cpu')), target='cpu')\n"
        "print('numba.cuda' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
