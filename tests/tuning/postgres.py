"""A throwaway PostgreSQL server for the distributed tests, and a fresh database per test.

CI (``.ci/run``) starts one and exports ``TUNER_TEST_POSTGRES_URL`` (a server URL
without a database). Elsewhere the tests start their own from the ``initdb``
and ``pg_ctl`` they find (on PATH or in Debian's ``/usr/lib/postgresql/*/bin``),
in a temporary folder, listening on a unix socket only; as root it runs as an
unprivileged user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

ENV = "TUNER_TEST_POSTGRES_URL"


def server_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, if PostgreSQL is installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists():
            return Path(folder)
    return None


def _as_user() -> list[str]:
    """The prefix that runs a command as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return ["runuser", "-u", name, "--"]
    raise RuntimeError("running as root with no unprivileged user to run PostgreSQL as")


@contextlib.contextmanager
def server() -> Iterator[str]:
    """Start a server in a temporary folder; yields its URL (no database); stops it after."""
    folder = server_bin()
    assert folder is not None
    root = Path(tempfile.mkdtemp(prefix="tuner-pg-", dir="/tmp"))  # a short socket path
    data = root / "data"
    prefix = _as_user()
    if prefix:
        shutil.chown(root, user=prefix[2])
    os.chmod(root, 0o755)
    run = lambda *args: subprocess.run(  # noqa: E731
        [*prefix, *map(str, args)], check=True, capture_output=True, text=True, cwd=root
    )
    try:
        run(folder / "initdb", "-D", data, "-U", "tuner", "--auth=trust", "-E", "UTF8")
        options = f"-k {root} -c listen_addresses='' -c fsync=off -c max_connections=100"
        run(folder / "pg_ctl", "-D", data, "-l", root / "log", "-o", options, "-w", "start")
        try:
            yield f"postgresql+psycopg://tuner@/?host={root}"
        finally:
            run(folder / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def with_database(server_url: str, name: str) -> str:
    """``server_url`` pointing at database ``name``."""
    head, _, query = server_url.partition("?")
    return f"{head.rstrip('/')}/{name}" + (f"?{query}" if query else "")


def _admin(server_url: str) -> object:
    import psycopg

    url = with_database(server_url, "postgres").replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(url, autocommit=True)


def create_database(server_url: str) -> str:
    """A new empty database on the server; returns its SQLAlchemy URL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with _admin(server_url) as conn:  # type: ignore[attr-defined]
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    """Drop the database of ``url``, cutting off whoever is connected to it."""
    name = url.split("?")[0].rsplit("/", 1)[1]
    with _admin(server_url) as conn:  # type: ignore[attr-defined]
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
