"""compile_model end to end on small models: results against onnxruntime, inputs checked."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tuner
from tuner.graph import GraphError
from tuner.model import ModelInputError

from .conftest import helper, make_model, ort_outputs, residual_block


def test_a_residual_block_matches_onnxruntime_fused_and_unfused(rng, tmp_path):
    model = residual_block(rng)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    (want,) = ort_outputs(model, {"x": x})
    fused = tuner.compile_model(model)
    unfused = tuner.compile_model(model, fuse=False)
    for mod in (fused, unfused):
        (got,) = mod.run({"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # BN folds into the first conv; the residual add and relu fuse into a kernel.
    assert len(fused.plans[0].specs) < len(unfused.plans[0].specs)
    ops = [s.ops for s in fused.plans[0].specs]
    assert ops[0] == "Transpose" and ops[1].startswith("Conv")  # into channels-last, once
    assert "BatchNormalization" not in "+".join(ops)


def test_a_classifier_over_a_batch_of_one_is_dense_with_its_bias(rng):
    """A bias [N] over a [1, N] output is per channel (it is also the output's full shape)."""
    model = residual_block(rng, batch=1)
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    mod = tuner.compile_model(model)
    last = mod.plans[0].specs[-1]
    assert last.task.op_name == "dense" and last.task.workload.as_dict()["bias"] is True
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4)


def test_a_pointwise_conv_is_channels_last_with_its_weight_packed_and_its_epilogue(rng):
    model = residual_block(rng, batch=1)
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    mod = tuner.compile_model(model)
    second = mod.plans[0].specs[2]  # Conv 1x1 + Add(residual) + Relu, after the entry's transpose
    args = second.task.workload.as_dict()
    assert second.task.op_name == "conv2d" and second.ops == "Conv+Add+Relu"
    assert (args["layout"], args["weights"], args["R"], args["K"]) == ("NHWC", "blocked", 1, 8)
    assert args["epilogue"] == "add@f;relu"
    packed = mod.plans[0].values[second.inputs[1]]
    assert packed.shape == (-(-8 // args["block"]), 1, 1, 8, args["block"])
    np.testing.assert_allclose(mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4)


def test_a_strided_convolution_is_one_channels_last_kernel_with_bias_and_relu(rng):
    """16 channels in, 3 x 3, stride 2, bias and relu, an odd width: one direct kernel between
    the layout's two transposes (no window copy)."""
    weights = {
        "w": (rng.standard_normal((5, 16, 3, 3)) * 0.2).astype(np.float32),
        "b": rng.standard_normal(5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = make_model(
        nodes, {"x": ("float32", (1, 16, 9, 11))}, {"y": ("float32", (1, 5, 5, 6))}, weights
    )
    mod = tuner.compile_model(model)
    ops = [(s.task.op_name, s.ops) for s in mod.plans[0].specs]
    assert ops == [
        ("nchw_to_nhwc", "Transpose"),
        ("conv2d", "Conv+Relu"),
        ("transpose", "Transpose"),
    ]
    args = mod.plans[0].specs[1].task.workload.as_dict()
    assert (args["stride"], args["bias"], args["epilogue"]) == (2, True, "relu")
    x = rng.standard_normal((1, 16, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(
        mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5
    )


def test_symbolic_batch_compiles_per_shape_on_first_sight(rng):
    model = residual_block(rng, batch="batch")
    mod = tuner.compile_model(model)
    assert mod.plans == []
    assert "run it once" in mod.summary()
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 7, 7)).astype(np.float32)
        (got,) = mod.run({"x": x})
        np.testing.assert_allclose(got, ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert [p.signature for p in mod.plans] == [((1, 3, 7, 7),), ((3, 3, 7, 7),)]
    # The weights are one copy for both shapes: each constant of the second plan is the
    # first plan's array where it holds the same values.
    first, second = (p.lowered.values for p in mod.plans)
    shared = [n for n, v in second.items() if v.data is not None and v.data is first[n].data]
    weights = [n for n, v in second.items() if v.data is not None and v.data.size >= 8]
    assert weights and set(weights) <= set(shared)
    given = tuner.compile_model(model, shapes={"x": (4, 3, 7, 7)})
    assert [p.signature for p in given.plans] == [((4, 3, 7, 7),)]


def test_bad_inputs_get_one_line_each(rng):
    mod = tuner.compile_model(residual_block(rng))
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    cases = [
        ({"y": x}, "the model has no input 'y'; its inputs are x"),
        ({}, "input 'x' is missing"),
        ({"x": x.astype(np.float64)}, "input 'x' must be float32, got float64"),
        ({"x": x[:1]}, "input 'x' must have shape 2x3x7x7, got 1x3x7x7"),
    ]
    for feeds, message in cases:
        with pytest.raises(ModelInputError) as err:
            mod.run(feeds)
        assert str(err.value) == message


def test_outputs_are_fresh_arrays_and_intermediates_are_planned(rng):
    # y1 is an output that a later kernel also reads; y2 a view of an intermediate.
    nodes = [
        helper.make_node("Exp", ["x"], ["y1"]),
        helper.make_node("Tanh", ["y1"], ["t"]),
        helper.make_node("Sigmoid", ["t"], ["s"]),
        helper.make_node("Transpose", ["s"], ["u"], perm=[1, 0]),
        helper.make_node("Flatten", ["u"], ["y2"], axis=0),
    ]
    model = make_model(
        nodes,
        {"x": ("float32", (3, 5))},
        {"y1": ("float32", (3, 5)), "y2": ("float32", (1, 15))},
    )
    mod = tuner.compile_model(model, fuse=False)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    first = mod.run({"x": x})
    second = mod.run({"x": x})
    for got, want in zip(first, ort_outputs(model, {"x": x}), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert all(not np.shares_memory(a, b) for a, b in zip(first, second, strict=True))
    plan = mod.plans[0]
    assert all(not np.shares_memory(out, plan.arena) for out in first)
    assert plan.arena_bytes > 0


def test_an_output_that_is_an_input_or_a_constant_is_a_copy(rng):
    nodes = [
        helper.make_node("Identity", ["x"], ["y"]),
        helper.make_node("Constant", [], ["k"], value_float=2.5),
    ]
    model = make_model(
        nodes, {"x": ("float32", (4,))}, {"y": ("float32", (4,)), "k": ("float32", ())}
    )
    x = np.arange(4, dtype=np.float32)
    y, k = tuner.compile_model(model).run({"x": x})
    np.testing.assert_array_equal(y, x)
    assert not np.shares_memory(y, x)
    assert k.shape == () and float(k) == 2.5


def _outputs_model():
    """y1 is an output a later kernel reads; y2 a view of an intermediate; y3 an input."""
    nodes = [
        helper.make_node("Exp", ["x"], ["y1"]),
        helper.make_node("Tanh", ["y1"], ["t"]),
        helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
        helper.make_node("Flatten", ["u"], ["y2"], axis=0),
        helper.make_node("Identity", ["x"], ["y3"]),
    ]
    outs = {"y1": ("float32", (3, 5)), "y2": ("float32", (1, 15)), "y3": ("float32", (3, 5))}
    return make_model(nodes, {"x": ("float32", (3, 5))}, outs)


def test_given_output_arrays_are_written_in_place(rng):
    model = _outputs_model()
    mod = tuner.compile_model(model, fuse=False)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    out = [np.full((3, 5), np.nan, np.float32), np.full((1, 15), np.nan, np.float32)]
    out.append(np.full((3, 5), np.nan, np.float32))
    for _ in range(2):  # the second call overwrites the first's results
        got = mod.run({"x": x}, out=out)
        assert all(g is o for g, o in zip(got, out, strict=True))
        for o, want in zip(out, ort_outputs(model, {"x": x}), strict=True):
            np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-6)
        x = x[::-1].copy()


def test_output_arrays_the_model_cannot_write_get_one_line_each(rng):
    mod = tuner.compile_model(_outputs_model(), fuse=False)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    good = [np.empty((3, 5), np.float32), np.empty((1, 15), np.float32)]
    three = np.empty((3, 5), np.float32)
    cases = [
        (good, "out has 2 arrays; the model has 3 outputs"),
        (
            [*good, np.empty((5, 3), np.float32)],
            "out for 'y3' must be float32[3, 5], got float32[5, 3]",
        ),
        ([*good, x], "out for 'y3' shares memory with input 0; pass a separate array"),
        ([three, good[1], three], "out for 'y3' shares memory"),
    ]
    for out, message in cases:
        with pytest.raises(ModelInputError) as err:
            mod.run({"x": x}, out=out)
        assert str(err.value) == message


def test_an_unsupported_operator_fails_before_anything_runs():
    nodes = [helper.make_node("Unique", ["x"], ["y"])]
    model = make_model(nodes, {"x": ("float32", (4,))}, {"y": ("float32", None)})
    with pytest.raises(
        GraphError, match=r"^unsupported operator Unique \(node 'Unique_0', opset 17\)$"
    ):
        tuner.compile_model(model)


def test_untuned_tasks_get_one_warning_that_counts_them(rng, tmp_path):
    from records import LogWriter, Record
    from search_spaces import get_operator
    from tuner.workload import Workload

    log = tmp_path / "other.jsonl"  # a log that tunes none of the model's tasks
    target = tuner.Target.from_name("cpu")
    args = {"M": 4, "N": 8}
    config = get_operator("softmax").default_config(args, target)
    with LogWriter(log) as w:
        w.write(Record.make(Workload.make("softmax", **args), target, config, samples=(1e-6,)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = tuner.compile_model(residual_block(rng), log)
    untuned = [w for w in caught if issubclass(w.category, tuner.UntunedWorkloadWarning)]
    assert len(untuned) == 1
    n = len(mod.plans[0].tasks())
    assert f"{n} of {n} tasks have no tuning record" in str(untuned[0].message)


@pytest.mark.slow
def test_a_tuned_task_takes_its_record_and_the_rest_are_counted(rng, tmp_path):
    from tuner.tuning.tune import TuneOptions, tune

    model = residual_block(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = tuner.compile_model(model)
    spec = first.plans[0].specs[-1]  # the Gemm: a dense task
    log = tmp_path / "tune.jsonl"
    opts = TuneOptions(trials=3, log=log, threads=first.target.threads, retime=0, baseline=False)
    tune(spec.task.workload.op, spec.task.workload.as_dict(), opts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = tuner.compile_model(model, log, target=first.target)
    uses = {u.key: u for u in mod.plans[0].tasks()}
    assert uses[spec.task.key].tuned
    assert sum(u.tuned for u in uses.values()) == 1
    untuned = [w for w in caught if issubclass(w.category, tuner.UntunedWorkloadWarning)]
    assert len(untuned) == 1 and f"{len(uses) - 1} of {len(uses)} tasks" in str(untuned[0].message)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(
        mod.run({"x": x})[0], ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5
    )


def test_a_second_compile_of_a_file_reads_the_lowered_cache(rng, tmp_path, monkeypatch):
    import onnx

    import tuner.graph.onnx_import as importer
    from tuner.codegen import cache_dir

    path = tmp_path / "block.onnx"
    onnx.save(residual_block(rng), str(path))
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    first = tuner.compile_model(path).run({"x": x})[0]

    def no_import(*args, **kwargs):
        raise AssertionError("imported again")

    monkeypatch.setattr(importer, "from_onnx", no_import)
    np.testing.assert_array_equal(tuner.compile_model(path).run({"x": x})[0], first)
    # Other arguments are other entries; a damaged entry is compiled again.
    with pytest.raises(AssertionError, match="imported again"):
        tuner.compile_model(path, fuse=False)
    monkeypatch.undo()
    for meta in (cache_dir() / "models").glob("*/meta.json"):
        meta.write_text("{damaged")
    np.testing.assert_array_equal(tuner.compile_model(path).run({"x": x})[0], first)


def test_a_diamond_after_a_convolution_is_its_epilogue_or_splits_after_it(rng):
    """SiLU (a Sigmoid and a Mul reading the convolution) is the conv's epilogue
    ``sigmoid;mul@v...``; a diamond the epilogue cannot say (the convolution as Pow's
    base) leaves the convolution alone and computes the rest in one generic kernel."""
    w = (rng.random((4, 3, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["a"]),
        helper.make_node("Add", ["a", "x4"], ["r"]),
        helper.make_node("Conv", ["r", "w4"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["d"], ["t"]),
        helper.make_node("Pow", ["d", "t"], ["y"]),
    ]
    weights = {"w": w, "w4": (rng.random((4, 4, 3, 3)) * 0.2).astype(np.float32)}
    model = make_model(
        nodes,
        {"x": ("float32", (1, 3, 7, 5)), "x4": ("float32", (1, 4, 7, 5))},
        {"y": ("float32", (1, 4, 7, 5))},
        weights,
    )
    feeds = {"x": rng.random((1, 3, 7, 5), np.float32), "x4": rng.random((1, 4, 7, 5), np.float32)}
    mod = tuner.compile_model(model)
    (got,) = mod.run(feeds)
    np.testing.assert_allclose(got, ort_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)
    specs = mod.plans[0].specs
    ops = [s.ops for s in specs]
    assert "Conv+Sigmoid+Mul+Add" in ops and "Sigmoid+Pow" in ops, ops
    silu = next(s for s in specs if s.ops == "Conv+Sigmoid+Mul+Add")
    assert "sigmoid;mul@v" in silu.task.args["epilogue"], silu.task.args
