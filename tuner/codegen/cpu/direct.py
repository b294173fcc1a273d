"""A generated kernel function lowered to LLVM IR from its syntax tree, inside one Numba call.

Numba compiles a function by analysing its bytecode into an IR of its own,
inferring types over that IR and lowering it statement by statement through
generic machinery: for a tuning candidate's kernel that front end was a third
of the build (matmul 512 on AMD Zen 4: typing 0.11 s and lowering about 0.2 s
of 1.15), and the IR it hands LLVM is verbose (a range iterator per loop, a
reference count per array variable) for LLVM's passes to clean.

The source the CPU backend writes is a small language: ``for`` over ``range``,
``if``, assignments of scalars and of stack arrays, reads and writes of
one-dimensional arrays, arithmetic, and calls of a fixed set of helpers
(``runtime``, ``vectors``, ``math``, NumPy's scalar types). :func:`body` lowers
such a function straight from its syntax tree: each operation is typed by
Numba's typing context and emitted by Numba's own implementation of it
(``context.get_function``, memoized per operation and argument types), so it
compiles to what Numba would emit; only the control flow and the variables are
this module's. A loop is a counted loop with its induction variable in a
``phi`` (rotated: one test on entry, one at the latch), a variable a stack slot
that LLVM's first pass promotes to registers.

The kernel module keeps the function as plain Python (readable, and what the
IR means) and wraps it (:func:`rewrite`)::

    def kernel_p0(lo_, hi_, A, B, C):          # the loop nest, unchanged
        ...
    kernel_p0_ir = body(kernel_p0)             # an intrinsic that lowers it

    @numba.njit(<the same signature and flags>)
    def kernel_p0(lo_, hi_, A, B, C):          # the name now Numba's function
        kernel_p0_ir((lo_, hi_, A, B, C))

so Numba's calling convention, ``noalias`` arguments, fast-math flags, LLVM
passes, disk cache and the launcher see the kernel as before. A function
outside the language (a ``prange``, a heap allocation, a helper this module
does not know) is left to Numba: :func:`rewrite` checks each one first by
typing it (:func:`check`).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from numba import types
from numba.extending import intrinsic

from .direct_lower import Lowerer
from .direct_types import NUMBERS, Unsupported, typing_context

__all__ = ["Unsupported", "body", "check", "rewrite"]


def check(fn: ast.FunctionDef, argtys: list[Any]) -> str | None:
    """Why ``fn`` (with parameters of ``argtys``) is outside the language, or None."""
    try:
        Lowerer(typing_context()).function(fn, [(t, None) for t in argtys])
    except Unsupported as e:
        return str(e) or "unsupported"
    return None


def body(pyfunc: Callable[..., Any]) -> Any:
    """An intrinsic taking the tuple of ``pyfunc``'s arguments that is ``pyfunc``'s body, lowered
    by this module (``pyfunc``'s source is read when Numba first compiles a caller)."""

    def typer(typingctx: Any, args: Any) -> Any:
        if not isinstance(args, types.BaseTuple):
            return None

        def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
            (tup,) = llargs
            params = [(t, builder.extract_value(tup, k)) for k, t in enumerate(sig.args[0].types)]
            tree = ast.parse(textwrap.dedent(inspect.getsource(pyfunc)))
            (fn,) = tree.body
            assert isinstance(fn, ast.FunctionDef)
            Lowerer(context.typing_context, context, builder).function(fn, params)
            return context.get_dummy_value()

        return types.void(args), codegen

    typer.__name__ = f"{pyfunc.__name__}_ir"
    return intrinsic(typer)


# -- the kernel module -------------------------------------------------------------------------


def _signature(deco: ast.expr) -> list[Any] | None:
    """The argument types of ``@numba.njit(numba.void(<types>), ...)``, or None."""
    if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "numba.njit" and deco.args):
        return None
    sig = deco.args[0]
    if not (isinstance(sig, ast.Call) and ast.unparse(sig.func) == "numba.void"):
        return None
    out = []
    for a in sig.args:
        text = ast.unparse(a)
        if text.startswith("numba.") and text.endswith("[::1]") and text[6:-5] in NUMBERS:
            out.append(types.Array(NUMBERS[text[6:-5]], 1, "C"))
        elif text.startswith("numba.") and text[6:] in NUMBERS:
            out.append(NUMBERS[text[6:]])
        else:
            return None
    return out


def _parallel(deco: ast.Call) -> bool:
    return any(
        k.arg == "parallel" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
        for k in deco.keywords
    )


def rewrite(source: str, on_fallback: Callable[[str, str], None] | None = None) -> str:
    """``source`` (a kernel module) with each ``@numba.njit`` function that :func:`check` accepts
    lowered by :func:`body` (see the module's docstring); the others as they were.

    ``on_fallback(name, why)`` hears of each function left to Numba.
    """
    tree = ast.parse(source)
    lines = source.splitlines()
    edits: list[tuple[int, int, list[str]]] = []
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and len(fn.decorator_list) == 1):
            continue
        deco = fn.decorator_list[0]
        argtys = _signature(deco)
        if argtys is None or not isinstance(deco, ast.Call) or _parallel(deco):
            continue
        why = check(fn, argtys)
        if why is not None:
            if on_fallback is not None:
                on_fallback(fn.name, why)
            continue
        start, end = deco.lineno - 1, fn.end_lineno
        assert end is not None
        params = ", ".join(a.arg for a in fn.args.args)
        tup = f"({params},)" if len(fn.args.args) == 1 else f"({params})"
        new = [
            f"def {fn.name}({params}):",
            *lines[fn.body[0].lineno - 1 : end],
            "",
            f"# {fn.name} above, lowered by tuner.codegen.cpu.direct, is the body of {fn.name} below",
            f"{fn.name}_ir = lowered_body({fn.name})",
            "",
            *lines[start : fn.lineno - 1],
            f"def {fn.name}({params}):",
            f"    {fn.name}_ir({tup})",
        ]
        edits.append((start, end, new))
    for start, end, new in reversed(edits):
        lines[start:end] = new
    return "\n".join(lines) + "\n"
