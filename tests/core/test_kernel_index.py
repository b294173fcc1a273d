"""The kernel index: a schedule built before is loaded without lowering it again."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import tuner
from tuner.codegen import cache_dir


def _matmul(**args):
    return tuner.build_op("matmul", M=13, N=7, K=5, **args)


def _forget_modules() -> None:
    for name in [n for n in sys.modules if n.startswith("k_")]:
        del sys.modules[name]


def test_a_second_build_restores_the_kernel_from_the_index():
    first = _matmul()
    entries = list((cache_dir() / "index").glob("*.json"))
    assert entries, "the first build records an index entry"
    _forget_modules()  # as in a new process: only the files remain
    again = _matmul()
    assert again.kernel._lowered is None  # restored, not lowered
    assert again.kernel.source == first.kernel.source
    assert again.kernel.lowered.body == first.kernel.lowered.body  # lowered when asked for
    a = np.random.default_rng(0).random((13, 5), dtype=np.float32)
    b = np.random.default_rng(1).random((5, 7), dtype=np.float32)
    np.testing.assert_allclose(again(a, b), a @ b, rtol=1e-5)
    # It keeps the arguments' checks: it knows which one it writes.
    out = np.empty((13, 7), np.float32)
    with pytest.raises(ValueError, match="shares memory"):
        again.kernel(a, b, out[:, :7])  # fine
        again.kernel(out[:13, :5].copy(), b, out)  # fine
        again.kernel(a, b, np.lib.stride_tricks.as_strided(a, (13, 7)))


def test_damaged_or_foreign_entries_are_rebuilt():
    _matmul()
    for path in (cache_dir() / "index").glob("*.json"):
        entry = json.loads(path.read_text())
        entry["module"] = "../../etc/passwd"
        path.write_text(json.dumps(entry))
    _forget_modules()
    built = _matmul()
    assert built.kernel._lowered is not None  # the bad entry was not used
    for path in (cache_dir() / "index").glob("*.json"):
        path.write_text("{not json")
    _forget_modules()
    built = _matmul()
    assert built.kernel._lowered is not None
