"""Task schedulers: which of a model's tasks gets the next batch of trials.

A model's latency is the weighted sum of its tasks' latencies (weight = how
often the task runs). A scheduler spends a shared trial budget across the
tasks, ask/tell shaped like the search strategies: ``next_task()`` names the
task to tune for one round, ``round_trials(index)`` how many trials that round
gets (``warmup`` for a task's first, its default schedule first of all;
``batch`` after), ``tell(index, trials, best_seconds)`` reports what the round
measured and the task's best time since. Every task gets its warm-up round
before any task gets a second, so a run cut short (a time limit) has timed
every task once rather than a few of them many times. It never measures anything itself, so it is tested on replayed
measurements, and its state is rebuilt from a tuning log with ``restore``.

>>> sched = get_scheduler("gradient", [TaskInfo(weight=2), TaskInfo(weight=1)])
>>> i = sched.next_task()        # warm-up: every task once, in order
>>> sched.round_trials(i)
1
>>> sched.tell(i, trials=1, best_seconds=1e-3)

Schedulers are found by name (``round-robin``, ``gradient``);
``register_scheduler`` adds more.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "GradientScheduler",
    "RoundRobinScheduler",
    "Scheduler",
    "SchedulerError",
    "TaskInfo",
    "get_scheduler",
    "register_scheduler",
    "replay",
    "schedulers",
]


class SchedulerError(ValueError):
    """An unknown scheduler, or tasks it cannot schedule."""


@dataclass(frozen=True)
class TaskInfo:
    """What a scheduler knows of a task before measuring it.

    ``weight``: occurrences in the model (its latency counts that often).
    ``flops`` and ``tag`` let the gradient scheduler estimate a task from
    similar ones (same tag, e.g. the operator template): how fast it could be
    if it reached their throughput. ``flops <= 0`` means unknown.
    """

    weight: float = 1.0
    flops: float = 0.0
    tag: str | None = None


class Scheduler(ABC):
    """Warm-up (every task one round of ``warmup`` trials, in order), then ``_pick`` among the
    tasks still alive, a round of ``batch`` trials each.

    A task drops out ("dead") when a round measured nothing (its space is
    exhausted) or, with ``patience``, after that many trials without
    improving its best (a task that never ran correctly counts from zero).
    ``next_task`` returns None once every task is dead.
    """

    name = ""

    def __init__(
        self,
        tasks: Sequence[TaskInfo],
        *,
        batch: int = 8,
        warmup: int = 1,
        patience: int | None = None,
        seed: int = 0,
    ):
        if not tasks:
            raise SchedulerError("a scheduler needs at least one task")
        if any(t.weight <= 0 for t in tasks):
            raise SchedulerError("task weights must be positive")
        self.tasks = list(tasks)
        if batch < 1 or warmup < 1:
            raise SchedulerError("a round needs at least one trial")
        self.batch, self.warmup, self.patience = batch, warmup, patience
        self.rng = np.random.default_rng(seed)
        n = len(tasks)
        self.rounds = [0] * n
        self.trials = [0] * n
        self.best = [math.inf] * n
        #: The best seconds after each of a task's rounds.
        self.history: list[list[float]] = [[] for _ in range(n)]
        self.dead: set[int] = set()
        self._trials_at_best = [0] * n

    # -- ask / tell --------------------------------------------------------------------

    def next_task(self) -> int | None:
        """The task to tune next (for one round), or None when every task has dropped out."""
        alive = [i for i in range(len(self.tasks)) if i not in self.dead]
        if not alive:
            return None
        for i in alive:
            if self.rounds[i] == 0:
                return i
        return self._pick(alive)

    def round_trials(self, index: int) -> int:
        """How many trials task ``index``'s next round gets: ``warmup`` for its first round,
        ``batch`` after."""
        return self.warmup if self.rounds[index] == 0 else self.batch

    def tell(self, index: int, trials: int, best_seconds: float) -> None:
        """Task ``index`` measured ``trials`` candidates in one round; its best is now ``best_seconds``.

        ``trials == 0`` says its space is exhausted. ``best_seconds`` is
        ``inf`` while no candidate of the task ran correctly.
        """
        self.rounds[index] += 1
        self.trials[index] += trials
        if best_seconds < self.best[index]:
            self.best[index] = best_seconds
            self._trials_at_best[index] = self.trials[index]
        self.history[index].append(self.best[index])
        stale = self.trials[index] - self._trials_at_best[index]
        if trials == 0 or (self.patience is not None and stale >= self.patience):
            self.dead.add(index)

    def restore(self, index: int, seconds: Sequence[float]) -> None:
        """Replay task ``index``'s logged trials (median seconds in trial order, ``inf`` for failures).

        They are told in rounds of ``round_trials``, so a scheduler rebuilt
        from a log is in the state it had when the log was written.
        """
        start = 0
        while start < len(seconds):
            chunk = seconds[start : start + self.round_trials(index)]
            self.tell(index, len(chunk), min(self.best[index], min(chunk)))
            start += len(chunk)

    @abstractmethod
    def _pick(self, alive: list[int]) -> int:
        """The next task after warm-up, among ``alive`` (never empty)."""

    # -- what the model's latency is estimated to be ---------------------------------

    def weighted_latency(self) -> float:
        """The weighted sum of every task's best seconds (``inf`` while one has none)."""
        return sum(t.weight * b for t, b in zip(self.tasks, self.best, strict=True))

    @property
    def total_trials(self) -> int:
        return sum(self.trials)


class RoundRobinScheduler(Scheduler):
    """Each live task in turn: the one with the fewest rounds so far (ties: the first)."""

    name = "round-robin"

    def _pick(self, alive: list[int]) -> int:
        return min(alive, key=lambda i: (self.rounds[i], i))


class GradientScheduler(Scheduler):
    """Ansor's scheduler: the task whose next round is expected to lower the weighted latency most.

    For task i with weight w_i, best time g_i after r_i rounds (Zheng et al.,
    "Ansor", OSDI 2020, section 6)::

        backward = (g_i(now) - g_i(``window`` rounds ago)) / window
        forward  = min(g_i - g_i / r_i, beta * flops_i / V_best) - g_i
        gradient = w_i * (alpha * backward + (1 - alpha) * forward)

    where V_best is the best throughput (flops per second) among the tasks
    similar to i (same ``tag``), so a task far slower than its peers is
    expected to gain. The most negative gradient wins (ties: at random). A
    task that, after 5 rounds more than any of its peers, is still ``beta``
    times slower than the best of them leaves the similarity group: it is not
    like them after all. A task with no correct candidate yet goes first.
    """

    name = "gradient"

    def __init__(
        self,
        tasks: Sequence[TaskInfo],
        *,
        alpha: float = 0.2,
        beta: float = 2.0,
        window: int = 3,
        **options: Any,
    ):
        super().__init__(tasks, **options)
        self.alpha, self.beta, self.window = alpha, beta, window
        self.groups: dict[str, list[int]] = {}
        for i, t in enumerate(self.tasks):
            if t.tag is not None and t.flops > 0:
                self.groups.setdefault(t.tag, []).append(i)
        self._group_of = {i: tag for tag, members in self.groups.items() for i in members}

    def gradient(self, i: int) -> float:
        """The expected change of the weighted latency per round given to task ``i`` (<= 0)."""
        g, r = self.best[i], self.rounds[i]
        if not math.isfinite(g):
            return -math.inf
        hist = self.history[i]
        backward = (hist[-1] - hist[-1 - self.window]) / self.window if r > self.window else 0.0
        forward_est = g - g / r
        peers = self._peers(i)
        if peers:
            speed = max(self.tasks[j].flops / self.best[j] for j in peers)
            forward_est = min(forward_est, self.beta * self.tasks[i].flops / speed)
        forward = forward_est - g
        return self.tasks[i].weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def _peers(self, i: int) -> list[int]:
        """The members of ``i``'s similarity group (``i`` included) timed so far; [] without peers."""
        tag = self._group_of.get(i)
        members = self.groups.get(tag, []) if tag is not None else []
        timed = [j for j in members if math.isfinite(self.best[j])]
        return timed if len(members) > 1 and timed else []

    def _pick(self, alive: list[int]) -> int:
        grads = [self.gradient(i) for i in alive]
        if max(grads) == min(grads):
            return alive[int(self.rng.integers(len(alive)))]
        return alive[int(np.argmin(grads))]

    def tell(self, index: int, trials: int, best_seconds: float) -> None:
        super().tell(index, trials, best_seconds)
        self._adjust_group(index)

    def _adjust_group(self, i: int) -> None:
        tag = self._group_of.get(i)
        if tag is None or not math.isfinite(self.best[i]):
            return
        members = self.groups[tag]
        others = [j for j in members if j != i]
        timed = [j for j in members if math.isfinite(self.best[j])]
        if not others or not timed:
            return
        best_speed = max(self.tasks[j].flops / self.best[j] for j in timed)
        speed = self.tasks[i].flops / self.best[i]
        if speed < best_speed / self.beta and self.rounds[i] > 5 + max(
            self.rounds[j] for j in others
        ):
            members.remove(i)
            del self._group_of[i]


_REGISTRY: dict[str, Callable[..., Scheduler]] = {
    "round-robin": RoundRobinScheduler,
    "gradient": GradientScheduler,
}


def register_scheduler(name: str) -> Callable[[Callable[..., Scheduler]], Callable[..., Scheduler]]:
    """Class decorator: make a scheduler available to ``get_scheduler(name)``."""

    def deco(factory: Callable[..., Scheduler]) -> Callable[..., Scheduler]:
        _REGISTRY[name] = factory
        return factory

    return deco


def schedulers() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def get_scheduler(name: str, tasks: Sequence[TaskInfo], **options: Any) -> Scheduler:
    """A new scheduler ``name`` over ``tasks`` (``batch``, ``patience``, ``seed``, ...).

    >>> get_scheduler("round-robin", [TaskInfo()]).next_task()
    0
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise SchedulerError(
            f"unknown scheduler {name!r}; known schedulers: {', '.join(schedulers())}"
        )
    return factory(tasks, **options)


def replay(
    scheduler: Scheduler, seconds: Sequence[Sequence[float]], budget: int
) -> list[tuple[int, float]]:
    """Run ``scheduler`` on recorded measurements: task i's trials give ``seconds[i]`` in order.

    Each round a task is given ``scheduler.round_trials`` trials (fewer at the end
    of the budget, or of its records, which exhaust it). Returns, after each
    round, the trials spent in all and the weighted latency then.

    >>> rr = get_scheduler("round-robin", [TaskInfo(), TaskInfo()], batch=1)
    >>> replay(rr, [[3.0, 2.0], [1.0]], 3)
    [(1, inf), (2, 4.0), (3, 3.0)]
    """
    served = [0] * len(seconds)
    curve: list[tuple[int, float]] = []
    spent = 0
    while spent < budget:
        i = scheduler.next_task()
        if i is None:
            break
        n = min(scheduler.round_trials(i), budget - spent)
        chunk = seconds[i][served[i] : served[i] + n]
        served[i] += len(chunk)
        spent += len(chunk)
        scheduler.tell(i, len(chunk), min((scheduler.best[i], *chunk)))
        curve.append((spent, scheduler.weighted_latency()))
    return curve
