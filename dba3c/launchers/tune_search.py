"""The search behind ``dba3c tune``: coordinate descent over a node's throughput settings.

Pure: no processes, files or clocks of its own. :class:`CoordinateDescent` proposes the next
setting from the results so far; :func:`search` drives it within a time budget with the
measuring function and the clock injected, so tests run it on a fake throughput surface.

Coordinate descent: start at the config's values; vary one key over its candidates with the
other keys at the best setting so far, keep the best, go on to the next key; stop when a
whole pass over the keys changes nothing (or the budget is spent). Every setting is measured
at most once, so the search ends after finitely many trials; it does not re-tune while
training (GA3C's annealing oscillated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dba3c.config import Config, is_atari

TUNED_KEYS = ("env.num_envs", "env.batch_size", "train.intra_op_threads",
              "train.inter_op_threads")

Setting = tuple[tuple[str, int], ...]  # ((key, value), ...) in TUNED_KEYS order: hashable
Values = Callable[[str, dict[str, int]], Sequence[int]]
Measure = Callable[[Setting, float], "float | None"]

# a trial's wall time beyond its training seconds (a fresh process: Python, TensorFlow and
# the simulators start), assumed until a trial has been timed
STARTUP_S = 8.0
MIN_TRIAL_S = 5.0  # shorter trials hold too few metrics lines for a steady rate


def make_setting(values: dict[str, int]) -> Setting:
    """The hashable setting of ``values`` (key -> value), keys in ``values``' order."""
    return tuple(values.items())


def setting_overrides(setting: Setting) -> list[str]:
    """``KEY=VALUE`` overrides of a setting, e.g. ``["env.num_envs=16", ...]``."""
    return [f"{key}={value}" for key, value in setting]


def start_values(cfg: Config) -> dict[str, int]:
    """The config's values of the tuned keys: where the search starts."""
    return {"env.num_envs": cfg.env.num_envs, "env.batch_size": cfg.env.batch_size,
            "train.intra_op_threads": cfg.train.intra_op_threads,
            "train.inter_op_threads": cfg.train.inter_op_threads}


def make_candidates(cfg: Config, num_cpus: int) -> Values:
    """The values tried for each key, from the config and the node's ``num_cpus`` cores.

    env.num_envs: half, the same and twice the config's, and two per core.
    env.batch_size (ALE games only; a gymnasium env steps every env at once and ignores
    it): the config's, a quarter of the current env.num_envs and all of them.
    train.intra_op_threads: the config's, 0 (TensorFlow's choice), 1, half the cores, all.
    train.inter_op_threads: the config's, 0, 1, 2.
    Combinations the config validator refuses are skipped by :class:`CoordinateDescent`.
    """
    start = start_values(cfg)
    n = start["env.num_envs"]
    fixed = {"env.num_envs": [max(1, n // 2), n, 2 * n, 2 * num_cpus],
             "train.intra_op_threads": [start["train.intra_op_threads"], 0, 1,
                                        max(1, num_cpus // 2), num_cpus],
             "train.inter_op_threads": [start["train.inter_op_threads"], 0, 1, 2]}
    atari = is_atari(cfg.env.id)

    def values(key: str, current: dict[str, int]) -> list[int]:
        if key == "env.batch_size":
            envs = current["env.num_envs"]
            found = [start[key], max(1, envs // 4), envs] if atari else [start[key]]
        else:
            found = fixed[key]
        return sorted(set(found))

    return values


def planned_trials(values: Values, start: dict[str, int]) -> int:
    """Trials of a first pass from ``start`` (at most): the start and each other candidate."""
    return 1 + sum(len([v for v in values(key, start) if v != start[key]]) for key in start)


def default_trial_seconds(budget_s: float, num_trials: int) -> float:
    """Training seconds per trial so that ``num_trials`` trials, each with its start-up,
    fit ``budget_s`` (at least :data:`MIN_TRIAL_S`)."""
    return max(MIN_TRIAL_S, budget_s / max(1, num_trials) - STARTUP_S)


@dataclass
class CoordinateDescent:
    """Propose settings one by one; :meth:`record` each one's rate (None: the trial failed).

    ``values(key, best)`` gives the candidates of a key given the best values so far;
    ``is_valid(setting)`` is the config validator's verdict (invalid settings are skipped,
    never proposed). Ties keep the earlier setting.
    """

    start: dict[str, int]
    values: Values
    is_valid: Callable[[Setting], bool]
    results: dict[Setting, float | None] = field(default_factory=dict)
    skipped: list[Setting] = field(default_factory=list)
    best: Setting | None = None
    _queue: list[Setting] = field(default_factory=list)
    _key_index: int = -1  # -1: the start setting first
    _best_at_pass_start: Setting | None = None
    done: bool = False

    def best_rate(self) -> float | None:
        """The data points/s of the best setting so far (None before a successful trial)."""
        return None if self.best is None else self.results[self.best]

    def record(self, setting: Setting, rate: float | None) -> None:
        """The measured rate of a proposed setting (None: the trial failed)."""
        self.results[setting] = rate
        best_rate = self.best_rate()
        if rate is not None and (best_rate is None or rate > best_rate):
            self.best = setting

    def propose(self) -> Setting | None:
        """The next setting to measure, or None when a full pass changed nothing."""
        while not self._queue:
            if self.done or not self._refill():
                self.done = True
                return None
        return self._queue.pop(0)

    def _centre(self) -> dict[str, int]:
        return dict(self.best) if self.best is not None else dict(self.start)

    def _refill(self) -> bool:
        """Queue the next key's untried valid settings; False when the search is over."""
        keys = list(self.start)
        if self._key_index == -1:
            self._key_index = 0
            self._best_at_pass_start = None
            self._enqueue([make_setting(self.start)])
            return True
        if self._key_index == len(keys):  # a pass ended
            if self.best is None or self.best == self._best_at_pass_start:
                return False
            self._key_index = 0
        if self._key_index == 0:
            self._best_at_pass_start = self.best
        key = keys[self._key_index]
        self._key_index += 1
        centre = self._centre()
        self._enqueue([make_setting({**centre, key: v}) for v in self.values(key, centre)])
        return True

    def _enqueue(self, settings: list[Setting]) -> None:
        for s in settings:
            if s in self.results or s in self._queue or s in self.skipped:
                continue
            if self.is_valid(s):
                self._queue.append(s)
            else:
                self.skipped.append(s)


@dataclass
class SearchOutcome:
    """How a search ended: ``trials`` in the order measured (setting, rate, measured now or
    taken from an earlier run), and why it stopped."""

    trials: list[tuple[Setting, float | None, bool]]
    best: Setting | None
    best_rate: float | None
    converged: bool
    interrupted: bool
    skipped: list[Setting]


def search(descent: CoordinateDescent, measure: Measure, *, budget_s: float,
           trial_s: float, clock: Callable[[], float],
           known: dict[Setting, float | None] | None = None,
           on_trial: Callable[[int, Setting, float | None, bool, float], None] =
           lambda k, s, rate, fresh, left: None) -> SearchOutcome:
    """Run ``descent`` within ``budget_s`` seconds of ``clock``.

    A setting in ``known`` (an earlier run's results) is taken as measured, at no cost;
    another is measured with ``measure(setting, trial_s)`` only if a trial fits the time
    left (a trial is expected to take as long as the longest so far, at first ``trial_s`` +
    :data:`STARTUP_S`). ``on_trial(k, setting, rate, fresh, seconds_left)`` follows each.
    A KeyboardInterrupt during a trial ends the search with what was measured before it.
    """
    known = dict(known or {})
    deadline = clock() + budget_s
    longest = 0.0  # the longest trial so far, in seconds of ``clock``
    trials: list[tuple[Setting, float | None, bool]] = []
    interrupted = converged = False
    while True:
        setting = descent.propose()
        if setting is None:
            converged = True
            break
        fresh = setting not in known
        if fresh:
            if deadline - clock() < (longest or trial_s + STARTUP_S):
                break
            started = clock()
            try:
                rate = measure(setting, trial_s)
            except KeyboardInterrupt:
                interrupted = True
                break
            longest = max(longest, clock() - started)
        else:
            rate = known[setting]
        descent.record(setting, rate)
        trials.append((setting, rate, fresh))
        on_trial(len(trials), setting, rate, fresh, max(0.0, deadline - clock()))
    return SearchOutcome(trials, descent.best, descent.best_rate(), converged, interrupted,
                         list(descent.skipped))
