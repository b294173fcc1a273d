"""The epilogue DSL: parsing, the NumPy twin against te, and every template with an epilogue."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tuner
from search_spaces import OperatorError, canonical_records, get_operator
from search_spaces._epilogue import (
    BROADCASTS,
    CONSTANT_OPS,
    EXTRA_OPS,
    UNARY,
    Step,
    apply_numpy,
    parse,
)
from tuner import te
from tuner.workload import Workload

from .targets import AVX2

# -- parsing ----------------------------------------------------------------------------------

EVERY_STEP = [
    *UNARY,
    "clip:0.0:6.0",
    "clip:-inf:6.0",
    "clip:0.0:inf",
    "leaky:0.01",
    "hardsigmoid:0.2:0.5",
    *(f"{op}c:-1.5" for op in CONSTANT_OPS),
    *(f"{op}@{b}" for op in EXTRA_OPS for b in BROADCASTS),
    *(f"{op}@v0" for op in EXTRA_OPS),
]


@pytest.mark.parametrize("text", EVERY_STEP)
def test_each_step_reads_back_to_its_own_text(text: str) -> None:
    (step,) = parse(text).steps
    assert step.text == text and parse(text).text == text


def test_a_chain_keeps_its_order_and_its_extra_inputs_in_order() -> None:
    epi = parse("mul@c;add@f;clip:0.0:6.0;rsubc:1.0;pow@s")
    assert [s.kind for s in epi.steps] == ["extra", "extra", "param", "const", "extra"]
    assert epi.steps[3] == Step("const", "rsub", (1.0,))
    assert epi.extra_shapes(5, (2, 5)) == [(5,), (2, 5), (1,)]
    assert [t.name for t in epi.placeholders(5, (2, 5), "float64")] == ["E0", "E1", "E2"]
    assert parse("none").steps == () and not parse("none") and parse("none").text == "none"


def test_an_earlier_value_makes_a_diamond_a_chain() -> None:
    """``sigmoid;mul@v0`` is SiLU; ``@vK`` reads the value after K steps, extras unchanged."""
    epi = parse("add@c;sigmoid;mul@v1;add@f;sub@v3")
    assert [s.kind for s in epi.steps] == ["extra", "unary", "earlier", "extra", "earlier"]
    assert epi.steps[2] == Step("earlier", "mul", ref=1) and len(epi.extras) == 2
    y, c, f = np.array([[-1.0, 0.5]]), np.array([0.25, -0.5]), np.array([[2.0, 3.0]])
    z = y + c
    silu = z / (1.0 + np.exp(-z))
    np.testing.assert_allclose(apply_numpy(epi.text, y, [c, f], 1), (silu + f) - silu)


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "is empty"),
        ("relu;", "step '' is not a step"),
        ("relu;swish", "step 'swish' is not a step"),
        ("relu; sigmoid", "step ' sigmoid' is not a step"),
        ("subc:1.0", "step 'subc:1.0' is not a step"),
        ("clip:0:6", "write numbers as Python's repr: 0.0"),
        ("clip:0.0", "needs 2 numbers (lo:hi)"),
        ("leaky", "needs 1 numbers (alpha)"),
        ("addc:x", "has 'x' where a number belongs"),
        ("addc:1.0:2.0", "needs one number"),
        ("mulc:nan", "NaN"),
        ("add@x", "reads 'x'"),
        ("mul@v1", "reads v1, not made yet"),
        ("sigmoid;mul@v01", "reads 'v01'"),
        ("mul@v0;mul@v1;mul@v2;mul@v3;mul@v4;mul@v5;mul@v6", "repeats the template's value 128"),
        ("xor@c", "has no input op 'xor'"),
        ("gelu_tanh;gelu_tanh;gelu_tanh;gelu_tanh", "repeats the template's value 256 times"),
        ("__import__('os')", "is not a step"),
    ],
)
def test_a_bad_text_is_one_line_naming_the_step(text: str, says: str) -> None:
    with pytest.raises(OperatorError) as info:
        parse(text)
    message = str(info.value)
    assert says in message and "\n" not in message and message.startswith(f"epilogue {text!r}")


SMALL = {
    "conv2d": {"C": 3, "H": 5, "W": 5, "K": 2},
    "depthwise_conv2d": {"C": 3, "H": 5, "W": 5},
    "dense": {"batch": 2, "in_features": 3, "out_features": 4},
    "matmul": {"M": 2, "N": 3, "K": 4},
    "batch_matmul": {"B": 1, "M": 2, "N": 3, "K": 4},
}


@pytest.mark.parametrize("name", SMALL)
def test_the_operators_refuse_a_bad_epilogue(name: str) -> None:
    with pytest.raises(OperatorError, match="step 'swish'"):
        get_operator(name).parse_args({**SMALL[name], "epilogue": "relu;swish"})


def test_matmul_takes_an_epilogue_only_for_float_dtypes() -> None:
    op = get_operator("matmul")
    with pytest.raises(OperatorError, match="only for float dtypes, not int8"):
        op.parse_args({**SMALL["matmul"], "dtype": "int8", "epilogue": "relu"})
    assert op.parse_args({**SMALL["matmul"], "dtype": "int8"})["epilogue"] == "none"


# -- the NumPy twin against te, on a 3 x 5 tensor ------------------------------------------------

TWIN_CHAINS = [
    "relu;sigmoid;tanh;exp;log;sqrt;abs;neg;erf",
    "gelu;gelu_tanh;hardswish",
    "clip:-0.5:0.5;leaky:0.1;hardsigmoid:0.2:0.5;clip:-inf:0.6;clip:0.55:inf",
    "addc:2.0;mulc:0.5;rsubc:3.0;divc:2.0;rdivc:1.0;powc:1.5;maxc:0.9;minc:1.1",
    # every input op and broadcast, kept away from zero and negative bases
    "abs;addc:1.0;add@c;mul@f;div@c;rdiv@f;pow@s;sub@f;rsub@s;max@c;min@s",
    # earlier values: SiLU, a square, a decomposed GELU
    "sigmoid;mul@v0;mul@v2;mulc:0.7071067690849304;erf;addc:1.0;mul@v3;mulc:0.5;rsub@v1",
]


@pytest.mark.parametrize(
    "text, dtype",
    [*((t, "float32") for t in TWIN_CHAINS), (TWIN_CHAINS[1], "float64")],
)
def test_the_numpy_twin_matches_the_kernel(text: str, dtype: str) -> None:
    epi = parse(text)
    X = te.placeholder((3, 5), dtype, name="X")
    extras = epi.placeholders(5, (3, 5), dtype)
    Y = te.compute((3, 5), lambda i, j: epi.apply(X[i, j], j, (i, j), extras), name="Y")
    rng = np.random.default_rng(0)
    x = (rng.random((3, 5)) * 2 - 1).astype(dtype)
    ins = [(rng.random(t.shape_ints) + 0.5).astype(dtype) for t in extras]
    out = np.zeros((3, 5), dtype)
    tuner.build(te.create_schedule(Y), [X, *extras, Y])(x, *ins, out)
    expected = apply_numpy(text, x.astype(np.float64), ins, channel_axis=1)
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_the_twin_broadcasts_a_channel_input_along_the_given_axis() -> None:
    y = np.zeros((2, 3, 4))
    got = apply_numpy("add@c", y, [np.arange(3.0)], channel_axis=1)
    assert got.shape == (2, 3, 4) and (got[1, :, 2] == [0, 1, 2]).all()
    assert apply_numpy("add@c", y.transpose(0, 2, 1), [np.arange(3.0)], 2)[0, 0, 2] == 2.0


# -- every template with an epilogue ---------------------------------------------------------

TEMPLATE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("conv2d", dict(C=3, H=7, W=5, K=5, pad=1, bias=True, epilogue="add@c;relu")),
    ("conv2d", dict(N=2, C=2, H=5, W=7, K=7, S=1, epilogue="mul@c;add@c;sigmoid")),
    ("conv2d", dict(N=1, C=5, H=7, W=7, K=17, layout="NHWC", epilogue="add@c;sigmoid;mul@v1")),
    (
        "conv2d",
        dict(N=2, C=4, H=5, W=7, K=3, S=1, stride=2, layout="NHWC", epilogue="add@f;clip:0.0:6.0"),
    ),
    ("depthwise_conv2d", dict(C=3, H=7, W=11, pad=1, epilogue="add@c;relu")),
    ("depthwise_conv2d", dict(N=2, C=1, H=5, W=3, R=1, epilogue="add@f;gelu")),
    (
        "dense",
        dict(
            batch=7, in_features=13, out_features=5, activation="relu", epilogue="add@s;hardswish"
        ),
    ),
    (
        "dense",
        dict(batch=1, in_features=11, out_features=17, bias=False, epilogue="mul@c;add@c;sigmoid"),
    ),
    ("matmul", dict(M=7, N=17, K=13, epilogue="add@c;relu")),
    ("matmul", dict(M=1, N=5, K=3, trans_a=True, trans_b=True, epilogue="add@f;clip:0.0:6.0")),
    ("matmul", dict(M=5, N=3, K=2, dtype="float64", epilogue="gelu_tanh;mulc:2.0")),
    ("matmul", dict(M=7, N=17, K=13, channels="rows", epilogue="add@c;relu")),
    ("matmul", dict(M=13, N=49, K=5, channels="rows", epilogue="mul@c;add@f;clip:0.0:6.0")),
    ("matmul", dict(M=101, N=9, K=5, channels="rows", epilogue="add@c")),  # blocks by default
    ("matmul", dict(M=13, N=49, K=5, channels="rows", epilogue="sigmoid;mul@v0;add@f")),
    ("batch_matmul", dict(B=3, M=7, N=5, K=13, epilogue="add@f;leaky:0.1")),
    ("batch_matmul", dict(B=1, M=1, N=17, K=3, trans_b=True, epilogue="mul@c;add@s;tanh")),
]


def _configs(name: str, args: dict[str, Any]) -> list[Any]:
    """The default config and one sampled from the space (seeded by the case)."""
    op = get_operator(name)
    space = op.space(args, AVX2)
    rng = np.random.default_rng(len(str(args)))
    return [space.validate(op.default_config(args, AVX2)), space.sample(rng)]


@pytest.mark.parametrize("which", [0, 1], ids=["default", "sampled"])
@pytest.mark.parametrize(
    "name, raw",
    TEMPLATE_CASES,
    ids=[f"{n}-{a['epilogue']}-{a.get('channels', '')}" for n, a in TEMPLATE_CASES],
)
def test_each_template_with_an_epilogue_matches_its_reference(
    name: str, raw: dict[str, Any], which: int
) -> None:
    op = get_operator(name)
    args = op.parse_args(raw)
    cfg = _configs(name, args)[which]
    s, tensors = op.schedule(cfg, args, AVX2)
    extras = len(parse(args["epilogue"]).extras)
    assert [t.name for t in tensors[-1 - extras : -1]] == [f"E{i}" for i in range(extras)]
    inputs = op.make_inputs(args, seed=3, target=AVX2)
    out = np.full(tensors[-1].shape_ints, 12345, tensors[-1].dtype)
    tuner.build(s, tensors)(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs, **args), rtol=1e-4, atol=1e-5)


def test_a_full_input_has_the_output_layout_and_a_channel_input_the_channels() -> None:
    op = get_operator("conv2d")
    for layout, out_shape in (("NCHW", (2, 7, 3, 4)), ("NHWC", (2, 3, 4, 7))):
        args = op.parse_args(
            dict(N=2, C=3, H=5, W=6, K=7, layout=layout, bias=True, epilogue="add@f;mul@c")
        )
        _, tensors = op.schedule(op.default_config(args, AVX2), args, AVX2)
        assert [(t.name, t.shape_ints) for t in tensors] == [
            ("X", (2, 3, 5, 6) if layout == "NCHW" else (2, 5, 6, 3)),
            ("W", (7, 3, 3, 3)),
            ("B", (7,)),
            ("E0", out_shape),
            ("E1", (7,)),
            ("Y", out_shape),
        ]


def test_an_epilogue_adds_one_flop_per_output_per_step_and_keeps_the_plain_space() -> None:
    op = get_operator("dense")
    plain = op.parse_args(dict(batch=3, in_features=4, out_features=5))
    fused = op.parse_args(dict(batch=3, in_features=4, out_features=5, epilogue="add@c;relu"))
    assert op.flops(fused) == op.flops(plain) + 2 * 3 * 5
    assert op.space(fused, AVX2).version == op.space(plain, AVX2).version
    mm = get_operator("matmul")
    a = mm.parse_args(dict(M=3, N=4, K=5))
    b = mm.parse_args(dict(M=3, N=4, K=5, epilogue="gelu"))
    assert mm.flops(b) == mm.flops(a) + 12
    # matmul's epilogue adds one knob, where the product is read back from (absent: block)
    extra = set(mm.space(b, AVX2).knobs) - set(mm.space(a, AVX2).knobs)
    assert extra == {"epilogue_at"} and set(mm.space(a, AVX2).knobs) < set(mm.space(b, AVX2).knobs)


def test_records_written_before_the_argument_name_the_plain_workload() -> None:
    from records import Record

    op = get_operator("conv2d")
    args = op.parse_args(dict(C=3, H=5, W=5, K=2))
    old = {k: v for k, v in args.items() if k != "epilogue"}
    cfg = op.default_config(args, AVX2)
    rec = Record.make(Workload.make("conv2d", **old), AVX2, cfg, samples=(1e-6,))
    (done,) = canonical_records([rec])
    assert done.workload == Workload.make("conv2d", **args)
    assert "epilogue=none" in done.workload.key and "epilogue" not in rec.workload.key
