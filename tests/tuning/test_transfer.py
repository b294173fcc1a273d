"""--transfer-from: other workloads' records warm-start the cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from records import LogWriter, Record
from search_spaces import get_operator
from tuner.search.model_based import ModelBasedSearch
from tuner.target import Target
from tuner.task import Task
from tuner.tuning.context import transfer_data
from tuner.tuning.featurize import Featurizer
from tuner.workload import Workload


def _log(path: Path, op: str, args: dict[str, int], n: int) -> None:
    """``n`` random configs of ``op(args)`` with made-up times (faster with bigger ``mr``)."""
    template = get_operator(op)
    parsed = template.parse_args(args)
    space = template.space(parsed, Target.from_name("cpu"))
    rng = np.random.default_rng(0)
    with LogWriter(path) as log:
        for trial, cfg in enumerate(space.sample_many(rng, n)):
            seconds = 1e-3 / cfg.get("mr", 1) if op == "matmul" else 1e-3
            log.write(
                Record.make(
                    Workload.make(op, **parsed),
                    Target.from_name("cpu"),
                    cfg.to_json(),
                    samples=(seconds,),
                    trial=trial,
                )
            )


def _setup(args: dict[str, int]):  # type: ignore[no-untyped-def]
    op = get_operator("matmul")
    parsed = op.parse_args(args)
    target = Target.from_name("cpu")
    space = op.space(parsed, target)
    task = Task.make("matmul", parsed, target)
    return Workload.make("matmul", **parsed), space, Featurizer(task, space)


def test_other_workloads_become_groups_and_this_one_is_left_out(tmp_path: Path) -> None:
    log = tmp_path / "other.jsonl"
    _log(log, "matmul", {"M": 40, "N": 48, "K": 24}, 12)
    _log(log, "softmax", {"M": 8, "N": 16}, 5)
    _log(log, "matmul", {"M": 64, "N": 64, "K": 64}, 6)  # the workload being tuned
    workload, space, featurize = _setup({"M": 64, "N": 64, "K": 64})
    data = transfer_data([log], workload, Target.from_name("cpu"), space)
    assert data is not None
    x, seconds, groups = data
    assert x.shape == (17, len(featurize(space.sample(np.random.default_rng(1)))))
    assert sorted(set(groups.tolist())) == [1, 2] and (groups == 1).sum() == 12
    knobs = len(space.feature_names())
    assert np.isnan(x[groups == 2, :knobs]).all(), "softmax configs have no matmul knobs"
    assert np.isfinite(x[:, knobs:]).all(), "loop-nest features describe every program"
    assert np.isfinite(seconds).all()


def test_a_transferred_model_ranks_before_the_first_measurement(tmp_path: Path) -> None:
    log = tmp_path / "other.jsonl"
    _log(log, "matmul", {"M": 40, "N": 48, "K": 24}, 40)
    workload, space, featurize = _setup({"M": 64, "N": 64, "K": 64})
    data = transfer_data([log], workload, Target.from_name("cpu"), space)
    search = ModelBasedSearch(space, seed=0, features=featurize, transfer=data)
    assert search.model.is_fitted
    picks = search.propose(8, exclude=set())
    # The made-up times reward a tall register tile: the first picks should have one.
    assert np.mean([c["mr"] for c in picks[:7]]) > np.mean(
        [c["mr"] for c in space.sample_many(np.random.default_rng(0), 200)]
    )


def test_no_usable_records_means_no_transfer(tmp_path: Path) -> None:
    log = tmp_path / "same.jsonl"
    _log(log, "matmul", {"M": 64, "N": 64, "K": 64}, 3)
    workload, space, featurize = _setup({"M": 64, "N": 64, "K": 64})
    assert transfer_data([log], workload, Target.from_name("cpu"), space) is None
