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

Besides LLVM's own options, a side may say ``function-passes=N``: the level of
the passes Numba runs on each function before the module's pipeline
(Numba's own is ``config.OPT``, 3; ``function-passes=numba`` says so;
``function-passes=lean``: SROA, instruction combining and CFG simplification only), and
``front-end=numba`` or ``front-end=direct``: how the kernel's functions become
LLVM IR (``BuildOptions.front_end``; the default is the backend's), and
``loop-hints=a,b``: the ``llvm.loop`` hints the direct front end puts on each loop.
``--log LOG --configs N`` adds the first N configs a tuning log measured (the
candidates a tune builds, not only defaults). The side built first alternates
from one kernel to the next, so that neither pays every first-build warm-up.

    python experiments/llvm_options_ab.py --a "function-passes=numba" --b "function-passes=0" \
        --log tune.jsonl --configs 8
"""

from __future__ import annotations

import argparse
import functools
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
DEFAULTS = {
    "-dag-maps-huge-region": "1000",
    "-enable-misched": "true",
    "-disable-lsr": "false",
}


def _set(options: list[str]) -> None:
    import llvmlite.binding as llvm

    for option in options:
        llvm.set_option("llvm_options_ab", option)


def _defaults(options: list[str]) -> list[str]:
    names = {o.split("=")[0] for o in options}
    return [f"{n}={DEFAULTS[n]}" for n in sorted(names) if n in DEFAULTS]


#: A side's pseudo-options: the level of Numba's per-function passes, and the front end that
#: turns a kernel's functions into LLVM IR (``BuildOptions.front_end``: direct or numba).
FP = "function-passes="
FE = "front-end="
#: ... and the loop hints the direct front end puts on every loop (``direct_lower.LOOP_HINTS``):
#: ``loop-hints=llvm.loop.unroll.runtime.disable,...``, or ``loop-hints=`` for none.
LH = "loop-hints="


def _function_passes(options: list[str]) -> int | str | None:
    """The level a side's ``function-passes=`` asks for (None: Numba's own, ``config.OPT``;
    "lean": SROA, instruction combining and CFG simplification only)."""
    for option in options:
        if option.startswith(FP) and option[len(FP) :] != "numba":
            value = option[len(FP) :]
            return value if value == "lean" else int(value)
    return None


def _set_function_passes(level: int | str | None) -> None:
    """Numba's per-function passes at ``level`` from now on (None: its own).

    Numba builds the pass manager it runs on each function as it is lowered from its
    code generator (``CPUCodegen._function_pass_manager``, at ``config.OPT``), and the
    module's pass manager apart; an instance attribute overrides the first only.
    """
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    vars(codegen).pop("_function_pass_manager", None)
    if level == "lean":

        def lean(**kwargs: Any) -> Any:
            import llvmlite.binding as llvm

            pb = codegen._pass_builder(**kwargs)
            pm = llvm.create_new_function_pass_manager()
            pm.add_sroa_pass()
            pm.add_instruction_combine_pass()
            pm.add_simplify_cfg_pass()
            return pm, pb

        codegen._function_pass_manager = lean
    elif level is not None:
        codegen._function_pass_manager = functools.partial(
            type(codegen)._function_pass_manager, codegen, opt=level
        )


def _logged(log: Path, n: int) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """The first ``n`` distinct configs a tuning log measured without error, as workloads."""
    import json

    seen, out = set(), []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        key = json.dumps(rec["config"], sort_keys=True)
        if rec["result"].get("error_kind") != "ok" or key in seen:
            continue
        seen.add(key)
        out.append((rec["workload"]["op"], rec["workload"]["args"], rec["config"]))
        if len(out) == n:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="", help="LLVM options of side a (default: LLVM's own)")
    ap.add_argument("--b", default="-dag-maps-huge-region=64", help="LLVM options of side b")
    ap.add_argument("--null", action="store_true", help="side b the same as side a")
    ap.add_argument("--only", help="comma-separated operators")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--log", type=Path, help="a tuning log whose configs to add")
    ap.add_argument("--configs", type=int, default=8, help="how many of --log's configs")
    opts = ap.parse_args(argv)
    side = {"a": opts.a.split(), "b": opts.a.split() if opts.null else opts.b.split()}
    passes = {label: _function_passes(options) for label, options in side.items()}
    front = {
        label: next((o[len(FE) :] for o in options if o.startswith(FE)), None)
        for label, options in side.items()
    }
    hints = {
        label: next(
            (tuple(filter(None, o[len(LH) :].split(","))) for o in options if o.startswith(LH)),
            None,
        )
        for label, options in side.items()
    }
    side = {
        label: [o for o in options if not o.startswith((FP, FE, LH))]
        for label, options in side.items()
    }
    unknown = sorted({o.split("=")[0] for s in side.values() for o in s} - set(DEFAULTS))
    if unknown:
        print(f"llvm_options_ab: no default known for {', '.join(unknown)}", file=sys.stderr)
        return 2
    os.environ["TUNER_CACHE_DIR"] = tempfile.mkdtemp(prefix="llvm_ab_")

    import numpy as np

    from search_spaces import get_operator
    from tuner.codegen.backend import BuildOptions
    from tuner.codegen.build import build
    from tuner.codegen.cpu import backend, direct_lower
    from tuner.measure.interleave import interleaved, medians
    from tuner.target import Target

    default_hints = direct_lower.LOOP_HINTS
    backend.LLVM_OPTIONS = ()  # type: ignore[misc]  # each side sets its own
    backend._LLVM_DEFAULTS = ()  # type: ignore[misc]
    target = Target.from_name("cpu", num_threads=opts.threads)
    only = set(opts.only.split(",")) if opts.only else None
    reset = _defaults(side["a"] + side["b"])
    warm = get_operator("matmul")  # Numba's and the helpers' first compile, outside the sides
    warm_args = warm.parse_args({"M": 8, "N": 8, "K": 8})
    build(*warm.schedule(warm.default_config(warm_args, target), warm_args, target), target)
    rows = []
    workloads = WORKLOADS + (_logged(opts.log, opts.configs) if opts.log else [])
    for n, (name, raw, given) in enumerate(workloads):
        if only and name not in only:
            continue
        op = get_operator(name)
        args = op.parse_args(raw)
        config = given or op.default_config(args, target)
        inputs = op.make_inputs(args, target=target)
        ref = op.reference(*inputs, **args)
        calls, build_s = {}, {}
        for label in ("a", "b") if n % 2 == 0 else ("b", "a"):
            options = side[label]
            _set(reset + options)
            _set_function_passes(passes[label])
            sched, tensors = op.schedule(config, args, target)
            t0 = time.perf_counter()
            build_options = BuildOptions(front_end=front[label]) if front[label] else None
            direct_lower.LOOP_HINTS = default_hints if hints[label] is None else hints[label]
            kernel = build(sched, tensors, target, name=f"kernel_{label}", options=build_options)
            build_s[label] = time.perf_counter() - t0
            out = np.zeros_like(ref)
            kernel(*inputs, out)
            np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max()))
            calls[label] = lambda k=kernel, i=inputs, o=out: k(*i, o)
        _set(reset)
        _set_function_passes(None)
        direct_lower.LOOP_HINTS = default_hints
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
