"""A kernel's cache files as shipped: read inertly, refused for any global a kernel's cache
does not hold, installed only where the cache lacks them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from numba.core.environment import _rebuild_env

import tuner
from tuner import te
from tuner.codegen.cpu.shipping import CacheFileError, cached_files, check_cache_file


def _kernel(n: int):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    f = tuner.build(te.create_schedule(B), [A, B])
    a = np.ones(n, np.float32)
    out = np.zeros(n, np.float32)
    f(a, out)
    return f


class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def test_a_kernels_own_cache_files_pass_the_check():
    f = _kernel(37)
    files = cached_files(f.module_name)
    assert any(n.endswith(".nbi") for n in files) and any(n.endswith(".nbc") for n in files)
    for name, data in files.items():
        check_cache_file(f.module_name, name, data)


def test_a_file_naming_anything_else_is_refused_before_it_is_read():
    f = _kernel(41)
    name = next(n for n in cached_files(f.module_name) if n.endswith(".nbc"))
    planted = pickle.dumps(_Reduce(print, ("planted",)))
    with pytest.raises(CacheFileError, match=r"names builtins\.print"):
        check_cache_file(f.module_name, name, planted)
    other_module = pickle.dumps(_Reduce(_rebuild_env, ("os", [], "env")))
    with pytest.raises(CacheFileError, match="imports 'os'"):
        check_cache_file(f.module_name, name, other_module)
    with pytest.raises(CacheFileError, match="not a cache file of kernel"):
        check_cache_file(f.module_name, "../" + name, b"")
    with pytest.raises(CacheFileError, match="not a readable cache file"):
        check_cache_file(f.module_name, name, b"\x80\x05garbage")
