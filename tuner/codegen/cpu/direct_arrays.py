"""The arrays of ``tuner.codegen.cpu.direct``'s language as LLVM IR: an element's address, its
load and store, and a stack array, emitted as Numba would (its array structure, its data model).

The kernel functions index one-dimensional C arrays (their parameters, and stack arrays made by
``carray(stack_empty(n, np.T), (n,))``) with one integer. ``direct_lower.Lowerer`` checks and
types each access; these functions emit it.
"""

from __future__ import annotations

import ast
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils

from .direct_types import NUMBERS, Unsupported

__all__ = ["address", "is_stack_array", "load", "stack_array", "stack_array_type", "store"]


def address(context: Any, b: Any, aty: Any, ary: Any, ity: Any, idx: Any) -> Any:
    """The address of element ``idx`` (of integer type ``ity``) of the array value ``ary``.

    An unsigned index (every index the CPU backend writes) has no negative value to count
    back from the end: the address is the data pointer plus the index, the one Numba's
    ``get_item_pointer2`` computes for a 1-D C array, without its array-structure helpers.
    """
    if not getattr(ity, "signed", True):
        data = b.extract_value(ary, context.data_model_manager[aty].get_field_position("data"))
        return b.gep(data, [context.cast(b, idx, ity, types.intp)])
    arr = context.make_array(aty)(context, b, ary)
    idx = context.cast(b, idx, ity, types.intp)
    return cgutils.get_item_pointer2(
        context,
        b,
        data=arr.data,
        shape=cgutils.unpack_tuple(b, arr.shape, 1),
        strides=cgutils.unpack_tuple(b, arr.strides, 1),
        layout=aty.layout,
        inds=[idx],
        wraparound=True,  # as Numba: a negative index counts back
    )


def load(context: Any, b: Any, aty: Any, ptr: Any) -> Any:
    if isinstance(aty.dtype, types.Number):  # (Numba's data model stores numbers as they are)
        return b.load(ptr)
    return context.unpack_value(b, aty.dtype, ptr)


def store(context: Any, b: Any, aty: Any, ptr: Any, value: Any) -> None:
    """Store ``value``, already of the array's element type, at ``ptr``."""
    if isinstance(aty.dtype, types.Number):
        b.store(value, ptr)
    else:
        context.pack_value(b, aty.dtype, value, ptr)


def is_stack_array(e: ast.expr) -> bool:
    """Whether ``e`` has the shape of ``carray(stack_empty(n, T), shape)``."""
    return (
        isinstance(e, ast.Call)
        and isinstance(e.func, ast.Name)
        and e.func.id == "carray"
        and len(e.args) == 2
        and isinstance(e.args[0], ast.Call)
        and isinstance(e.args[0].func, ast.Name)
        and e.args[0].func.id == "stack_empty"
        and len(e.args[0].args) == 2
    )


def stack_array_type(node: ast.Call) -> tuple[Any, int]:
    """The array type and length of ``carray(stack_empty(n, np.T), (n,))``, else Unsupported."""
    inner = node.args[0]
    assert isinstance(inner, ast.Call)
    n, dtype = inner.args[0], inner.args[1]
    shape = node.args[1]
    if not (
        isinstance(n, ast.Constant)
        and type(n.value) is int
        and n.value > 0
        and isinstance(shape, ast.Tuple)
        and len(shape.elts) == 1
        and isinstance(shape.elts[0], ast.Constant)
        and shape.elts[0].value == n.value
        and isinstance(dtype, ast.Attribute)
        and isinstance(dtype.value, ast.Name)
        and dtype.value.id == "np"
        and dtype.attr in NUMBERS
    ):
        raise Unsupported("a stack array other than carray(stack_empty(n, np.T), (n,))")
    return types.Array(NUMBERS[dtype.attr], 1, "C"), n.value


def stack_array(context: Any, b: Any, aty: Any, n: int) -> Any:
    """An array value of ``n`` elements of ``aty`` on the stack, 64-byte aligned."""
    from .runtime import _STACK_ALIGN

    elem = context.get_value_type(aty.dtype)
    ptr = cgutils.alloca_once(b, elem, size=n)
    ptr.align = _STACK_ALIGN
    arr = context.make_array(aty)(context, b)
    itemsize = context.get_abi_sizeof(elem)
    intp = context.get_value_type(types.intp)
    context.populate_array(
        arr,
        data=ptr,
        shape=[ir.Constant(intp, n)],
        strides=[ir.Constant(intp, itemsize)],
        itemsize=ir.Constant(intp, itemsize),
        meminfo=None,
    )
    return arr._getvalue()
