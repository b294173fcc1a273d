"""Convolutions, pools, LRN and norms against onnxruntime: NumPy evaluation and te kernel.

Each built kernel costs about a second of Numba compile, so the kernels cover
what is new to the lowering (padding stages, strides, dilation, groups, the
ConvTranspose gather, the average's divisor) and the many ``auto_pad`` /
``ceil_mode`` variants are checked on the evaluation alone (``lower=False``):
the lowering reads the same parameter readers.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.helpers import check_op, evaluate, ort_run
from tuner.graph import GraphError, Node
from tuner.graph.ops import OpKind, opdef
from tuner.graph.ops.windows import conv_params, conv_transpose_params, pool_params

rng = np.random.default_rng(13)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def node(op: str, **attrs: object) -> Node:
    return Node(op, ("x", "w"), ("y",), attrs, "n0")


# -- parameter readers ---------------------------------------------------------------------


def test_conv_params_fill_defaults_and_resolve_same_padding() -> None:
    p = conv_params(node("Conv"), (1, 4, 7, 5), (6, 4, 3, 2))
    assert (p.kernel, p.strides, p.dilations, p.group) == ((3, 2), (1, 1), (1, 1), 1)
    assert (p.pads_begin, p.pads_end, p.out_spatial) == ((0, 0), (0, 0), (5, 4))
    # ceil(7/2) = 4 outputs need 3 + 3*2 - 7 = 2 rows of padding; 6 -> 3 need 1 (odd at the end).
    up = conv_params(
        node("Conv", strides=(2, 2), auto_pad="SAME_UPPER"), (1, 4, 7, 6), (6, 4, 3, 3)
    )
    assert (up.pads_begin, up.pads_end, up.out_spatial) == ((1, 0), (1, 1), (4, 3))
    low = conv_params(
        node("Conv", strides=(2, 2), auto_pad="SAME_LOWER"), (1, 4, 7, 6), (6, 4, 3, 3)
    )
    assert (low.pads_begin, low.pads_end) == ((1, 1), (1, 0))
    assert up.uniform() is None
    sym = conv_params(node("Conv", pads=(1, 1, 1, 1), group=2), (1, 4, 8, 8), (6, 2, 3, 3))
    assert sym.uniform() == (1, 1, 1) and sym.group == 2 and sym.rank == 2


def test_pool_params_ceil_mode_drops_a_window_that_starts_in_the_end_padding() -> None:
    # 5 + 1 + 1 - 2 = 5 over stride 2: ceil gives 4 windows, but the 4th starts at 6 >= 5 + 1.
    n = Node(
        "MaxPool",
        ("x",),
        ("y",),
        {"kernel_shape": (2,), "strides": (2,), "pads": (1, 1), "ceil_mode": 1},
    )
    p = pool_params(n, (1, 1, 5))
    assert p.out_spatial == (3,) and p.ceil_mode and not p.count_include_pad
    n = Node("MaxPool", ("x",), ("y",), {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1})
    assert pool_params(n, (1, 1, 6, 6)).out_spatial == (3, 3)  # floor would give 2


def test_conv_transpose_params_output_shape_sets_the_padding() -> None:
    n = Node("ConvTranspose", ("x", "w"), ("y",), {"strides": (2, 2), "output_shape": (6, 7)})
    p = conv_transpose_params(n, (1, 2, 3, 4), (2, 3, 3, 3))
    # full extents 2*2 + 3 = 7 and 2*3 + 3 = 9: the odd row of padding goes first.
    assert (p.pads_begin, p.pads_end, p.out_spatial) == ((1, 1), (0, 1), (6, 7))


@pytest.mark.parametrize(
    ("op", "attrs", "x", "w", "why"),
    [
        ("Conv", {"group": 2}, (1, 3, 5, 5), (4, 1, 3, 3), "group"),
        ("Conv", {"kernel_shape": (2, 2)}, (1, 3, 5, 5), (4, 3, 3, 3), "kernel_shape"),
        ("Conv", {}, (1, 3, 2, 5), (4, 3, 3, 3), "does not fit"),
        ("Conv", {"auto_pad": "SAME"}, (1, 3, 5, 5), (4, 3, 3, 3), "auto_pad"),
        ("Conv", {"strides": (1,)}, (1, 3, 5, 5), (4, 3, 3, 3), "strides"),
        ("ConvTranspose", {"output_padding": (1, 1)}, (1, 2, 3, 3), (2, 3, 3, 3), "output_padding"),
    ],
)
def test_bad_windows_are_one_line_graph_errors(
    op: str, attrs: dict[str, object], x: tuple[int, ...], w: tuple[int, ...], why: str
) -> None:
    with pytest.raises(GraphError, match=why) as err:
        evaluate(op, [rand(*x), rand(*w)], attrs)
    assert "\n" not in str(err.value) and "node 'n0'" in str(err.value)


def test_kinds() -> None:
    kinds = {op: opdef(op).kind for op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool")}
    assert set(kinds.values()) == {OpKind.ANCHOR}
    assert opdef("GlobalAveragePool").kind is OpKind.REDUCTION
    assert opdef("LRN").kind is OpKind.REDUCTION
    assert opdef("BatchNormalization").kind is OpKind.ELEMENTWISE


# -- Conv ----------------------------------------------------------------------------------


def test_conv_asymmetric_pads_stride_and_bias() -> None:
    x, w, b = rand(1, 3, 7, 5), rand(2, 3, 3, 2), rand(2)
    check_op("Conv", [x, w, b], {"pads": (1, 0, 2, 1), "strides": (2, 1)}, rtol=1e-4, atol=1e-5)


def test_conv_dilated_with_two_groups() -> None:
    x, w = rand(2, 4, 7, 6), rand(6, 2, 2, 3)
    check_op(
        "Conv",
        [x, w],
        {"dilations": (2, 1), "group": 2, "pads": (1, 1, 1, 1)},
        rtol=1e-4,
        atol=1e-5,
    )


def test_depthwise_conv_same_upper_stride_two() -> None:
    x, w, b = rand(1, 3, 5, 6), rand(6, 1, 3, 3), rand(6)  # channel multiplier 2
    check_op(
        "Conv",
        [x, w, b],
        {"group": 3, "strides": (2, 2), "auto_pad": "SAME_UPPER"},
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_1d_same_lower_and_extent_one() -> None:
    check_op(
        "Conv",
        [rand(1, 2, 7), rand(3, 2, 2)],
        {"strides": (2,), "auto_pad": "SAME_LOWER"},
        rtol=1e-4,
    )
    check_op("Conv", [rand(2, 3, 1, 1), rand(1, 3, 1, 1)], {}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("auto_pad", ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("stride", "kernel"), [(1, 2), (2, 3), (3, 1)])
def test_conv_auto_pad_variants(auto_pad: str, stride: int, kernel: int) -> None:
    x, w = rand(1, 2, 7, 6), rand(3, 2, kernel, kernel)
    check_op(
        "Conv", [x, w], {"strides": (stride, stride), "auto_pad": auto_pad}, lower=False, rtol=1e-4
    )


def test_conv_3d_and_float64() -> None:
    x, w = rand(1, 2, 4, 3, 5), rand(2, 2, 2, 2, 3)
    check_op(
        "Conv", [x, w], {"pads": (1, 0, 1, 0, 1, 1), "dilations": (1, 2, 1)}, lower=False, rtol=1e-4
    )
    # onnxruntime has no float64 Conv: compare with its float32 result.
    x64, w64 = rand(1, 2, 5, 5, dtype="float64"), rand(2, 1, 3, 3, dtype="float64")
    attrs = {"group": 2, "pads": (1, 1, 1, 1)}
    ref = ort_run("Conv", [x64.astype("float32"), w64.astype("float32")], attrs)[0]
    (y,) = evaluate("Conv", [x64, w64], attrs)
    assert y.dtype == np.float64 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


# -- ConvTranspose -------------------------------------------------------------------------


def test_conv_transpose_stride_two_output_padding_and_bias() -> None:
    x, w, b = rand(1, 2, 3, 4), rand(2, 3, 3, 3), rand(3)
    attrs = {"strides": (2, 2), "pads": (1, 0, 0, 1), "output_padding": (1, 0)}
    check_op("ConvTranspose", [x, w, b], attrs, rtol=1e-4, atol=1e-5)


def test_conv_transpose_groups_dilation_and_odd_stride() -> None:
    x, w = rand(1, 4, 3, 3), rand(4, 1, 2, 3)  # 2 groups of 2 -> 1 channel each
    check_op(
        "ConvTranspose",
        [x, w],
        {"group": 2, "dilations": (2, 1), "strides": (3, 2)},
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_transpose_same_upper_kernel() -> None:
    x, w = rand(1, 2, 3, 3), rand(2, 2, 3, 2)
    check_op(
        "ConvTranspose", [x, w], {"strides": (2, 2), "auto_pad": "SAME_UPPER"}, rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("auto_pad", ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": (2, 3), "output_padding": (1, 2)},
        {"strides": (3, 3), "dilations": (2, 1)},  # SAME: in*3 exceeds what a 2x2 kernel reaches
        {"strides": (2, 2), "output_shape": (6, 9)},
        {"strides": (2, 2), "output_shape": (7, 9)},  # one more than the full output
    ],
)
def test_conv_transpose_padding_variants(auto_pad: str, attrs: dict[str, object]) -> None:
    x, w = rand(1, 2, 3, 4), rand(2, 3, 2, 2)
    check_op(
        "ConvTranspose", [x, w], {**attrs, "auto_pad": auto_pad}, lower=False, rtol=1e-4, atol=1e-5
    )


def test_conv_transpose_1d() -> None:
    check_op(
        "ConvTranspose",
        [rand(2, 3, 5), rand(3, 2, 3)],
        {"strides": (2,), "pads": (2, 1)},
        lower=False,
    )


# -- pools ---------------------------------------------------------------------------------


def test_max_pool_ceil_mode_asymmetric_pads() -> None:
    attrs = {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 0, 0, 1), "ceil_mode": 1}
    check_op("MaxPool", [rand(1, 2, 7, 6)], attrs)


def test_max_pool_1d_dilated() -> None:
    check_op(
        "MaxPool",
        [rand(2, 3, 11)],
        {"kernel_shape": (3,), "dilations": (2,), "strides": (2,), "pads": (2, 1)},
    )


@pytest.mark.parametrize("auto_pad", ["VALID", "SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_max_pool_auto_pad(auto_pad: str, ceil_mode: int) -> None:
    attrs = {
        "kernel_shape": (3, 2),
        "strides": (2, 3),
        "auto_pad": auto_pad,
        "ceil_mode": ceil_mode,
    }
    check_op("MaxPool", [rand(1, 2, 7, 8)], attrs, lower=False)


def test_pool_same_padding_with_dilations_is_a_graph_error() -> None:
    attrs = {"kernel_shape": (2,), "dilations": (2,), "auto_pad": "SAME_UPPER"}
    with pytest.raises(GraphError, match="dilations"):
        evaluate("AveragePool", [rand(1, 1, 6)], attrs)


def test_max_pool_indices_output_is_a_graph_error() -> None:
    with pytest.raises(GraphError, match="only its first output"):
        evaluate("MaxPool", [rand(1, 1, 4, 4)], {"kernel_shape": (2, 2)}, n_outputs=2)


def test_average_pool_excluding_pad() -> None:
    attrs = {"kernel_shape": (3, 3), "strides": (2, 1), "pads": (1, 2, 2, 0)}
    check_op("AveragePool", [rand(1, 2, 6, 5)], attrs)


def test_average_pool_including_pad_in_ceil_mode() -> None:
    # The last windows overhang the end padding: that part is not counted.
    attrs = {
        "kernel_shape": (3, 2),
        "strides": (2, 2),
        "pads": (1, 1, 0, 0),
        "ceil_mode": 1,
        "count_include_pad": 1,
    }
    check_op("AveragePool", [rand(1, 2, 6, 5)], attrs)


def test_average_pool_dilated_excluding_pad() -> None:
    attrs = {"kernel_shape": (2, 3), "dilations": (2, 2), "pads": (1, 2, 1, 1), "strides": (1, 2)}
    check_op("AveragePool", [rand(1, 1, 5, 7)], attrs, opset=19)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("auto_pad", ["VALID", "SAME_UPPER", "SAME_LOWER"])
def test_average_pool_auto_pad(auto_pad: str, count_include_pad: int) -> None:
    attrs = {
        "kernel_shape": (3, 2),
        "strides": (2, 2),
        "auto_pad": auto_pad,
        "count_include_pad": count_include_pad,
    }
    check_op("AveragePool", [rand(1, 2, 7, 5)], attrs, lower=False)


def test_global_pools() -> None:
    x = rand(2, 3, 5, 7)
    check_op("GlobalAveragePool", [x])
    check_op("GlobalMaxPool", [x])
    check_op("GlobalAveragePool", [rand(1, 2, 3)], lower=False)
    check_op("GlobalMaxPool", [rand(1, 2, 3, 2, 2)], lower=False)


# -- LRN, BatchNormalization, InstanceNormalization ----------------------------------------


def test_lrn_odd_and_even_windows() -> None:
    x = rand(1, 5, 3, 2)
    check_op("LRN", [x], {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, rtol=1e-5)
    # onnxruntime takes odd sizes only (and onnx's reference loops over the wrong axis):
    # the spec's window is [c - floor((size-1)/2), c + ceil((size-1)/2)] within the channels.
    size, alpha = 4, 0.3
    ref = np.empty_like(x)
    for c in range(x.shape[1]):
        window = x[:, max(0, c - 1) : c + 3]
        ref[:, c] = x[:, c] / (1.0 + alpha / size * (window**2).sum(axis=1)) ** 0.75
    np.testing.assert_allclose(
        evaluate("LRN", [x], {"size": size, "alpha": alpha})[0], ref, rtol=1e-5
    )
    check_op("LRN", [rand(2, 3, 4, 1)], {"size": 5, "alpha": 0.5}, lower=False)  # size > C


def _bn_inputs(c: int) -> list[np.ndarray]:
    var = rng.uniform(0.5, 2.0, c).astype("float32")
    return [rand(c), rand(c), rand(c), var]


def test_batch_norm_rank_2_and_4() -> None:
    check_op(
        "BatchNormalization", [rand(3, 5), *_bn_inputs(5)], {"epsilon": 1e-3}, const={1, 2, 3, 4}
    )
    check_op("BatchNormalization", [rand(2, 3, 2, 5), *_bn_inputs(3)], {}, const={1, 2, 3, 4})
    check_op("BatchNormalization", [rand(1, 7, 3), *_bn_inputs(7)], {}, lower=False)


@pytest.mark.parametrize(
    ("attrs", "n_outputs", "why"),
    [({"training_mode": 1}, 1, "training mode"), ({}, 3, "only its first output")],
)
def test_batch_norm_training_is_a_graph_error(
    attrs: dict[str, object], n_outputs: int, why: str
) -> None:
    with pytest.raises(GraphError, match=why):
        evaluate("BatchNormalization", [rand(1, 2, 3), *_bn_inputs(2)], attrs, n_outputs=n_outputs)


def test_instance_norm() -> None:
    check_op(
        "InstanceNormalization",
        [rand(2, 3, 4, 5), rand(3), rand(3)],
        {"epsilon": 1e-4},
        rtol=1e-4,
        atol=1e-5,
    )
    check_op(
        "InstanceNormalization",
        [rand(1, 2, 7), rand(2), rand(2)],
        {},
        lower=False,
        rtol=1e-4,
        atol=1e-5,
    )
