"""Byte tables read in vectors: ``vlookup16``, ``vlookup32``, ``vlookup64`` (AVX-512 VBMI).

A table lookup (``tuner.graph.ops.lookup``: an activation between quantizers) is a
loop ``out[i] = table[x[i] + c]`` over bytes. LLVM keeps it scalar (a load of the key, a
load from the table, a store: about 1.6 cycles a byte on Zen 4, and no gathers of bytes
exist); ``vpermi2b`` picks 64 bytes at once from two 64-byte registers by the low 7 bits
of each index, so two of them and a select by the top bit read a 256-entry table for 64
keys: ``vlookup64(out, o, table, x, xo, flip)`` is ``out[o + l] = table[x[xo + l] ^ flip]``
for the 64 lanes ``l`` (``flip`` 128 turns an int8 key into its uint8 index). The 16 and
32 lane ones widen their keys to 64 lanes and keep the first results. 1.2 million keys
on one thread: 0.036 ms against 0.36 scalar (Zen 4).

``LoopRewrites._lookups`` (``loops``) writes a lookup loop with them where the target
has the instruction (``Target.table_lookup_bits``); offsets are element offsets into
flat arrays, unchecked: the loop proved them in bounds.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["LANES", "names"]

#: The widths a lookup loop is written in, widest first.
LANES = (64, 32, 16)

_BYTES = (types.int8, types.uint8)
_PERMUTE = "llvm.x86.avx512.vpermi2var.qi.512"


def names() -> list[str]:
    """Every lookup's name, for the generated module's import line."""
    return [f"vlookup{n}" for n in LANES]


def _bytes_array(a: Any) -> bool:
    return isinstance(a, types.Array) and a.dtype in _BYTES


def _address(context: Any, builder: Any, arrayty: Any, array: Any, index: Any, vec: Any) -> Any:
    ary = context.make_array(arrayty)(context, builder, array)
    item = cgutils.get_item_pointer(context, builder, arrayty, ary, [index])
    return builder.bitcast(item, vec.as_pointer())


def _lookup(lanes: int) -> Any:
    wide, narrow = ir.VectorType(ir.IntType(8), 64), ir.VectorType(ir.IntType(8), lanes)
    i32 = ir.IntType(32)

    def typer(typingctx: Any, out: Any, o: Any, table: Any, x: Any, xo: Any, flip: Any) -> Any:
        arrays = (out, table, x)
        offsets = (o, xo, flip)
        if not all(_bytes_array(a) for a in arrays):
            return None
        if not all(isinstance(i, types.Integer) for i in offsets):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            def element(array: int, index: int, vec: Any) -> Any:
                i = context.cast(builder, args[index], sig.args[index], types.intp)
                return _address(context, builder, sig.args[array], args[array], i, vec)

            keys = builder.load(element(3, 4, narrow), align=1)
            if lanes < 64:  # the other lanes read entry 0, and are dropped
                zero = ir.Constant(narrow, [0] * lanes)
                keys = builder.shuffle_vector(
                    keys,
                    zero,
                    ir.Constant(ir.VectorType(i32, 64), [*range(lanes), *[lanes] * (64 - lanes)]),
                )
            flip = builder.trunc(
                context.cast(builder, args[5], sig.args[5], types.int64), ir.IntType(8)
            )
            undef = ir.Constant(wide, ir.Undefined)
            splat = builder.shuffle_vector(
                builder.insert_element(undef, flip, i32(0)),
                undef,
                ir.Constant(ir.VectorType(i32, 64), [0] * 64),
            )
            keys = builder.xor(keys, splat)
            ary = context.make_array(sig.args[2])(context, builder, args[2])
            base = builder.bitcast(ary.data, wide.as_pointer())
            quarters = [builder.load(builder.gep(base, [i32(k)]), align=1) for k in range(4)]
            permute = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(wide, [wide] * 3), _PERMUTE
            )
            low = builder.call(permute, [quarters[0], keys, quarters[1]])
            high = builder.call(permute, [quarters[2], keys, quarters[3]])
            top = builder.icmp_signed("<", keys, ir.Constant(wide, [0] * 64))
            found = builder.select(top, high, low)
            if lanes < 64:
                found = builder.shuffle_vector(
                    found, undef, ir.Constant(ir.VectorType(i32, lanes), list(range(lanes)))
                )
            builder.store(found, element(0, 1, narrow), align=1)
            return context.get_dummy_value()

        return types.void(out, o, table, x, xo, flip), codegen

    typer.__name__ = f"vlookup{lanes}"
    return intrinsic(typer)


vlookup64 = _lookup(64)
vlookup32 = _lookup(32)
vlookup16 = _lookup(16)
