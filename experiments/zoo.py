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

The families (:data:`ZOO`):

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = HERE / "out" / "zoo"
SEED = 0


@dataclass(frozen=True)
class Entry:
    """One model of the zoo: how to build it, its inputs, and how it is exported."""

    name: str
    family: str  # "vision" or "text"
    make: Callable[[bool], Any]  # small -> torch module in eval mode
    inputs: Callable[[bool, int, int], dict[str, Any]]  # (small, batch, seq) -> torch tensors
    opset: int = 17
    legacy: bool = False  # old-exporter form: no folding, initializers as inputs
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)
    note: str = ""

    def stem(self, small: bool) -> str:
        return f"{self.name}{'_small' if small else ''}"


# -- vision ------------------------------------------------------------------------------------


def _image_size(name: str, small: bool) -> int:
    if name == "inception_v3":
        return 96 if small else 299
    if name in ("alexnet", "vgg16"):  # their adaptive pool needs a 224 input's feature map
        return 224
    return 64 if small else 224


def _torchvision(name: str, **kwargs: Any) -> Callable[[bool], Any]:
    def make(small: bool) -> Any:
        import torchvision

        if small and name == "vgg16":  # VGG-16's 13 convolutions and pools, 1/4 of the channels
            from torch import nn
            from torchvision.models.vgg import VGG, cfgs, make_layers

            narrow = [c if c == "M" else int(c) // 4 for c in cfgs["D"]]
            model = VGG(make_layers(narrow), num_classes=10, init_weights=True)
            model.classifier = nn.Sequential(
                *(nn.Linear(128 * 7 * 7, 256), nn.ReLU(True), nn.Dropout()),
                *(nn.Linear(256, 256), nn.ReLU(True), nn.Dropout(), nn.Linear(256, 10)),
            )
            return model

        return torchvision.models.get_model(
            name, weights=None, num_classes=10 if small else 1000, **kwargs
        )

    return make


def _vit_small(small: bool) -> Any:
    from torchvision.models.vision_transformer import VisionTransformer

    if small:
        return VisionTransformer(64, 16, 2, 2, 64, 128, num_classes=10)
    return VisionTransformer(224, 16, 12, 6, 384, 1536, num_classes=1000)  # ViT-S/16


def _images(name: str) -> Callable[[bool, int, int], dict[str, Any]]:
    def inputs(small: bool, batch: int, seq: int) -> dict[str, Any]:
        import torch

        size = _image_size(name, small)
        gen = torch.Generator().manual_seed(SEED + 2)
        return {"input": torch.randn((batch, 3, size, size), generator=gen)}

    return inputs


def _vision(name: str, opset: int = 17, legacy: bool = False, **kwargs: Any) -> Entry:
    label = name if not legacy else f"{name}_opset{opset}"
    make = _vit_small if name == "vit" else _torchvision(name, **kwargs)
    dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if legacy else {}
    return Entry(label, "vision", make, _images(name), opset, legacy, dynamic)


_NO_AUX = {"aux_logits": False, "init_weights": False}
VISION = [
    _vision("resnet18"),
    _vision("resnet50"),
    _vision("resnext50_32x4d"),
    _vision("wide_resnet50_2"),
    _vision("mobilenet_v2"),
    _vision("mobilenet_v3_large"),
    _vision("efficientnet_b0"),
    _vision("regnet_y_400mf"),
    _vision("convnext_tiny"),
    _vision("densenet121"),
    _vision("squeezenet1_1"),
    _vision("shufflenet_v2_x1_0"),
    _vision("googlenet", **_NO_AUX),
    _vision("inception_v3", **_NO_AUX),
    _vision("vgg16"),
    _vision("alexnet"),
    _vision("mnasnet1_0"),
    _vision("vit"),
    _vision("alexnet", 9, legacy=True),
    _vision("vgg16", 9, legacy=True),
    _vision("resnet50", 9, legacy=True),
    _vision("googlenet", 9, legacy=True, **_NO_AUX),
    _vision("squeezenet1_1", 11, legacy=True),
    _vision("densenet121", 11, legacy=True),
]


# -- text --------------------------------------------------------------------------------------


class _LastHidden:
    """Wraps a ``transformers`` model so the export has one output, the last hidden state."""

    @staticmethod
    def wrap(model: Any, keys: tuple[str, ...]) -> Any:
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                return self.model(**dict(zip(keys, args, strict=True))).last_hidden_state

        return Wrapper().eval()


def _hf(config_name: str, model_name: str, keys: tuple[str, ...], **sizes: Any) -> Any:
    def make(small: bool) -> Any:
        import transformers

        cfg = dict(sizes["small" if small else "full"])
        config = getattr(transformers, config_name)(**cfg)
        config._attn_implementation = "eager"
        model = getattr(transformers, model_name)(config).eval()
        return _LastHidden.wrap(model, keys)

    return make


def _tokens(vocab: int, mask: bool) -> Callable[[bool, int, int], dict[str, Any]]:
    def inputs(small: bool, batch: int, seq: int) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(SEED + 2)
        feeds = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=gen)}
        if mask:
            m = torch.ones((batch, seq), dtype=torch.int64)
            m[0, seq - max(1, seq // 4) :] = 0  # padding at the end of the first row
            feeds["attention_mask"] = m
        return feeds

    return inputs


def _text(name: str, config: str, model: str, mask: bool, full: dict, small: dict) -> Entry:
    keys = ("input_ids", "attention_mask") if mask else ("input_ids",)
    axes = {k: {0: "batch", 1: "seq"} for k in (*keys, "output")}
    vocab = full.get("vocab_size", 1000)
    return Entry(
        name,
        "text",
        _hf(config, model, keys, full=full, small=small),
        _tokens(vocab, mask),
        17,
        False,
        axes,
    )


def _vit_hf(small: bool) -> Any:
    import transformers

    sizes = (
        {"image_size": 32, "patch_size": 8, "hidden_size": 64, "num_hidden_layers": 2}
        | {"num_attention_heads": 2, "intermediate_size": 128}
        if small
        else {"image_size": 224, "patch_size": 16, "hidden_size": 384}
        | {"num_hidden_layers": 6, "num_attention_heads": 6, "intermediate_size": 1536}
    )
    config = transformers.ViTConfig(**sizes)
    config._attn_implementation = "eager"
    return _LastHidden.wrap(transformers.ViTModel(config).eval(), ("pixel_values",))


def _pixels(small: bool, batch: int, seq: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(SEED + 2)
    size = 32 if small else 224
    return {"pixel_values": torch.randn((batch, 3, size, size), generator=gen)}


_BERT = {"vocab_size": 1000, "hidden_size": 768, "num_hidden_layers": 4}
_BERT |= {"num_attention_heads": 12, "intermediate_size": 3072}
_BERT_SMALL = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2}
_BERT_SMALL |= {"num_attention_heads": 2, "intermediate_size": 128}
TEXT = [
    _text("bert", "BertConfig", "BertModel", True, _BERT, _BERT_SMALL),
    _text(
        "distilbert",
        "DistilBertConfig",
        "DistilBertModel",
        True,
        {"vocab_size": 1000, "dim": 768, "n_layers": 4, "n_heads": 12, "hidden_dim": 3072},
        {"vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 2, "hidden_dim": 128},
    ),
    _text(
        "gpt2",
        "GPT2Config",
        "GPT2Model",
        False,
        {"vocab_size": 1000, "n_embd": 768, "n_layer": 4, "n_head": 12, "n_positions": 1024},
        {"vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 128},
    ),
    _text(
        "t5_encoder",
        "T5Config",
        "T5EncoderModel",
        True,
        {"vocab_size": 1000, "d_model": 512, "num_layers": 4, "num_heads": 8, "d_ff": 2048}
        | {"d_kv": 64},
        {"vocab_size": 1000, "d_model": 64, "num_layers": 2, "num_heads": 2, "d_ff": 128}
        | {"d_kv": 32},
    ),
    Entry(
        "vit_hf",
        "vision",
        _vit_hf,
        _pixels,
        17,
        False,
        {"pixel_values": {0: "batch"}, "output": {0: "batch"}},
    ),
]

ZOO: dict[str, Entry] = {e.name: e for e in (*VISION, *TEXT)}
SEQ = {False: 128, True: 16}  # the example sequence length, full and small


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


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
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
