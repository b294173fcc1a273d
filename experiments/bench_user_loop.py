"""A user's loop against the runner: the same record timed both ways, on this machine.

    python experiments/bench_user_loop.py --log experiments/logs/bench_ops_200.jsonl --rounds 5

For each workload, the best record of ``--log`` for this machine and thread
count (what ``tuner.apply_best`` picks; the template's default where there
is none) is timed two ways, in rounds that alternate between them:

- **runner**: the tuner's own measurement, ``tuner.measure.Measurer`` on the
  record's config (its build worker and its runner process; the figure is
  the median of its samples, as a record's ``median``);
- **user**: a fresh plain Python process that does what a user does:
  ``with tuner.apply_best(log): f = tuner.build_op(...)``, then
  ``for _ in range(n): f(a, b, out=c)`` timed by ``time.perf_counter`` over
  blocks of at least ``--block`` seconds (``n`` from ``tuner.measure.timer``,
  as the runner's), the median block (``alloc`` is the
  same loop calling ``f(a, b)``, which allocates its output each call).

The bar is a user's loop within 5 % of the runner: ``user / runner <= 1.05``.
The figures are medians over the rounds. Writes nothing; prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOADS = {
    "matmul_1024": "matmul M=1024 N=1024 K=1024",
    "matmul_512": "matmul M=512 N=512 K=512",
    "dense_relu": "dense batch=128 in_features=768 out_features=3072 bias=true activation=relu",
    "softmax": "softmax M=4096 N=1024",
    "matmul_int8": "matmul M=1024 N=1024 K=1024 dtype=int8",
    # Tiny, for the tests.
    "matmul_small": "matmul M=24 N=20 K=17",
}

#: The user's process: nothing of the tuner's but the public API, and the timing loop
#: the runner uses (``tuner.measure.timer``) so that both sides count their calls alike.
USER = textwrap.dedent(
    """
    import json, statistics, sys, warnings
    import numpy as np
    import tuner
    from tuner.measure.timer import loop_seconds, reps_for
    from search_spaces import get_operator
    op_name, args, log, block, blocks, threads = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")
    target = tuner.Target.from_name("cpu", num_threads=threads)
    op = get_operator(op_name)
    args = op.parse_args(args)
    inputs = op.make_inputs(args, target=target)
    if log:
        with tuner.apply_best(log):
            f = tuner.build_op(op_name, target=target, **args)
    else:
        f = tuner.build_op(op_name, target=target, **args)
    out = f(*inputs)
    result = {"config": f.config, "from_log": f.record is not None}
    for name, call in (("user", lambda: f(*inputs, out=out)), ("alloc", lambda: f(*inputs))):
        seconds = loop_seconds(call)
        n, _ = reps_for(seconds, block)
        result[name] = statistics.median([seconds(n) / n for _ in range(blocks)])
    print("RESULT " + json.dumps(result))
    """
)


def user_times(
    op_name: str, raw: dict[str, str], log: str, threads: int, block: float
) -> dict[str, Any]:
    from bench_schedules import thread_env

    payload = json.dumps([op_name, raw, log, block, 5, threads])
    out = subprocess.run(
        [sys.executable, "-c", USER, payload],
        env=thread_env(threads),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the user's process failed: {out.stderr.strip().splitlines()[-1:]}")
    result: dict[str, Any] = json.loads(line[7:])
    return result


def runner_time(op_name: str, args: dict[str, Any], config: dict[str, Any], threads: int) -> float:
    from tuner import Target
    from tuner.measure import Candidate, Measurer

    target = Target.from_name("cpu", num_threads=threads)
    with Measurer(threads=threads) as m:
        (res,) = m.measure([Candidate(op_name, args, config, target.to_json())])
    if not res.ok:
        raise SystemExit(f"{op_name}: the runner failed: {res.error_msg.splitlines()[-1:]}")
    return statistics.median(res.samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--log",
        default=str(ROOT / "experiments" / "logs" / "bench_ops_200.jsonl"),
        help="tuning log whose best records are timed ('' for the default schedules)",
    )
    p.add_argument("--workloads", default="matmul_1024,matmul_512,dense_relu,softmax")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=float, default=0.2, help="seconds per timed block")
    opts = p.parse_args(argv)
    if opts.log and not Path(opts.log).exists():
        raise SystemExit(f"no tuning log {opts.log}")
    unknown = [w for w in opts.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload {unknown[0]!r}; known: {', '.join(WORKLOADS)}")
    sys.path.insert(0, str(ROOT / "experiments"))
    from search_spaces import get_operator

    warnings.simplefilter("ignore")
    print("| workload | config from | runner ms | user ms (out=) | user / runner | alloc ms |")
    print("|---|---|---|---|---|---|")
    for label in opts.workloads.split(","):
        op_name, *pairs = WORKLOADS[label].split()
        raw = dict(pair.split("=", 1) for pair in pairs)
        args = get_operator(op_name).parse_args(raw)
        runner: list[float] = []
        user: list[float] = []
        alloc: list[float] = []
        from_log = False
        for _ in range(opts.rounds):
            got = user_times(op_name, raw, opts.log, opts.threads, opts.block)
            from_log = got["from_log"]
            user.append(got["user"])
            alloc.append(got["alloc"])
            runner.append(runner_time(op_name, args, got["config"], opts.threads))
        r, u, a = (statistics.median(x) * 1e3 for x in (runner, user, alloc))
        source = "log" if from_log else "default"
        print(f"| {label} | {source} | {r:.4g} | {u:.4g} | {u / r:.3f} | {a:.4g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
