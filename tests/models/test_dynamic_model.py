"""Models with symbolic dimensions: ``compile_model(..., dynamic=..., bounds=...)`` against onnxruntime.

The shipped encoder with a symbolic batch and sequence runs at several
(batch, sequence) pairs in ``specialize`` and ``bucket``; a bucket pads, masks
its softmaxes and slices, and without the mask it would be wrong (checked,
so the comparison cannot pass by accident). Models that padding would change
are refused before anything is built; bounds give one-line errors.
``generic`` builds every kernel once: later shapes reuse the same kernel
objects and only plan their buffers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tuner.graph.ir import GraphError
from tuner.model.module import ModelInputError, Module, compile_model

from .builders import BUILDERS, random_feeds

DATA = Path(__file__).parent / "data"
ENCODER = DATA / "encoder_small_dynamic.onnx"
RTOL, ATOL = 1e-3, 1e-4


def _tokens(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 100 * batch + seq)
    return {"input": rng.standard_normal((batch, seq, 32)).astype(np.float32)}


def _reference(model: Path | onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _assert_matches(module: Module, model: Path, feeds: dict[str, np.ndarray]) -> None:
    got = module.run(feeds)
    want = _reference(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_bucket_serves_the_encoder_at_many_shapes_with_one_build_per_bucket() -> None:
    module = compile_model(ENCODER, dynamic="bucket", bounds={"batch": 4, "seq": 32})
    assert module.buckets == {"batch": [1, 2, 4], "seq": [1, 2, 4, 8, 16, 32]}
    assert module.padding is not None
    assert {sym for _, sym, _ in module.padding.masks} == {"seq"}  # both layers' softmaxes
    assert len(module.padding.masks) == 2
    pairs = [(1, 16), (2, 7), (3, 13), (1, 9), (2, 5), (4, 32), (1, 1)]
    for batch, seq in pairs:
        _assert_matches(module, ENCODER, _tokens(batch, seq))
    # (1, 9) shares (1, 16)'s bucket and (2, 5) shares (2, 7)'s
    assert len(module.plans) == len(pairs) - 2
    # out= takes the sliced shape and is written in place
    feeds = _tokens(3, 11)
    out = np.empty((3, 11, 32), np.float32)
    (y,) = module.run(feeds, out=[out])
    assert y is out
    np.testing.assert_allclose(out, _reference(ENCODER, feeds)[0], rtol=RTOL, atol=ATOL)
    with pytest.raises(ModelInputError, match=r"out for 'output'"):
        module.run(feeds, out=[np.empty((3, 16, 32), np.float32)])


@pytest.mark.slow
def test_without_the_mask_a_padded_sequence_would_change_the_results() -> None:
    module = compile_model(ENCODER, dynamic="bucket", bounds={"batch": 2, "seq": 16})
    assert module.padding is not None
    module.padding = dataclasses.replace(module.padding, masks=())
    feeds = _tokens(1, 9)
    (y,) = module.run(feeds)
    (want,) = _reference(ENCODER, feeds)
    assert not np.allclose(y, want, rtol=RTOL, atol=ATOL)  # padded keys leak into real rows
    exact = _tokens(1, 8)  # a bucket's own length pads nothing: still right
    np.testing.assert_allclose(
        module.run(exact)[0], _reference(ENCODER, exact)[0], rtol=RTOL, atol=ATOL
    )


@pytest.mark.slow
def test_generic_builds_the_encoder_once_and_serves_every_shape() -> None:
    module = compile_model(ENCODER, dynamic="generic", bounds={"batch": 4, "seq": 64})
    assert module.generic is not None
    families = {id(f.kernel) for f in module.generic.families.values()}
    assert len(families) == 11  # one kernel per distinct task, shared by both layers
    for batch, seq in [(1, 16), (2, 7), (3, 1), (4, 64), (1, 33), (2, 5)]:
        _assert_matches(module, ENCODER, _tokens(batch, seq))
    assert len(module.plans) == 6
    for plan in module.plans:  # every shape ran the kernels built at compile time
        assert {id(k) for k in plan.kernels} == families
    with pytest.raises(ModelInputError, match=r"seq=65 on axis 1, outside its bounds 1\.\.64"):
        module.run(_tokens(1, 65))


def test_generic_serves_a_convolution_over_any_image_size() -> None:
    model = _conv_over_a_symbolic_image()
    module = compile_model(model, dynamic="generic", bounds={"H": 64, "W": 64})
    for h, w in [(5, 9), (1, 1), (32, 17)]:
        feeds = {"x": np.random.default_rng(h).standard_normal((1, 3, h, w)).astype(np.float32)}
        np.testing.assert_allclose(
            module.run(feeds)[0], _reference(model, feeds)[0], rtol=RTOL, atol=ATOL
        )


def test_generic_serves_a_small_batch_through_dense_and_softmax() -> None:
    model = BUILDERS["symbolic_batch"]()
    module = compile_model(model, dynamic="generic", bounds={"N": 16})
    for n in (1, 3, 16):
        feeds = random_feeds(model, seed=n, dims={"N": n})
        np.testing.assert_allclose(
            module.run(feeds)[0], _reference(model, feeds)[0], rtol=RTOL, atol=ATOL
        )


def test_generic_refuses_a_task_without_a_shape_generic_kernel() -> None:
    with pytest.raises(GraphError, match=r"generic: no shape-generic kernel for ReduceMean"):
        compile_model(BUILDERS["sequence_mean"](), dynamic="generic", bounds={"N": 4, "S": 64})


@pytest.mark.slow
def test_specialize_serves_the_encoder_within_its_bounds() -> None:
    module = compile_model(ENCODER, bounds={"batch": (1, 3), "seq": (2, 24)})
    for batch, seq in [(1, 16), (3, 2), (2, 23), (1, 16)]:
        _assert_matches(module, ENCODER, _tokens(batch, seq))
    assert len(module.plans) == 3
    with pytest.raises(ModelInputError, match=r"seq=25 on axis 1, outside its bounds 2\.\.24"):
        module.run(_tokens(1, 25))
    with pytest.raises(ModelInputError, match=r"batch=4 on axis 0, outside its bounds 1\.\.3"):
        module.run(_tokens(4, 8))


def test_bucket_pads_a_batch_through_matmul_and_softmax() -> None:
    model = BUILDERS["symbolic_batch"]()
    module = compile_model(model, dynamic="bucket", bounds={"N": 8})
    assert (
        module.padding is not None and module.padding.masks == ()
    )  # the softmax is over a static axis
    for n in (1, 3, 8, 5):
        feeds = random_feeds(model, seed=n, dims={"N": n})
        (got,) = module.run(feeds)
        (want,) = _reference(model, feeds)
        assert got.shape == (n, 2, 4)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert sorted(p.signature for p in module.plans) == [((1, 16),), ((4, 16),), ((8, 16),)]


def test_bucket_refuses_a_model_that_reduces_over_the_padded_axis() -> None:
    model = BUILDERS["sequence_mean"]()
    with pytest.raises(
        GraphError, match=r"bucket: ReduceMean node .* axis 1, which is padded \(S\)"
    ):
        compile_model(model, dynamic="bucket", bounds={"N": 4, "S": 64})
    module = compile_model(model, bounds={"N": 4, "S": 64})  # specialize serves it
    feeds = random_feeds(model, seed=2, dims={"N": 3, "S": 7})
    np.testing.assert_allclose(
        module.run(feeds)[0], _reference(model, feeds)[0], rtol=RTOL, atol=ATOL
    )


def _conv_over_a_symbolic_image() -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.FLOAT, (4, 3, 3, 3), np.ones(108, np.float32))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, "H", "W"))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, "H", "W"))],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_bucket_refuses_a_convolution_over_a_padded_image() -> None:
    with pytest.raises(GraphError, match=r"bucket: Conv node .* axis 2, which is padded \(H\)"):
        compile_model(_conv_over_a_symbolic_image(), dynamic="bucket", bounds={"H": 64, "W": 64})


def test_bucket_pads_a_batch_of_images_through_a_convolution() -> None:
    """Convolutions and pools keep the images of a batch apart: a padded batch is sound."""
    model = _conv_over_a_symbolic_image()
    for dim in (*model.graph.input, *model.graph.output):
        shape = dim.type.tensor_type.shape.dim
        shape[0].dim_param, shape[2].dim_value, shape[3].dim_value = "N", 9, 9
    module = compile_model(model, dynamic="bucket", bounds={"N": 4})
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 3, 9, 9)).astype(np.float32)
        (got,) = module.run({"x": x})
        assert got.shape == (n, 4, 9, 9)
        np.testing.assert_allclose(got, _reference(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


def test_generic_serves_a_batch_of_images_through_a_convolution_with_an_epilogue() -> None:
    """The convolution's bias and relu are a stage over the symbolic batch (ViT's patches)."""
    model = _conv_over_a_symbolic_image()
    b = helper.make_tensor("b", TensorProto.FLOAT, (4,), np.arange(4, dtype=np.float32) - 1.5)
    model.graph.initializer.append(b)
    conv = model.graph.node[0]
    conv.input.append("b")
    conv.output[0] = "z"
    model.graph.node.append(helper.make_node("Relu", ["z"], ["y"]))
    for dim in (*model.graph.input, *model.graph.output):
        shape = dim.type.tensor_type.shape.dim
        shape[0].dim_param, shape[2].dim_value, shape[3].dim_value = "N", 9, 9
    module = compile_model(model, dynamic="generic", bounds={"N": 4})
    for n in (1, 3, 4):
        x = np.random.default_rng(n).standard_normal((n, 3, 9, 9)).astype(np.float32)
        np.testing.assert_allclose(
            module.run({"x": x})[0], _reference(model, {"x": x})[0], rtol=RTOL, atol=ATOL
        )
    assert module.generic is not None
    built = {id(f.kernel) for f in module.generic.families.values()}
    assert all({id(k) for k in plan.kernels} <= built for plan in module.plans)


def test_generic_refuses_a_concatenation_along_a_symbolic_axis() -> None:
    model = _two_inputs()
    model.graph.node[0].CopyFrom(helper.make_node("Concat", ["a", "b"], ["y"], axis=0))
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "m"
    with pytest.raises(GraphError, match=r"Concat node .* concatenates along a symbolic axis"):
        compile_model(model, dynamic="generic", bounds={"n": 8})


def _two_inputs() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "add",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ("n", 4)),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ("n", 4)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("n", 4))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_symbol_must_have_one_value_across_inputs() -> None:
    module = compile_model(_two_inputs(), dynamic="bucket", bounds={"n": 16})
    a = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(module.run({"a": a, "b": a})[0], 2 * a)
    with pytest.raises(
        ModelInputError, match=r"input 'b' has n=5 on axis 0, another input has n=3"
    ):
        module.run({"a": a, "b": np.ones((5, 4), np.float32)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dynamic": "generic"}, r"dynamic='generic' needs a bound for n: bounds=\{'n': MAX\}"),
        ({"dynamic": "bucket"}, r"dynamic='bucket' needs a bound for n: bounds=\{'n': MAX\}"),
        ({"bounds": {"m": 4}}, r"bounds for 'm': the model's symbolic dimensions are n"),
        ({"bounds": {"n": (0, 4)}}, r"1 <= MIN <= MAX, got \(0, 4\)"),
        ({"bounds": {"n": "big"}}, r"bounds for 'n' must be MAX or \(MIN, MAX\)"),
        ({"dynamic": "sometimes"}, r"dynamic must be one of specialize, generic, bucket"),
        (
            {"dynamic": "bucket", "bounds": {"n": 100}, "buckets": [8, 64]},
            r"the largest bucket of n \(64\) is below its bound 100",
        ),
    ],
)
def test_dynamic_arguments_are_checked_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compile_model(_two_inputs(), **kwargs)


def test_bounds_on_a_static_model_are_refused() -> None:
    with pytest.raises(ValueError, match=r"bounds for x: the model has no symbolic dimension"):
        compile_model(BUILDERS["mlp"](), bounds={"x": 4})
