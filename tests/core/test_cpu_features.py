"""The CPU backend's LLVM features: the host's plus a preference against gathers and scatters.

Each case runs in a fresh interpreter, since Numba fixes its target machine's
features once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tuner.target import cpu_flags

REPORT = (
    "from numba.core import config\n"
    "from tuner.codegen.cpu.features import gather_preference\n"
    "print(gather_preference(), config.CPU_FEATURES is None)\n"
)

#: A loop nest whose inner loop LLVM unrolls fully, leaving the strided outer loop to the
#: loop vectorizer: on AVX-512 with the host's features it becomes gathers and scatters.
STRIDED = """
import numba, numpy as np
import tuner.codegen.cpu  # the backend sets the features, or not (see the test)
from numba.core import config
config.SLP_VECTORIZE, config.LOOP_VECTORIZE = 0, 1

@numba.njit(numba.void(numba.float32[::1], numba.float32[::1]), fastmath={"contract"},
            error_model="numpy", boundscheck=False)
def f(x, y):
    for jo in range(16):
        for ji in range(32):
            y[np.uint64(64 * jo + ji)] = x[np.uint64(64 * jo + ji)] * np.float32(2.0) + np.float32(1.0)

asm = "\\n".join(f.inspect_asm().values())
print("gathers" if ("vgather" in asm or "vscatter" in asm) else "contiguous")
"""


def _python(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CPU_FEATURES"}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_backend_compiles_for_the_host_without_gathers() -> None:
    assert _python("import tuner.codegen.cpu\n" + REPORT) == "no-gather False"


def test_a_users_numba_cpu_features_are_left_alone() -> None:
    import llvmlite.binding as llvm

    host = llvm.get_host_cpu_features().flatten()
    assert _python("import tuner.codegen.cpu\n" + REPORT, NUMBA_CPU_FEATURES=host) == "host False"


def test_numba_started_before_the_backend_keeps_its_features() -> None:
    started = "import numba\nnumba.njit(lambda x: x + 1)(1)\nimport tuner.codegen.cpu\n"
    assert _python(started + REPORT) == "host True"


@pytest.mark.skipif(
    "avx512f" not in cpu_flags(), reason="needs AVX-512 (gathers are not chosen on AVX2)"
)
def test_strided_loops_vectorize_without_gathers_on_avx512() -> None:
    import llvmlite.binding as llvm

    host = llvm.get_host_cpu_features().flatten()
    assert _python(STRIDED, NUMBA_CPU_FEATURES=host) == "gathers"  # what the preference avoids
    assert _python(STRIDED) == "contiguous"


#: A contiguous loop that LLVM's loop vectorizer takes; the register width it picks shows
#: in the assembly (``zmm`` at 512 bits, ``ymm`` where the tuning prefers 256).
CONTIGUOUS = """
import numba, numpy as np
import tuner.codegen.cpu
from numba.core import config
from tuner.codegen.cpu.features import FULL_WIDTH
config.SLP_VECTORIZE, config.LOOP_VECTORIZE = 0, 1

@numba.njit(numba.void(numba.float32[::1], numba.float32[::1]), fastmath={"contract"},
            error_model="numpy", boundscheck=False)
def f(x, y):
    for i in range(4096):
        y[np.uint64(i)] = x[np.uint64(i)] * np.float32(2.0) + np.float32(1.0)

asm = "\\n".join(f.inspect_asm().values())
print("zmm" if "zmm" in asm else "narrower", FULL_WIDTH in (config.CPU_FEATURES or ""))
"""


@pytest.mark.skipif("avx512f" not in cpu_flags(), reason="needs AVX-512")
def test_avx512_hosts_vectorize_at_full_width() -> None:
    """LLVM's tuning for Intel's AVX-512 cores says 256 bits; the backend lifts it."""
    assert _python(CONTIGUOUS) == "zmm True"
