"""The NumPy reference of a workload, timed as a user meets it: a fresh process, NumPy's own threads.

What a tuned kernel is compared with at the end of a tune. The runner that
times candidates holds BLAS to the target's thread count and has spent the
run beside the build workers; timed there on a busy 2-core machine, a
128-cube matmul read 16 ms against plain NumPy's 0.033 ms. Here a new Python
process imports NumPy with the environment the user has (so OpenBLAS picks
its own thread count, as in the user's own scripts), makes the operator's
inputs, calls the reference once, then times it in ``blocks`` blocks, each
after a rest (``interleave.REST_SECONDS``) so that BLAS threads spinning from
the block before do not count. The samples of all blocks come back; their
spread says whether the figure can be trusted (``tuner.cli.progress``).

The operator, its arguments and the target cross as JSON; the child imports
only the package and the operator plugins the tuner itself was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from records import ErrorKind

from ._types import Candidate, MeasureOptions, MeasureResult

__all__ = ["fresh_baseline"]

_CHILD = "from tuner.measure.baseline import _serve; _serve()"


def fresh_baseline(
    c: Candidate, opts: MeasureOptions, blocks: int = 3, timeout: float = 300.0
) -> MeasureResult:
    """``c``'s NumPy reference timed in a new process: ``opts.samples`` samples over ``blocks``."""
    job = {
        "op": c.op,
        "args": c.args,
        "target": c.target,
        "samples": opts.samples,
        "min_sample_seconds": opts.min_sample_seconds,
        "blocks": blocks,
        "plugins": list(opts.plugins),
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return MeasureResult(ErrorKind.RUN_TIMEOUT, f"no NumPy timing within {timeout:g} s")
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
        samples = tuple(float(s) for s in out["samples"])
    except (IndexError, ValueError, KeyError, TypeError):
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return MeasureResult(ErrorKind.RUNTIME_ERROR, f"the NumPy timing failed: {why[:300]}")
    return MeasureResult(ErrorKind.OK, samples=samples)


def _serve() -> None:
    """The child: time the reference the job on standard input names; samples on standard output."""
    import importlib

    from search_spaces import get_operator

    from ..target import Target
    from ._child import _Calls, _time
    from .interleave import REST_SECONDS

    job: dict[str, Any] = json.loads(sys.stdin.read())
    for name in job["plugins"]:
        importlib.import_module(name)
    op = get_operator(job["op"])
    args = job["args"]
    inputs = op.make_inputs(args, target=Target.from_json(job["target"]))
    total = int(job["samples"])
    blocks = max(1, min(int(job["blocks"]), total))
    op.reference(*inputs, **args)  # first call: page faults, BLAS's threads start
    samples: list[float] = []
    for b in range(blocks):
        time.sleep(REST_SECONDS)
        share = total // blocks + (b < total % blocks)
        block = MeasureOptions(samples=share, min_sample_seconds=float(job["min_sample_seconds"]))
        samples += _time(_Calls(lambda: op.reference(*inputs, **args)), block)
    print(json.dumps({"samples": samples}))
