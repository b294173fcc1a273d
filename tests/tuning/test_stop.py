"""Faults: SIGTERM is handled as Ctrl-C; children never outlive a tuner killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from records import load
from tuner.measure import MeasureOptions, Measurer, Terminated

from .workers import alive, children, lines, stacks, start_worker, wait_for


@pytest.mark.slow
def test_sigterm_stops_the_tuner_like_ctrl_c_and_leaves_no_process(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    proc = start_worker(log, "--trials", "200", "--batch", "2", "--strategy", "random")
    try:
        wait_for(lambda: lines(log) >= 1, 120, "the first measurement")
        kids = children(proc.pid)
        assert kids, "the measurer's build worker and runner are running"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        "tuner: stopped (SIGTERM); the log keeps every measurement made so far"
    )
    assert "Traceback" not in err
    wait_for(lambda: not any(alive(k) for k in kids), 10, "the children to exit")
    assert len(load(log)) == lines(log) >= 1, "every line of the log is a whole record"


@pytest.mark.slow
def test_ctrl_c_in_a_terminal_stops_every_process_without_a_traceback(tmp_path: Path) -> None:
    # A terminal's Ctrl-C sends SIGINT to the whole foreground group: the tuner,
    # its build worker and its runner alike.
    log = tmp_path / "tune.jsonl"
    proc = start_worker(log, "--trials", "200", "--batch", "2", "--strategy", "random", group=True)
    try:
        wait_for(lambda: lines(log) >= 2, 120, "the first measurements")
        kids = children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the tuner did not stop within 60 s of Ctrl-C; where it was:\n{stacks(proc)}"
            )
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "tuner: interrupted; the log keeps every measurement made so far"
    )
    assert "Traceback" not in err
    wait_for(lambda: not any(alive(k) for k in kids), 10, "the children to exit")
    assert len(load(log)) == lines(log) >= 2


@pytest.mark.slow
def test_children_exit_when_the_tuner_is_killed_outright(tmp_path: Path) -> None:
    log = tmp_path / "tune.jsonl"
    proc = start_worker(log, "--trials", "200", "--batch", "4", "--strategy", "random")
    try:
        wait_for(lambda: lines(log) >= 1, 120, "the first measurement")
        wait_for(lambda: len(children(proc.pid)) >= 2, 30, "build worker and runner")
        kids = children(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    wait_for(lambda: not any(alive(k) for k in kids), 15, "the orphaned children to exit")


def test_sigterm_inside_a_measurer_raises_terminated_and_restores_the_handler() -> None:
    with pytest.raises(Terminated), Measurer(MeasureOptions(jobs=1), threads=1):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal interrupts this
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_build_worker_whose_parent_is_gone_exits_by_itself(tmp_path: Path) -> None:
    """The child arms ``exit_with_parent`` for a parent that has already died: it exits at once."""
    code = (
        "import os, sys, time\n"
        "from tuner.measure._child import init_build_worker\n"
        "init_build_worker((), parent=int(sys.argv[1]))\n"
        "time.sleep(30)\n"
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    started = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-c", code, str(gone.pid)], env=env, timeout=60, check=False
    )
    assert child.returncode == 1
    assert time.monotonic() - started < 25


class _ClosedAfterRecv:
    """A runner's pipe whose tuner end closed while a candidate was in flight."""

    def __init__(self) -> None:
        self.sent: list[object] = []

    def recv(self) -> tuple[object, object, float]:
        return (None, None, 0.0)  # no candidate at all: the runner replies with the error

    def send(self, obj: object) -> None:
        self.sent.append(obj)
        if obj != "ready":
            raise BrokenPipeError(32, "Broken pipe")


def test_a_runner_whose_tuner_closed_the_pipe_returns_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.measure._child import runner_main

    # The runner sets these for its own process; here they are put back after the test,
    # or the next test of this worker would start Numba's threads at the runner's count.
    for name in ("NUMBA_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)

    conn = _ClosedAfterRecv()
    handler = signal.getsignal(signal.SIGINT)
    try:
        runner_main(conn, threads=1)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, handler)  # the runner leaves Ctrl-C to its tuner
    assert conn.sent[0] == "ready" and len(conn.sent) == 2  # nothing after the failed send
    assert capsys.readouterr().err == ""
