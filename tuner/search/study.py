"""The Optuna study of one task: every trial a strategy runs, and the claims of many workers.

A trial's params are the knob indices of one config. Alone, a tuner uses the
study as a record of its trials. With a shared storage (``--storage``) many
tuners join one study per task, and a RUNNING trial is a **claim**: the
worker named in its ``worker`` user attribute is measuring that config.

- Claims are taken under the storage's lock (``Storage.lock``): a worker reads
  the study afresh, drops the configs that others finished or hold, and
  marks its trials with its name before the lock is released, so no two
  workers ever hold one config.
- Every worker beats a heartbeat (the study user attribute ``worker:NAME``,
  rewritten by a thread every ``claim_timeout / 4`` seconds). A claim whose
  worker's heartbeat has not changed for ``claim_timeout`` seconds, by the
  reader's own clock (no clocks are compared across machines), is released:
  the trial fails with a ``released`` attribute and its config is free again.
- A measured config is a COMPLETE trial, or a FAIL one with the ``measured``
  attribute (the candidate failed); other FAIL trials (points a sampler
  proposed and the strategy refused, lost or released claims) were never measured.
- Each trial of a config also carries the config itself, knob values rather
  than indices, as JSON text in its ``config`` user attribute: what
  ``optuna-dashboard`` shows beside the trial's time.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..space import Config, ConfigError, ConfigSpace
from .storage import Storage, open_storage, storage_errors

__all__ = ["IN_MEMORY", "KnobStudy", "Snapshot", "StudyPlace"]

#: Seconds without a heartbeat after which a worker's claims are released.
CLAIM_TIMEOUT = 60.0

#: The trial user attribute that holds the config's knob values (JSON text).
CONFIG_ATTR = "config"


def _finished_states() -> tuple[Any, ...]:
    import optuna

    State = optuna.trial.TrialState
    return (State.COMPLETE, State.FAIL, State.PRUNED)


@dataclass
class Snapshot:
    """What a read of the study found.

    ``finished``: measured configs (median seconds, ``inf`` for a failure);
    ``claimed``: configs others hold, by worker; ``done``: measured trials
    that had not finished when this worker joined the study; ``spent``:
    those and the live claims made since (ours included).
    """

    finished: dict[str, float] = field(default_factory=dict)
    claimed: dict[str, str] = field(default_factory=dict)
    done: int = 0
    spent: int = 0
    configs: dict[str, Config] = field(default_factory=dict)

    @property
    def taken(self) -> set[str]:
        return set(self.finished) | set(self.claimed)


@dataclass(frozen=True)
class StudyPlace:
    """Where a strategy's Optuna study lives: in memory, or named in a storage workers share.

    Every strategy is given one (``get_strategy`` builds it from the
    ``storage``, ``study_name`` and ``claim_timeout`` options) and opens its
    study here, so the three travel together and are read in one place.
    """

    storage: str | None = None
    name: str | None = None
    #: Seconds a dead worker's claims are held before others measure those configs.
    claim_timeout: float = CLAIM_TIMEOUT

    @property
    def shared(self) -> bool:
        return self.storage is not None

    def open(self, space: ConfigSpace, sampler: Any) -> KnobStudy:
        return KnobStudy(space, sampler, self.storage, self.name, self.claim_timeout)


#: A study of this process alone (the place of a strategy given none).
IN_MEMORY = StudyPlace()


class KnobStudy:
    """An Optuna study over a space's knob indices; see the module docstring.

    Samplers ``ask`` it for points; other strategies' configs become trials
    when they are claimed (shared storage) or told. A named study in a
    storage is loaded when it exists; ``tell`` of a config it already holds
    adds nothing.
    """

    def __init__(
        self,
        space: ConfigSpace,
        sampler: Any,
        storage: str | None = None,
        study_name: str | None = None,
        claim_timeout: float = CLAIM_TIMEOUT,
    ):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.choices = space.choices()
        self.distributions: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.IntDistribution(0, len(v) - 1) for k, v in self.choices.items()
        }
        self.shared: Storage | None = open_storage(storage) if storage else None
        self.name = study_name or ""
        self.claim_timeout = claim_timeout
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._pending: dict[str, int] = {}  # config key -> number of the trial we hold
        self._done: set[str] = set()
        self._beats: dict[str, tuple[Any, float]] = {}  # owner -> (heartbeat, when it changed)
        self._heartbeat: _Heartbeat | None = None
        self._prior: set[int] | None = None
        with self.errors():
            self.study = optuna.create_study(
                direction="minimize",
                sampler=sampler,
                storage=self.shared.optuna if self.shared else None,
                study_name=study_name,
                load_if_exists=study_name is not None,
            )
            self.snapshot = self.read()
            finished = self.study.get_trials(deepcopy=False, states=_finished_states())
        self._prior = {t.number for t in finished}  # claims open at joining count later
        self._done |= set(self.snapshot.finished)

    # -- the trials of one tuner -------------------------------------------------

    def errors(self) -> Any:
        """Storage failures inside become one-line ``StorageError``s."""
        return storage_errors(self.shared.label if self.shared else "memory")

    def indices(self, cfg: Config) -> dict[str, int]:
        return {name: self.choices[name].index(_json(cfg[name])) for name in self.choices}

    def ask(self) -> tuple[Any, Config]:
        """A trial of the study's sampler and the config its knob indices name."""
        trial = self.study.ask()
        idx = {k: trial.suggest_int(k, 0, len(v) - 1) for k, v in self.choices.items()}
        return trial, self.space.from_indices(idx)

    def reject(self, trial: Any) -> None:
        """Tell the sampler a point of no use (invalid or measured), so that it moves on."""
        self._fail(trial.number)

    def hold(self, trial: Any, cfg: Config) -> None:
        """Keep ``trial`` open until ``cfg`` is measured."""
        self._pending[cfg.key] = trial.number
        trial.set_user_attr(CONFIG_ATTR, _config_text(cfg))

    def tell(self, cfg: Config, seconds: float) -> None:
        """Close ``cfg``'s open trial, or add a finished one for a config measured before."""
        import optuna

        value = seconds if math.isfinite(seconds) else None
        number = self._pending.pop(cfg.key, None)
        if number is not None:
            try:
                if value is None:
                    self._mark(number, "measured", True)
                    self.study.tell(number, state=optuna.trial.TrialState.FAIL)
                else:
                    self.study.tell(number, value)
            except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
                number = None  # released while we measured: record the measurement anew
        if number is None and cfg.key not in self._done:
            if value is not None:
                self._add(cfg, optuna.trial.TrialState.COMPLETE, value=value)
            elif self.shared is not None:  # so that no other worker measures it again
                self._add(cfg, optuna.trial.TrialState.FAIL, measured=True)
        self._done.add(cfg.key)

    def _add(self, cfg: Config, state: Any, value: float | None = None, **attrs: Any) -> int:
        """A new trial of ``cfg`` in ``state``; returns its number."""
        import optuna

        trial = optuna.trial.create_trial(
            state=state,
            value=value,
            params=self.indices(cfg),
            distributions=self.distributions,
            user_attrs={CONFIG_ATTR: _config_text(cfg), **attrs},
        )
        storage = self.study._storage
        trial_id = storage.create_new_trial(self.study._study_id, template_trial=trial)
        return int(storage.get_trial(trial_id).number)

    def _mark(self, number: int, key: str, value: Any) -> None:
        storage = self.study._storage
        storage.set_trial_user_attr(self._trial_id(number), key, value)

    def _trial_id(self, number: int) -> int:
        return int(
            self.study._storage.get_trial_id_from_study_id_trial_number(
                self.study._study_id, number
            )
        )

    def _fail(self, number: int, **attrs: Any) -> bool:
        """Fail a RUNNING trial (never measured); False if it had finished already."""
        import optuna

        storage = self.study._storage
        try:
            trial_id = self._trial_id(number)
            for key, value in attrs.items():
                storage.set_trial_user_attr(trial_id, key, value)
            return bool(storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL))
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    # -- many tuners on one study ------------------------------------------------

    def read(self) -> Snapshot:
        """Read the study afresh: measured configs, live claims of others; release dead claims."""
        import optuna

        State = optuna.trial.TrialState
        beats = self.study.user_attrs if self.shared is not None else {}
        mine = set(self._pending.values())
        snap = Snapshot()
        now = time.monotonic()
        for t in self.study.get_trials(deepcopy=False):
            new = self._prior is not None and t.number not in self._prior
            if set(t.params) != set(self.choices):
                continue  # a sampler's point still being drawn, or another space's trial
            try:
                cfg = self.space.from_indices(t.params)
            except ConfigError:
                continue
            snap.configs[cfg.key] = cfg
            if t.state == State.COMPLETE or (
                t.state == State.FAIL and t.user_attrs.get("measured")
            ):
                snap.finished[cfg.key] = t.value if t.value is not None else math.inf
                snap.done += new
                snap.spent += new
            elif t.state == State.RUNNING and self.shared is not None:
                owner = t.user_attrs.get("worker")
                if t.number in mine or owner == self.worker:
                    snap.spent += new and owner is not None
                elif owner is None:  # drawn by a sampler, never claimed: its worker died?
                    if not self._alive(f"trial:{t.number}", None, now):
                        self._fail(t.number, released="never claimed")
                elif self._alive(owner, beats.get(f"worker:{owner}"), now):
                    snap.claimed[cfg.key] = owner
                    snap.spent += new
                else:
                    self._fail(t.number, released=f"worker {owner} stopped")
        return snap

    def _alive(self, owner: str, beat: Any, now: float) -> bool:
        """Whether ``owner``'s heartbeat changed within the claim timeout, by our clock."""
        last = self._beats.get(owner)
        if last is None or last[0] != beat:
            self._beats[owner] = (beat, now)
            return True
        return now - last[1] < self.claim_timeout

    def observations(self) -> list[tuple[Config, float]]:
        """Configs measured by others since the last call (the strategy learns from them)."""
        with self.errors():
            self.snapshot = self.read()
        out = []
        for key, seconds in self.snapshot.finished.items():
            if key not in self._done and key not in self._pending:
                self._done.add(key)
                cfg = self.snapshot.configs[key]
                if self.space.is_valid(cfg):
                    out.append((cfg, seconds))
        return out

    def claim(self, cfgs: Sequence[Config], budget: int | None = None) -> list[Config]:
        """The configs of ``cfgs`` this worker now holds; the others are dropped.

        Under the storage's lock: a config finished or held by another worker
        is dropped (its sampler trial failed); so are those beyond ``budget``
        (trials spent in the study since this worker joined, counting live
        claims). Each kept config is a RUNNING trial marked with our name.
        """
        import optuna

        if self.shared is None:
            return list(cfgs)
        self._start_heartbeat()
        kept: list[Config] = []
        with self.errors(), self.shared.lock(self.name):
            self.snapshot = snap = self.read()
            room = math.inf if budget is None else budget - snap.spent
            for cfg in cfgs:
                number = self._pending.get(cfg.key)
                if cfg.key in snap.taken or len(kept) >= room:
                    if number is not None:
                        self._fail(self._pending.pop(cfg.key), lost="another worker has it")
                    continue
                if number is None:
                    state = optuna.trial.TrialState.RUNNING
                    self._pending[cfg.key] = self._add(cfg, state, worker=self.worker)
                else:
                    self._mark(number, "worker", self.worker)
                kept.append(cfg)
            snap.spent += len(kept)
        return kept

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and self.shared is not None:
            self._heartbeat = _Heartbeat(self, max(0.2, self.claim_timeout / 4))
            self._heartbeat.beat()
            self._heartbeat.start()

    def close(self) -> None:
        """Stop the heartbeat and fail the trials still held, so that others take them now."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self.shared is None:
            return
        pending, self._pending = self._pending, {}
        try:
            with self.errors():
                for number in pending.values():
                    self._fail(number, released=f"worker {self.worker} stopped")
        except OSError:
            pass  # the storage is gone: the claims time out instead


class _Heartbeat(threading.Thread):
    """Rewrites ``worker:NAME`` in the study's user attributes while the tuner lives."""

    def __init__(self, study: KnobStudy, interval: float):
        super().__init__(name="tuner-heartbeat", daemon=True)
        self.study, self.interval = study, interval
        self._halt = threading.Event()

    def beat(self) -> None:
        storage = self.study.study._storage
        storage.set_study_user_attr(
            self.study.study._study_id, f"worker:{self.study.worker}", time.time()
        )

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            try:
                self.beat()
            except Exception:  # the storage went away: the main thread says so
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def _config_text(cfg: Config) -> str:
    return json.dumps(cfg.to_json(), separators=(",", ":"))


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
