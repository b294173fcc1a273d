"""The lowering behind ``tuner.codegen.cpu.direct``: one generated function's statements as LLVM
IR, each operation typed by Numba's typing context and emitted by Numba's implementation of it.

``Lowerer(typingctx)`` types a function without emitting anything (``direct.check``);
``Lowerer(typingctx, context, builder)`` emits it into the builder of a Numba intrinsic
(``direct.body``). The language, and why, is ``tuner.codegen.cpu.direct``'s docstring.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils

from . import direct_arrays as arrays
from .direct_types import (
    BINOPS,
    CMPOPS,
    INPLACE,
    NUMBERS,
    UNARY,
    Unsupported,
    implementation,
    namespace,
    resolve,
)

__all__ = ["LOOP_HINTS", "Lowerer"]

#: Integer operations kept at their operands' width (``Lowerer.arith``), by LLVM instruction.
_NARROW = {
    operator.add: "add", operator.iadd: "add",
    operator.sub: "sub", operator.isub: "sub",
    operator.mul: "mul", operator.imul: "mul",
}  # fmt: skip


Value = tuple[Any, Any]  # (Numba type, LLVM value; None when only typing)


class Lowerer:
    """Types (and, with a builder, emits) one function's statements.

    ``builder`` None types only (:func:`check`): the same walk, the same
    resolutions, no IR, so a function that passes the check lowers.
    """

    def __init__(self, typingctx: Any, context: Any = None, builder: Any = None):
        self.typingctx, self.context, self.b = typingctx, context, builder
        self.ns = namespace()
        #: Names bound to SSA values (the parameters, the enclosing loops' variables).
        self.bound: dict[str, Value] = {}
        #: Assigned variables: name -> (type, stack slot).
        self.slots: dict[str, Value] = {}
        self.loop_vars: set[str] = set()

    # -- emission helpers ------------------------------------------------------
    def cast(self, v: Value, to: Any) -> Any:
        ty, val = v
        if self.b is None or ty == to:
            return val
        return self.context.cast(self.b, val, ty, to)

    def call(self, fn: Any, args: list[Value], argtys: tuple[Any, ...] | None = None) -> Value:
        """``fn(*args)`` typed and lowered as Numba does (arguments cast to its signature)."""
        fnty, sig = resolve(self.typingctx, fn, argtys or tuple(t for t, _ in args))
        if self.b is None:
            return sig.return_type, None
        impl = implementation(self.context, fnty, sig)
        n = len(sig.args)
        star = sig.args[-1] if n else None
        if isinstance(star, (types.StarArgTuple, types.StarArgUniTuple)):  # min(a, b): *args
            vals = [self.cast(a, t) for a, t in zip(args[: n - 1], sig.args, strict=False)]
            rest = [self.cast(a, t) for a, t in zip(args[n - 1 :], star.types, strict=True)]
            vals.append(cgutils.make_anonymous_struct(self.b, rest))
        else:
            vals = [self.cast(a, t) for a, t in zip(args, sig.args, strict=True)]
        return sig.return_type, impl(self.b, vals)

    def arith(self, op: Any, a: Value, b: Value) -> Value:
        """``a op b``: as Numba types it, except that two integers of one type narrower than
        64 bits add, subtract and multiply in that type (NumPy's rule, and what the kernel's
        tensor expression says), where Numba widens to 64 bits: an int8 kernel's int32 sums
        then fill whole vectors (16 lanes, not 8 of int64 and conversions between)."""
        how = _NARROW.get(op)
        ta, tb = a[0], b[0]
        narrow = isinstance(ta, types.Integer) and getattr(ta, "bitwidth", 64) < 64
        if how is None or ta != tb or not narrow:
            return self.call(op, [a, b])
        if self.b is None:
            return ta, None
        return ta, getattr(self.b, how)(a[1], b[1])

    # -- functions ---------------------------------------------------------------
    def function(self, fn: ast.FunctionDef, params: list[Value]) -> None:
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise Unsupported("only positional parameters")
        if len(a.args) != len(params):
            raise Unsupported("parameters and types differ in number")
        for arg, v in zip(a.args, params, strict=True):
            self.bound[arg.arg] = v
        self.block(fn.body, top=True)

    def block(self, stmts: list[ast.stmt], top: bool = False) -> None:
        for k, s in enumerate(stmts):
            if isinstance(s, ast.Return):
                if not (top and k == len(stmts) - 1 and s.value is None):
                    raise Unsupported("return other than a bare one at the end")
                return
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.For):
            self.loop(s)
        elif isinstance(s, ast.If):
            self.branch(s)
        elif isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                raise Unsupported("chained assignment")
            self.assign(s.targets[0], s.value)
        elif isinstance(s, ast.AugAssign):
            self.augassign(s)
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Call):
                raise Unsupported("an expression statement other than a call")
            self.expr(s.value)
        elif not isinstance(s, ast.Pass):
            raise Unsupported(type(s).__name__)

    def loop(self, s: ast.For) -> None:
        it = s.iter
        if not (
            isinstance(s.target, ast.Name)
            and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and 1 <= len(it.args) <= 2
            and not it.keywords
            and not s.orelse
        ):
            raise Unsupported("a loop other than for x in range(a[, b])")
        var = s.target.id
        if var in self.slots or var in self.bound:
            raise Unsupported(f"loop variable {var} is also another variable")
        bounds = [self.expr(x) for x in it.args]
        for ty, _ in bounds:
            if not (isinstance(ty, types.Integer) and ty in (types.int64, types.intp)):
                raise Unsupported(f"range over {ty}")  # (Numba's range of int32 counts in int32)
        if len(bounds) == 1:
            bounds.insert(0, (types.int64, ir.Constant(ir.IntType(64), 0)))
        i64 = types.int64
        start, stop = (self.cast(v, i64) for v in bounds)
        self.loop_vars.add(var)
        if self.b is None:
            self.bound[var] = (i64, None)
            self.block(s.body)
            del self.bound[var]
            return
        b = self.b
        entry = b.block
        head = b.append_basic_block(f"for.{var}")
        done = b.append_basic_block(f"for.{var}.end")
        b.cbranch(b.icmp_signed("<", start, stop), head, done)
        b.position_at_end(head)
        phi = b.phi(start.type, name=var)
        phi.add_incoming(start, entry)
        self.bound[var] = (i64, phi)
        self.block(s.body)
        del self.bound[var]
        nxt = b.add(phi, ir.Constant(phi.type, 1), name=f"{var}.next", flags=("nsw",))
        phi.add_incoming(nxt, b.block)
        latch = b.cbranch(b.icmp_signed("<", nxt, stop), head, done)
        if LOOP_HINTS:
            latch.set_metadata("llvm.loop", _loop_id(b.module, LOOP_HINTS))
        b.position_at_end(done)

    def branch(self, s: ast.If) -> None:
        cond = self.truth(self.expr(s.test))
        if self.b is None:
            self.block(s.body)
            self.block(s.orelse)
            return
        if s.orelse:
            with self.b.if_else(cond) as (then, orelse):
                with then:
                    self.block(s.body)
                with orelse:
                    self.block(s.orelse)
        else:
            with self.b.if_then(cond):
                self.block(s.body)

    def truth(self, v: Value) -> Any:
        ty, val = v
        if ty != types.boolean:
            raise Unsupported(f"a condition of type {ty}")
        return val

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Subscript):
            arr, ptr = self.element(target)
            self.store(arr, ptr, self.expr(value))
            return
        if not isinstance(target, ast.Name):
            raise Unsupported("assignment to other than a name or an element")
        name = target.id
        if name in self.bound or name in self.loop_vars:
            raise Unsupported(f"{name} is reassigned")
        v = (
            self.stack_array(value)
            if isinstance(value, ast.Call) and arrays.is_stack_array(value)
            else self.expr(value)
        )
        if name in self.slots:
            ty, slot = self.slots[name]
            if ty != v[0]:
                raise Unsupported(f"{name} changes type")
        else:
            ty = v[0]
            if isinstance(ty, types.Array) and not arrays.is_stack_array(value):
                raise Unsupported("an array variable other than a stack array")
            slot = None
            if self.b is not None:
                slot = cgutils.alloca_once(self.b, self.context.get_value_type(ty), name=name)
            self.slots[name] = (ty, slot)
        if self.b is not None:
            self.b.store(v[1], slot)

    def augassign(self, s: ast.AugAssign) -> None:
        op = INPLACE.get(type(s.op))
        if op is None:
            raise Unsupported(f"augmented {type(s.op).__name__}")
        if isinstance(s.target, ast.Subscript):
            arr, ptr = self.element(s.target)
            old = (arr.dtype, None if self.b is None else self.load(arr, ptr))
            self.store(arr, ptr, self.arith(op, old, self.expr(s.value)))
            return
        if not isinstance(s.target, ast.Name) or s.target.id not in self.slots:
            raise Unsupported("augmented assignment to other than an assigned name or an element")
        ty, slot = self.slots[s.target.id]
        new = self.arith(op, self.name(s.target.id), self.expr(s.value))
        if new[0] != ty:
            raise Unsupported(f"{s.target.id} changes type")
        if self.b is not None:
            self.b.store(new[1], slot)

    # -- arrays (their emission: ``direct_arrays``) ---------------------------------
    def element(self, node: ast.Subscript) -> tuple[Any, Any]:
        """The array type and the address of ``node`` (``a[i]``, one index)."""
        if not isinstance(node.value, ast.Name) or isinstance(node.slice, (ast.Slice, ast.Tuple)):
            raise Unsupported("an element other than name[index]")
        aty, ary = self.name(node.value.id)
        ity, idx = self.expr(node.slice)
        if not (isinstance(aty, types.Array) and aty.ndim == 1 and aty.layout == "C"):
            raise Unsupported(f"indexing {aty}")
        if not isinstance(ity, types.Integer):
            raise Unsupported(f"an index of type {ity}")
        if self.b is None:
            return aty, None
        return aty, arrays.address(self.context, self.b, aty, ary, ity, idx)

    def load(self, aty: Any, ptr: Any) -> Any:
        return arrays.load(self.context, self.b, aty, ptr)

    def store(self, aty: Any, ptr: Any, v: Value) -> None:
        if not isinstance(v[0], (types.Number, types.Boolean)):
            raise Unsupported(f"storing a {v[0]}")
        if self.b is not None:
            arrays.store(self.context, self.b, aty, ptr, self.cast(v, aty.dtype))

    def stack_array(self, node: ast.Call) -> Value:
        """``carray(stack_empty(n, np.T), (n,))``: ``n`` elements on the stack, 64-byte aligned."""
        aty, n = arrays.stack_array_type(node)
        if self.b is None:
            return aty, None
        return aty, arrays.stack_array(self.context, self.b, aty, n)

    # -- expressions -----------------------------------------------------------------
    def name(self, name: str) -> Value:
        if name in self.bound:
            return self.bound[name]
        if name in self.slots:
            ty, slot = self.slots[name]
            return ty, None if self.b is None else self.b.load(slot)
        raise Unsupported(f"{name} is not a variable")

    def expr(self, e: ast.expr) -> Value:
        if isinstance(e, ast.Constant):
            return self.constant(e.value)
        if isinstance(e, ast.Name):
            return self.name(e.id)
        if isinstance(e, ast.BinOp):
            op = BINOPS.get(type(e.op))
            if op is None:
                raise Unsupported(type(e.op).__name__)
            return self.arith(op, self.expr(e.left), self.expr(e.right))
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1 or type(e.ops[0]) not in CMPOPS:
                raise Unsupported("a chained or membership comparison")
            return self.call(
                CMPOPS[type(e.ops[0])], [self.expr(e.left), self.expr(e.comparators[0])]
            )
        if isinstance(e, ast.UnaryOp):
            if type(e.op) not in UNARY:
                raise Unsupported(type(e.op).__name__)
            return self.call(UNARY[type(e.op)], [self.expr(e.operand)])
        if isinstance(e, ast.BoolOp):
            return self.boolop(e)
        if isinstance(e, ast.IfExp):
            return self.ifexp(e)
        if isinstance(e, ast.Subscript):
            aty, ptr = self.element(e)
            return aty.dtype, None if self.b is None else self.load(aty, ptr)
        if isinstance(e, ast.Call):
            return self.callexpr(e)
        if (
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and (e.value.id, e.attr) in (("np", "inf"), ("math", "inf"))
        ):
            return self.constant(math.inf)  # a float64 global, as Numba types it
        raise Unsupported(type(e).__name__)

    def constant(self, v: object) -> Value:
        if isinstance(v, bool):
            ty: Any = types.boolean
        elif isinstance(v, int):
            ty = types.int64
        elif isinstance(v, float):
            ty = types.float64
        else:
            raise Unsupported(f"a constant {v!r}")
        if self.b is None:
            return ty, None
        return ty, self.context.get_constant(ty, v)

    def callexpr(self, e: ast.Call) -> Value:
        if e.keywords:
            raise Unsupported("keyword arguments")
        f = e.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id == "np" and f.attr in NUMBERS and len(e.args) == 1:
                to = NUMBERS[f.attr]
                v = self.expr(e.args[0])
                if not isinstance(v[0], (types.Number, types.Boolean)):
                    raise Unsupported(f"np.{f.attr} of a {v[0]}")
                return to, self.cast(v, to)
            if f.value.id == "math" and isinstance(getattr(math, f.attr, None), type(math.sqrt)):
                return self.call(getattr(math, f.attr), [self.expr(a) for a in e.args])
            raise Unsupported(f"{f.value.id}.{f.attr}")
        if not isinstance(f, ast.Name) or f.id not in self.ns or f.id in ("carray", "stack_empty"):
            raise Unsupported(f"a call of {ast.unparse(f)}")
        from . import runtime

        if self.b is not None and f.id in runtime._INLINED:
            runtime._always_inlined(f.id)  # as NoAliasCompiler.compile_extra does for Numba
        return self.call(self.ns[f.id], [self.expr(a) for a in e.args])

    def boolop(self, e: ast.BoolOp) -> Value:
        """``a and b`` / ``a or b`` of conditions, short-circuited (a guard keeps a read in bounds)."""
        first = self.truth(self.expr(e.values[0]))
        rest = e.values[1:]
        if self.b is None:
            for x in rest:
                self.truth(self.expr(x))
            return types.boolean, None
        b = self.b
        is_and = isinstance(e.op, ast.And)
        done = b.append_basic_block("bool.end")
        incoming = []
        value = first
        for x in rest:
            here = b.block
            nxt = b.append_basic_block("bool.next")
            if is_and:
                b.cbranch(value, nxt, done)
            else:
                b.cbranch(value, done, nxt)
            incoming.append((ir.Constant(ir.IntType(1), 0 if is_and else 1), here))
            b.position_at_end(nxt)
            value = self.truth(self.expr(x))
        incoming.append((value, b.block))
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(ir.IntType(1))
        for val, block in incoming:
            phi.add_incoming(val, block)
        return types.boolean, phi

    def ifexp(self, e: ast.IfExp) -> Value:
        cond = self.truth(self.expr(e.test))
        if self.b is None:
            t, f = self.expr(e.body), self.expr(e.orelse)
            ty = self.typingctx.unify_pairs(t[0], f[0])
            if ty is None:
                raise Unsupported(f"branches of types {t[0]} and {f[0]}")
            return ty, None
        b = self.b
        then, orelse, done = (b.append_basic_block(n) for n in ("if.then", "if.else", "if.end"))
        b.cbranch(cond, then, orelse)
        b.position_at_end(then)
        t = self.expr(e.body)
        then_end = b.block
        b.position_at_end(orelse)
        f = self.expr(e.orelse)
        ty = self.typingctx.unify_pairs(t[0], f[0])
        fv = self.cast(f, ty)
        else_end = b.block
        b.branch(done)
        b.position_at_end(then_end)
        tv = self.cast(t, ty)
        then_end = b.block
        b.branch(done)
        b.position_at_end(done)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(fv, else_end)
        return ty, phi


#: LLVM loop hints (``llvm.loop.*`` metadata names) put on every loop.
#:
#: No runtime unrolling: the schedule decides what is unrolled (in the source, or a loop of
#: constant trips that LLVM unrolls fully), and what LLVM's unroller found to unroll at run
#: time was mostly the chunk loop of a parallel kernel, ``range(lo_, hi_)``, whose body is
#: the whole nest: matmul 512's default built in 1.78 s with it and 0.73 s without, and
#: 13 default kernels and 8 tuning candidates ran as fast within the noise (AMD Zen 4,
#: ``experiments/llvm_options_ab.py --a loop-hints= --b loop-hints=<this>``).
LOOP_HINTS: tuple[str, ...] = ("llvm.loop.unroll.runtime.disable",)


def _loop_id(module: ir.Module, hints: tuple[str, ...]) -> ir.MDValue:
    """A loop's own ``llvm.loop`` node (its first operand itself) carrying ``hints``."""
    node = ir.MDValue(module, (), name=str(len(module.metadata)))
    node.operands = (node, *(module.add_metadata([ir.MetaDataString(module, h)]) for h in hints))
    return node
