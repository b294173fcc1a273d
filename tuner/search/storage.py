"""Opening the Optuna storage that many tuners share, and the lock their claims take.

``--storage`` names where the studies live:

- ``postgresql+psycopg://user@host/db``: many machines (the ``distributed`` extra
  brings the ``psycopg`` driver);
- ``journal:./tune.journal``: Optuna's journal file, several processes on one machine;
- ``sqlite:///tune.db``: one machine, mostly one process.

Opening is race-free: workers that start together on an empty PostgreSQL
database take one advisory lock while Optuna creates its tables, so the first
creates them and the others wait (without it the second died with
``UniqueViolation`` on the ``studydirection`` type). Every failure ends in a
:class:`StorageError` of one line, with the password left out.

>>> storage = open_storage("journal:./tune.journal")
>>> with storage.lock("matmul(...)@cpu/threads=2#ab12"):
...     ...  # read the study's claims and add ours, with no other worker in between
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Storage", "StorageError", "open_storage", "storage_errors"]


class StorageError(OSError):
    """The study storage cannot be opened or stopped answering (one line, no password)."""


#: The advisory lock every tuner takes while Optuna creates or checks its tables.
_SCHEMA_LOCK = 0x7475_6E65_7201  # "tuner" 1


@dataclass
class Storage:
    """An opened Optuna storage, what it is called in messages, and its claim lock."""

    optuna: Any  # optuna.storages.BaseStorage
    label: str  # the URL without its password
    _lock: Callable[[str], contextlib.AbstractContextManager[None]]
    _threads: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the lock named ``name`` against every process of this storage (and thread)."""
        with self._threads, self._lock(name):
            yield


_OPEN: dict[str, Storage] = {}


def open_storage(url: str) -> Storage:
    """The storage ``url`` names, opened once per process (its tables created if missing)."""
    if url not in _OPEN:
        _OPEN[url] = _journal(url) if url.startswith("journal:") else _rdb(url)
    return _OPEN[url]


def _journal(url: str) -> Storage:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = url.removeprefix("journal:")
    if not path:
        raise StorageError("journal storage needs a file: --storage journal:./tune.journal")
    try:
        storage = JournalStorage(JournalFileBackend(path))
    except OSError as exc:
        raise StorageError(f"cannot open the journal {path}: {exc.strerror or exc}") from None
    return Storage(storage, url, functools.partial(_file_lock_for, path))


def _rdb(url: str) -> Storage:
    import sqlalchemy
    from optuna.storages import RDBStorage, _CachedStorage

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise StorageError(
            f"not a storage URL: {url!r} (postgresql+psycopg://USER@HOST/DB, "
            "journal:PATH or sqlite:///PATH)"
        ) from None
    label = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise StorageError(
            f"unsupported storage {label}: use postgresql+psycopg://..., journal:PATH or sqlite:///PATH"
        )
    lock: Callable[[str], contextlib.AbstractContextManager[None]]
    with storage_errors(label, "cannot open the study storage"):
        if backend == "postgresql":
            engine = sqlalchemy.create_engine(parsed)  # fails fast on a missing driver
            with _advisory_lock(engine, _SCHEMA_LOCK):
                rdb = _retry(lambda: RDBStorage(url, engine_kwargs=_PG_ENGINE))
            engine.dispose()
            lock = functools.partial(_named_advisory_lock, rdb.engine)
        else:
            path = parsed.database or ""
            if not path or path == ":memory:":
                raise StorageError(f"an in-memory SQLite database cannot be shared: {label}")
            rdb = _retry(lambda: RDBStorage(url))
            lock = functools.partial(_file_lock_for, path)
    return Storage(_CachedStorage(rdb), label, lock)


def _retry(make: Callable[[], Any], attempts: int = 5) -> Any:
    """``make()``, tried again after a short wait when another process raced it.

    PostgreSQL workers never race here (they hold the schema lock); SQLite
    ones may both see no tables and both create them: the loser sees them
    on its next try.
    """
    import sqlalchemy

    for attempt in range(attempts):
        try:
            return make()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == attempts - 1:
                raise
        except sqlalchemy.exc.OperationalError as exc:
            if "already exists" not in str(exc) or attempt == attempts - 1:
                raise
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


#: Connections are checked before use (a restarted server is survived) and give up
#: after 10 s (a server that is gone is reported, not waited for).
_PG_ENGINE = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}


def _named_advisory_lock(engine: Any, name: str) -> contextlib.AbstractContextManager[None]:
    return _advisory_lock(engine, _key(name))


def _file_lock_for(path: str, name: str) -> contextlib.AbstractContextManager[None]:
    return _file_lock(path)  # one lock per file: the studies of one file are claimed in turn


def _key(name: str) -> int:
    """A signed 64-bit advisory-lock key for ``name`` (stable across processes)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextlib.contextmanager
def _advisory_lock(engine: Any, key: int) -> Iterator[None]:
    """A PostgreSQL advisory lock held by a transaction; freed when it ends or the process dies."""
    import sqlalchemy

    with engine.connect() as conn, conn.begin():
        conn.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        yield


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (the journal or SQLite file itself)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _first_line(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    orig = getattr(cause, "orig", None)  # SQLAlchemy's wrapper around the driver's error
    text = str(orig if orig is not None else cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


@contextlib.contextmanager
def storage_errors(label: str, doing: str = "lost the study storage") -> Iterator[None]:
    """Turn what SQLAlchemy, the driver or Optuna raise about the storage into one line."""
    import optuna
    import sqlalchemy

    try:
        yield
    except StorageError:
        raise
    except ModuleNotFoundError as exc:
        raise StorageError(
            f"{doing} {label}: the {exc.name} driver is missing "
            "(pip install 'tuner[distributed]' brings psycopg, for postgresql+psycopg://)"
        ) from None
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as exc:
        raise StorageError(f"{doing} {label}: {_first_line(exc)}") from None
