"""A model's first compile builds its kernels in worker processes, into the kernel cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tuner
import tuner.model.runner as module
from tests.models.builders import attention, random_feeds
from tuner.model.prebuild import build_jobs, prebuild

from .conftest import ort_outputs


def test_a_cold_compile_builds_the_other_kernels_in_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))  # nothing built before
    monkeypatch.setenv("TUNER_BUILD_JOBS", "2")
    ran: list[int] = []

    def spy(tasks: Any, records: Any, jobs: int | None = None) -> bool:
        ran.append(len(tasks))
        return prebuild(tasks, records, jobs)

    monkeypatch.setattr(module, "prebuild", spy)
    model = attention()
    mod = tuner.compile_model(model, fuse=False)
    plan = mod.plans[0]
    distinct = {s.task.key: k for k, s in enumerate(plan.specs)}
    assert ran == [len(distinct) - 1] and len(distinct) >= 5
    cached = [plan.kernels[k].kernel.from_cache for k in distinct.values()]
    assert cached == [False] + [True] * (len(distinct) - 1), "the workers built all but the first"
    feeds = random_feeds(model, seed=3)
    for got, want in zip(mod.run(feeds), ort_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_warm_cache_starts_no_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNER_BUILD_JOBS", "1")
    tuner.compile_model(attention(), fuse=False)  # fills the cache, one process
    monkeypatch.setenv("TUNER_BUILD_JOBS", "2")
    ran: list[int] = []
    monkeypatch.setattr(module, "prebuild", lambda tasks, records: ran.append(len(tasks)))
    mod = tuner.compile_model(attention(), fuse=False)
    assert ran == [] and not any(k.kernel.wrote_cache for k in mod.plans[0].kernels)


def test_a_task_that_fails_in_a_worker_is_left_to_the_module(tmp_path: Path) -> None:
    """Workers never raise: what they cannot build, the module builds (and reports) itself."""
    assert prebuild(["not a task"] * 4, None, jobs=2) is True
    assert prebuild(["not a task"] * 4, None, jobs=1) is False  # one job: no workers
    assert prebuild(["not a task"] * 2, None, jobs=2) is False  # too few to pay for a start


def test_the_number_of_workers_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_BUILD_JOBS", "3")
    assert build_jobs() == 3
    monkeypatch.setenv("TUNER_BUILD_JOBS", "0")
    assert build_jobs() == 1
    monkeypatch.setenv("TUNER_BUILD_JOBS", "many")
    with pytest.raises(ValueError, match="TUNER_BUILD_JOBS must be an integer, got 'many'"):
        build_jobs()
    monkeypatch.delenv("TUNER_BUILD_JOBS")
    assert build_jobs() >= 1
