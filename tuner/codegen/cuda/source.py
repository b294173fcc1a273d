"""``numba.cuda.jit`` source for a lowered loop nest: one kernel per launch, and a host entry.

The walk is the shared one (``tuner.lower.render``); what differs from the
CPU's Numba source is a few hooks. A loop bound to a GPU index is not a loop:
its variable is that index (``i_o = cuda.blockIdx.x``), guarded where the
loop covers fewer threads than the launch has. Buffers are flat, indexed
with constant strides; those allocated inside a kernel are declared at its
top, ``cuda.shared.array`` for a block's shared memory and
``cuda.local.array`` for each thread's own. A barrier is
``cuda.syncthreads()``. ``unroll`` loops (and loops of one iteration) are
unrolled in the source.
``cuda`` is a module-level name, so Numba's simulator can swap in its own::

    @cuda.jit(numba.void(numba.float32[::1], numba.float32[::1]))
    def kernel_k0(X, Y):
        i_o = cuda.blockIdx.x
        i_i = cuda.threadIdx.x
        if ((i_o * 64) + i_i) < 1000:
            Y[((i_o * 64) + i_i)] = ...

    def kernel(X, Y):
        kernel_k0[(16, 1, 1), (64, 1, 1)](X, Y)
"""

from __future__ import annotations

from ...lower.gpu import GpuKernel, GpuProgram, gpu_program
from ...lower.ir import Barrier, Buffer, For, Prefetch
from ...lower.lower import LoweredFunc
from ...lower.simplify import Linear, linear, render_linear, simplify
from ...lower.visitor import substitute_stmt
from ...te.dtypes import is_float
from ...te.expr import Binary, Call, Cast, Const, Expr, Var
from ..numba_source import NumbaSourceRenderer

__all__ = ["kernel_name", "render"]


def _numba_type(dtype: str) -> str:
    return "numba.boolean" if dtype == "bool" else f"numba.{dtype}"


class CudaRenderer(NumbaSourceRenderer):
    """One kernel's body; ``declared`` collects the buffers it allocates (name -> buffer)."""

    def __init__(self, buffers: dict[str, Buffer], kernel: GpuKernel):
        super().__init__(buffers)
        self.kernel = kernel
        self.declared: dict[str, Buffer] = {}

    # -- expressions -------------------------------------------------------
    def cast(self, e: Cast, value: str) -> str:
        if e.dtype == "bool":
            return f"({value} != 0)"
        return f"np.{e.dtype}({value})"

    def call(self, e: Call, args: str) -> str:
        if e.name == "abs":
            return f"abs({args})"
        if e.name == "sigmoid":
            one = f"np.{e.dtype}(1.0)" if is_float(e.dtype) else "1.0"
            text = f"({one} / ({one} + math.exp(-({args}))))"
        else:
            text = f"math.{e.name}({args})"
        # math.* of a float32 is float32 on the device but a Python float on the simulator.
        return f"np.{e.dtype}({text})" if e.dtype == "float32" else text

    def index(self, name: str, idx: tuple[Expr, ...]) -> str:
        flat = self.flat_index(name, idx)
        return self.expr(simplify(render_linear(_recombine(linear(simplify(flat))))))

    # -- statements --------------------------------------------------------
    def loop(self, s: For) -> None:
        if s.kind.is_thread:
            self.emit(f"{s.var} = cuda.{s.kind.value}")
            extent = int(s.extent.value)  # type: ignore[attr-defined]  # check_gpu: constant
            if extent < self.kernel.dim(s.kind):
                self.emit(f"if {s.var} < {extent}:")
                self.block(s.body)
            else:
                self.visit(s.body)
            return
        once = isinstance(s.extent, Const) and int(s.extent.value) == 1
        if (s.kind == "unroll" or once) and isinstance(s.extent, Const):
            for k in range(int(s.extent.value)):
                self.visit(substitute_stmt(s.body, _binds(s.var, Const(k)), simplify))
            return
        # parallel and vectorize mean nothing inside one GPU thread: a plain loop.
        self.emit(f"for {s.var} in range({self.expr(s.extent)}):")
        self.block(s.body)

    def alloc(self, b: Buffer) -> None:
        known = self.declared.get(b.name)
        if known is None or known.size < b.size:
            self.declared[b.name] = b

    def barrier(self, s: Barrier) -> None:
        self.emit("cuda.syncthreads()")

    def prefetch(self, s: Prefetch) -> None:
        """A cache hint the CPU's loops give; a GPU kernel's loads need none."""
        self.emit("pass")


def _recombine(lin: Linear) -> Linear:
    """``k*c*(e // c) + k*(e % c)`` back into ``k*e``, as long as such pairs remain.

    A packed buffer's index splits a position into quotient and remainder
    (a shared tile copied in rounds of the block's threads); flattened, the
    parts add up to the position again, without the divisions.
    """
    while True:
        for atom, k in lin.terms.items():
            if not (isinstance(atom, Binary) and atom.op == "mod" and isinstance(atom.b, Const)):
                continue
            c = int(atom.b.value)
            quotient = Binary("floordiv", atom.a, atom.b, atom.dtype)
            if c > 0 and lin.terms.get(quotient) == k * c:
                rest = Linear(
                    {a: v for a, v in lin.terms.items() if a not in (atom, quotient)}, lin.const
                )
                lin = rest.add(linear(atom.a).scale(k))
                break
        else:
            return lin


def _binds(var: str, value: Expr):  # type: ignore[no-untyped-def]
    return lambda e: value if isinstance(e, Var) and e.name == var else None


def kernel_name(func: LoweredFunc, k: int) -> str:
    return f"{func.name}_k{k}"


def render(func: LoweredFunc, jit_flags: str = "", program: GpuProgram | None = None) -> str:
    """The kernels of ``func`` and its host entry, as Python source for ``numba.cuda``.

    Each kernel takes the arguments then the device temporaries (buffers
    between kernels), flat; so does the entry ``<name>(...)``, which launches
    the kernels in order. ``jit_flags`` are added to every ``cuda.jit``.
    """
    program = program or gpu_program(func.body)
    params = [*func.args, *program.temps]
    names = ", ".join(b.name for b in params)
    sig = ", ".join(f"{_numba_type(b.dtype)}[::1]" for b in params)
    flags = f", {jit_flags}" if jit_flags else ""
    out: list[str] = []
    calls: list[str] = []
    for k, kernel in enumerate(program.kernels):
        r = CudaRenderer({b.name: b for b in params}, kernel)
        r.visit(kernel.body)
        decls = []
        for b in r.declared.values():
            where = "shared" if b.scope == "shared" else "local"
            decls.append(f"    {b.name} = cuda.{where}.array({b.size}, {_numba_type(b.dtype)})")
        name = kernel_name(func, k)
        out += [f"@cuda.jit(numba.void({sig}){flags})", f"def {name}({names}):", *decls, *r.lines]
        if not decls and not r.lines:
            out.append("    pass")
        out.append("")
        calls.append(f"    {name}[{kernel.grid}, {kernel.block}]({names})")
    out += [f"def {func.name}({names}):", *(calls or ["    pass"])]
    return "\n".join(out) + "\n"
