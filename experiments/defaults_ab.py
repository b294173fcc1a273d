"""Two checkouts' default schedules for one model, compared whole-model in one process.

    # in the other checkout (say a worktree of main before a change to the defaults):
    python experiments/defaults_ab.py dump MODEL.onnx --out /tmp/before.json
    # in this one:
    python experiments/defaults_ab.py compare MODEL.onnx /tmp/before.json --csv results.csv

``dump`` writes the default config of every task of the compiled model (task
key -> config). ``compare`` compiles the model with this checkout's defaults,
builds each task whose config in the dump differs with the dumped config (a
knob the dump lacks takes its ``absent`` value, so a config from before a knob
existed builds as it did then), and times the whole module both ways, each
side run a few times after a switch, sides interleaved for ``--rounds``
rounds, medians. The other side's outputs are checked against this side's.
Tasks whose key differs between the checkouts (a change of the blocked
layout's channel block changes the task) keep this side's kernel on both
sides, and their count is printed.

Timing two processes one after the other on a shared machine mixes the
change with the machine's drift (5 to 10 % between minutes on the cloud
machines this project runs on); in one process, interleaved, the drift falls
on both sides alike.

Where the change alters task keys (a new channel block re-lays the weights),
``compare`` leaves those tasks alone; then ``time`` (the median of whole-model
runs in one process) alternated between the checkouts a few times is the
measure, each side with its own kernel cache::

    for r in 1 2 3; do
      (cd ../before && TUNER_CACHE_DIR=/tmp/a python experiments/defaults_ab.py time M.onnx)
      TUNER_CACHE_DIR=/tmp/b python experiments/defaults_ab.py time M.onnx
    done
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from csv_rows import append_rows  # noqa: E402


def _plan(model: str) -> tuple[Any, Any]:
    """The compiled module and its one plan (a model with symbolic input dimensions has none
    until it runs: it is refused)."""
    import tuner

    module = tuner.compile_model(model)
    if len(module.plans) != 1:
        raise SystemExit(f"defaults_ab: {model} has symbolic input dimensions; export it static")
    return module, module.plans[0]


def _default(task: Any) -> dict[str, Any]:
    """``task``'s default config as a record writes it (absent knobs filled in)."""
    return dict(task.space.validate(task.default_config()).to_json())


def _feeds(module: Any, plan: Any) -> dict[str, Any]:
    """Random inputs for the model's one input (seeded: both sides run the same)."""
    import numpy as np

    value = plan.values[plan.lowered.inputs[0]]
    x = np.random.default_rng(0).random(tuple(int(d) for d in value.shape)).astype(np.float32)
    return {module.input_names[0]: x}


def _median_seconds(module: Any, feeds: dict[str, Any], runs: int, untimed: int) -> float:
    """Median seconds of ``runs`` whole-model runs after ``untimed`` ones."""
    import numpy as np

    for _ in range(untimed):
        module.run(feeds)
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        module.run(feeds)
        seconds.append(time.perf_counter() - t0)
    return float(np.median(seconds))


def dump(model: str, out: str) -> None:
    _, plan = _plan(model)
    configs = {s.task.key: _default(s.task) for s in plan.specs}
    Path(out).write_text(json.dumps(configs, indent=1))
    print(f"{len(configs)} task defaults of {model} -> {out}")


def compare(model: str, other: dict[str, Any], rounds: int, csv: str | None) -> dict[str, Any]:
    """Time the model with this checkout's defaults and with ``other``'s configs (see the
    module's docstring); the row it prints (and appends to ``csv``)."""
    import numpy as np

    from tuner.kernels.opkernel import _build
    from tuner.space import ConfigError

    module, plan = _plan(model)
    # a slice of a concatenation written in place keeps its row pitch (tuner.model.inplace)
    pitch = {v: place.pitch for place in plan.in_place for v in place.parts}
    steps = list(plan._steps)
    theirs = list(steps)
    built: dict[tuple[str, int], Any] = {}
    differ = missing = 0
    for j, spec in enumerate(plan.specs):
        task = spec.task
        if task.key not in other:
            missing += 1
            continue
        try:
            cfg = task.space.validate(other[task.key]).to_json()
        except ConfigError as e:
            raise SystemExit(f"defaults_ab: the dump's config for {task.key}: {e}") from None
        if cfg == _default(task):
            continue
        key = (task.key, pitch.get(spec.output, 0))
        if key not in built:
            built[key] = _build(task, *task.schedule(cfg), out_pitch=key[1])._fn
        theirs[j] = (built[key], *steps[j][1:])
        differ += 1
    feeds = _feeds(module, plan)
    want = module.run(feeds)[0].copy()
    seconds: dict[str, list[float]] = {"this": [], "other": []}
    for _ in range(rounds):
        for side, chosen in (("this", steps), ("other", theirs)):
            plan._steps = chosen
            seconds[side].append(_median_seconds(module, feeds, runs=10, untimed=3))
    plan._steps = theirs
    np.testing.assert_allclose(module.run(feeds)[0], want, rtol=1e-3, atol=1e-3)
    plan._steps = steps
    this, that = (1e3 * float(np.median(seconds[k])) for k in ("this", "other"))
    name = Path(model).stem
    print(
        f"{name}: {differ} kernels differ, {missing} tasks not in the dump; this {this:.2f} ms,"
        f" other {that:.2f} ms, other/this {that / this:.3f}"
    )
    from tuner.target import Target

    target = Target.from_name("cpu")
    row = {
        "machine": target.get("model", ""),
        "fingerprint": target.fingerprint,
        "model": name,
        "kernels_differ": differ,
        "tasks_missing": missing,
        "this_ms": round(this, 3),
        "other_ms": round(that, 3),
        "other_over_this": round(that / this, 4),
        "rounds": rounds,
    }
    if csv:
        append_rows(Path(csv), [row])
    return row


def time_model(model: str, runs: int) -> float:
    """Median milliseconds of ``runs`` whole-model runs, after five untimed ones."""
    module, plan = _plan(model)
    ms = 1e3 * _median_seconds(module, _feeds(module, plan), runs, untimed=5)
    print(f"{Path(model).stem}: {ms:.2f} ms (median of {runs} runs)")
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="write this checkout's default configs of a model")
    d.add_argument("model")
    d.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="time this checkout's defaults against a dump's")
    c.add_argument("model")
    c.add_argument("other")
    c.add_argument("--rounds", type=int, default=12)
    c.add_argument("--csv")
    t = sub.add_parser("time", help="median time of whole-model runs with this checkout")
    t.add_argument("model")
    t.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)
    if not Path(args.model).is_file():
        print(f"defaults_ab: no such model file: {args.model}", file=sys.stderr)
        return 2
    if args.command == "dump":
        dump(args.model, args.out)
        return 0
    if args.command == "time":
        if args.runs < 1:
            print("defaults_ab: --runs must be at least 1", file=sys.stderr)
            return 2
        time_model(args.model, args.runs)
        return 0
    try:
        other = json.loads(Path(args.other).read_text())
    except (OSError, ValueError) as e:
        print(f"defaults_ab: cannot read the dump {args.other}: {e}", file=sys.stderr)
        return 2
    if not isinstance(other, dict):
        print(f"defaults_ab: {args.other} is not a dump (task key -> config)", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print("defaults_ab: --rounds must be at least 1", file=sys.stderr)
        return 2
    compare(args.model, other, args.rounds, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
