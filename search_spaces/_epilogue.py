"""The epilogue DSL: elementwise steps fused after a template's product (conv2d, dense, matmul ...).

A model compiler fuses an ONNX Conv or MatMul with the elementwise operators
after it (a bias, a residual add, an activation, a per-channel scale) into one
tuned kernel. The template's ``epilogue`` argument names those operators as a
text of ``;``-separated steps, applied in order to the template's output value
``v`` (after the template's own bias and activation)::

    relu sigmoid tanh exp log sqrt abs neg erf gelu gelu_tanh hardswish   unary
    clip:<lo>:<hi>  leaky:<alpha>  hardsigmoid:<alpha>:<beta>             parametrised
    addc:<x> mulc:<x> rsubc:<x> divc:<x> rdivc:<x> powc:<x> maxc:<x> minc:<x>
    <op>@<b>  op in add sub rsub mul div rdiv max min pow, b in c f s     an extra input

    <op>@v<k>                                                             an earlier value
    quant_int8:<scale>:<zero_point>  quant_uint8:<scale>:<zero_point>     last step only

``rsub`` is ``x - v`` and ``rdiv`` ``x / v``. A ``quant_*`` step is ONNX's QuantizeLinear
with a constant scale and zero point (``tuner.graph.ops.quant.quantize``): it ends the
epilogue, and the template's output has its integer type (a convolution that writes the
int8 activations the next one reads). ``@v<k>`` reads the value after the
first ``k`` steps (``@v0`` the template's output), ``k`` at most the step's own
position: ``sigmoid;mul@v0`` is SiLU (``v * sigmoid(v)``), ``mul@v0`` alone ``v * v``.
A graph's diamond (a Sigmoid and a Mul both reading a convolution) is one chain
of steps this way. An extra input is a placeholder
appended after the template's own inputs, in order of appearance: ``@c`` has
one value per output channel (shape ``(channels,)``), ``@f`` the output's own
shape (in the template's layout, a residual), ``@s`` shape ``(1,)``. Numbers
are written as Python's ``repr(float(x))`` ("0.5", "6.0", "-inf"), so that one
epilogue has one text, hence one workload key. ``"none"`` is no step.

The text is parsed, never executed: every step is looked up in the tables
below, and a text that is not one of them is an OperatorError naming the step.

>>> epi = parse("mul@c;add@c;clip:0.0:6.0")
>>> [s.text for s in epi.steps], epi.text
(['mul@c', 'add@c', 'clip:0.0:6.0'], 'mul@c;add@c;clip:0.0:6.0')
>>> scale, shift = epi.placeholders(channels=64, shape=(1, 64, 56, 56))
>>> # inside te.compute: epi.apply(conv[n, k, h, w], k, (n, k, h, w), [scale, shift])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner import te
from tuner.graph.ops import activations as act
from tuner.graph.ops.quant import quantize, quantize_numpy
from tuner.te import Tensor

__all__ = [
    "BROADCASTS",
    "CONSTANT_OPS",
    "EXTRA_OPS",
    "NONE",
    "PARAMETRISED",
    "PARAM_DOC",
    "QUANT",
    "UNARY",
    "Epilogue",
    "Step",
    "apply_numpy",
    "check_epilogue",
    "parse",
]

#: The text of no epilogue (the templates' default).
NONE = "none"

Fn = Callable[..., Any]  # on te expressions and NumPy arrays alike, or one of each


@dataclass(frozen=True)
class _Unary:
    fn: Fn  # (math, v): the activation over act.TE or act.NP
    uses: int = 1  # how often the step reads v (the expression tree repeats v that often)


UNARY: dict[str, _Unary] = {
    "relu": _Unary(act.relu),
    "sigmoid": _Unary(lambda m, v: m.sigmoid(v)),
    "tanh": _Unary(lambda m, v: m.tanh(v)),
    "exp": _Unary(lambda m, v: m.exp(v)),
    "log": _Unary(lambda m, v: m.log(v)),
    "sqrt": _Unary(lambda m, v: m.sqrt(v)),
    "abs": _Unary(lambda m, v: m.abs(v)),
    "neg": _Unary(lambda m, v: -v),
    "erf": _Unary(lambda m, v: m.erf(v)),
    "gelu": _Unary(act.gelu, uses=2),
    "gelu_tanh": _Unary(act.gelu_tanh, uses=4),
    "hardswish": _Unary(act.hard_swish, uses=2),
}


@dataclass(frozen=True)
class _Parametrised:
    params: tuple[str, ...]  # the names of its numbers, for messages
    fn: Fn  # (math, v, *numbers)
    uses: int = 1


PARAMETRISED: dict[str, _Parametrised] = {
    "clip": _Parametrised(("lo", "hi"), act.clip),
    "leaky": _Parametrised(("alpha",), act.leaky_relu, uses=2),
    "hardsigmoid": _Parametrised(("alpha", "beta"), act.hard_sigmoid),
}

#: ``op(v, x)`` for both te and NumPy: the steps with one more operand (a constant or an input).
_BINARY: dict[str, Fn] = {  # (math, v, x)
    "add": lambda m, v, x: v + x,
    "sub": lambda m, v, x: v - x,
    "rsub": lambda m, v, x: x - v,
    "mul": lambda m, v, x: v * x,
    "div": lambda m, v, x: v / x,
    "rdiv": lambda m, v, x: x / v,
    "max": lambda m, v, x: m.maximum(v, x),
    "min": lambda m, v, x: m.minimum(v, x),
    "pow": lambda m, v, x: m.pow(v, x),
}
#: The quantizing steps and the integer type each writes (the last step only).
QUANT = {"quant_int8": "int8", "quant_uint8": "uint8"}
#: Steps with a constant: ``addc:<x>`` ... (no ``subc``: that is ``addc`` of ``-x``).
CONSTANT_OPS = ("add", "mul", "rsub", "div", "rdiv", "pow", "max", "min")
#: Steps with an extra input: ``<op>@<b>``.
EXTRA_OPS = ("add", "sub", "rsub", "mul", "div", "rdiv", "max", "min", "pow")
#: Broadcasts of an extra input: one per output channel, the full output, one value.
BROADCASTS = ("c", "f", "s")
#: An operand that is an earlier value of the chain: ``mul@v0``.
_EARLIER = "v"

#: The most copies of the template's value ``v`` the expression may hold (no CSE in te).
_MAX_USES = 64


@dataclass(frozen=True)
class Step:
    """One step: ``kind`` is "unary", "param", "const", "extra", "earlier" or "quant"."""

    kind: str
    op: str
    numbers: tuple[float, ...] = ()
    broadcast: str = ""  # c, f or s for an extra input
    ref: int = 0  # the earlier value an "earlier" step reads: after that many steps

    @property
    def text(self) -> str:
        if self.kind == "extra":
            return f"{self.op}@{self.broadcast}"
        if self.kind == "earlier":
            return f"{self.op}@{_EARLIER}{self.ref}"
        if self.kind == "const":
            return f"{self.op}c:{self.numbers[0]!r}"
        return ":".join([self.op, *(repr(x) for x in self.numbers)])

    @property
    def uses(self) -> int:
        if self.kind == "unary":
            return UNARY[self.op].uses
        return PARAMETRISED[self.op].uses if self.kind == "param" else 1

    @property
    def integer(self) -> bool:
        """Whether the step writes an integer (a quantizing step)."""
        return self.kind == "quant"


def _error(text: str, step: str, why: str) -> Exception:
    from . import OperatorError

    return OperatorError(f"epilogue {text!r}: step {step!r} {why}")


def _number(text: str, step: str, word: str) -> float:
    """A number as ``repr(float(x))`` writes it, so that each epilogue has one text."""
    try:
        x = float(word)
    except ValueError:
        raise _error(text, step, f"has {word!r} where a number belongs") from None
    if math.isnan(x):
        raise _error(text, step, "has a NaN, which no step takes")
    if repr(x) != word:
        raise _error(text, step, f"writes {word!r}; write numbers as Python's repr: {x!r}")
    return x


def _step(text: str, word: str) -> Step:
    if word in UNARY:
        return Step("unary", word)
    if "@" in word:
        op, _, b = word.partition("@")
        if op not in EXTRA_OPS:
            raise _error(text, word, f"has no input op {op!r}; one of {', '.join(EXTRA_OPS)}")
        k = b[len(_EARLIER) :]
        if b.startswith(_EARLIER) and k.isdigit() and str(int(k)) == k:
            return Step("earlier", op, ref=int(k))
        if b not in BROADCASTS:
            raise _error(
                text, word, f"reads {b!r}; one of c (channel), f (full), s (scalar), v<k> (earlier)"
            )
        return Step("extra", op, broadcast=b)
    name, *args = word.split(":")
    if name in QUANT:
        if len(args) != 2:
            raise _error(text, word, "needs 2 numbers (scale:zero_point)")
        scale, zp = (_number(text, word, a) for a in args)
        if not (scale > 0 and math.isfinite(scale)):
            raise _error(text, word, f"has scale {scale!r}; a scale is positive and finite")
        lo, hi = np.iinfo(QUANT[name]).min, np.iinfo(QUANT[name]).max
        if zp != int(zp) or not lo <= zp <= hi:
            raise _error(text, word, f"has zero point {zp!r}, not an {QUANT[name]}")
        return Step("quant", name, (scale, zp))
    if name in PARAMETRISED:
        want = PARAMETRISED[name].params
        if len(args) != len(want):
            raise _error(text, word, f"needs {len(want)} numbers ({':'.join(want)})")
        return Step("param", name, tuple(_number(text, word, a) for a in args))
    if name.endswith("c") and name[:-1] in CONSTANT_OPS:
        if len(args) != 1:
            raise _error(text, word, "needs one number (as in addc:1.0)")
        return Step("const", name[:-1], (_number(text, word, args[0]),))
    known = [
        *UNARY, *PARAMETRISED, *(f"{op}c" for op in CONSTANT_OPS), "<op>@<c|f|s|v<k>>", *QUANT
    ]  # fmt: skip
    raise _error(text, word, f"is not a step; steps are {' '.join(known)}")


@dataclass(frozen=True)
class Epilogue:
    """Parsed steps; builds the te expression and its NumPy twin, and the extra placeholders."""

    steps: tuple[Step, ...] = ()

    @property
    def text(self) -> str:
        """The canonical text (what ``parse`` reads back to these steps)."""
        return ";".join(s.text for s in self.steps) if self.steps else NONE

    def __bool__(self) -> bool:
        return bool(self.steps)

    def out_dtype(self, dtype: str) -> str:
        """The output's dtype: a quantizing last step's integer type, else ``dtype``."""
        if self.steps and self.steps[-1].integer:
            return QUANT[self.steps[-1].op]
        return dtype

    @property
    def extras(self) -> tuple[Step, ...]:
        """The steps that read an extra input, in the order of the inputs."""
        return tuple(s for s in self.steps if s.kind == "extra")

    def extra_shapes(self, channels: int, shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shape of each extra input: ``(channels,)``, the output's ``shape``, or ``(1,)``."""
        by = {"c": (channels,), "f": tuple(shape), "s": (1,)}
        return [by[s.broadcast] for s in self.extras]

    def placeholders(
        self, channels: int, shape: Sequence[int], dtype: str = "float32"
    ) -> list[Tensor]:
        """The extra inputs as placeholders ``E0``, ``E1`` ... (the template appends them)."""
        return [
            te.placeholder(sh, dtype, name=f"E{i}")
            for i, sh in enumerate(self.extra_shapes(channels, shape))
        ]

    def apply(
        self,
        v: te.Expr,
        channel_index: te.Expr,
        out_index: Sequence[te.Expr],
        extras: Sequence[Tensor],
    ) -> te.Expr:
        """The steps on ``v``, the output element ``out_index`` of output channel ``channel_index``.

        ``extras`` are the placeholders of :meth:`placeholders` (or tensors of their shapes).
        """
        inputs, seen = iter(extras), [v]
        for s in self.steps:
            if s.kind == "extra":
                t = next(inputs)
                reads: dict[str, tuple[te.Expr | int, ...]] = {
                    "c": (channel_index,),
                    "f": tuple(out_index),
                    "s": (0,),
                }
                v = _BINARY[s.op](act.TE, v, t[reads[s.broadcast]])
            elif s.kind == "earlier":
                v = _BINARY[s.op](act.TE, v, seen[s.ref])
            elif s.kind == "quant":
                v = quantize(v, s.numbers[0], s.numbers[1], QUANT[s.op])
            else:
                v = _te_step(s, v)
            seen.append(v)
        return v

    def apply_numpy(
        self, y: np.ndarray, extras: Sequence[np.ndarray], channel_axis: int
    ) -> np.ndarray:
        """The NumPy twin of :meth:`apply` on the whole output ``y`` (in y's dtype, or the
        integer type of a quantizing last step)."""
        inputs, dtype, seen = iter(extras), y.dtype, [y]
        for s in self.steps:
            if s.kind == "quant":
                scale, zero_point = s.numbers
                return quantize_numpy(y.astype(np.float32), scale, zero_point, QUANT[s.op])
            if s.kind == "earlier":
                y = _BINARY[s.op](act.NP, y, seen[s.ref])
            elif s.kind == "extra":
                x = np.asarray(next(inputs), dtype=dtype)
                if s.broadcast == "c":
                    shape = [1] * y.ndim
                    shape[channel_axis] = -1
                    x = x.reshape(shape)
                y = _BINARY[s.op](act.NP, y, x)
            elif s.kind == "unary":
                y = UNARY[s.op].fn(act.NP, y)
            elif s.kind == "param":
                y = PARAMETRISED[s.op].fn(act.NP, y, *s.numbers)
            else:
                y = _BINARY[s.op](act.NP, y, dtype.type(s.numbers[0]))
            y = np.asarray(y, dtype=dtype)
            seen.append(y)
        return y

    def flops(self, elements: int) -> float:
        """One operation per element per step (an approximation: gelu takes several)."""
        return float(len(self.steps) * elements)


def _te_step(s: Step, v: te.Expr) -> te.Expr:
    if s.kind == "unary":
        return UNARY[s.op].fn(act.TE, v)  # type: ignore[no-any-return]
    if s.kind == "param":
        return PARAMETRISED[s.op].fn(act.TE, v, *s.numbers)  # type: ignore[no-any-return]
    return _BINARY[s.op](act.TE, v, s.numbers[0])  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=256)
def parse(text: str) -> Epilogue:
    """Read an epilogue text (``"none"`` is no step); a bad one is an OperatorError of one line."""
    if text == NONE:
        return Epilogue()
    if not text:
        raise _error(text, "", f"is empty; no epilogue is {NONE!r}")
    steps = tuple(_step(text, word) for word in text.split(";"))
    copies = [1]  # how often the expression after each step holds the template's value
    for i, s in enumerate(steps):
        if s.kind == "earlier" and s.ref > i:
            raise _error(text, s.text, f"reads v{s.ref}, not made yet (step {i} reads v0 to v{i})")
        copies.append(copies[i] + copies[s.ref] if s.kind == "earlier" else copies[i] * s.uses)
        if s.integer and i + 1 < len(steps):
            raise _error(text, s.text, "quantizes, so it must be the last step")
        if copies[-1] > _MAX_USES:
            raise _error(
                text,
                s.text,
                f"repeats the template's value {copies[-1]} times (at most {_MAX_USES})",
            )
    return Epilogue(steps)


def check_epilogue(text: str, dtype: str, op: str) -> None:
    """Raise OperatorError for a bad ``text``, or for an epilogue on a non-float output
    (matmul's int8 accumulates in int32): what the templates' ``check`` calls."""
    from . import OperatorError

    if parse(text) and dtype not in ("float32", "float64"):
        raise OperatorError(f"{op} takes an epilogue only for float dtypes, not {dtype}")


def apply_numpy(
    text: str, y: np.ndarray, extras: Sequence[np.ndarray], channel_axis: int
) -> np.ndarray:
    """The epilogue ``text`` on the output ``y`` by NumPy: the operators' references use it.

    >>> apply_numpy("add@c;relu", np.zeros((2, 3)), [np.array([1.0, -1.0, 2.0])], 1)[0]
    array([1., 0., 2.])
    """
    return parse(text).apply_numpy(y, extras, channel_axis)


#: The template parameter's documentation (each template adds ``Param("epilogue", ...)``).
PARAM_DOC = (
    "elementwise steps after the output, ';'-separated (relu, add@c, clip:0.0:6.0 ...;"
    " see search_spaces._epilogue); extra inputs follow the template's own"
)
