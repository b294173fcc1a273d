"""Appending to and reading tuning logs, and choosing the best records.

Writing is safe for many processes at once: each line goes out in one
``os.write`` on an ``O_APPEND`` descriptor under an exclusive ``flock``, and is
``fsync``-ed before the lock is released, so a crash loses at most the line
being written and concurrent tuners never interleave partial lines.

Reading never trusts the file: lines are decoded with plain ``json.loads``,
nothing read is ever executed, and damaged lines or lines of an unknown format
version are skipped with one ``RecordsWarning`` per ``load`` call.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType

from tuner.target import Target
from tuner.workload import Workload

from .format import ErrorKind, Record, RecordError, RecordVersionError, config_key

__all__ = [
    "LogWriter",
    "Match",
    "RecordsWarning",
    "append",
    "best",
    "best_by_workload",
    "best_match",
    "judged",
    "load",
    "measured_configs",
    "target_label",
]

PathLike = str | os.PathLike[str]
LogSource = PathLike | Sequence[PathLike]


class RecordsWarning(UserWarning):
    """Some lines of a tuning log were skipped (damaged, or of an unknown version)."""


def _encode(record: Record) -> bytes:
    text = json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


class LogWriter:
    """Appends records to one log file, one flushed and fsync-ed line per record.

    >>> with LogWriter("logs/matmul.jsonl") as log:
    ...     log.write(record)

    The file and its parent folders are created if missing; existing lines are
    never truncated or rewritten. Use it as a context manager, or call ``close``.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self._fd: int | None = os.open(self.path, flags, 0o644)

    def write(self, record: Record) -> None:
        """Append ``record`` as one line, durable on disk when this returns."""
        if self._fd is None:
            raise RecordError(f"tuning log {self.path} is already closed")
        line = _encode(record)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(self._fd).st_size
            # A line cut short by a crash would swallow ours; start a fresh line.
            if size and os.pread(self._fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            written = os.write(self._fd, line)
            while written < len(line):  # only on a short write (e.g. a signal)
                written += os.write(self._fd, line[written:])
            os.fsync(self._fd)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def append(path: PathLike, records: Iterable[Record]) -> None:
    """Append ``records`` to the log at ``path``, each line flushed on its own."""
    with LogWriter(path) as log:
        for record in records:
            log.write(record)


@dataclass
class _Skipped:
    """Tally of lines that a load call could not use, for its single warning."""

    damaged: int = 0
    unknown_version: int = 0
    files: list[str] = field(default_factory=list)
    first: str = ""

    def add(self, where: str, path: Path, error: RecordError) -> None:
        if isinstance(error, RecordVersionError):
            self.unknown_version += 1
        else:
            self.damaged += 1
        if str(path) not in self.files:
            self.files.append(str(path))
        self.first = self.first or f"{where}: {error}"

    def message(self) -> str:
        parts = [
            _plural(self.damaged, "damaged line"),
            _plural(self.unknown_version, "line of unknown version", "lines of unknown version"),
        ]
        counts = " and ".join(p for p in parts if p)
        return f"skipped {counts} in {', '.join(self.files)} (first at {self.first})"


def _plural(n: int, one: str, many: str = "") -> str:
    if n == 0:
        return ""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _log_files(source: LogSource) -> list[Path]:
    paths = [source] if isinstance(source, str | os.PathLike) else list(source)
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("*.jsonl"))
            if not found:
                raise RecordError(f"no tuning logs (*.jsonl) in the folder {path}")
            files.extend(found)
        else:
            files.append(path)
    return files


def _read_lines(path: Path) -> list[bytes]:
    try:
        return path.read_bytes().split(b"\n")
    except FileNotFoundError:
        raise RecordError(f"tuning log {path} does not exist") from None
    except OSError as exc:
        raise RecordError(f"cannot read tuning log {path}: {exc.strerror}") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _parse(line: bytes) -> Record:
    try:
        data = json.loads(line, parse_constant=_reject_constant)
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        raise RecordError(f"not a JSON line ({exc})") from None
    return Record.from_json(data)


def _key(workload: Workload | str) -> str:
    return workload.key if isinstance(workload, Workload) else workload


def load(
    source: LogSource,
    *,
    workload: Workload | str | None = None,
    target_kind: str | None = None,
    require: bool = False,
) -> list[Record]:
    """Read records from a log file, a list of them, or a folder of ``*.jsonl`` logs.

    Optionally keep only one workload (a ``Workload`` or its key) and one target
    kind. Unusable lines are skipped with one ``RecordsWarning`` that counts them.
    A ``RecordError`` of one line for: a missing file, a folder without logs, a
    file none of whose lines is a record (an ONNX model passed where a log
    belongs; a log whose only line is cut short by a crash still reads, as
    empty), and, with ``require`` (a log to read records from, not to append
    to), logs that hold no record at all.

    >>> records = load("logs/", workload="matmul(K=512,M=512,N=512)", target_kind="cpu")
    """
    wanted = None if workload is None else _key(workload)
    records: list[Record] = []
    skipped = _Skipped()
    found = 0
    for path in _log_files(source):
        lines = _read_lines(path)
        read, first_error = 0, None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = _parse(line)
            except RecordError as error:
                skipped.add(f"{path}:{number}", path, error)
                first_error = first_error or f"line {number}: {error}"
                continue
            read += 1
            if wanted is not None and record.workload.key != wanted:
                continue
            if target_kind is not None and record.target.kind != target_kind:
                continue
            records.append(record)
        if read == 0 and first_error is not None and not _cut_short(lines):
            raise RecordError(
                f"{path} is not a tuning log: none of its lines is a record ({first_error})"
            )
        found += read
    if require and found == 0:
        raise RecordError(f"{_name(source)} holds no tuning records")
    if skipped.files:
        warnings.warn(skipped.message(), RecordsWarning, stacklevel=2)
    return records


def _cut_short(lines: list[bytes]) -> bool:
    """One line without its newline: the first record of a log whose writer died mid-line."""
    text = [line for line in lines if line.strip()]
    return len(text) == 1 and lines[-1].strip() != b""


def _name(source: LogSource) -> str:
    if isinstance(source, str | os.PathLike):
        return str(source)
    return ", ".join(map(str, source)) or "an empty list of logs"


#: The strategy name of the records a tune writes when it measures its leaders again.
RETIME = "retime"


def target_label(target: Target) -> str:
    """A target as people tell records apart: its kind and thread count ("cpu, 2 threads")."""
    n = target.threads
    if not n:
        return target.kind
    return f"{target.kind}, {n} thread{'s' if n != 1 else ''}"


def judged(records: Iterable[Record]) -> list[Record]:
    """Each correct config once, judged on the median of the samples that count for it.

    Records group by workload, machine (fingerprint), thread count and
    config: a config measured more than once (by two tuners sharing a log,
    say) on one machine at one thread count is judged on its records'
    samples pooled, so one lucky measurement does not win on its own, and
    timings at two thread counts are never pooled. A config re-timed at the
    end of a tune (strategy "retime") is judged on its re-timed samples
    alone: they were taken side by side in one batch, while a search's
    samples come from whatever moment each candidate ran in (a MobileNetV2
    default timed 1.71 ms in its search, under load, and 0.217 ms re-timed
    with the leaders). A config that ever gave a wrong answer is left out.
    Each config's latest counted record is returned, carrying the judged
    samples when there are several, in the order configs first appear.
    ``best`` (the fastest, among the re-timed configs where a tune re-timed:
    a config timed once is not preferred for having escaped the second
    look) and ``tuner show`` both read it, so they give one figure per config.
    """
    groups: dict[tuple[str, str, int, str], list[Record]] = {}
    wrong: set[tuple[str, str, int, str]] = set()
    for r in records:
        key = (r.workload.key, r.target.fingerprint, r.target.threads, config_key(r.config))
        if r.error_kind is ErrorKind.WRONG_ANSWER:
            wrong.add(key)
        elif r.ok and r.samples:
            groups.setdefault(key, []).append(r)
    out: list[Record] = []
    for key, group in groups.items():
        if key in wrong:
            continue
        group = [r for r in group if r.strategy == RETIME] or group
        latest = max(group, key=lambda r: r.timestamp)
        if len(group) > 1:
            latest = replace(latest, samples=tuple(s for r in group for s in r.samples))
        out.append(latest)
    return out


def _fastest(records: Iterable[Record]) -> Record | None:
    """The fastest of the ``judged`` configs (the re-timed ones where a tune re-timed)."""
    configs = judged(records)
    retimed = {_machine(r) for r in configs if r.strategy == RETIME}
    best: Record | None = None
    for r in configs:
        if _machine(r) in retimed and r.strategy != RETIME:
            continue
        if best is None or r.median < best.median:
            best = r
    return best


def _machine(r: Record) -> tuple[str, str, int]:
    return (r.workload.key, r.target.fingerprint, r.target.threads)


@dataclass(frozen=True)
class Match:
    """The record chosen for a workload on a target, and why it is a near miss ("" if exact).

    ``note`` names what differs: another thread count, another machine.
    """

    record: Record | None
    note: str = ""


def best_match(records: Iterable[Record], workload: Workload | str, target: Target) -> Match:
    """The best record for ``workload`` built for ``target``, preferring what matches it.

    This machine's records (same fingerprint) first, at the target's thread
    count, else the nearest thread count; records of other machines of the
    same kind only when this one has none, again by nearest thread count.
    A record taken from another thread count or machine comes with a
    ``note`` saying so (the compiler warns with it).

    >>> m = best_match(load("tune.jsonl"), workload, Target.from_name("cpu", num_threads=1))
    >>> m.record.target.cap("threads"), m.note
    (1, '')
    """
    wanted = _key(workload)
    pool = [r for r in records if r.workload.key == wanted and r.target.kind == target.kind]
    threads = target.threads
    here = [r for r in pool if r.target.fingerprint == target.fingerprint]
    elsewhere = [r for r in pool if r.target.fingerprint != target.fingerprint]
    for tier, other_machine in ((here, False), (elsewhere, True)):
        by_threads: dict[int, list[Record]] = {}
        for r in tier:
            by_threads.setdefault(r.target.threads, []).append(r)
        order = sorted(by_threads, key=lambda n: (n == 0, abs(n - threads), n))
        for n in order:
            chosen = _fastest(by_threads[n])
            if chosen is None:
                continue
            notes = []
            if n != threads:
                timed = f"{n} threads" if n else "an unrecorded thread count"
                notes.append(f"no record at {threads} threads; using one timed with {timed}")
            if other_machine:
                model = chosen.target.get("model", "")
                where = f"{model} " if model else ""
                notes.append(
                    f"measured on another machine ({where}fingerprint {chosen.target.fingerprint})"
                )
            return Match(chosen, "; ".join(notes))
    return Match(None)


def best(
    records: Iterable[Record],
    workload: Workload | str | None = None,
    target: Target | str | None = None,
) -> Record | None:
    """The fastest correct config's record, optionally for one workload and target.

    Errors and wrong answers are never chosen; a config measured several
    times is judged on all its samples (see ``_fastest``). Given a ``Target``
    and a workload, the record is chosen as ``best_match`` does (this
    machine, this thread count, first); a string target means a kind.

    >>> best(load("logs/matmul.jsonl"), workload, target=Target.from_name("cpu"))
    """
    wanted = None if workload is None else _key(workload)
    pool = [r for r in records if wanted is None or r.workload.key == wanted]
    if target is None:
        return _fastest(pool)
    if isinstance(target, Target) and wanted is not None:
        return best_match(pool, wanted, target).record
    kind = target.kind if isinstance(target, Target) else target
    return _fastest(r for r in pool if r.target.kind == kind)


def best_by_workload(records: Iterable[Record]) -> dict[tuple[str, str], Record]:
    """The fastest correct record per workload and target label (kind and thread count).

    >>> table = best_by_workload(load("logs/"))
    >>> table["matmul(K=512,M=512,N=512)", "cpu, 2 threads"].config
    """
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        groups.setdefault((record.workload.key, target_label(record.target)), []).append(record)
    table = {key: _fastest(group) for key, group in groups.items()}
    return {key: record for key, record in table.items() if record is not None}


def measured_configs(
    records: Iterable[Record], workload_key: Workload | str, target_kind: str
) -> set[str]:
    """Config keys already measured (with any outcome), so a resumed run skips them.

    >>> done = measured_configs(load(log), "matmul(K=512,M=512,N=512)", "cpu")
    >>> config_key(candidate) in done
    """
    key = _key(workload_key)
    return {
        config_key(r.config)
        for r in records
        if r.workload.key == key and r.target.kind == target_kind
    }
