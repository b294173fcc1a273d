"""Tuner processes for the tests that start, stop and kill them: ``tuner tune`` as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: A workload whose candidates build in a second or two, with a space of thousands.
WORKLOAD = ["matmul", "M=32", "N=32", "K=32"]


def start_worker(
    log: Path, *flags: str, workload: list[str] = WORKLOAD, group: bool = False
) -> subprocess.Popen[str]:
    """``tuner tune`` in its own process, quick settings, stderr captured.

    With ``group``, it leads a process group of its own, as a terminal's foreground job does.
    """
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env["PYTHONFAULTHANDLER"] = "1"  # a stuck worker can be made to print its stacks (stacks())
    # Ctrl-C at its default, as in a terminal's job: a process inherits an ignored SIGINT,
    # and a test that ran the runner's loop in this process may have left it ignored.
    start = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('tuner', run_name='__main__', alter_sys=True)"
    )
    argv = [sys.executable, "-c", start, "tune", *workload, "--log", str(log)]
    argv += ["--jobs", "1", "--retime", "0", "--no-baseline", *flags]
    return subprocess.Popen(
        argv,
        cwd=log.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=group,
    )


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def stacks(proc: subprocess.Popen[str]) -> str:
    """Every thread's Python stack of a worker that did not stop, and its stderr so far:
    SIGABRT makes its fault handler (``PYTHONFAULTHANDLER``) print them, then it dies."""
    proc.send_signal(signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        return "(no stacks: the worker did not die on SIGABRT either)"
    return err
