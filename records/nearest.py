"""Records of other shapes: the nearest tuned workload of the same family.

A workload never tuned (a batch size, a sequence length, an image size
that the log has not seen) can start from the record of a similar one. Two
workloads are of one **family** when they are the same operator with the
same argument names and the same value for every argument that is not an
integer (dtype, layout, epilogue...). Their distance is Ansor's: the
product, over the integer arguments, of the larger value over the smaller
(1 for the same shape; ``M=64`` and ``M=256`` are 4 apart, as are
``M=128,N=64`` and ``M=256,N=128``).

>>> for distance, source, match in nearest_matches(load("tune.jsonl"), workload, target):
...     print(distance, source.key, match.record.config)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from tuner.target import Target
from tuner.workload import Workload

from .format import Record
from .log import Match, best_match

__all__ = ["nearest_matches", "shape_distance"]


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def shape_distance(a: Workload, b: Workload) -> float | None:
    """The distance between two workloads of one family; None when they are not one family.

    >>> shape_distance(Workload.make("matmul", M=64, N=8), Workload.make("matmul", M=256, N=8))
    4.0
    """
    if a.op != b.op:
        return None
    args_a, args_b = dict(a.args), dict(b.args)
    if args_a.keys() != args_b.keys():
        return None
    distance = 1.0
    for name, x in args_a.items():
        y = args_b[name]
        m, n = _positive_int(x), _positive_int(y)
        if m is not None and n is not None:
            distance *= max(m, n) / min(m, n)
        elif x != y:  # other values (and zero or negative integers) must agree
            return None
    return distance


def nearest_matches(
    records: Iterable[Record], workload: Workload, target: Target
) -> Iterator[tuple[float, Workload, Match]]:
    """The best record of each other shape of ``workload``'s family, nearest first.

    Each is chosen among its own shape's records as ``best_match`` does
    (this machine and thread count first); shapes with no correct record are
    left out, and so is ``workload`` itself. Ties go to the smaller key.
    """
    by_key: dict[str, tuple[Workload, list[Record]]] = {}
    for r in records:
        if r.workload.op == workload.op and r.target.kind == target.kind:
            by_key.setdefault(r.workload.key, (r.workload, []))[1].append(r)
    ranked = []
    for key, (other, recs) in by_key.items():
        d = shape_distance(workload, other)
        if d is not None and key != workload.key:
            ranked.append((d, key, other, recs))
    for d, _, other, recs in sorted(ranked, key=lambda t: (t[0], t[1])):
        match = best_match(recs, other, target)
        if match.record is not None and math.isfinite(d):
            yield d, other, match
