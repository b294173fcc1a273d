"""The two errors of the knob-space DSL, and the one-line legality check."""

from __future__ import annotations

import json

__all__ = ["ConfigError", "SpaceError", "check", "show"]


class SpaceError(ValueError):
    """A space that cannot be declared or searched.

    Raised for a bad knob definition (unknown policy, duplicate name, illegal
    candidate), a definition after the space was frozen, or constraints that
    reject every point the sampler tried.
    """


class ConfigError(ValueError):
    """A config that does not belong to its space.

    Raised for a missing or unknown knob, a value that is not one of the knob's
    legal values, or a violated constraint. The message is one sentence that
    names the knob (or constraint) and says what would be legal.
    """


def check(condition: bool, message: str) -> None:
    """Raise ``SpaceError(message)`` unless ``condition`` holds.

    >>> check(3 > 2, "never raised")
    """
    if not condition:
        raise SpaceError(message)


def show(value: object, limit: int = 80) -> str:
    """Render a value for an error message: compact JSON when possible, else ``repr``.

    >>> show((4, 16))
    '[4, 16]'
    >>> show("__import__('os')")
    '"__import__(\\'os\\')"'
    """
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
