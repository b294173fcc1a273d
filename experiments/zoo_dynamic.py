"""The zoo's transformers with their symbolic batch and sequence, in ``generic`` and ``bucket``.

(A ViT's only symbol is its batch: its rows repeat a length for each batch.)

Each model exported by ``experiments/zoo.py`` whose inputs have symbolic axes is
compiled in each mode (bounds: ``batch`` 4, ``seq`` 64, those it has), then run at every
(batch, length) pair given and compared with onnxruntime on the same inputs
(integer inputs are token ids below 100; an input named like a mask holds ones
over a random prefix, zeros after). One row per model, mode and shape: the
largest absolute difference, whether it is within ``rtol=1e-3, atol=1e-4``, the
compile seconds (once per mode) and the call's seconds. A mode that refuses a
model writes one row with its one-line reason.

    python experiments/zoo_dynamic.py --cache experiments/out/zoo --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("bert", "distilbert", "gpt2", "t5_encoder", "vit_hf")
FIELDS = ["model", "mode", "batch", "seq", "compile_s", "call_s", "max_err", "match", "error"]


def _feeds(session, batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    feeds = {}
    for i in session.get_inputs():
        dims = {"batch": batch, "seq": seq}
        shape = [dims.get(d, seq) if isinstance(d, str) else int(d) for d in i.shape]
        if "int" not in i.type:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in i.name:
            mask = np.zeros(shape, np.int64)
            for row in mask.reshape(-1, shape[-1]):
                row[: rng.integers(1, shape[-1] + 1)] = 1
            feeds[i.name] = mask
        else:
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
    return feeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cache", type=Path, default=ROOT / "experiments" / "out" / "zoo")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--shapes", default="1x1,2x7,1x13,3x32,2x64", help="BATCHxSEQ pairs")
    ap.add_argument("--modes", default="generic,bucket")
    ap.add_argument("--csv", type=Path, required=True)
    args = ap.parse_args()

    import onnxruntime as ort

    import tuner

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        out = csv.DictWriter(f, FIELDS)
        out.writeheader()
        for name in args.only.split(","):
            path = args.cache / f"{name}.onnx"
            if not path.exists():
                print(f"{name}: {path} is missing (python experiments/zoo.py --export-only)")
                continue
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            named = {d for i in session.get_inputs() for d in i.shape if isinstance(d, str)}
            bounds = {k: v for k, v in {"batch": 4, "seq": 64}.items() if k in named}
            for mode in args.modes.split(","):
                started = time.perf_counter()
                try:
                    module = tuner.compile_model(path, dynamic=mode, bounds=bounds)
                except Exception as exc:  # one row with the refusal, then the next mode
                    row = {"model": name, "mode": mode, "error": str(exc).splitlines()[0]}
                    out.writerow(row)
                    f.flush()
                    print(f"{name} {mode}: {row['error']}")
                    continue
                compile_s = time.perf_counter() - started
                rng = np.random.default_rng(0)
                for batch, seq in shapes:
                    feeds = _feeds(session, batch, seq, rng)
                    want = session.run(None, feeds)
                    t0 = time.perf_counter()
                    got = module.run(feeds)
                    call_s = time.perf_counter() - t0
                    err = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
                    ok = all(
                        np.allclose(g, w, rtol=1e-3, atol=1e-4)
                        for g, w in zip(got, want, strict=True)
                    )
                    out.writerow(
                        {
                            "model": name,
                            "mode": mode,
                            "batch": batch,
                            "seq": seq,
                            "compile_s": round(compile_s, 1),
                            "call_s": round(call_s, 3),
                            "max_err": f"{err:.1e}",
                            "match": "yes" if ok else "NO",
                            "error": "",
                        }
                    )
                    f.flush()
                    print(f"{name} {mode} {batch}x{seq}: {'yes' if ok else 'NO'} {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
