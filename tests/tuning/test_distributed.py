"""Many workers on one study, against a real PostgreSQL server and a journal file.

In-process tuners (with a measurer that answers at once) check the claims
precisely; ``tuner tune`` processes check it as users run it: started
together on an empty database, one killed mid-run, the database dropped.
"""

from __future__ import annotations

import json
import os
import signal
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest

from records import ErrorKind, LogWriter, load, merge
from tuner.cli import main
from tuner.kernels import BestRecords
from tuner.measure import MeasureResult
from tuner.search import get_strategy
from tuner.target import Target
from tuner.task import Task, TaskTuner

from . import postgres
from .workers import WORKLOAD, lines, start_worker, wait_for

NO_SERVER = (
    "no PostgreSQL server binary (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
    "install Debian's postgresql package (.ci/run does) to run the distributed tests"
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    url = os.environ.get(postgres.ENV)
    if url:
        yield url
        return
    if postgres.server_bin() is None:
        pytest.skip(NO_SERVER)
    with postgres.server() as url:
        yield url


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database (no Optuna tables yet)."""
    url = postgres.create_database(pg_server)
    yield url
    postgres.drop_database(pg_server, url)


@pytest.fixture(params=["postgres", "journal"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "journal":
        return f"journal:{tmp_path / 'tune.journal'}"
    return str(request.getfixturevalue("pg_url"))


# -- in-process tuners: the claims ------------------------------------------------


class Instant:
    """A measurer answering every candidate at once, with a time that depends on its config."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def measure(self, candidates: list[Any], on_result: Any = None) -> list[MeasureResult]:
        out = []
        for c in candidates:
            key = json.dumps(c.config, sort_keys=True)
            self.seen.append(key)
            out.append(
                MeasureResult(ErrorKind.OK, samples=(1e-3 + zlib.crc32(key.encode()) * 1e-12,))
            )
        return out


TASK = Task.make("matmul", {"M": 32, "N": 32, "K": 32}, Target.from_name("cpu", num_threads=2))


def _key(config: dict[str, Any]) -> str:
    return TASK.space.validate(config).key


def _tuner(storage: str, log: Path, seed: int, timeout: float = 30.0) -> TaskTuner:
    strategy = get_strategy(
        "random",
        TASK.space,
        seed=seed,
        storage=storage,
        study_name=TASK.study_name,
        claim_timeout=timeout,
    )
    return TaskTuner(TASK, strategy, Instant(), LogWriter(log))


def test_study_name_is_task_key_and_fingerprint() -> None:
    other = Task(TASK.workload, TASK.target.with_threads(1))
    assert TASK.study_name == f"{TASK.key}#{TASK.target.fingerprint}"
    assert "threads=2" in TASK.study_name and other.study_name != TASK.study_name


def test_two_tuners_share_the_budget_and_each_others_results(storage: str, tmp_path: Path) -> None:
    a, b = _tuner(storage, tmp_path / "a.jsonl", 0), _tuner(storage, tmp_path / "b.jsonl", 1)
    a.budget = b.budget = 13
    while a.done < 13 or b.done < 13:
        got = a.step(3) + b.step(4)
        assert got or a.done >= 13, "no progress"
    measured = [r.config for t in (a, b) for r in t.written]
    keys = [_key(c) for c in measured]
    assert len(keys) == 13 and len(set(keys)) == 13, "the budget once, no config twice"
    assert a.trials and b.trials
    learnt = {c.key for c, _ in a.strategy.history}
    assert {_key(r.config) for r in b.written} <= learnt
    a.close()
    b.close()


def test_each_trial_shows_its_configs_knob_values(storage: str, tmp_path: Path) -> None:
    # The params are knob indices; optuna-dashboard shows the values from this attribute.
    import optuna

    from tuner.search.storage import open_storage

    a, b = _tuner(storage, tmp_path / "a.jsonl", 0), _tuner(storage, tmp_path / "b.jsonl", 1)
    a.step(3)
    b.step(2)
    a.close()
    b.close()
    study = optuna.load_study(study_name=TASK.study_name, storage=open_storage(storage).optuna)
    complete = study.get_trials(states=[optuna.trial.TrialState.COMPLETE])
    shown = {json.dumps(json.loads(t.user_attrs["config"]), sort_keys=True) for t in complete}
    logged = {json.dumps(r.config, sort_keys=True) for t in (a, b) for r in t.written}
    assert len(complete) == 5 and shown == logged


def test_claims_are_exclusive_and_a_silent_workers_are_released(
    storage: str, tmp_path: Path
) -> None:
    a = _tuner(storage, tmp_path / "a.jsonl", 0, timeout=0.6)
    b = _tuner(storage, tmp_path / "b.jsonl", 0, timeout=0.6)  # same seed: same proposals
    assert a.shared is not None and b.shared is not None
    held = a.shared.claim(a._propose(4, set()))  # a claims, then goes silent mid-measurement
    assert len(held) == 4
    assert not b.shared.claim(held), "claimed configs are not claimed twice"
    first = b.step(4)
    assert not {_key(r.config) for r in first} & {c.key for c in held}

    a.shared._heartbeat.stop()  # type: ignore[union-attr]  # a dies: no more heartbeats
    b.shared.observations()  # b notes the heartbeat it has seen ...
    time.sleep(1.0)  # ... and that it stopped changing for longer than the timeout
    b.shared.observations()
    study = optuna.load_study(study_name=TASK.study_name, storage=b.shared.study._storage)
    released = [t for t in study.trials if "released" in t.user_attrs]
    assert len(released) == 4 and all(t.state.name == "FAIL" for t in released)
    assert b.shared.claim(held) == held, "released configs are free again"
    b.close()


def test_close_gives_claims_back_at_once(storage: str, tmp_path: Path) -> None:
    a, b = _tuner(storage, tmp_path / "a.jsonl", 0), _tuner(storage, tmp_path / "b.jsonl", 0)
    assert a.shared is not None and b.shared is not None
    held = a.shared.claim(a._propose(3, set()))
    a.close()
    assert b.shared.claim(held) == held
    b.close()


# -- tuner tune processes ------------------------------------------------------------


def _flags(storage: str, trials: int, *extra: str) -> list[str]:
    flags = ["--storage", storage, "--trials", str(trials), "--batch", "2", "--threads", "2"]
    return [*flags, *extra]


def _finish(proc: Any, timeout: float = 300) -> str:
    _, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return str(err)


def _measured_in_study(storage: str) -> set[str]:
    from tuner.search.storage import open_storage

    study = optuna.load_study(study_name=TASK.study_name, storage=open_storage(storage).optuna)
    space = TASK.space
    return {
        space.from_indices(t.params).key
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" or t.user_attrs.get("measured")
    }


def _keys(path: Path) -> list[str]:
    return [_key(r.config) for r in load(path) if r.strategy != "retime"]


def _two_workers_share_one_study(storage: str, tmp_path: Path, strategy: str) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    flags = _flags(storage, 8, "--strategy", strategy)
    procs = [start_worker(logs / f"{w}.jsonl", *flags) for w in "ab"]
    for p in procs:
        _finish(p)
        assert p.returncode == 0
    a, b = _keys(logs / "a.jsonl"), _keys(logs / "b.jsonl")
    assert a and b, "both workers measured"
    assert len(set(a + b)) == len(a + b), "no config measured twice"
    assert 8 <= len(a + b) < 16, "they shared the budget of 8"
    assert set(a + b) == _measured_in_study(storage)
    merged = tmp_path / "merged.jsonl"
    merge(merged, logs)
    records = load(merged)
    assert sorted(_keys(merged)) == sorted(a + b)
    assert len({r.trial for r in records}) == len(records)
    fastest = BestRecords(logs).lookup(TASK.workload, TASK.target)  # a folder of logs
    assert (
        fastest is not None
        and fastest.config == BestRecords(merged).lookup(TASK.workload, TASK.target).config
    )  # type: ignore[union-attr]


@pytest.mark.slow
def test_two_workers_start_together_on_an_empty_postgres_database(
    pg_url: str, tmp_path: Path
) -> None:
    _two_workers_share_one_study(pg_url, tmp_path, "xgb")


@pytest.mark.slow
def test_two_workers_share_a_journal_file(tmp_path: Path) -> None:
    _two_workers_share_one_study(f"journal:{tmp_path / 'tune.journal'}", tmp_path, "random")


def _claims_of(storage: str, pid: int) -> list[Any]:
    from tuner.search.storage import open_storage

    try:
        study = optuna.load_study(study_name=TASK.study_name, storage=open_storage(storage).optuna)
    except KeyError:  # not created yet
        return []
    return [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "RUNNING" and f":{pid}:" in str(t.user_attrs.get("worker"))
    ]


def _frozen_holding_a_claim(proc: Any, storage: str) -> bool:
    """Stop ``proc``; leave it stopped if it holds a claim, else let it go on.

    Reading its claims while it runs races with it: it may finish the trial
    between the read and a kill, and then no claim is left to release.
    """
    proc.send_signal(signal.SIGSTOP)
    if _claims_of(storage, proc.pid):
        return True
    proc.send_signal(signal.SIGCONT)
    return False


@pytest.mark.slow
def test_a_killed_workers_claims_are_released_and_the_other_finishes(
    pg_url: str, tmp_path: Path
) -> None:
    flags = _flags(pg_url, 10, "--strategy", "random", "--claim-timeout", "3")
    a = start_worker(tmp_path / "a.jsonl", *flags)
    b = start_worker(tmp_path / "b.jsonl", *flags)
    try:
        wait_for(lambda: lines(tmp_path / "b.jsonl") >= 1, 180, "b's first measurement")
        wait_for(lambda: _frozen_holding_a_claim(b, pg_url), 60, "b to hold a claim")
        b.send_signal(signal.SIGKILL)  # frozen while it holds one: the claim is orphaned
        b.wait(timeout=10)
        _finish(a)
    finally:
        b.kill()
        a.kill()
    assert a.returncode == 0
    from tuner.search.storage import open_storage

    study = optuna.load_study(study_name=TASK.study_name, storage=open_storage(pg_url).optuna)
    released = [t for t in study.trials if f":{b.pid}:" in str(t.user_attrs.get("released"))]
    assert released and all(t.state.name == "FAIL" for t in released)
    assert not any(t.state.name == "RUNNING" for t in study.trials)
    # b may have been frozen between writing a measurement to its log and telling
    # the study (the log comes first: a measurement is never lost). That config's
    # claim was released; it is in b's log, and a may have measured it again.
    lost_tell = {TASK.space.from_indices(t.params).key for t in released}
    ka, kb = _keys(tmp_path / "a.jsonl"), _keys(tmp_path / "b.jsonl")
    twice = {k for k in ka + kb if (ka + kb).count(k) > 1}
    assert twice <= lost_tell, "no config measured twice, but for one b had not told"
    assert len(set(ka + kb)) >= 10
    merged = tmp_path / "merged.jsonl"
    merge(merged, [tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    in_log, in_study = set(_keys(merged)), _measured_in_study(pg_url)
    assert in_study <= in_log, "the merged log has every measurement"
    assert in_log - in_study <= lost_tell & set(kb), "and nothing else but b's untold ones"


@pytest.mark.slow
def test_a_database_that_goes_away_stops_the_worker_with_one_line(
    pg_server: str, pg_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "tune.jsonl"
    proc = start_worker(log, *_flags(pg_url, 100, "--strategy", "random"))
    try:
        wait_for(lambda: lines(log) >= 1, 180, "the first measurement")
        postgres.drop_database(pg_server, pg_url)
        err = _finish(proc, timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("tuner: error: lost the study storage postgresql+psycopg://"), err
    assert last.endswith(f"{log.name} keeps every measurement made"), err
    assert len(load(log)) == lines(log) >= 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nonsense", "not a storage URL: 'nonsense'"),
        ("mysql://u@h/db", "unsupported storage mysql://u@h/db"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open the study storage"),
    ],
)
def test_a_bad_storage_url_is_one_line(
    url: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "t.jsonl"
    assert main(["tune", *WORKLOAD, "--log", str(log), "--storage", url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tuner: error: ") and message in err[0], err
    assert "secret" not in err[0]
    assert not log.exists()


def _open_at_once(url: str, barrier: Any, out: Any) -> None:
    from tuner.search.storage import open_storage

    barrier.wait()
    try:
        open_storage(url)
        out.put("ok")
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_workers_opening_an_empty_database_together_do_not_race(pg_url: str) -> None:
    """Optuna's table creation raced (UniqueViolation on studydirection): the schema lock serialises it."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_at_once, args=(pg_url, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert sorted(out.get(timeout=5) for _ in procs) == ["ok"] * 4
