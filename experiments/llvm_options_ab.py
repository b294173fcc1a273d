"""The same kernels compiled under two sets of LLVM options: their build seconds and speed.

    python experiments/llvm_options_ab.py --csv experiments/results/llvm_options_<machine>.csv
    python experiments/llvm_options_ab.py --a "" --b "-enable-misched=false" --only matmul

The kernel backend sets LLVM options around each compile
(``tuner.codegen.cpu.backend.LLVM_OPTIONS``). This checks what a set costs or
saves: each workload's config (its default, or the one given) is built twice
in one process, once with the options of ``--a`` and once with those of
``--b`` (the other side's options set back to LLVM's defaults), under
different kernel names so that both stay loaded; both are checked against
the operator's NumPy reference, then timed against each other in
interleaved rounds (``tuner.measure.interleave``), medians. ``--a`` ``--b``
the same (``--null``) shows the run-to-run spread of the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from csv_rows import append_rows  # noqa: E402

#: (operator, arguments, config or None for the default).
WORKLOADS: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("matmul", {"M": 512, "N": 512, "K": 512}, None),
    (
        "matmul",
        {"M": 512, "N": 512, "K": 512},
        {
            "k_unroll": 4,
            "kc": 512,
            "mc_tiles": 24,
            "mr": 8,
            "nc_tiles": 4,
            "nr": 32,
            "pack_a": False,
            "pack_a_at": "block",
            "pack_b": True,
            "parallel": True,
            "parallel_at": "cols",
        },
    ),
    ("matmul", {"M": 128, "N": 3136, "K": 576, "channels": "rows"}, None),
    ("matmul", {"M": 49, "N": 169, "K": 61}, None),
    (
        "conv2d",
        {
            "C": 512,
            "H": 7,
            "W": 7,
            "K": 512,
            "R": 3,
            "S": 3,
            "pad": 1,
            "layout": "NHWC",
            "weights": "blocked",
            "block": 32,
            "bias": True,
            "epilogue": "relu",
        },
        None,
    ),
    (
        "conv2d",
        {
            "C": 1024,
            "H": 14,
            "W": 14,
            "K": 256,
            "R": 1,
            "S": 1,
            "layout": "NHWC",
            "weights": "blocked",
            "block": 64,
            "bias": True,
            "epilogue": "relu",
        },
        None,
    ),
    (
        "conv2d",
        {
            "C": 64,
            "H": 56,
            "W": 56,
            "K": 64,
            "R": 3,
            "S": 3,
            "pad": 1,
            "layout": "NHWC",
            "weights": "blocked",
            "block": 64,
            "bias": True,
            "epilogue": "relu",
        },
        None,
    ),
    (
        "conv2d",
        {
            "C": 3,
            "H": 224,
            "W": 224,
            "K": 64,
            "R": 7,
            "S": 7,
            "pad": 3,
            "stride": 2,
            "layout": "NHWC",
        },
        None,
    ),
    ("depthwise_conv2d", {"C": 144, "H": 56, "W": 56, "R": 3, "S": 3, "pad": 1}, None),
    ("dense", {"batch": 128, "in_features": 768, "out_features": 3072, "activation": "gelu"}, None),
    ("dense", {"batch": 1, "in_features": 1280, "out_features": 1000}, None),
    ("softmax", {"M": 4096, "N": 1024}, None),
    ("layer_norm", {"M": 512, "N": 768}, None),
]

#: LLVM's defaults of the options this compares (set back between the two builds).
DEFAULTS = {"-dag-maps-huge-region": "1000", "-enable-misched": "true"}


def _set(options: list[str]) -> None:
    import llvmlite.binding as llvm

    for option in options:
        llvm.set_option("llvm_options_ab", option)


def _defaults(options: list[str]) -> list[str]:
    names = {o.split("=")[0] for o in options}
    return [f"{n}={DEFAULTS[n]}" for n in sorted(names) if n in DEFAULTS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="", help="LLVM options of side a (default: LLVM's own)")
    ap.add_argument("--b", default="-dag-maps-huge-region=64", help="LLVM options of side b")
    ap.add_argument("--null", action="store_true", help="side b the same as side a")
    ap.add_argument("--only", help="comma-separated operators")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--csv", type=Path)
    opts = ap.parse_args(argv)
    side = {"a": opts.a.split(), "b": opts.a.split() if opts.null else opts.b.split()}
    unknown = sorted({o.split("=")[0] for s in side.values() for o in s} - set(DEFAULTS))
    if unknown:
        print(f"llvm_options_ab: no default known for {', '.join(unknown)}", file=sys.stderr)
        return 2
    os.environ["TUNER_CACHE_DIR"] = tempfile.mkdtemp(prefix="llvm_ab_")

    import numpy as np

    from search_spaces import get_operator
    from tuner.codegen.build import build
    from tuner.codegen.cpu import backend
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    backend.LLVM_OPTIONS = ()  # type: ignore[misc]  # each side sets its own
    backend._LLVM_DEFAULTS = ()  # type: ignore[misc]
    target = Target.from_name("cpu", num_threads=opts.threads)
    only = set(opts.only.split(",")) if opts.only else None
    reset = _defaults(side["a"] + side["b"])
    warm = get_operator("matmul")  # Numba's and the helpers' first compile, outside the sides
    warm_args = warm.parse_args({"M": 8, "N": 8, "K": 8})
    build(*warm.schedule(warm.default_config(warm_args, target), warm_args, target), target)
    rows = []
    for name, raw, given in WORKLOADS:
        if only and name not in only:
            continue
        op = get_operator(name)
        args = op.parse_args(raw)
        config = given or op.default_config(args, target)
        inputs = op.make_inputs(args, target=target)
        ref = op.reference(*inputs, **args)
        calls, build_s = {}, {}
        for label, options in side.items():
            _set(reset + options)
            sched, tensors = op.schedule(config, args, target)
            t0 = time.perf_counter()
            kernel = build(sched, tensors, target, name=f"kernel_{label}")
            build_s[label] = time.perf_counter() - t0
            out = np.zeros_like(ref)
            kernel(*inputs, out)
            np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
            calls[label] = lambda k=kernel, i=inputs, o=out: k(*i, o)
        _set(reset)
        med = medians(interleaved(calls, rounds=opts.rounds, min_sample=0.05))
        row = {
            "op": name,
            "args": " ".join(f"{k}={v}" for k, v in raw.items()),
            "config": "default" if given is None else "given",
            "a": opts.a,
            "b": opts.a if opts.null else opts.b,
            "a_ms": round(med["a"] * 1e3, 4),
            "b_ms": round(med["b"] * 1e3, 4),
            "b_over_a": round(med["b"] / med["a"], 3),
            "a_build_s": round(build_s["a"], 2),
            "b_build_s": round(build_s["b"], 2),
            "machine": f"{target.get('model', 'cpu')} {target.fingerprint}",
        }
        rows.append(row)
        print(
            f"{name:17s} {row['args'][:58]:58s} {row['config']:7s} a {row['a_ms']:8.3f} ms"
            f"  b {row['b_ms']:8.3f} ms  b/a {row['b_over_a']:5.3f}"
            f"  build a {row['a_build_s']:5.2f} s  b {row['b_build_s']:5.2f} s",
            flush=True,
        )
    if opts.csv:
        append_rows(opts.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
