"""The replay runner: serves recorded measurements, so strategies are compared without timing.

>>> replay = ReplayMeasurer(canonical_records(load("experiments/logs/matmul256_sample_400.jsonl")))
>>> tune("matmul", args, TuneOptions(strategy="xgb", log=tmp), replay=replay)
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from records import ErrorKind, Record, config_key

from ._types import Candidate, MeasureResult, OnResult


class ReplayMeasurer:
    """Answers each candidate with its recorded result (the first record of its config)."""

    def __init__(self, records: Iterable[Record]):
        self._by_key: dict[str, Record] = {}
        for r in records:
            self._by_key.setdefault(config_key(r.config), r)

    @property
    def keys(self) -> set[str]:
        return set(self._by_key)

    def measure(
        self, candidates: list[Candidate], on_result: OnResult | None = None
    ) -> list[MeasureResult]:
        out = []
        for i, c in enumerate(candidates):
            r = self._by_key.get(config_key(c.config))
            if r is None:
                out.append(MeasureResult(ErrorKind.RUNTIME_ERROR, "config not in the replayed log"))
            else:
                out.append(
                    MeasureResult(
                        r.error_kind, r.error_msg, r.samples, r.build_seconds, r.run_seconds
                    )
                )
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def close(self) -> None:
        pass

    def __enter__(self) -> ReplayMeasurer:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
