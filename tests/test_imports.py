"""Each top-level package imports on its own, first, in a fresh process (no import cycles)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["tuner", "records", "search_spaces", "cost_models", "tuner.cli"]
)
def test_imports_first_in_a_fresh_process(module: str) -> None:
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
