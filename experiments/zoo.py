"""A zoo of real architectures, exported to ONNX here, compiled and checked against onnxruntime.

    python experiments/zoo.py --list
    python experiments/zoo.py --check --threads 2                 # every model, full size
    python experiments/zoo.py --check --small --only resnet18,bert
    python experiments/zoo.py --export-only --cache out/zoo

Nothing is downloaded: every model is built from its library's code with
random weights drawn from a fixed seed (``weights=None`` for torchvision,
a config object for ``transformers``) and exported by ``torch.onnx`` into a
cache folder (default ``experiments/out/zoo``, not committed), once per
name, size and opset. What it needs is the ``zoo`` extra
(``pip install -e ".[zoo]"``: torch, torchvision, transformers).

The families (``zoo_models.ZOO``):

- torchvision's classification networks, at 224x224 (Inception v3 at 299),
  batch 1; ``--small`` makes them 64x64 (96 for Inception v3) with 10
  classes, so that the architecture is whole but each compiles in seconds.
  Batch-norm statistics and norm scales are calibrated on one random batch
  (``models._calibrate``) so activations stay of order one through the depth,
  as in a trained network.
- transformer families from ``transformers`` configs (BERT, DistilBERT, GPT-2
  with its causal mask, a T5 encoder, a ViT), eager attention, exported with
  a symbolic ``batch`` and ``seq`` (ViT: ``batch``) so the same file serves
  the shape-generic modes.
- legacy exports (``*_opset9`` and ``*_opset11``): the same networks written
  the way older exporters wrote them: an old opset, no constant folding, the
  initializers listed among the graph's inputs and a symbolic batch (so that
  shape arithmetic, ``ConstantOfShape``, ``Unsqueeze`` with attributes and
  ``Upsample``-era forms reach the importer).

``--check`` compiles each model with default schedules (``compile_model``,
no log), runs it on seeded inputs beside onnxruntime with all its graph
optimizations at the same thread count, and prints one row per model: opset,
nodes, kernels, cold compile seconds, the largest error, whether it matches
(rtol 1e-3, atol 1e-3 of the output's largest magnitude) and both latencies. A
model that fails prints its one-line reason and the run goes on; the exit
status is non-zero if any failed. ``--csv`` writes the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from zoo_models import SEED, SEQ, ZOO, Entry  # beside this file: on the path of its scripts

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = HERE / "out" / "zoo"

__all__ = ["SEED", "SEQ", "ZOO", "Entry", "check", "export", "feeds_for", "main"]


# -- export ------------------------------------------------------------------------------------


def export(entry: Entry, small: bool, cache: Path) -> Path:
    """The model's ONNX file in ``cache``, exported (and checked against torch) if not there yet."""
    path = cache / f"{entry.stem(small)}.onnx"
    if path.exists():
        return path
    import torch

    sys.path.insert(0, str(HERE))
    from models import _calibrate  # norm statistics of order one, as in a trained network

    torch.manual_seed(SEED)
    torch.backends.mha.set_fastpath_enabled(False)  # the fused attention kernel has no export
    model = entry.make(small).eval()
    feeds = entry.inputs(small, 1, SEQ[small])
    _no_zero_weights(model)
    if entry.family == "vision" and "input" in feeds:
        _calibrate(model, entry.inputs(small, 4, SEQ[small])["input"])
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".onnx.tmp")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(
            model,
            tuple(feeds.values()),
            str(tmp),
            dynamo=False,
            opset_version=entry.opset,
            input_names=list(feeds),
            output_names=["output"],
            dynamic_axes=entry.dynamic or None,
            do_constant_folding=not entry.legacy,
            keep_initializers_as_inputs=entry.legacy,
        )
        want = model(*feeds.values()).numpy()
    got = _onnxruntime(tmp, {k: v.numpy() for k, v in feeds.items()}, threads=0)[0]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * scale)  # two other implementations
    os.replace(tmp, path)
    return path


def _no_zero_weights(model: Any) -> None:
    """Draw the weight matrices an init scheme leaves at zero (ViT's head): a zero layer would make
    everything before it invisible in the output, and the check meaningless."""
    import torch

    gen = torch.Generator().manual_seed(SEED + 4)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2 and not p.any():
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def _onnxruntime(path: Path, feeds: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
    return list(_session(path, threads).run(None, feeds))


def _session(path: Path, threads: int, optimize: bool = True) -> Any:
    """onnxruntime on ``path``: every graph optimization (``optimize``), else none."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # (its warnings about unused initializers, one per node)
    level = ort.GraphOptimizationLevel
    opts.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def feeds_for(
    path: Path, entry: Entry, small: bool, batch: int = 1, seq: int | None = None
) -> dict:
    """NumPy inputs for the exported file (the same seeded draw as the export's check)."""
    feeds = entry.inputs(small, batch, seq or SEQ[small])
    return {k: v.numpy() for k, v in feeds.items()}


# -- check -------------------------------------------------------------------------------------

#: Absolute tolerance relative to the output's largest magnitude: float32 implementations of a deep
#: network differ by that much among themselves (torch and onnxruntime by 4.4e-4 on Inception v3).
ATOL = 1e-3
COLUMNS = ["model", "opset", "nodes", "kernels", "compile_s", "max_err", "match"]
COLUMNS += ["tuner_ms", "onnxruntime_ms", "x_onnxruntime", "error"]


def check(entry: Entry, small: bool, cache: Path, threads: int, rounds: int) -> dict[str, Any]:
    """One row of the table: compile ``entry`` on defaults, compare and time it beside onnxruntime."""
    import time

    import onnx

    import tuner
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    row: dict[str, Any] = {"model": entry.stem(small)}
    try:
        path = export(entry, small, cache)
    except Exception as exc:  # an export problem is torch's, not the compiler's: say so
        return row | {"match": "export failed", "error": _line(exc)}
    proto = onnx.load(str(path), load_external_data=False)
    row["opset"] = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    row["nodes"] = len(proto.graph.node)
    feeds = feeds_for(path, entry, small)
    target = Target.from_name("cpu", num_threads=threads)
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = tuner.compile_model(path, target=target)
            got = mod.run(feeds)
    except Exception as exc:
        return row | {"match": "no", "error": f"{type(exc).__name__}: {_line(exc)}"}
    row["compile_s"] = round(time.perf_counter() - started, 1)
    row["kernels"] = len(mod.plans[0].specs) if mod.plans else None
    sess = _session(path, threads)
    want = sess.run(None, feeds)
    errs, ok = [], True
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.abs(w).max()))
        errs.append(float(np.abs(g - w).max()) / scale)
        ok &= g.shape == w.shape and bool(np.allclose(g, w, rtol=1e-3, atol=ATOL * scale))
    row["max_err"] = f"{max(errs):.1e}"
    row["match"] = "yes" if ok else "no"
    if rounds > 0:
        fns = {"tuner": lambda: mod.run(feeds), "onnxruntime": lambda: sess.run(None, feeds)}
        times = medians(interleaved(fns, rounds=rounds))
        row["tuner_ms"] = round(times["tuner"] * 1e3, 2)
        row["onnxruntime_ms"] = round(times["onnxruntime"] * 1e3, 2)
        row["x_onnxruntime"] = round(times["onnxruntime"] / times["tuner"], 2)
    return row


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _table(rows: list[dict[str, Any]]) -> str:
    cols = [c for c in COLUMNS if c != "error"]
    cells = [[str(r.get(c, "-") if r.get(c) is not None else "-") for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) for c in cells]
    lines += [f"{r['model']}: {r['error']}" for r in rows if r.get("error")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="store_true", help="print the zoo's models and stop")
    p.add_argument("--check", action="store_true", help="compile each and compare with onnxruntime")
    p.add_argument("--export-only", action="store_true", help="write the ONNX files and stop")
    p.add_argument("--only", help="comma-separated names (see --list)")
    p.add_argument("--small", action="store_true", help="the small versions (the tests' sizes)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the ONNX files")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="timing rounds (0: no timing)")
    p.add_argument("--csv", type=Path, help="write the table here")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        print(f"zoo: unknown model {', '.join(unknown)}; --list shows the zoo", file=sys.stderr)
        return 2
    if args.list or not (args.check or args.export_only):
        for n in names:
            e = ZOO[n]
            print(
                f"{n:24s} {e.family:7s} opset {e.opset:2d}{'  legacy export' if e.legacy else ''}"
            )
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print('zoo: exporting needs the zoo extra: pip install -e ".[zoo]"', file=sys.stderr)
        return 2
    if args.export_only:
        for n in names:
            print(export(ZOO[n], args.small, args.cache))
        return 0
    sys.path.insert(0, str(HERE.parent))
    rows = []
    for n in names:
        row = check(ZOO[n], args.small, args.cache, args.threads, args.rounds)
        rows.append(row)
        print(
            f"{row['model']}: {row.get('match')} {row.get('compile_s', '-')} s "
            f"{row.get('x_onnxruntime', '-')}x onnxruntime {row.get('error', '')}",
            flush=True,
        )
        if args.csv:
            import csv

            args.csv.parent.mkdir(parents=True, exist_ok=True)
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, COLUMNS)
                w.writeheader()
                w.writerows(rows)
    print(_table(rows))
    return 0 if all(r.get("match") == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
