"""Steady state of a model with a symbolic sequence length: ``generic`` against ``specialize``.

For each length given, the model (default: the encoder of four BERT-base layers,
``experiments/models.py encoder ... --dynamic-seq``) is compiled in both modes
in one process, bounds ``seq`` in [8, 512], run once (the first call's seconds:
a compile per length in ``specialize``, only planning in ``generic``), checked
against onnxruntime, then timed: each side in its own block after a rest, two
rounds, the lower of the two medians of 15 calls kept; onnxruntime (all graph
optimizations) at the same thread count beside them. Rows go to a CSV as they
are measured.

    python experiments/dynamic_steady.py --lengths 37,128,301 --csv out.csv

``experiments/dynamic_shapes.py`` serves a whole request trace per mode in its
own process; this is the per-length view the issue's bar reads (generic within
1.5x of specialize).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _median_ms(fn, n: int = 15) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", type=Path, default=ROOT / "experiments/out/models/encoder_dynamic.onnx"
    )
    ap.add_argument("--lengths", default="37,128,301")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--csv", type=Path, required=True)
    opts = ap.parse_args(argv)
    if not opts.model.is_file():
        print(
            f"dynamic_steady: no {opts.model}; export it with: python experiments/models.py"
            f" encoder {opts.model} --dynamic-seq",
            file=sys.stderr,
        )
        return 2
    import onnxruntime as ort

    import tuner
    from tuner.target import Target

    warnings.simplefilter("ignore")
    target = Target.from_name("cpu", num_threads=opts.threads)
    mods = {
        mode: tuner.compile_model(opts.model, target=target, dynamic=mode, bounds={"seq": (8, 512)})
        for mode in ("specialize", "generic")
    }
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = opts.threads, 1
    sess = ort.InferenceSession(str(opts.model), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    width = int(sess.get_inputs()[0].shape[-1])
    opts.csv.parent.mkdir(parents=True, exist_ok=True)
    with opts.csv.open("w", newline="") as f:
        writer = None
        for length in (int(x) for x in opts.lengths.split(",")):
            x = {
                name: np.random.default_rng(length)
                .standard_normal((1, length, width))
                .astype(np.float32)
            }
            want = sess.run(None, x)[0]
            row: dict[str, float | int] = {"seq": length}
            for mode, mod in mods.items():
                t0 = time.perf_counter()
                got = mod.run(x)[0]
                row[f"{mode}_first_s"] = round(time.perf_counter() - t0, 2)
                row[f"{mode}_max_err"] = float(np.max(np.abs(got - want)))
            for _ in range(2):
                for mode, mod in mods.items():
                    time.sleep(0.5)
                    ms = _median_ms(lambda m=mod, x=x: m.run(x))
                    row[f"{mode}_ms"] = round(min(float(row.get(f"{mode}_ms", ms)), ms), 3)
                time.sleep(0.5)
                ms = _median_ms(lambda x=x: sess.run(None, x))
                row["onnxruntime_ms"] = round(min(float(row.get("onnxruntime_ms", ms)), ms), 3)
            row["generic_over_specialize"] = round(
                float(row["generic_ms"]) / float(row["specialize_ms"]), 3
            )
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            f.flush()
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
