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

An epilogue's activation is written in vectors too (``vmax16`` for a ReLU, ``vsigmoid16``,
``verf16``...): the float32 helpers of ``runtime`` as LLVM vector code, the same operations
in the same order, so a lane computes what the scalar helper does, bit for bit. The scalar
form unrolled every lane's call in the source: a 1 x 1 convolution with a SiLU built in 2.41
s, 0.68 in vectors; a matmul with a bias and GELU 3.14 -> 0.61 s, as fast (Xeon with AVX-512).

Each width is its own Numba type (``float32x8``, ``float32x16``...), an LLVM ``<L x
float>`` value; the operations are intrinsics, inlined where they are called. Numba's
fast-math pass flags their products and sums as it flags the kernel's own float
arithmetic (``fastmath={'contract'}``), so a product added to a sum becomes one FMA.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from .features import compiles_avx512

__all__ = ["LANES", "names"]

#: Vector widths in float32 lanes that kernels may be written with (SSE, AVX2, AVX-512).
LANES = (4, 8, 16)

#: The operations of every width: ``vload16``, ``vstore16``... (``names``).
_OPS = (
    "vload", "vstore", "vbcast", "vbload", "vadd", "vsub", "vmul", "vdiv", "vmax", "vmin",
    "vabs", "vexp", "verf", "vtanh", "vsigmoid",
)  # fmt: skip


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

    def lanewise1(emit: Any) -> Any:
        """An intrinsic of one vector whose code ``emit(builder, x)`` writes."""

        @intrinsic  # type: ignore[misc]
        def fn(typingctx: Any, x: Any) -> Any:
            if x != vt:
                return None

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                return emit(builder, args[0])

            return vt(x), codegen

        return fn

    def lanewise2(emit: Any) -> Any:
        """An intrinsic of two vectors whose code ``emit(builder, x, y)`` writes."""

        @intrinsic  # type: ignore[misc]
        def fn(typingctx: Any, x: Any, y: Any) -> Any:
            if not (x == vt and y == vt):
                return None

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                return emit(builder, args[0], args[1])

            return vt(x, y), codegen

        return fn

    unary = {name: lanewise1(emit) for name, emit in _MATH.items()}
    return {
        f"vload{lanes}": vload,
        f"vstore{lanes}": vstore,
        f"vbcast{lanes}": vbcast,
        f"vbload{lanes}": vbload,
        f"vadd{lanes}": lanewise2(lambda b, x, y: b.fadd(x, y)),
        f"vsub{lanes}": lanewise2(lambda b, x, y: b.fsub(x, y)),
        f"vmul{lanes}": lanewise2(lambda b, x, y: b.fmul(x, y)),
        f"vdiv{lanes}": lanewise2(lambda b, x, y: b.fdiv(x, y)),
        f"vmax{lanes}": lanewise2(lambda b, x, y: _pick(b, "<", x, y)),
        f"vmin{lanes}": lanewise2(lambda b, x, y: _pick(b, ">", x, y)),
        **{f"{name}{lanes}": fn for name, fn in unary.items()},
    }


# -- float32 math in vectors: the scalar helpers of ``runtime``, the same operations in the
# same order on every lane (``exp32``, ``erf32``, ``tanh32``, ``sigmoid32``), so that a
# kernel written in vectors computes what its scalar loop computed.


def _const(vec: ir.VectorType, x: float) -> Any:
    return ir.Constant(vec, [float(np.float32(x))] * vec.count)


def _pick(b: Any, op: str, x: Any, y: Any) -> Any:
    """``max`` (``op`` "<") or ``min`` (">") as Python's: ``y`` where ``x op y``, else ``x``."""
    return b.select(b.fcmp_ordered(op, x, y), y, x)


def _call(b: Any, name: str, x: Any, *rest: Any) -> Any:
    types_ = [x.type, *(r.type for r in rest)]
    suffix = ".".join(
        f"v{t.count}{'f32' if isinstance(t.element, ir.FloatType) else 'i32'}" for t in types_
    )
    fn = cgutils.get_or_insert_function(
        b.module, ir.FunctionType(x.type, types_), f"llvm.{name}.{suffix}"
    )
    return b.call(fn, [x, *rest])


def _poly(b: Any, x: Any, coeffs: tuple[float, ...]) -> Any:
    """Horner's rule from the highest coefficient, as the scalar helpers write it."""
    p = _const(x.type, coeffs[0])
    for c in coeffs[1:]:
        p = b.fadd(b.fmul(p, x), _const(x.type, c))
    return p


def _exp(b: Any, x: Any) -> Any:
    """``runtime.exp32`` on every lane."""
    vec = x.type
    ivec = ir.VectorType(ir.IntType(32), vec.count)
    x = _pick(b, ">", _pick(b, "<", x, _const(vec, -87.33654)), _const(vec, 88.72283))
    n = _call(b, "floor", b.fadd(b.fmul(x, _const(vec, 1.442695041)), _const(vec, 0.5)))
    r = b.fsub(x, b.fmul(n, _const(vec, 0.693359375)))
    r = b.fadd(r, b.fmul(n, _const(vec, 2.12194440e-4)))
    p = _poly(b, r, (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                     1.6666665459e-1, 5.0000001201e-1))  # fmt: skip
    p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), _const(vec, 1.0))
    k = b.fptosi(n, ivec)
    if compiles_avx512():  # as exp32_scalef: one vscalefps
        return _call(b, "ldexp", p, k)
    half = b.ashr(k, ir.Constant(ivec, [1] * vec.count))  # as exp32_bits
    bias, shift = ir.Constant(ivec, [127] * vec.count), ir.Constant(ivec, [23] * vec.count)
    s1 = b.bitcast(b.shl(b.add(half, bias), shift), vec)
    s2 = b.bitcast(b.shl(b.add(b.sub(k, half), bias), shift), vec)
    return b.fmul(b.fmul(p, s1), s2)


def _erf(b: Any, x: Any) -> Any:
    """``runtime.erf32`` on every lane (Abramowitz & Stegun 7.1.26)."""
    vec = x.type
    a = _call(b, "fabs", x)
    t = b.fdiv(_const(vec, 1.0), b.fadd(_const(vec, 1.0), b.fmul(_const(vec, 0.3275911), a)))
    inner = _const(vec, 1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        inner = b.fadd(_const(vec, c), b.fmul(t, inner))
    y = b.fmul(t, inner)
    r = b.fsub(_const(vec, 1.0), b.fmul(y, _exp(b, b.fmul(b.fneg(a), a))))
    return b.select(b.fcmp_ordered(">=", x, _const(vec, 0.0)), r, b.fneg(r))


def _tanh(b: Any, x: Any) -> Any:
    """``runtime.tanh32`` on every lane (Eigen's rational approximation)."""
    vec = x.type
    lim = 7.99881172180175781
    x = _pick(b, ">", _pick(b, "<", x, _const(vec, -lim)), _const(vec, lim))
    x2 = b.fmul(x, x)
    p = _poly(b, x2, (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                      5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                      4.89352455891786e-03))  # fmt: skip
    q = _poly(b, x2, (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                      4.89352518554385e-03))  # fmt: skip
    return b.fdiv(b.fmul(x, p), q)


def _sigmoid(b: Any, x: Any) -> Any:
    """``runtime.sigmoid32`` on every lane."""
    one = _const(x.type, 1.0)
    return b.fdiv(one, b.fadd(one, _exp(b, b.fneg(x))))


_MATH = {
    "vabs": lambda b, x: _call(b, "fabs", x),
    "vexp": _exp,
    "verf": _erf,
    "vtanh": _tanh,
    "vsigmoid": _sigmoid,
}

for _n in LANES:
    globals().update(_ops(_n))
