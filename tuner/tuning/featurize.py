"""What the cost model sees of a config, computed here or in the build workers.

A config's features are its knob encoding (``space.encode``, meaningful for
its own task only) and the loop-nest features of its lowering
(``cost_models.loop_features``, which carry across tasks). Lowering is the
cost: about 9 ms a config for a 512^3 matmul, mostly index simplification,
and a model-based search ranks a few hundred configs a batch (1,779 in a
64-trial matmul tune, 18 of its 70 s, Zen 5), in the tuner's process while
the build workers sit idle between batches. :class:`Featurizer` hands a
list of configs to the measurer's build workers, one chunk each
(``Measurer.map``); without workers (a replayed run, a short list) it
lowers them here. Either way a config's features are the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..measure import Candidate
from ..space import Config, ConfigSpace
from ..target import Target
from ..task import Task

__all__ = ["Featurizer", "candidate_loop_features"]


class Featurizer:
    """``f(config)`` or ``f.many(configs)``: the features of configs of ``task``.

    ``space``: the knob encoding's space (None: loop-nest features alone, what
    a cost model shared by several tasks compares). ``workers``: a measurer
    whose build workers lower long lists (anything with ``map``), or None.
    """

    def __init__(self, task: Task, space: ConfigSpace | None = None, workers: Any = None):
        self.task, self.space = task, space
        self._map = getattr(workers, "map", None)

    def __call__(self, cfg: Config) -> np.ndarray:
        return self.many([cfg])[0]

    def many(self, cfgs: Sequence[Config]) -> list[np.ndarray]:
        candidates = [self.task.candidate(c) for c in cfgs]
        if self._map is not None:
            loops = self._map(candidate_loop_features, candidates)
        else:
            loops = candidate_loop_features(candidates)
        if self.space is None:
            return loops
        return [np.concatenate([self.space.encode(c), f]) for c, f in zip(cfgs, loops, strict=True)]


#: A build worker's operators and targets by (operator, arguments, target), as JSON.
_RESOLVED: dict[str, tuple[Any, Target]] = {}


def candidate_loop_features(candidates: Sequence[Candidate]) -> list[np.ndarray]:
    """The loop-nest features of each candidate's lowering (runs in a build worker)."""
    from cost_models import loop_features
    from search_spaces import get_operator

    from ..lower.lower import lower

    out = []
    for c in candidates:
        key = json.dumps([c.op, c.target], sort_keys=True, default=str)
        resolved = _RESOLVED.get(key)
        if resolved is None:
            if len(_RESOLVED) >= 64:
                _RESOLVED.clear()
            resolved = _RESOLVED[key] = (get_operator(c.op), Target.from_json(c.target))
        op, target = resolved
        sched, tensors = op.schedule(c.config, c.args, target)
        out.append(np.asarray(loop_features(lower(sched, tensors), target), dtype=np.float64))
    return out
