"""Operators over changing shapes: ``build_op`` with symbolic dimensions, in each mode.

Every mode must give NumPy's answer at every shape within the bounds: one
generic kernel for all, a kernel per bucket with neutral padding (``-inf``
for a softmax's columns, zeros for a matmul's reduction), a kernel per shape.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tuner
from tuner import te
from tuner.kernels.dynamic import MODES, buckets_for

RNG = np.random.default_rng(0)
SHAPES = [(1, 1), (7, 13), (31, 64), (65, 97), (7, 13)]


def softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("mode", MODES)
def test_softmax_over_symbolic_rows_and_columns_matches_numpy(mode: str) -> None:
    f = tuner.build_op("softmax", M=te.var("M", max=128), N=te.var("N", max=128), dynamic=mode)
    for m, n in SHAPES:
        x = (RNG.random((m, n)) * 8 - 4).astype(np.float32)
        np.testing.assert_allclose(f(x), softmax_ref(x), rtol=1e-5, atol=1e-6)
    built = {"generic": 1, "specialize": 4, "bucket": 4}[mode]  # the repeated shape reuses
    assert len(f.compiles) == built
    if mode == "bucket":  # padded to powers of two, the bound a bucket of its own
        assert [dict(c.values)["N"] for c in f.compiles] == [1, 16, 64, 128]


@pytest.mark.parametrize("mode", MODES)
def test_matmul_with_a_symbolic_reduction_matches_numpy(mode: str) -> None:
    """Attention's ``P @ V``: the sequence is the reduction; padded with zeros, it adds nothing."""
    f = tuner.build_op("matmul", M=te.var("S", max=96), N=16, K=te.var("S", max=96), dynamic=mode)
    for s in (1, 5, 33, 96):
        a = RNG.random((s, s), dtype=np.float32)
        b = RNG.random((s, 16), dtype=np.float32)
        out = np.empty((s, 16), np.float32)
        assert f(a, b, out=out) is out
        np.testing.assert_allclose(out, a @ b, rtol=1e-4)


@given(
    st.lists(st.tuples(st.integers(1, 70), st.integers(1, 70)), min_size=1, max_size=4),
    st.sampled_from(MODES),
)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_layer_norm_at_random_shapes_in_every_mode(shapes, mode) -> None:  # type: ignore[no-untyped-def]
    """Its normalised columns have no neutral padding: a bucket serves them at their size."""
    f = tuner.build_op("layer_norm", M=te.var("M", max=70), N=te.var("N", max=70), dynamic=mode)
    for m, n in shapes:
        x = RNG.random((m, n), dtype=np.float32)
        g, b = RNG.random(n, dtype=np.float32), RNG.random(n, dtype=np.float32)
        mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
        np.testing.assert_allclose(
            f(x, g, b), (x - mean) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-5
        )
        if mode == "bucket":
            assert dict(f.compiles[-1].values)["N"] == n or len(f.compiles) < len(shapes)


def test_conv2d_over_symbolic_batch_and_image_size() -> None:
    op = "conv2d"
    f = tuner.build_op(
        op,
        N=te.var("N", max=4),
        C=3,
        H=te.var("H", min=3, max=32),
        W=te.var("W", min=3, max=32),
        K=8,
        pad=1,
        dynamic="generic",
    )
    from search_spaces import get_operator

    conv = get_operator(op)
    for n, h, w in ((1, 3, 5), (2, 17, 9), (4, 32, 32)):
        args = conv.parse_args(dict(N=n, C=3, H=h, W=w, K=8, pad=1))
        x, wt = conv.make_inputs(args)
        np.testing.assert_allclose(f(x, wt), conv.reference(x, wt, **args), rtol=1e-4, atol=1e-4)
    assert len(f.compiles) == 1


def test_shapes_outside_the_bounds_and_bad_modes_are_one_line_errors() -> None:
    f = tuner.build_op("softmax", M=te.var("M", max=8), N=16, dynamic="generic")
    with pytest.raises(TypeError, match="M must be at least 1 and at most 8"):
        f(np.zeros((9, 16), np.float32))
    with pytest.raises(TypeError, match=r"must be float32\[M, 16\]|must have 2 dimension"):
        f(np.zeros((4,), np.float32))
    with pytest.raises(ValueError, match="dynamic must be one of"):
        tuner.build_op("softmax", M=te.var("M", max=8), N=16, dynamic="fast")
    with pytest.raises(ValueError, match="needs a dimension given as a symbol"):
        tuner.build_op("softmax", M=8, N=16, dynamic="generic")
    with pytest.raises(ValueError, match="needs its max"):
        tuner.build_op("softmax", M=te.var("M"), N=16, dynamic="bucket")
    g = tuner.build_op("softmax", M=te.var("M", max=64), N=16, dynamic="bucket", buckets=[4, 16])
    with pytest.raises(ValueError, match="above the largest bucket"):
        g(np.zeros((17, 16), np.float32))


def test_bucket_sizes() -> None:
    assert buckets_for(te.var("n", max=100)) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert buckets_for(te.var("n", min=5, max=64)) == [8, 16, 32, 64]
    assert buckets_for(te.var("n"), [48, 16, 16]) == [16, 48]


@pytest.mark.parametrize("mode", ["generic", "bucket"])
def test_matmul_with_a_fused_epilogue_over_symbolic_rows(mode: str) -> None:
    """A bias per column and a residual of the output's shape: the residual pads with the rows."""
    f = tuner.build_op(
        "matmul", M=te.var("M", max=80), N=24, K=16, epilogue="add@c;add@f;relu", dynamic=mode
    )
    for m in (1, 7, 80):
        a, b = RNG.random((m, 16), dtype=np.float32), RNG.random((16, 24), dtype=np.float32)
        bias, res = RNG.random(24, dtype=np.float32) - 0.5, RNG.random((m, 24), dtype=np.float32)
        want = np.maximum(a @ b + bias + res - 2.0, 0.0)
        np.testing.assert_allclose(f(a, b, bias, res - 2.0), want, rtol=1e-4, atol=1e-5)


def test_a_generic_kernel_takes_the_record_of_its_representative_shape(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from records import LogWriter, Record
    from tuner.target import Target
    from tuner.task import Task

    target = Target.from_name("cpu")
    task = Task.make("softmax", {"M": 16, "N": 16}, target)  # the middle of [1, 256]
    config = {**task.default_config(), "lanes": 4}
    with LogWriter(tmp_path / "t.jsonl") as log:
        log.write(Record.make(task.workload, target, config, samples=(1e-6,), trial=7))
    with tuner.apply_best(tmp_path / "t.jsonl"):
        f = tuner.build_op(
            "softmax", M=te.var("M", max=256), N=te.var("N", max=256), dynamic="generic"
        )
    assert f.config["lanes"] == 4 and f.record is not None and f.record.trial == 7
    x = (RNG.random((5, 200)) * 8 - 4).astype(np.float32)
    np.testing.assert_allclose(f(x), softmax_ref(x), rtol=1e-5, atol=1e-6)
    assert f.kernel_for(f.values([x])).record is f.record


def test_a_generic_kernel_and_a_model_kernel_resolve_records_as_build_op_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One resolver: with no record of the representative shape, the generic kernel takes the
    nearest tuned shape's (and says so), as a constant shape's ``build_op`` does."""
    from records import LogWriter, Record
    from tuner.kernels import RecordChoiceWarning, resolve
    from tuner.target import Target
    from tuner.task import Task

    target = Target.from_name("cpu")
    tuned = Task.make("softmax", {"M": 32, "N": 16}, target)  # near the middle (16, 16)
    config = {**tuned.default_config(), "lanes": 4}
    with LogWriter(tmp_path / "t.jsonl") as log:
        log.write(Record.make(tuned.workload, target, config, samples=(1e-6,), trial=3))
    middle = Task.make("softmax", {"M": 16, "N": 16}, target)
    with tuner.apply_best(tmp_path / "t.jsonl"):
        choice = resolve(middle, replay=False)
        with pytest.warns(RecordChoiceWarning, match=r"none of this shape; .* softmax\(M=32"):
            f = tuner.build_op(
                "softmax", M=te.var("M", max=256), N=te.var("N", max=256), dynamic="generic"
            )
        with pytest.warns(RecordChoiceWarning, match="none of this shape"):
            g = tuner.build_op("softmax", M=16, N=16)
    assert choice.how == "nearest" and choice.record is not None and choice.record.trial == 3
    assert f.config == g.config == choice.config and f.config["lanes"] == 4
    assert resolve(middle).how == "default" and not resolve(middle).notes  # no logs in scope
    x = (RNG.random((9, 31)) * 8 - 4).astype(np.float32)
    np.testing.assert_allclose(f(x), softmax_ref(x), rtol=1e-5, atol=1e-6)
