"""Quantized zoo models: compiled by the tuner, checked and timed against onnxruntime on the same file.

Each CNN of the zoo (``experiments/zoo.py``'s ONNX files) is quantized here with
``onnxruntime.quantization.quantize_static`` (QDQ, int8 activations and per-channel
int8 weights, calibrated on random images), each text model with
``quantize_dynamic`` (int8 weights, MatMulInteger). Then, in one process, at the
same thread count:

- agreement: the CNNs' top-1 class on ``--inputs`` random images against
  onnxruntime running the quantized file; the text models' largest difference
  over the output's largest magnitude;
- onnxruntime_self: the same comparison between onnxruntime with all its graph
  optimizations and onnxruntime with none, on the same inputs: how far two
  faithful runs of one quantized file differ. With the zoo's random weights a
  CNN's logits sit within a few quantization steps of each other (MobileNetV2:
  the top two within one output step on 15 % of the inputs), so a fused kernel
  that rounds one activation the other way in one layer can change the class;
  onnxruntime itself does (its optimized graph runs some convolutions in float
  between QuantizeLinear and DequantizeLinear, others as QLinearConv);
- decided_agreement: the CNNs' top-1 agreement on the inputs whose onnxruntime top-1
  class leads the next by more than twice the largest logit difference between
  onnxruntime's two runs (optimized and not) over all the inputs: two faithful runs can
  move the two logits apart by that much, so any class closer than that is a tie of the
  quantized network, not an answer (``onnxruntime_self`` flips such classes too). Over
  all inputs, not per input: onnxruntime's two runs of EfficientNet-B0 are bit-identical
  on some inputs and 8-11 output steps apart on others;
- time: our module on the quantized file, onnxruntime on it (all graph
  optimizations), and our module on the float32 file, in interleaved rounds.

    python experiments/int8_models.py --only mobilenet_v2,resnet50 --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from zoo import _session  # noqa: E402  (onnxruntime with every graph optimization, or none)

from tuner.measure.interleave import interleaved, medians  # noqa: E402
from tuner.model import compile_model  # noqa: E402
from tuner.target import Target  # noqa: E402

CNNS = ("mobilenet_v2", "resnet50", "resnet18", "efficientnet_b0")
TEXT = ("bert", "distilbert")
FIELDS = [
    "model", "format", "compile_s", "agreement", "onnxruntime_self", "decided_agreement",
    "tuner_int8_ms",
    "onnxruntime_int8_ms",
    "tuner_fp32_ms", "x_onnxruntime", "x_fp32", "error",
]  # fmt: skip


def _feeds(sess: Any, rng: np.random.Generator, dims: dict[str, int]) -> dict[str, np.ndarray]:
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(str(d), 1) for d in i.shape]
        if "int" in i.type:
            feeds[i.name] = rng.integers(
                0 if "mask" in i.name else 1, 2 if "mask" in i.name else 1000, shape
            ).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def quantize(name: str, src: Path, dst: Path, calibration: int, dims: dict[str, int]) -> str:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    if name in TEXT:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return "dynamic"
    sess = _session(src, 2)
    rng = np.random.default_rng(0)
    batches = [_feeds(sess, rng, dims) for _ in range(calibration)]

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(batches)

        def get_next(self) -> Any:
            return next(self.left, None)

    quantize_static(
        str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return "static QDQ"


def run(name: str, folder: Path, out: Path, opts: argparse.Namespace) -> dict[str, Any]:
    src, dst = folder / f"{name}.onnx", out / f"{name}_int8.onnx"
    dims = {"batch": 1, "seq": opts.seq}
    row: dict[str, Any] = {"model": name}
    row["format"] = quantize(name, src, dst, opts.calibration, dims)
    target = Target.from_name("cpu", num_threads=opts.threads)
    sess = _session(dst, opts.threads)
    shapes = {
        i.name: [d if isinstance(d, int) else dims.get(str(d), 1) for d in i.shape]
        for i in sess.get_inputs()
    }
    t0 = time.perf_counter()
    module = compile_model(dst, shapes=shapes, target=target)
    row["compile_s"] = round(time.perf_counter() - t0, 1)
    fp32 = compile_model(src, shapes=shapes, target=target)
    plain = _session(dst, opts.threads, optimize=False)
    rng = np.random.default_rng(1)
    if name in TEXT:
        worst = [0.0, 0.0]
        for _ in range(opts.inputs):
            f = _feeds(sess, rng, dims)
            want = sess.run(None, f)[0]
            for k, got in enumerate((module.run(f)[0], plain.run(None, f)[0])):
                worst[k] = max(worst[k], float(np.abs(got - want).max() / np.abs(want).max()))
        row["agreement"] = f"max diff {worst[0]:.3g} of the largest output"
        row["onnxruntime_self"] = f"max diff {worst[1]:.3g} of the largest output"
    else:
        same, spread, answers = [0, 0], 0.0, []
        for _ in range(opts.inputs):
            f = _feeds(sess, rng, dims)
            logits = sess.run(None, f)[0].reshape(-1)
            ours, theirs = module.run(f)[0].reshape(-1), plain.run(None, f)[0].reshape(-1)
            want = np.argmax(logits)
            same[0] += int(want == np.argmax(ours))
            same[1] += int(want == np.argmax(theirs))
            spread = max(spread, float(np.abs(theirs - logits).max()))
            second, first = np.sort(logits)[-2:]
            answers.append((float(first - second), bool(want == np.argmax(ours))))
        decided = [agree for lead, agree in answers if lead > 2 * spread]
        row["agreement"] = f"top-1 {same[0]}/{opts.inputs}"
        row["onnxruntime_self"] = f"top-1 {same[1]}/{opts.inputs}"
        row["decided_agreement"] = f"top-1 {sum(decided)}/{len(decided)}"
    f = _feeds(sess, rng, dims)
    times = medians(
        interleaved(
            {
                "int8": lambda: module.run(f),
                "ort": lambda: sess.run(None, f),
                "fp32": lambda: fp32.run(f),
            },
            opts.rounds,
        )
    )
    row.update(
        tuner_int8_ms=round(times["int8"] * 1e3, 3),
        onnxruntime_int8_ms=round(times["ort"] * 1e3, 3),
        tuner_fp32_ms=round(times["fp32"] * 1e3, 3),
        x_onnxruntime=round(times["ort"] / times["int8"], 3),
        x_fp32=round(times["fp32"] / times["int8"], 3),
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(CNNS + TEXT))
    ap.add_argument("--cache", type=Path, default=ROOT / "experiments" / "out" / "zoo")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "out" / "int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=200, help="random inputs compared")
    ap.add_argument("--calibration", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--csv", type=Path)
    opts = ap.parse_args(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [n for n in opts.only.split(",") if n]:
        if not (opts.cache / f"{name}.onnx").exists():
            print(
                f"int8_models: {name}.onnx is not in {opts.cache} (python experiments/zoo.py --export-only)",
                file=sys.stderr,
            )
            return 2
        try:
            row = run(name, opts.cache, opts.out, opts)
        except Exception as exc:  # one model's failure is a row, not the end of the run
            row = {
                "model": name,
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
            }
        rows.append(row)
        print(" ".join(f"{k}={row.get(k)}" for k in FIELDS if row.get(k) is not None), flush=True)
        if opts.csv:
            with opts.csv.open("w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=FIELDS)
                w.writeheader()
                w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
