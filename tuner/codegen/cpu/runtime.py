"""Helpers that generated kernels import: stack buffers and vectorizable math.

There is no SVML on the machines this targets, so ``np.exp`` / ``np.tanh`` in a
loop become scalar libm calls that block vectorization. The float32 versions
here are branch-free polynomials that LLVM inlines and vectorizes; their
accuracy (a few ulp) is checked against NumPy in the tests.
"""

from __future__ import annotations

import math
import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, compiler
from numba.core.compiler_machinery import PassManager
from numba.core.untyped_passes import InlineClosureLikes
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from .features import compiles_avx512

__all__ = [
    "NoAliasCompiler",
    "carray",
    "dot_u8s8_i32x8",
    "dot_u8s8_i32x16",
    "erf32",
    "exp32",
    "exp32_bits",
    "exp32_scalef",
    "flush_denormals",
    "load_acquire",
    "maxnum",
    "minnum",
    "prefetch",
    "restore_fp",
    "sigmoid32",
    "stack_empty",
    "tanh32",
]


class NoAliasCompiler(compiler.Compiler):
    """Numba's pipeline, with every array argument's data pointer marked ``noalias``, less the
    passes generated source does not need.

    ``noalias`` is what Numba does for a prange body whose arrays it finds distinct.
    Without it, LLVM must assume that a kernel's output may overlap its inputs and
    scratch buffers: the loop vectorizer guards its loops with overlap checks
    and keeps scalar copies of them, and the SLP vectorizer gives up on
    stores. A kernel's buffers are distinct: scratch is allocated by the
    kernel, and ``Kernel`` refuses outputs that share memory with another
    argument (inputs may share memory with each other: LLVM's ``noalias``
    only concerns memory that is written). Measured on one thread (medians
    of interleaved rounds): layer norm 4096 x 768 2.9 -> 2.0 ms, the
    elementwise chain 12.9 -> 9.5 ms, matmul 1024^3 unchanged.

    A generated kernel is loops over ranges, arithmetic, array reads and writes and
    calls of the helpers here: no closure to inline, no array expression or constant
    to rewrite, no variable that changes type. So the passes for those are left out
    (``_lean_pipeline``): closure inlining, the rewrites before and after typing, and
    the SSA reconstruction. Their cost grew with the source faster than its length
    (Numba's reaching-definitions analysis after each): a Winograd kernel of 12,000
    IR statements spent 1.7 s inlining closures it does not have. A kernel with
    prange loops (``parallel=True``) keeps the whole pipeline, for Numba's parfors.
    """

    def __init__(self, typingctx, targetctx, library, args, return_type, flags, locals):  # type: ignore[no-untyped-def]
        flags.noalias = True  # a fresh Flags per compile (Dispatcher._compile_core)
        if not flags.auto_parallel.enabled:
            flags.no_rewrites = True
            flags.enable_ssa = False
        super().__init__(typingctx, targetctx, library, args, return_type, flags, locals)

    def define_pipelines(self):  # type: ignore[no-untyped-def]
        full = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        if self.state.flags.auto_parallel.enabled:
            return [full]
        return [_lean_pipeline(full)]

    def compile_extra(self, func):  # type: ignore[no-untyped-def]
        for name in func.__code__.co_names:
            if name in _INLINED:
                _always_inlined(name)
        return super().compile_extra(func)


def _lean_pipeline(full: PassManager) -> PassManager:
    """``full`` without closure inlining (``NoAliasCompiler``; the rewrites and SSA are
    switched off by its flags)."""
    pm = PassManager("tuner kernel")
    for pass_class, description in full.passes:
        if pass_class is not InlineClosureLikes:
            pm.add_pass(pass_class, description)
    pm.finalize()
    return pm


#: Alignment of stack buffers: a cache line, so that no vector load or store of a
#: buffer's aligned elements splits one.
_STACK_ALIGN = 64


@intrinsic(prefer_literal=True)
def stack_empty(typingctx, size, dtype):  # type: ignore[no-untyped-def]
    """A pointer to ``size`` elements on the stack (``alloca`` in the entry block)."""
    if not isinstance(size, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ty = context.get_value_type(dtype.dtype)
        ptr = cgutils.alloca_once(builder, ty, size=size.literal_value)
        ptr.align = _STACK_ALIGN
        return ptr

    return types.CPointer(dtype.dtype)(size, dtype), codegen


def _item_pointer(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """The address of ``array[index]`` for an intrinsic called as ``f(array, index)``."""
    arrayty = signature.args[0]
    ary = context.make_array(arrayty)(context, builder, args[0])
    idx = context.cast(builder, args[1], signature.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, arrayty, ary, [idx])


@intrinsic
def load_acquire(typingctx, array, index):  # type: ignore[no-untyped-def]
    """``array[index]`` of an int64 array as an atomic load: a polling loop sees other threads' stores.

    A plain load in a loop that stores nothing is hoisted out of it by LLVM.
    """
    if not (isinstance(array, types.Array) and array.dtype == types.int64):
        return None
    if not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.load_atomic(_item_pointer(context, builder, signature, args), "acquire", 8)

    return types.int64(array, index), codegen


#: ``llvm.prefetch``'s locality: 3 keeps the line in every level (``prefetcht0``). A weight
#: panel streamed from memory, the next chunk's lines prefetched during this one's work:
#: 1 x 1, 2048 -> 512 channels at 7 x 7 (Xeon with AVX-512, 2 threads, weights cold) 0.50 ms
#: without, 0.38 at locality 3 or 2, 0.40 at 1, 0.69 at 0 (non-temporal, evicted too soon).
_PREFETCH_LOCALITY = 3


@intrinsic
def prefetch(typingctx, array, index):  # type: ignore[no-untyped-def]
    """A hint to bring the cache line of ``array[index]`` into the cache (``llvm.prefetch``).

    No bounds check and no fault: an address past the array (the iteration after the last)
    is ignored by the processor.
    """
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = _item_pointer(context, builder, signature, args)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # read, locality, data cache
        flags = [ir.Constant(i32, v) for v in (0, _PREFETCH_LOCALITY, 1)]
        builder.call(fn, [builder.bitcast(ptr, i8p), *flags])
        return context.get_dummy_value()

    return types.void(array, index), codegen


#: MXCSR's flush-to-zero (results) and denormals-are-zero (inputs) bits.
_FTZ_DAZ = 0x8040
#: Whether this machine's floating point has an MXCSR (x86); elsewhere the two calls do nothing.
_MXCSR = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _mxcsr(builder, value=None):  # type: ignore[no-untyped-def]
    """Store MXCSR to a slot and return it (``value`` None), or load ``value`` into it."""
    i32 = ir.IntType(32)
    slot = cgutils.alloca_once(builder, i32)
    i8p = ir.IntType(8).as_pointer()
    name = "llvm.x86.sse.stmxcsr" if value is None else "llvm.x86.sse.ldmxcsr"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p]), name)
    if value is not None:
        builder.store(value, slot)
    builder.call(fn, [builder.bitcast(slot, i8p)])
    return builder.load(slot) if value is None else None


@intrinsic
def flush_denormals(typingctx):  # type: ignore[no-untyped-def]
    """Set this thread's MXCSR to flush denormal floats to zero, in and out; return its
    old value for :func:`restore_fp`.

    A denormal (below 1.2e-38) takes a microcode assist per instruction on x86: a
    batch matmul of BERT's attention (12 x 128 x 128 by 128 x 64) whose softmax
    probabilities underflowed to denormals ran 7.3 ms against 0.11 with normal ones
    (Xeon with AVX-512), 65 % of the model's time. Every kernel runs with denormals
    flushed (as oneDNN's and TensorFlow's threads do) and gives the thread its state back.
    """

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if not _MXCSR:
            return ir.Constant(ir.IntType(32), 0)
        old = _mxcsr(builder)
        _mxcsr(builder, builder.or_(old, ir.Constant(ir.IntType(32), _FTZ_DAZ)))
        return old

    return types.int32(), codegen


@intrinsic
def restore_fp(typingctx, old):  # type: ignore[no-untyped-def]
    """Give the thread back the MXCSR :func:`flush_denormals` returned."""
    if not isinstance(old, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if _MXCSR:
            _mxcsr(
                builder,
                builder.trunc(args[0], ir.IntType(32)) if args[0].type.width > 32 else args[0],
            )
        return context.get_dummy_value()

    return types.void(old), codegen


def _fold(name: str):  # type: ignore[no-untyped-def]
    """``llvm.<name>`` of two floats of one type, marked ``nnan`` and ``nsz``: one ``vmaxps``
    (``vminps``) whatever the code around it.

    Numba's ``max(a, b)`` is a compare and a select. Where the kernel folds an
    input into a stored accumulator, ``acc[i] = max(acc[i], x)``, LLVM's x86
    back end turns the select of the old value into a masked store (AVX-512);
    the next window step then reads that element back before the masked store
    has left the store buffer, which cannot forward it. A channels-last max
    pool's window over 192 channels ran 3 times slower than the same loop with
    ``vmaxps`` (GoogLeNet's 3 x 3 at 28 x 28: 66 against 23 us on one thread,
    Zen 5). Which of two operands a NaN gives is unspecified, as in
    onnxruntime's and PyTorch's vectorized pools.
    """

    def typer(typingctx, a, b):  # type: ignore[no-untyped-def]
        if not isinstance(a, types.Float) or a != b:
            return None

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            ty = args[0].type
            suffix = "f32" if ty == ir.FloatType() else "f64"
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ty, [ty, ty]), f"llvm.{name}.{suffix}"
            )
            return builder.call(fn, args, fastmath=("nnan", "nsz"))

        return a(a, b), codegen

    typer.__name__ = name
    return intrinsic(typer)


maxnum = _fold("maxnum")
minnum = _fold("minnum")


def _dot_u8s8(lanes: int):  # type: ignore[no-untyped-def]
    """``out[o:o+lanes] += [sum_q a[p+q] * b[r+4l+q] for l]`` as one ``vpdpbusd``.

    ``a`` is read as 4 unsigned bytes broadcast to every lane, ``b`` as
    ``lanes`` groups of 4 signed bytes; the sums wrap at 32 bits. Offsets are
    element offsets into flat arrays (int32, uint8 and int8), unchecked: the
    caller (``tuner.lower.intrin.match``) proved them in bounds.
    """
    name = f"llvm.x86.avx512.vpdpbusd.{32 * lanes}"

    def typer(typingctx, out, o, a, p, b, r):  # type: ignore[no-untyped-def]
        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            vec = ir.VectorType(ir.IntType(32), lanes)
            word = ir.IntType(32)

            def address(i: int, pointee: ir.Type):  # type: ignore[no-untyped-def]
                array = context.make_array(sig.args[i])(context, builder, args[i])
                ptr = builder.gep(array.data, [args[i + 1]], inbounds=True)
                return builder.bitcast(ptr, pointee.as_pointer())

            acc_ptr = address(0, vec)
            acc = builder.load(acc_ptr, align=4)
            group = builder.load(address(2, word), align=1)
            undef = ir.Constant(vec, ir.Undefined)
            one = builder.insert_element(undef, group, ir.Constant(word, 0))
            splat = builder.shuffle_vector(one, undef, ir.Constant(vec, [0] * lanes))
            bytes_ = builder.load(address(4, vec), align=1)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec, vec, vec]), name
            )
            builder.store(builder.call(fn, [acc, splat, bytes_]), acc_ptr, align=4)
            return context.get_dummy_value()

        want = (types.int32, types.uint8, types.int8)
        arrays = (out, a, b)
        if not all(
            isinstance(x, types.Array) and x.dtype == d for x, d in zip(arrays, want, strict=True)
        ):
            return None
        return types.void(out, o, a, p, b, r), codegen

    typer.__name__ = f"dot_u8s8_i32x{lanes}"
    return intrinsic(typer)


dot_u8s8_i32x16 = _dot_u8s8(16)
dot_u8s8_i32x8 = _dot_u8s8(8)


@intrinsic
def _bits_to_f32(typingctx, bits):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_F = np.float32


@intrinsic
def _ldexp_f32(typingctx, x, n):  # type: ignore[no-untyped-def]
    """``x * 2**n`` as LLVM's ``ldexp``, which AVX-512 vectorizes to one ``vscalefps``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        f32, i32 = ir.FloatType(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(f32, [f32, i32]), "llvm.ldexp.f32.i32"
        )
        return builder.call(fn, args)

    return types.float32(types.float32, types.int32), codegen


@njit(inline="always")
def _scale_bits(p, n):  # type: ignore[no-untyped-def]
    """``p * 2**n`` for ``-126 <= n <= 128`` from exponent bits, in two halves so that each
    factor stays a normal float: integer vector work every x86 vector unit has."""
    half = n >> np.int32(1)
    s1 = _bits_to_f32((half + np.int32(127)) << np.int32(23))
    s2 = _bits_to_f32((n - half + np.int32(127)) << np.int32(23))
    return p * s1 * s2


@njit(inline="always")
def _scale_scalef(p, n):  # type: ignore[no-untyped-def]
    """``p * 2**n`` in one AVX-512 instruction (where the vector unit lacks it, LLVM would
    call libm's ``ldexpf`` per element)."""
    return _ldexp_f32(p, n)


def _exp32(scale):  # type: ignore[no-untyped-def]
    @njit(fastmath={"contract"}, error_model="numpy")
    def exp32(x):  # type: ignore[no-untyped-def]
        """exp(x) for float32: Cody-Waite range reduction and Cephes' polynomial (< 2 ulp).

        Every step stays in float32 and int32. ``math.floor`` would return an int64,
        which turns the polynomial into float64 arithmetic and, on AVX2 (which has
        no vector float <-> int64 conversion), scalarizes the conversions: the
        vectorized loop then ran 4 to 5 times slower. The clamp keeps the result
        normal (no subnormal results: the vector unit takes a slow assist on
        them) and the infinities out of the reduction.
        """
        x = min(max(x, _F(-87.33654)), _F(88.72283))
        n = np.floor(x * _F(1.442695041) + _F(0.5))
        r = x - n * _F(0.693359375)
        r = r + n * _F(2.12194440e-4)
        p = _F(1.9875691500e-4)
        p = p * r + _F(1.3981999507e-3)
        p = p * r + _F(8.3334519073e-3)
        p = p * r + _F(4.1665795894e-2)
        p = p * r + _F(1.6666665459e-1)
        p = p * r + _F(5.0000001201e-1)
        p = p * (r * r) + r + _F(1.0)
        return scale(p, np.int32(n))

    return exp32


#: exp32 with either scaling by 2**n, for the tests; kernels use ``exp32``.
exp32_bits = _exp32(_scale_bits)
exp32_scalef = _exp32(_scale_scalef)
#: The scaling took 9 of the 26 vector instructions of an exp (conversions,
#: shifts and two multiplies); ``vscalefps`` does it in one. On AMD Zen 4 (AVX-512
#: on 256-bit units), softmax 4096 x 1024 on 2 threads, default schedule, each
#: variant in its own process and kernel cache: 0.98 to 1.23 ms against 1.19 to
#: 1.22 with the bit scaling, within this VM's noise.
exp32 = exp32_scalef if compiles_avx512() else exp32_bits


@njit(fastmath={"contract"}, error_model="numpy")
def tanh32(x):  # type: ignore[no-untyped-def]
    """tanh(x) as Eigen's float32 rational minimax approximation (relative error < 3e-7).

    Branch-free and without exp: one division. The input is clamped to
    |x| <= 7.9988, where tanh is within a few ulp of +-1.
    """
    x = min(max(x, _F(-7.99881172180175781)), _F(7.99881172180175781))
    x2 = x * x
    p = _F(-2.76076847742355e-16)
    p = p * x2 + _F(2.00018790482477e-13)
    p = p * x2 + _F(-8.60467152213735e-11)
    p = p * x2 + _F(5.12229709037114e-08)
    p = p * x2 + _F(1.48572235717979e-05)
    p = p * x2 + _F(6.37261928875436e-04)
    p = p * x2 + _F(4.89352455891786e-03)
    q = _F(1.19825839466702e-06)
    q = q * x2 + _F(1.18534705686654e-04)
    q = q * x2 + _F(2.26843463243900e-03)
    q = q * x2 + _F(4.89352518554385e-03)
    return x * p / q


@njit(fastmath={"contract"}, error_model="numpy")
def sigmoid32(x):  # type: ignore[no-untyped-def]
    return _F(1.0) / (_F(1.0) + exp32(-x))


@njit(fastmath={"contract"}, error_model="numpy")
def erf32(x):  # type: ignore[no-untyped-def]
    """erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7)."""
    a = abs(x)
    t = _F(1.0) / (_F(1.0) + _F(0.3275911) * a)
    y = t * (
        _F(0.254829592)
        + t
        * (_F(-0.284496736) + t * (_F(1.421413741) + t * (_F(-1.453152027) + t * _F(1.061405429))))
    )
    r = _F(1.0) - y * exp32(-a * a)
    return r if x >= _F(0.0) else -r


@njit(error_model="numpy")
def sigmoid64(x):  # type: ignore[no-untyped-def]
    return 1.0 / (1.0 + math.exp(-x))


#: The math helpers a kernel calls, with the argument type each is compiled for.
_INLINED = {
    "exp32": types.float32,
    "tanh32": types.float32,
    "sigmoid32": types.float32,
    "erf32": types.float32,
    "sigmoid64": types.float64,
}
_MARKED: set[str] = set()


def _always_inlined(name: str) -> None:
    """Compile helper ``name`` once per process and mark its code ``alwaysinline``.

    Numba links a helper's code into each kernel that calls it, where LLVM's
    inliner decides per call: of a dense layer's 64 GELU lanes it left dozens
    as calls, which the vectorizer cannot pack (3.0 -> 4.6 ms). Numba's own
    ``inline="always"`` inlines the helper's Python IR at each call instead,
    before typing: 64 copies of ``erf32`` and the ``exp32`` inside it made
    Numba's passes take 8 of a candidate's 13 s to build. Marked, LLVM
    inlines every call, after Numba has typed and lowered the helper once.
    """
    if name in _MARKED:
        return
    helper = globals()[name]
    if name != "exp32" and "exp32" in helper.py_func.__code__.co_names:
        _always_inlined("exp32")  # inlined into the helpers that call it first
    arg = _INLINED[name]
    helper.compile((arg,))
    cres = helper.overloads[(arg,)]
    module = cres.library._get_module_for_linking()  # what every caller links, kept
    module.get_function(cres.fndesc.llvm_func_name).add_function_attribute("alwaysinline")
    _MARKED.add(name)
