"""Fixtures for the records tests."""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import record


@pytest.fixture
def make_record() -> Any:
    return record
