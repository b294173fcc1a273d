"""A graph pass on and off, one model, one process: module time in interleaved rounds.

Builds the model's module twice from the same in-memory file (so the lowering cache
serves neither), once as the compiler is and once with one pass of
``tuner.model.lowered.Lowered.from_graph`` replaced by the identity, checks that both
give the same outputs, then times them in interleaved rounds, each block after a rest
(medians of medians). What the notes' "one process, interleaved" pass figures come from::

    python experiments/pass_ab.py experiments/out/int8/efficientnet_b0_int8.onnx tables.tabulate
    python experiments/pass_ab.py experiments/out/int8/shufflenet_v2_x1_0_int8.onnx moves.integer_moves
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from int8_models import _feeds  # noqa: E402
from zoo import _session  # noqa: E402

from tuner.model import compile_model  # noqa: E402
from tuner.target import Target  # noqa: E402

#: Passes that may be switched off: ``module.function`` under ``tuner.graph``.
PASSES = ("tables.tabulate", "moves.integer_moves", "quantized.integer_linear")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("graph_pass", choices=PASSES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=15, help="runs timed per block")
    opts = ap.parse_args(argv)
    import onnx

    if not opts.model.is_file():
        print(f"pass_ab: no model file {opts.model}", file=sys.stderr)
        return 2
    proto = onnx.load(opts.model)
    sess = _session(opts.model, opts.threads)
    dims = {"batch": 1, "seq": 128}
    shapes = {
        i.name: [d if isinstance(d, int) else dims.get(str(d), 1) for d in i.shape]
        for i in sess.get_inputs()
    }
    target = Target.from_name("cpu", num_threads=opts.threads)
    module_name, name = opts.graph_pass.split(".")
    module = importlib.import_module(f"tuner.graph.{module_name}")
    real = getattr(module, name)
    on = compile_model(proto, shapes=shapes, target=target)
    setattr(module, name, lambda graph: graph)
    try:
        off = compile_model(proto, shapes=shapes, target=target)
    finally:
        setattr(module, name, real)
    feeds = _feeds(sess, np.random.default_rng(1), dims)
    same = all(np.array_equal(a, b) for a, b in zip(on.run(feeds), off.run(feeds), strict=True))
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(opts.rounds):
        for side, m in (("on", on), ("off", off)):
            time.sleep(0.3)
            m.run(feeds)
            runs = []
            for _ in range(opts.runs):
                t0 = time.perf_counter()
                m.run(feeds)
                runs.append(time.perf_counter() - t0)
            times[side].append(float(np.median(runs)))
    on_ms, off_ms = (1e3 * float(np.median(times[s])) for s in ("on", "off"))
    print(
        f"{opts.model.name} {opts.graph_pass}: on {on_ms:.3f} ms, off {off_ms:.3f} ms "
        f"({off_ms / on_ms:.2f}x), kernels {len(on.plans[0].specs)} / {len(off.plans[0].specs)}, "
        f"outputs {'identical' if same else 'DIFFERENT'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
