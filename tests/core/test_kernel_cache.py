"""A kernel built once is loaded, not recompiled, by the next process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    t0 = time.perf_counter()
    import numpy as np
    import tuner
    from tuner import te
    A = te.placeholder((64, 64), "float32", name="A")
    B = te.placeholder((64, 64), "float32", name="B")
    k = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], jo)
    t1 = time.perf_counter()
    f = tuner.build(s, [A, B, C])
    t2 = time.perf_counter()
    a = np.ones((64, 64), np.float32); c = np.zeros((64, 64), np.float32)
    f(a, a, c)
    assert c[0, 0] == 64.0
    print(f.from_cache, t2 - t1)
    """
)


def test_a_fresh_process_loads_the_cached_kernel(tmp_path: Path) -> None:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, TUNER_CACHE_DIR=str(tmp_path / "cache"))
    script = SCRIPT.format(root=root)
    first = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    second = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert list((tmp_path / "cache").glob("k_*.py")), (
        "the kernel module was not written to the cache"
    )
    # Build times are measured by experiments/bench_build_cache.py; here: compiled, then loaded.
    assert first.stdout.split()[-2] == "False"
    assert second.stdout.split()[-2] == "True"


def test_a_changed_runtime_helper_means_a_new_kernel(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Numba's cache checks only the kernel's file: the runtime's hash is in the kernel's name."""
    import importlib

    import tuner
    from tuner import te

    build_module = importlib.import_module("tuner.codegen.cpu.backend")

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path))
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B)
    first = tuner.build(s, [A, B])._fn.__module__
    monkeypatch.setattr(build_module, "_RUNTIME_FINGERPRINT", "an edited exp32")
    second = tuner.build(s, [A, B])._fn.__module__
    assert first != second and first.startswith("k_") and second.startswith("k_")
