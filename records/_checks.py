"""Checks that turn plain JSON values into the typed, hashable fields of a Record.

Everything read from a log passes through here, so a bad value ends as one
``RecordError`` sentence that names the field, never as a crash later on.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeAlias

KnobValue: TypeAlias = "bool | int | float | str | tuple[KnobValue, ...]"


class RecordError(ValueError):
    """A record or tuning log that cannot be read or written."""


class RecordVersionError(RecordError):
    """A record written in a format version this reader does not know."""


def freeze_knob(value: Any, where: str) -> KnobValue:
    """A JSON knob value in hashable form (lists become tuples)."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise RecordError(f"{where} must be finite, got {value!r}")
        return value
    if isinstance(value, list | tuple):
        return tuple(freeze_knob(v, where) for v in value)
    raise RecordError(f"{where} must be a JSON number, string, bool or list, got {value!r}")


def strict_json(value: Any) -> str:
    """Canonical JSON text that refuses NaN and infinities (not valid JSON)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def thaw_knob(value: KnobValue) -> Any:
    """The plain-JSON form of a frozen knob value (tuples back to lists)."""
    return [thaw_knob(v) for v in value] if isinstance(value, tuple) else value


def seconds(value: Any, where: str) -> float:
    """A finite, non-negative number of seconds as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{where} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise RecordError(f"{where} must be finite and non-negative, got {value!r}")
    return float(value)


def optional_number(value: Any, where: str) -> float | None:
    """A finite number as a float, or None (for scores and counts that may be unknown)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{where} must be a number or null, got {value!r}")
    if not math.isfinite(value):
        raise RecordError(f"{where} must be finite, got {value!r}")
    return float(value)
