"""Config: one point of a space, a frozen mapping from knob name to value."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ._knobs import JsonValue, KnobValue, json_value

__all__ = ["Config"]


@dataclass(frozen=True)
class Config(Mapping[str, Any]):
    """One point of a ``ConfigSpace``: knob name -> value, in the space's knob order.

    Values are tuples of ints for splits, tuples of axis names for reorders,
    tuples of annotations for annotates, and scalars for other knobs. Configs
    are made by a space (``sample``, ``validate``, ``from_index``...), which
    always lists knobs in definition order, so equal points compare and hash
    equal. ``key`` is the canonical JSON text used to dedupe measurements.

    >>> cfg = Config((("tile", (4, 16)), ("unroll", True)))
    >>> cfg["tile"]
    (4, 16)
    >>> cfg.key
    '{"tile":[4,16],"unroll":true}'
    """

    entries: tuple[tuple[str, KnobValue], ...]

    def __getitem__(self, name: str) -> Any:
        for key, value in self.entries:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def to_json(self) -> dict[str, JsonValue]:
        """A JSON-ready dict: tuples become lists.

        >>> Config((("order", ("jo", "io")),)).to_json()
        {'order': ['jo', 'io']}
        """
        return {k: json_value(v) for k, v in self.entries}

    @cached_property
    def key(self) -> str:
        """Canonical JSON text (sorted keys, no spaces): the identity of a measurement."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.entries)
        return f"Config({inner})"
