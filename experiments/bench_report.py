"""The operator benchmark's report: the CSV columns and the markdown table (see bench_ops.py)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "PEERS", "markdown", "write"]

PEERS = (("numpy", "NumPy"), ("torch", "PyTorch"), ("torch_compile", "torch.compile"))
COLUMNS = [
    "workload",
    "spec",
    "threads",
    "unit",
    "tuned_rate",
    "tuned_s",
    "default_s",
    "default_x_tuned",
    "numpy_s",
    "tuned_x_numpy",
    "torch_s",
    "tuned_x_torch",
    "torch_compile_s",
    "tuned_x_torch_compile",
    "trials",
    "tune_s",
    "torch_compile_build_s",
    "cpus_before",
    "cpus_after",
    "note",
]


def _fmt(v: Any, scale: float = 1.0, digits: int = 2) -> str:
    if v is None or v == "":
        return "n/a"
    return f"{v * scale:.{digits}f}" if isinstance(v, float) else str(v)


def markdown(rows: list[dict[str, Any]], trials: int, torch_note: str) -> str:
    head = (
        "| workload | thr | tuned | tuned ms | default ms | default/tuned | NumPy ms | x NumPy | "
        "PyTorch ms | x PyTorch | "
        "torch.compile ms | x compile | trials | tune s | CPUs | note |"
    )
    lines = [
        f"# Operator benchmark, {trials} trials per workload",
        "",
        "Tuned on 2 threads; the 1-thread rows run the same tuned configs on one thread. "
        "Medians of interleaved rounds; `x PEER` is the peer's time over the tuned time "
        "(above 1: tuned is faster). CPUs: what a probe saw available before/after the timing.",
        "",
        *([torch_note, ""] if torch_note else []),
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in rows:
        rate = f"{r['tuned_rate']:.1f} {r['unit']}" if r.get("tuned_rate") else "n/a"
        lines.append(
            f"| {r['workload']} | {r['threads']} | {rate} | {_fmt(r.get('tuned_s'), 1e3, 3)} | "
            f"{_fmt(r.get('default_s'), 1e3, 3)} | {_fmt(r.get('default_x_tuned'))} | "
            f"{_fmt(r.get('numpy_s'), 1e3, 3)} | {_fmt(r.get('tuned_x_numpy'))} | "
            f"{_fmt(r.get('torch_s'), 1e3, 3)} | {_fmt(r.get('tuned_x_torch'))} | "
            f"{_fmt(r.get('torch_compile_s'), 1e3, 3)} | {_fmt(r.get('tuned_x_torch_compile'))} | "
            f"{r['trials']} | {_fmt(r.get('tune_s'), 1.0, 0)} | "
            f"{r.get('cpus_before', '?')}/{r.get('cpus_after', '?')} | {r.get('note', '')} |"
        )
    return "\n".join(lines) + "\n"


def write(rows: list[dict[str, Any]], md: str, stem: Path) -> Path:
    """``stem``.csv (one row per workload and thread count) and ``stem``.md; returns ``stem``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    with stem.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    stem.with_suffix(".md").write_text(md)
    return stem
