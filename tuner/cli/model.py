"""The ``tuner compile``, ``tuner run`` and ``tuner profile`` commands: whole ONNX models.

tuner compile model.onnx --log tune.jsonl --shape data=8,3,224,224 -o model.tpk
tuner run model.onnx --log tune.jsonl --repeat 50 --compare onnxruntime
tuner run model.tpk --compare onnxruntime      # a compiled model: loads, compiles nothing
tuner profile model.onnx --compare onnxruntime --csv layers.csv
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .options import add_shape_flag, positive
from .output import add_format_flags, console, emit, to_stdout
from .text import speed

__all__ = ["add_commands"]


def _shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split(","))
            if any(d < 1 for d in out[name]):
                raise ValueError
        except ValueError:
            raise ValueError(
                f"--shape takes NAME=D1,D2,... with positive dimensions, got {item!r}"
            ) from None
    return out


def _compile(ns: argparse.Namespace, out: Any) -> Any:
    """The module ``ns`` asks for, its kernels built (with a progress bar on a terminal):
    compiled from an ONNX file, or loaded from a compiled one (``tuner compile -o``)."""
    from ..model import compile_model
    from ..model.artifact import load
    from ..target import Target

    saved = _saved(ns.model)
    if saved and (ns.log is not None or ns.shape):
        flag = "--log" if ns.log is not None else "--shape"
        raise ValueError(f"{ns.model} is a compiled model: {flag} was fixed when it was compiled")
    if ns.log is not None and not ns.log.exists():
        raise FileNotFoundError(f"log {ns.log} does not exist")
    with warnings.catch_warnings(record=True) as caught, _building(out):
        warnings.simplefilter("always")
        if saved:
            mod = load(ns.model, threads=ns.threads)
        else:
            target = Target.from_name(
                ns.target, **({"num_threads": ns.threads} if ns.threads else {})
            )
            mod = compile_model(ns.model, ns.log, shapes=_shapes(ns.shape), target=target)
    for w in caught:
        out.print(f"[yellow]warning:[/] {w.message}", highlight=False)
    return mod


def _saved(path: Path) -> bool:
    """Whether ``path`` names a compiled model (a zip archive; ONNX files are protobuf)."""
    if path.suffix == ".tpk":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _reference(ns: argparse.Namespace, mod: Any) -> Path:
    """The ONNX file onnxruntime runs for ``--compare``: the model itself, ``--onnx``, or the
    file a compiled model was compiled from (where it still is, unchanged)."""
    if ns.onnx is not None:
        return Path(ns.onnx)
    if mod.source_model is None:
        return Path(ns.model)
    path = Path(mod.source_model["path"])
    try:
        same = hashlib.sha256(path.read_bytes()).hexdigest() == mod.source_model["sha256"]
    except OSError:
        same = False
    if not same:
        raise ValueError(
            f"--compare needs the ONNX file {ns.model} was compiled from ({path} is gone or"
            " changed): give it with --onnx PATH"
        )
    return path


@contextlib.contextmanager
def _building(out: Any) -> Iterator[None]:
    """A transient bar of the kernels built so far, where ``out`` is a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from ..model.runner import build_progress

    if not out.is_terminal:
        yield
        return
    bar = Progress(
        "building kernels",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    )
    task = bar.add_task("build", total=None)
    with bar, build_progress(lambda done, total: bar.update(task, completed=done, total=total)):
        yield


def _inputs(mod: Any, seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs of the shapes the module was compiled for."""
    rng = np.random.default_rng(seed)
    plan = mod.plans[0]
    feeds = {}
    for name, shape in zip(mod.input_names, plan.signature, strict=True):
        dtype = np.dtype(plan.values[name].dtype)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def cmd_compile(ns: argparse.Namespace) -> int:
    out = console(stderr=to_stdout(ns))
    mod = _compile(ns, out)
    if not mod.plans:
        out.print("the model has symbolic input dimensions: give them with --shape NAME=D1,D2")
        return 1
    plans = mod.report()
    doc: dict[str, Any] = {"model": str(ns.model), "plans": plans}
    if ns.output is not None:
        path = mod.save(ns.output)
        doc["saved"] = str(path)
        out.print(f"saved {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    rows = [row for plan in plans for row in plan["tasks"]]
    emit(ns, doc, rows, lambda: out.print(mod.summary(), highlight=False, markup=False))
    return 0


def _compiled(ns: argparse.Namespace) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """The console, the module compiled as ``ns`` says, and seeded inputs for it."""
    out = console(stderr=to_stdout(ns))
    mod = _compile(ns, out)
    if not mod.plans:
        raise ValueError("the model has symbolic input dimensions: give them with --shape")
    return out, mod, _inputs(mod, ns.seed)


def cmd_run(ns: argparse.Namespace) -> int:
    from ..measure.interleave import interleaved, medians

    started = time.perf_counter()
    out, mod, feeds = _compiled(ns)
    outs = mod.run(feeds)
    first = time.perf_counter() - started
    compiled = sum(p.compiled for p in mod.plans)
    out.print(
        f"first result {first:.2f} s after the start"
        + (f" ({compiled} kernels compiled)" if compiled else " (no kernel compiled)")
    )
    fns = {"tuner": lambda: mod.run(feeds)}
    checked = []
    if ns.compare == "onnxruntime":
        sess = _ort_session(_reference(ns, mod), mod.target.threads)
        expected = sess.run(None, feeds)
        for name, got, want in zip(mod.output_names, outs, expected, strict=True):
            err = float(np.max(np.abs(got - want))) if got.size else 0.0
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-4):
                raise ValueError(
                    f"output {name!r} disagrees with onnxruntime (max error {err:.3g})"
                )
            out.print(f"output {name!r} matches onnxruntime (max error {err:.3g})")
            checked.append({"output": name, "max_error": err})
        fns["onnxruntime"] = lambda: sess.run(None, feeds)
    plan = mod.plans[0]
    plan.profile(list(feeds.values()), repeat=max(3, ns.repeat // 5))
    times = medians(interleaved(fns, rounds=ns.repeat))
    mine = times["tuner"]
    row: dict[str, Any] = {
        "model": str(ns.model),
        "threads": mod.target.threads,
        "rounds": ns.repeat,
        "tuner_ms": mine * 1e3,
        "first_result_s": first,
        "kernels_compiled": compiled,
    }
    line = (
        f"median of {ns.repeat} rounds on {mod.target.threads} threads: tuner {mine * 1e3:.3f} ms"
    )
    if "onnxruntime" in times:
        ort = times["onnxruntime"]
        row["onnxruntime_ms"] = ort * 1e3
        row["speed"] = speed(mine, ort, "onnxruntime")
        line += f", onnxruntime {ort * 1e3:.3f} ms ({row['speed']})"

    def show() -> None:
        out.print(mod.summary(), highlight=False, markup=False)
        out.print(line)

    emit(ns, {**row, "outputs": checked, "plans": mod.report()}, [row], show)
    return 0


def cmd_profile(ns: argparse.Namespace) -> int:
    """Each kernel's time and share, beside onnxruntime's time for the same nodes."""
    from ..model.profile import join, onnxruntime_profile

    out, mod, feeds = _compiled(ns)
    df = mod.profile(feeds, repeat=ns.repeat)
    if ns.compare == "onnxruntime":
        try:
            ort = onnxruntime_profile(_reference(ns, mod), feeds, mod.target.threads, ns.repeat)
        except ImportError:
            out.print("onnxruntime is not installed (pip install onnxruntime): ours alone")
        else:
            df = join(df, ort)
    rows = df.to_dict("records")
    doc = {"model": str(ns.model), "threads": mod.target.threads, "kernels": rows}
    emit(ns, doc, rows, lambda: out.print(profile_table(df, ns.top), highlight=False, markup=False))
    return 0


def profile_table(df: Any, top: int) -> str:
    """The ``top`` slowest kernels (and onnxruntime's own nodes), then both totals."""
    has_ort = "ort_ms" in df.columns
    head = f"{'ms':>9} {'share':>6}  {'schedule':<8}"
    head += f" {'ort ms':>9} {'speed':>12}" if has_ort else ""
    lines = [f"{head}  {'ops':<24} {'shape':<16} nodes"]
    order = df.sort_values(["ms", "ort_ms"] if has_ort else ["ms"], ascending=False)
    for _, r in order.head(top).iterrows():
        ours = r["ms"] == r["ms"]  # not NaN: a kernel of ours (else onnxruntime's own node)
        line = (
            f"{r['ms']:>9.3f} {100 * r['share']:>5.1f}%  {r['schedule']:<8}"
            if ours
            else f"{'-':>9} {'-':>6}  {'-':<8}"
        )
        if has_ort:
            ort = r["ort_ms"]
            ratio = speed(r["ms"], ort) if ours and ort == ort else "-"
            line += f" {ort:>9.3f} {ratio:>12}" if ort == ort else f" {'-':>9} {'-':>12}"
        nodes = str(r["nodes"])
        lines.append(f"{line}  {str(r['ops'])[:24]:<24} {str(r['shape'])[:16]:<16} {nodes[:60]}")
    total = f"total: {df['ms'].sum():.3f} ms in {int(df['ms'].notna().sum())} kernels"
    if has_ort:
        ort_total = df["ort_ms"].sum()
        total += f"; onnxruntime {ort_total:.3f} ms ({speed(df['ms'].sum(), ort_total)})"
    return "\n".join([*lines, total])


def _ort_session(model: Path, threads: int) -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError(
            "--compare onnxruntime needs onnxruntime (pip install onnxruntime)"
        ) from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own error types: one line, as every other
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"onnxruntime cannot run this model: {first}") from None


def add_commands(sub: Any) -> None:
    """Add ``compile`` and ``run`` to the ``tuner`` command's subparsers."""
    for name, func, help_text in (
        ("compile", cmd_compile, "import, fuse and build an ONNX model; print its tasks"),
        ("run", cmd_run, "compile (or load) a model, run and time it (beside onnxruntime)"),
        ("profile", cmd_profile, "each kernel's time and share (beside onnxruntime's nodes)"),
    ):
        p = sub.add_parser(name, help=help_text)
        if name == "compile":
            p.add_argument("model", type=Path, help="an .onnx file")
            p.add_argument(
                "-o",
                "--output",
                type=Path,
                default=None,
                metavar="PATH",
                help="write the compiled model to PATH (run it with tuner run PATH)",
            )
        else:
            p.add_argument("model", type=Path, help="an .onnx file, or a compiled model (-o)")
        p.add_argument("--log", type=Path, default=None, help="tuning log or a folder of logs")
        add_shape_flag(p)
        p.add_argument("--target", default="cpu")
        p.add_argument("--threads", type=positive(int), default=None, help="default: all cores")
        if name in ("run", "profile"):
            p.add_argument("--repeat", type=positive(int), default=20, help="timed rounds")
            p.add_argument("--compare", choices=["onnxruntime"], default=None)
            p.add_argument(
                "--onnx",
                type=Path,
                default=None,
                metavar="PATH",
                help="the ONNX file --compare runs (default: the model, or the one a"
                " compiled model was compiled from)",
            )
            p.add_argument("--seed", type=int, default=0)
        if name == "profile":
            p.add_argument("--top", type=positive(int), default=25, help="rows shown")
        add_format_flags(p, {"compile": "the tasks", "run": "the timing"}.get(name, "every row"))
        p.set_defaults(func=func)
