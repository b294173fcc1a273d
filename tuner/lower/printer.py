"""Readable loop nests, as ``print(tuner.lower(s, args))`` shows them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lower import LoweredFunc


def render(func: LoweredFunc) -> str:
    from ..codegen.source import render as render_source

    return render_source(func, "print")
