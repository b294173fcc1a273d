"""The target a template helper works for when its caller names none."""

from __future__ import annotations

from tuner.target import Target


def resolve(target: Target | None) -> Target:
    """``target``, or the host CPU where it is None (module-level helpers, notebooks, docs).

    The operator registry always passes its target; only direct calls of a
    template's functions without one read the machine they run on.
    """
    return target if target is not None else Target.from_name("cpu")
