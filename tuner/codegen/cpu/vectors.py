"""SIMD vectors of float32 as Numba values: what the CPU source writes a register tile's
innermost loop with, instead of leaving LLVM to vectorize it again.

A register tile's innermost loop (``for j in range(32): acc[i*32 + j] += a[i] * b[j]``,
``kind="vectorize"``) was written as scalar code that LLVM unrolled fully and packed
back into vectors with its SLP vectorizer: 6 x 32 scalar multiply-adds per reduction
step, four times over with an unrolled reduction, twice over with an edge version,
and most of a candidate's build went there (matmul 512 with a 6 x 32 tile unrolled 4
times: 3.2 of its 4.6 s in LLVM's passes, unrolling and loop strength reduction
first). Written as ``vstore16(acc, i*32, vadd16(vload16(acc, i*32), vmul16(vbload16(a, i),
vload16(b, 0))))``, two statements per row, LLVM receives the vectors it would have
built (``loops.LoopRewrites._vectors``).

Each width is its own Numba type (``float32x8``, ``float32x16``...), an LLVM ``<L x
float>`` value; the operations are intrinsics, inlined where they are called. Numba's
fast-math pass flags their products and sums as it flags the kernel's own float
arithmetic (``fastmath={'contract'}``), so a product added to a sum becomes one FMA.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ["LANES", "names"]

#: Vector widths in float32 lanes that kernels may be written with (SSE, AVX2, AVX-512).
LANES = (4, 8, 16)

#: The operations of every width: ``vload16``, ``vstore16``... (``names``).
_OPS = ("vload", "vstore", "vbcast", "vbload", "vadd", "vsub", "vmul")


def names() -> list[str]:
    """Every operation's name, for the generated module's import line."""
    return [f"{op}{n}" for n in LANES for op in _OPS]


class Float32xN(types.Type):  # type: ignore[misc]
    """``lanes`` float32 values in one LLVM vector."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        super().__init__(name=f"float32x{lanes}")


@register_model(Float32xN)
class _VectorModel(models.PrimitiveModel):  # type: ignore[misc]
    def __init__(self, dmm: Any, fe_type: Float32xN):
        super().__init__(dmm, fe_type, ir.VectorType(ir.FloatType(), fe_type.lanes))


def _pointer(context: Any, builder: Any, sig: Any, args: Any, vec: ir.Type) -> Any:
    """The address of ``array[index]`` (the call's first two arguments) as a vector pointer."""
    arrayty, indexty = sig.args[0], sig.args[1]
    ary = context.make_array(arrayty)(context, builder, args[0])
    index = context.cast(builder, args[1], indexty, types.intp)
    item = cgutils.get_item_pointer(context, builder, arrayty, ary, [index])
    return builder.bitcast(item, vec.as_pointer())


def _splat(builder: Any, value: Any, vec: ir.VectorType) -> Any:
    """``value`` (a float) in every lane of a ``vec``."""
    undef = ir.Constant(vec, ir.Undefined)
    one = builder.insert_element(undef, value, ir.IntType(32)(0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return builder.shuffle_vector(one, undef, zeros)


def _is_f32_array(a: Any) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.float32


def _ops(lanes: int) -> dict[str, Any]:
    vt = Float32xN(lanes)
    llty = ir.VectorType(ir.FloatType(), lanes)

    @intrinsic  # type: ignore[misc]
    def vload(typingctx: Any, array: Any, index: Any) -> Any:
        """``array[index : index + lanes]`` (unaligned)."""
        if not (_is_f32_array(array) and isinstance(index, types.Integer)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.load(_pointer(context, builder, sig, args, llty), align=4)

        return vt(array, index), codegen

    @intrinsic  # type: ignore[misc]
    def vstore(typingctx: Any, array: Any, index: Any, value: Any) -> Any:
        """``array[index : index + lanes] = value`` (unaligned)."""
        if not (_is_f32_array(array) and isinstance(index, types.Integer) and value == vt):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            builder.store(args[2], _pointer(context, builder, sig, args, llty), align=4)
            return context.get_dummy_value()

        return types.void(array, index, value), codegen

    @intrinsic  # type: ignore[misc]
    def vbcast(typingctx: Any, x: Any) -> Any:
        """``x`` (a number) in every lane."""
        if not isinstance(x, (types.Float, types.Integer)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), llty)

        return vt(x), codegen

    @intrinsic  # type: ignore[misc]
    def vbload(typingctx: Any, array: Any, index: Any) -> Any:
        """``array[index]`` in every lane (one call where ``vbcast(array[index])`` is three
        for Numba to type: the index's cast, the read, the broadcast)."""
        if not (_is_f32_array(array) and isinstance(index, types.Integer)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            scalar = ir.FloatType().as_pointer()
            address = builder.bitcast(_pointer(context, builder, sig, args, llty), scalar)
            return _splat(builder, builder.load(address), llty)

        return vt(array, index), codegen

    def binary(op: str) -> Any:
        @intrinsic  # type: ignore[misc]
        def fn(typingctx: Any, a: Any, b: Any) -> Any:
            if not (a == vt and b == vt):
                return None

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                return getattr(builder, op)(args[0], args[1])

            return vt(a, b), codegen

        return fn

    return {
        f"vload{lanes}": vload,
        f"vstore{lanes}": vstore,
        f"vbcast{lanes}": vbcast,
        f"vbload{lanes}": vbload,
        f"vadd{lanes}": binary("fadd"),
        f"vsub{lanes}": binary("fsub"),
        f"vmul{lanes}": binary("fmul"),
    }


for _n in LANES:
    globals().update(_ops(_n))
