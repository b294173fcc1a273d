"""The GPU benchmark's report: its rows, the table, the issue's bars and the CSV (see bench_cuda.py).

One :class:`Row` per workload, filled by ``bench_cuda`` as it tunes, checks
and times; ratios are a peer's time over ours (above 1 we are faster).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BARS", "CSV_FIELDS", "PEERS", "Row", "Workload", "bars", "table", "write_csv"]

# The bars of issue 15 (peer time / ours at least this much).
BARS = {"matmul": ("cupy", 0.5, "tuned matmul >= 0.5x cuBLAS (CuPy)"),
        "softmax": ("torch", 0.8, "softmax >= 0.8x PyTorch")}  # fmt: skip

PEERS = ("cupy", "torch")


@dataclass(frozen=True)
class Workload:
    """One workload of the benchmark: its label in the table, its operator and arguments."""

    name: str  # the table's label
    op: str
    args: dict[str, Any]


@dataclass
class Row:
    """What the run found for one workload: its tuning, each side's time and notes."""

    workload: Workload
    trials: int = 0
    errors: int = 0
    tune_seconds: float = 0.0
    tuned: bool = False
    config: str = ""
    ms: dict[str, float | None] = field(default_factory=dict)
    reps: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    flops: float | None = None
    bytes_moved: float | None = None

    def ratio(self, peer: str) -> float | None:
        ours, theirs = self.ms.get("ours"), self.ms.get(peer)
        return theirs / ours if ours and theirs else None


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _rate(row: Row) -> str:
    ms = row.ms.get("ours")
    if not ms:
        return "-"
    if row.bytes_moved:
        return f"{row.bytes_moved / (ms * 1e-3) / 1e9:.3g} GB/s"
    if row.flops:
        return f"{row.flops / (ms * 1e-3) / 1e9:.3g} GFLOP/s"
    return "-"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def table(rows: list[Row]) -> str:
    head = ["workload", "trials", "ours ms", "ours rate", "cupy ms", "torch ms"]
    head += ["cupy/ours", "torch/ours"]
    body = [
        [
            r.workload.name,
            str(r.trials),
            _ms(r.ms.get("ours")),
            _rate(r),
            _ms(r.ms.get("cupy")),
            _ms(r.ms.get("torch")),
            _ratio(r.ratio("cupy")),
            _ratio(r.ratio("torch")),
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(x.ljust(n) for x, n in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * n for n in widths))
    lines += ["  ".join(x.ljust(n) for x, n in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)


def bars(rows: list[Row], simulated: bool) -> list[str]:
    said = []
    for op, (peer, bar, what) in BARS.items():
        row = next((r for r in rows if r.workload.op == op), None)
        ratio = row.ratio(peer) if row is not None else None
        if simulated:
            said.append(f"bar {what}: not judged (simulator timings)")
        elif ratio is None:
            said.append(f"bar {what}: not measured ({peer} or ours has no time)")
        else:
            verdict = "MET" if ratio >= bar else "NOT MET"
            said.append(f"bar {what}: {verdict} ({ratio:.2f}x)")
    return said


CSV_FIELDS = [
    "workload", "op", "args", "device", "simulated", "strategy", "trials", "errors", "tune_seconds",
    "tuned", "config", "ours_ms", "cupy_ms", "torch_ms", "cupy_over_ours", "torch_over_ours",
    "ours_reps", "cupy_reps", "torch_reps", "ours_gflops", "ours_gbps",
    "ours_note", "cupy_note", "torch_note", "tune_note", "timing_note",
]  # fmt: skip


def write_csv(path: Path, rows: list[Row], device: str, simulated: bool, strategy: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.DictWriter(fh, CSV_FIELDS)
        out.writeheader()
        for r in rows:
            ms = r.ms.get("ours")
            rec: dict[str, Any] = {
                "workload": r.workload.name,
                "op": r.workload.op,
                "args": " ".join(f"{k}={v}" for k, v in r.workload.args.items()),
                "device": device,
                "simulated": simulated,
                "strategy": strategy,
                "trials": r.trials,
                "errors": r.errors,
                "tune_seconds": f"{r.tune_seconds:.1f}",
                "tuned": r.tuned,
                "config": r.config,
                "ours_gflops": f"{r.flops / ms / 1e6:.1f}" if ms and r.flops else "",
                "ours_gbps": f"{r.bytes_moved / ms / 1e6:.1f}" if ms and r.bytes_moved else "",
            }
            for side in ("ours", *PEERS):
                v = r.ms.get(side)
                rec[f"{side}_ms"] = "" if v is None else f"{v:.6g}"
                rec[f"{side}_reps"] = r.reps.get(side, "")
                rec[f"{side}_note"] = r.notes.get(side, "")
            rec["tune_note"] = r.notes.get("tune", "")
            rec["timing_note"] = r.notes.get("timing", "")
            for peer in PEERS:
                q = r.ratio(peer)
                rec[f"{peer}_over_ours"] = "" if q is None else f"{q:.4f}"
            out.writerow(rec)
