"""Stopping cleanly: SIGTERM handled as Ctrl-C is, and children that die with their parent.

A job scheduler's stop or a CI timeout sends SIGTERM. Left to its default, the
tuner died at once and its build workers and multiprocessing's resource
tracker lived on as orphans, still compiling. While a measurer is open,
SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in the main
thread instead, so the same clean-up runs as for Ctrl-C: the measurer stops
its processes, the log is closed, claims are given back.

A parent killed outright (SIGKILL) runs no clean-up; its children notice by
themselves (:func:`exit_with_parent`) and exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

__all__ = ["Terminated", "exit_with_parent", "sigterm_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled as Ctrl-C is."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"stopped by signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` (main thread, default handler only)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield  # someone else decides what SIGTERM does
        return
    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


_PR_SET_PDEATHSIG = 1


def exit_with_parent(parent: int) -> None:
    """Make this (child) process exit when the process ``parent`` is gone.

    On Linux the kernel sends SIGKILL when the parent dies
    (``PR_SET_PDEATHSIG``); elsewhere a daemon thread watches the parent id.
    If the parent died before this ran, exit now.
    """
    armed = False
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
