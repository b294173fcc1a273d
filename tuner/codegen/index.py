"""The kernel index: a schedule's identity to its compiled kernel, without lowering again.

The CPU backend's module cache already avoids recompiling a kernel, but it is
keyed by the generated source, so finding it means lowering the schedule and
rendering the source first: a few tens of milliseconds per kernel, seconds
for a model of forty. The index keys a kernel by what determines its source
instead (a task's key, its config or trace, the target's fingerprint and
threads, the build options and a hash of the code that lowers and renders)
and stores what the backend needs to load it again (``Backend.describe`` /
``restore``), as JSON files beside the kernels. An entry whose kernel is gone
is built again; nothing in an entry is executed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from ..lower.lower import LoweredFunc
from ..target import Target
from .backend import BuildOptions, Kernel, cache_dir, get_backend

__all__ = ["code_fingerprint", "indexed"]

#: The packages whose code decides a kernel's source for a given schedule identity.
_CODE = ("te", "schedule", "lower", "codegen", "space", "task.py", "kinds.py", "graph", "model")
_FINGERPRINT: str | None = None


def code_fingerprint() -> str:
    """A hash of the tuner's lowering, rendering and template code (read once per process)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        here = Path(__file__).resolve().parents[1]
        roots = [here / c for c in _CODE] + [here.parent / "search_spaces"]
        h = hashlib.sha256()
        for root in roots:
            files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
            for f in files:
                if f.exists():
                    h.update(f.name.encode())
                    h.update(f.read_bytes())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


def indexed(
    identity: str,
    make: Callable[[], Kernel],
    target: Target,
    options: BuildOptions | None = None,
    relower: Callable[[], LoweredFunc] | None = None,
) -> Kernel:
    """The kernel ``identity`` names: restored from the index, else ``make()`` and recorded.

    ``relower`` lowers the schedule again, for a restored kernel's ``lowered``.
    """
    backend = get_backend(target)
    opts = backend.resolve(options or BuildOptions())  # "auto" choices count as made here
    parts = (identity, target.fingerprint, str(target.threads), repr(opts), code_fingerprint())
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    path = cache_dir() / "index" / f"{key}.json"
    try:
        entry = json.loads(path.read_text())
        kernel = backend.restore(entry, target, relower) if isinstance(entry, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        kernel = None
    if kernel is not None:
        return kernel
    kernel = make()
    entry = backend.describe(kernel)
    if entry is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)
    return kernel
