"""What the direct front end's language names, and Numba's typing of it: the operators, NumPy's
scalar types, the helpers a kernel may call (``namespace``), and each call's signature, resolved by
Numba's typing context once per callee and argument types (``resolve``).
"""

from __future__ import annotations

import ast
import operator
import threading
from typing import Any

from numba import types

__all__ = [
    "BINOPS", "CMPOPS", "INPLACE", "NUMBERS", "UNARY", "Unsupported", "implementation",
    "namespace", "resolve", "typing_context",
]  # fmt: skip


class Unsupported(Exception):
    """A construct outside the language this module lowers (Numba compiles the function)."""


BINOPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
INPLACE: dict[type, Any] = {
    ast.Add: operator.iadd,
    ast.Sub: operator.isub,
    ast.Mult: operator.imul,
    ast.Div: operator.itruediv,
}
CMPOPS: dict[type, Any] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
UNARY: dict[type, Any] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
#: NumPy's scalar types a kernel converts with (``np.float32(x)``).
NUMBERS = {
    name: getattr(types, name)
    for name in (
        "bool_", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float32", "float64",
    )
}  # fmt: skip
NUMBERS["bool_"] = types.boolean

_NAMESPACE: dict[str, Any] | None = None


def namespace() -> dict[str, Any]:
    """What a kernel's calls may name: the helpers its module imports and three builtins."""
    global _NAMESPACE
    if _NAMESPACE is None:
        from . import runtime, tables, vectors

        ns: dict[str, Any] = {n: getattr(runtime, n) for n in runtime.__all__}
        ns.update((n, getattr(vectors, n)) for n in vectors.names())
        ns.update((n, getattr(tables, n)) for n in tables.names())
        ns.update(min=min, max=max, abs=abs)
        _NAMESPACE = ns
    return _NAMESPACE


#: (callee, argument types) -> (function type, signature): Numba's typing of one call, once.
_RESOLVED: dict[tuple[Any, tuple[Any, ...]], tuple[Any, Any]] = {}
_RESOLVING = threading.Lock()


def resolve(typingctx: Any, fn: Any, argtys: tuple[Any, ...]) -> tuple[Any, Any]:
    key = (fn, argtys)
    found = _RESOLVED.get(key)
    if found is None:
        with _RESOLVING:
            try:
                fnty = typingctx.resolve_value_type(fn)
                sig = typingctx.resolve_function_type(fnty, argtys, {})
            except Exception as e:  # Numba's TypingError and kin: Numba compiles the function
                raise Unsupported(f"no typing of {fn} for {argtys}: {e}") from None
            if sig is None:
                raise Unsupported(f"no typing of {fn} for {argtys}")
            found = _RESOLVED[key] = (fnty, sig)
    return found


#: (target context, function type, signature) -> Numba's implementation of that call. Looked
#: up afresh, each wraps itself again (``inspect.signature`` of the implementation, ~40 us):
#: a fifth of a matmul candidate's lowering.
_IMPLEMENTATIONS: dict[tuple[Any, Any, Any], Any] = {}


def implementation(context: Any, fnty: Any, sig: Any) -> Any:
    key = (context, fnty, sig)
    impl = _IMPLEMENTATIONS.get(key)
    if impl is None:
        impl = _IMPLEMENTATIONS[key] = context.get_function(fnty, sig)
    return impl


def typing_context() -> Any:
    from numba.core.registry import cpu_target

    ctx = cpu_target.typing_context
    ctx.refresh()
    return ctx
