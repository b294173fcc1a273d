"""Fusion effectiveness by workload class: unfused vs fused, here and in PyTorch.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python experiments/fusion.py --threads 2

Five graphs, each a PyTorch module exported to ONNX (so both sides run the
same graph): an elementwise chain, a conv + BatchNorm + ReLU block, an MLP
block (linear, GELU, linear), an attention block (BERT-base sized, sequence
128) and a full ResNet-50 (batch 1). This project runs each as one kernel per
operator left after the graph passes (``compile_model(fuse=False)``: BN is
still folded into the convolution, that is a pass, not fusion) and fused
(``fuse=True``), with default schedules; PyTorch runs eager and
``torch.compile`` (TorchInductor). The survey seed measured Inductor at up
to 8.21x over eager on fusion-friendly graphs and little elsewhere. Timing
is ``tuner.measure.interleave`` (blocks after a rest, rounds rotated,
medians); outputs are checked against onnxruntime. Writes
experiments/out/fusion.csv (read by experiments/fusion.ipynb) and a plot.
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))


def blocks() -> dict[str, tuple[Any, tuple[int, ...]]]:
    """name -> (torch module in eval mode, input shape)."""
    import torch
    from models import build
    from torch import nn

    torch.manual_seed(0)

    class Chain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(x * 1.5 + 0.25) * 0.5
            return torch.sigmoid(y) + torch.tanh(x) - y * y

    class ConvBnRelu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(self.conv(x)))

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(768, 3072), nn.Linear(3072, 768)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(nn.functional.gelu(self.fc1(x)))

    class Attention(nn.Module):
        def __init__(self, hidden: int = 768, heads: int = 12) -> None:
            super().__init__()
            self.heads, self.d = heads, hidden // heads
            self.qkv = nn.Linear(hidden, 3 * hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, self.d).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-1, -2) / self.d**0.5, dim=-1)
            return (a @ v).transpose(1, 2).reshape(b, s, -1)

    resnet, _ = build("resnet50")
    out = {
        "elementwise chain": (Chain(), (1, 1 << 20)),
        "conv+bn+relu": (ConvBnRelu(), (1, 64, 56, 56)),
        "mlp block": (Mlp(), (128, 768)),
        "attention block": (Attention(), (1, 128, 768)),
        "resnet50": (resnet, (1, 3, 224, 224)),
    }
    for m, _ in out.values():
        m.eval()
    return out


def export(name: str, module: Any, shape: tuple[int, ...]) -> Path:
    import torch

    path = OUT / "models" / f"fusion_{name.replace(' ', '_').replace('+', '_')}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, (torch.randn(shape),), str(path), dynamo=False, opset_version=17,
                input_names=["input"], output_names=["output"],
            )  # fmt: skip
    return path


def measure(
    name: str, module: Any, shape: tuple[int, ...], threads: int, rounds: int
) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    import tuner
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    path = export(name, module, shape)
    target = Target.from_name("cpu", num_threads=threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = tuner.compile_model(path, target=target)
        unfused = tuner.compile_model(path, target=target, fuse=False)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feeds = {"input": x}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for mod in (fused, unfused):
        np.testing.assert_allclose(mod.run(feeds)[0], want, rtol=1e-3, atol=1e-3)
    torch.set_num_threads(threads)
    tx = torch.from_numpy(x)
    compiled = torch.compile(module)

    def eager() -> Any:
        with torch.inference_mode():
            return module(tx)

    def inductor() -> Any:
        with torch.inference_mode():
            return compiled(tx)

    inductor()
    t = medians(
        interleaved(
            {
                "unfused": lambda: unfused.run(feeds),
                "fused": lambda: fused.run(feeds),
                "eager": eager,
                "compile": inductor,
            },
            rounds=rounds,
        )
    )
    return {
        "workload": name,
        "threads": threads,
        "kernels_unfused": len(unfused.plans[0].specs),
        "kernels_fused": len(fused.plans[0].specs),
        **{f"{k}_ms": round(v * 1e3, 3) for k, v in t.items()},
        "tuner_fusion_speedup": round(t["unfused"] / t["fused"], 2),
        "inductor_speedup": round(t["eager"] / t["compile"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", default="", help="comma-separated workload names")
    ns = p.parse_args()
    rows = []
    for name, (module, shape) in blocks().items():
        if ns.only and name not in ns.only.split(","):
            continue
        row = measure(name, module, shape, ns.threads, ns.rounds)
        print(row, flush=True)
        rows.append(row)
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "fusion.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["tuner_fusion_speedup"] for r in rows], 0.4, label="tuner: unfused / fused")
    ax.bar(xs + 0.2, [r["inductor_speedup"] for r in rows], 0.4, label="PyTorch: eager / compile")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(xs, [r["workload"] for r in rows], rotation=15)
    ax.set_ylabel("speed-up from fusion")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "fusion.png", dpi=120)


if __name__ == "__main__":
    main()
