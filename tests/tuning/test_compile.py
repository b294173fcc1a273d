"""apply_best / build_op: the best record per workload, defaults with one warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tuner
from records import ErrorKind, LogWriter, Record
from tuner.target import Target
from tuner.workload import Workload

from . import faulty_ops  # noqa: F401  (registers t_double)


def write_log(
    path: Path, splits_and_seconds: list[tuple[int, float, str]], op: str = "t_double", N: int = 16
) -> None:
    target = Target.from_name("cpu")
    with LogWriter(path) as log:
        for trial, (split, seconds, kind) in enumerate(splits_and_seconds):
            log.write(
                Record.make(
                    Workload.make(op, N=N),
                    target,
                    {"split": split},
                    samples=(seconds,) if kind == "ok" else (),
                    error_kind=ErrorKind(kind),
                    trial=trial,
                )
            )


def test_build_op_uses_the_best_record_and_computes_the_reference(tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    write_log(log, [(1, 3e-6, "ok"), (4, 1e-6, "ok"), (2, 1e-9, "wrong_answer")])
    x = np.arange(16, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tuner.apply_best(log):
            f = tuner.build_op("t_double", N=16)
    assert f.config == {"split": 4} and f.record is not None and f.record.trial == 1
    np.testing.assert_array_equal(f(x), x * 2)


def test_logs_as_a_list_or_a_folder(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(1, 3e-6, "ok")])
    write_log(tmp_path / "b.jsonl", [(4, 2e-6, "ok")])
    for source in (tmp_path, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]):
        with tuner.apply_best(source):
            assert tuner.build_op("t_double", N=16).config == {"split": 4}


def test_an_untuned_workload_gets_its_default_and_one_warning(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(1, 3e-6, "ok")], op="t_wrong")  # no record of its family
    with (
        tuner.apply_best(tmp_path / "a.jsonl"),
        pytest.warns(tuner.UntunedWorkloadWarning) as caught,
    ):
        f = tuner.build_op("t_double", N=32)
    assert len(caught) == 1 and "t_double(N=32)" in str(caught[0].message)
    assert f.config == {"split": 2} and f.record is None


def test_outside_apply_best_the_default_is_used_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = tuner.build_op("t_double", N=8)
    assert f.config == {"split": 2}


def test_records_from_before_an_argument_existed_still_match(tmp_path: Path) -> None:
    """matmul gained trans_a/trans_b; a log naming matmul(K,M,N,dtype) is still its record."""
    from search_spaces import get_operator

    op = get_operator("matmul")
    args = op.parse_args({"M": 8, "N": 8, "K": 8})
    cfg = op.default_config(args, Target.from_name("cpu"))
    old = Workload.make("matmul", M=8, N=8, K=8, dtype="float32")
    assert "trans_b" not in old.key
    log = tmp_path / "old.jsonl"
    with LogWriter(log) as out:
        out.write(Record.make(old, Target.from_name("cpu"), cfg, samples=(1e-6,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UntunedWorkloadWarning
        with tuner.apply_best(log):
            f = tuner.build_op("matmul", M=8, N=8, K=8)
    assert f.record is not None and f.record.samples == (1e-6,)


def test_the_space_of_the_target_built_for_decides_what_a_record_may_be(tmp_path: Path) -> None:
    """A 12x32 tile measured on a 32-register target is used there, and not on a 16-register one."""
    from search_spaces import get_operator

    wide = Target.make("cpu", fingerprint="wide", vector_lanes=16, vector_registers=32, threads=1)
    narrow = Target.make("cpu", fingerprint="narrow", vector_lanes=8, vector_registers=16)
    op = get_operator("matmul")
    args = op.parse_args({"M": 13, "N": 37, "K": 8})
    cfg = op.space(args, wide).validate({**op.default_config(args, wide), "mr": 12, "nr": 32})
    log = tmp_path / "wide.jsonl"
    with LogWriter(log) as out:
        out.write(
            Record.make(Workload.make("matmul", **args), wide, cfg.to_json(), samples=(1e-6,))
        )
    rng = np.random.default_rng(0)
    a, b = rng.random((13, 8), dtype=np.float32), rng.random((8, 37), dtype=np.float32)
    with tuner.apply_best(log):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            f = tuner.build_op("matmul", target=wide, **args)
        assert f.record is not None and (f.config["mr"], f.config["nr"]) == (12, 32)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = tuner.build_op("matmul", target=narrow, **args)
    assert any("no longer fits its space" in str(w.message) for w in caught)
    assert g.record is None
    assert g.config == op.space(args, narrow).validate(op.default_config(args, narrow)).to_json()
    np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_a_kernel_writes_a_given_out_array_in_place() -> None:
    f = tuner.build_op("matmul", target=Target.from_name("cpu", num_threads=1), M=7, N=5, K=3)
    rng = np.random.default_rng(0)
    a, b = rng.random((7, 3), np.float32), rng.random((3, 5), np.float32)
    out = np.full((7, 5), np.nan, np.float32)
    assert f(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    assert f(a, b) is not out and np.allclose(f(a, b), out)


def _read_only() -> np.ndarray:
    out = np.empty((7, 5), np.float32)
    out.setflags(write=False)
    return out


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: [[0.0] * 5] * 7, "out must be a NumPy array, got list"),
        (lambda: np.empty((5, 7), np.float32), r"out must be float32\[7, 5\], got float32\[5, 7\]"),
        (lambda: np.empty((7, 5), np.float64), r"out must be float32\[7, 5\], got float64"),
        (lambda: np.empty((5, 7), np.float32).T, "out must be C-contiguous"),
        (_read_only, "out is read-only"),
    ],
)
def test_an_out_array_the_kernel_cannot_write_is_one_clear_error(make, message) -> None:  # type: ignore[no-untyped-def]
    f = tuner.build_op("matmul", target=Target.from_name("cpu", num_threads=1), M=7, N=5, K=3)
    a, b = np.ones((7, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises((TypeError, ValueError), match=message):
        f(a, b, out=make())
    memory = np.ones(64, np.float32)  # an input that is part of out
    with pytest.raises(ValueError, match="out shares memory with input 0"):
        f(memory[:21].reshape(7, 3), b, out=memory[:35].reshape(7, 5))


def test_a_shape_never_tuned_takes_the_nearest_tuned_shapes_record(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(1, 3e-6, "ok"), (4, 1e-6, "ok")], N=16)
    write_log(tmp_path / "b.jsonl", [(2, 1e-6, "ok")], N=64)
    write_log(tmp_path / "c.jsonl", [(4, 1e-6, "ok")], op="t_wrong", N=20)  # another family
    with tuner.apply_best(tmp_path), pytest.warns(tuner.RecordChoiceWarning) as caught:
        f = tuner.build_op("t_double", N=20)
    assert f.config == {"split": 4} and f.record is not None
    assert f.record.workload == Workload.make("t_double", N=16)
    (warning,) = caught
    assert "none of this shape; using the one tuned for t_double(N=16)" in str(warning.message)
    assert "shape distance 1.25" in str(warning.message)
    x = np.arange(20, dtype=np.float32)
    np.testing.assert_array_equal(f(x), 2 * x)


def test_a_nearer_record_whose_knobs_do_not_fit_is_passed_over(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", [(3, 1e-6, "ok")], N=16)  # 3 is no value of the knob
    write_log(tmp_path / "b.jsonl", [(1, 1e-6, "ok")], N=64)
    with tuner.apply_best(tmp_path), pytest.warns(tuner.RecordChoiceWarning, match="N=64"):
        f = tuner.build_op("t_double", N=20)
    assert f.config == {"split": 1}


def test_shape_distance_is_the_product_of_ratios_within_one_family() -> None:
    from records.nearest import shape_distance

    def mm(**args: object) -> Workload:
        return Workload.make("matmul", **{"M": 64, "N": 64, "K": 64, "dtype": "float32", **args})

    assert shape_distance(mm(), mm()) == 1.0
    assert shape_distance(mm(M=256), mm()) == shape_distance(mm(), mm(M=256)) == 4.0
    assert shape_distance(mm(M=128, N=32), mm()) == 4.0
    assert shape_distance(mm(dtype="int8"), mm()) is None, "another dtype is another family"
    assert shape_distance(Workload.make("t_double", N=64), mm()) is None
    assert shape_distance(mm(M=0), mm(M=1)) is None
