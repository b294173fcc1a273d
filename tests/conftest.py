"""Shared test set-up: a private kernel cache for the whole session."""

from __future__ import annotations

import os
import tempfile

# Set before any kernel is built so that tests never touch the user's cache.
os.environ.setdefault("TUNER_CACHE_DIR", tempfile.mkdtemp(prefix="tuner-test-cache-"))
os.environ.setdefault("NUMBA_NUM_THREADS", "2")
# pytest -n already keeps the cores busy: a model's cold compile stays in its process
# (tests/model/test_prebuild.py turns the workers on).
os.environ.setdefault("TUNER_BUILD_JOBS", "1")
# CUDA kernels run on Numba's simulator (CI has no GPU; NUMBA_ENABLE_CUDASIM=0 in the
# environment tests a real device). Numba reads it when first imported, hence here.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
