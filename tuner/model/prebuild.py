"""A model's first compile, spread over the cores: kernels built in parallel processes.

A model's kernels are independent Numba compiles, each on one core, 1 to 3 s
apiece: ResNet-50's 37 distinct tasks took 70 to 95 s in one process. When
the first kernel a module builds misses the kernel cache, the others are
built by one worker process per core into the on-disk cache, and the module
then loads each from there (a cached load takes milliseconds).

The workers are plain ``python -c`` processes, not ``multiprocessing``'s
spawn: spawn imports the caller's main script again in every worker, which
re-runs a script that calls ``compile_model`` without a ``__main__`` guard.
The tasks and records go to each worker pickled over its stdin (this
process's own objects, never data read from a file). A worker that fails
changes nothing but speed: the module builds every kernel itself anyway and
reports any error there, once, as it would without workers.

``TUNER_BUILD_JOBS`` sets the number of workers (``1``: none).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_jobs", "prebuild"]

#: Below this many kernels to compile, starting the workers costs more than it saves.
MIN_TASKS = 4

_WORKER = "from tuner.model.prebuild import _serve; _serve()"


def build_jobs() -> int:
    """Worker processes for a cold compile: ``$TUNER_BUILD_JOBS``, else the usable cores."""
    raw = os.environ.get("TUNER_BUILD_JOBS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            raise ValueError(f"TUNER_BUILD_JOBS must be an integer, got {raw!r}") from None
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(cores) if cores else os.cpu_count() or 1


def prebuild(tasks: Sequence[tuple[Any, int]], records: Any, jobs: int | None = None) -> bool:
    """Build ``tasks``, each a task and its output pitch (``build_task``'s ``out_pitch``), with
    ``records`` into the kernel cache in ``jobs`` processes.

    Returns whether workers ran (False when there are too few tasks or jobs).
    Worker ``k`` of ``n`` builds tasks ``k, k + n, ...``; all are waited for.
    """
    n = min(build_jobs() if jobs is None else jobs, len(tasks))
    if n < 2 or len(tasks) < MIN_TASKS:
        return False
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = []
    for k in range(n):
        payload = pickle.dumps((list(tasks[k::n]), records))
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        procs.append((proc, payload))
    try:
        for proc, payload in procs:
            assert proc.stdin is not None
            try:
                proc.stdin.write(payload)
                proc.stdin.close()
            except BrokenPipeError:  # the worker died at start: the module builds its share
                pass
        for proc, _ in procs:
            proc.wait()
    finally:  # Ctrl-C (or any error) here leaves no worker behind
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return True


def _serve() -> None:
    """A worker: build each task it is sent; a task that fails is skipped."""
    import warnings

    from ..kernels import build_task

    tasks, records = pickle.loads(sys.stdin.buffer.read())
    warnings.simplefilter("ignore")  # the module itself warns, once
    for item in tasks:
        try:
            task, pitch = item
            build_task(task, records, out_pitch=pitch)
        except Exception:  # the module builds it again and raises there
            continue
