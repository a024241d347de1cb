"""``dba3c tune``'s search (dba3c.launchers.tune_search): the coordinate descent on a fake
throughput surface with a fake clock (the optimum found, the budget kept, resuming,
Ctrl-C), and the candidates."""

from __future__ import annotations

import itertools
import math

import pytest

from dba3c.launchers.tune_search import (
    STARTUP_S,
    TUNED_KEYS,
    CoordinateDescent,
    Setting,
    make_candidates,
    make_setting,
    search,
)
from dba3c.preset import load_config

GRID = {"env.num_envs": [4, 8, 16, 32, 64], "env.batch_size": [0, 2, 8, 16],
        "train.intra_op_threads": [0, 1, 2, 4], "train.inter_op_threads": [0, 1, 2]}
START = {"env.num_envs": 8, "env.batch_size": 0, "train.intra_op_threads": 0,
         "train.inter_op_threads": 0}


def surface(setting: Setting) -> float:
    """A throughput surface with one peak: 32 envs, batches of 8, 2 intra-op threads, 1
    inter-op thread (plus a coupling term between envs and batch size)."""
    s = dict(setting)
    return (5000.0 - 300 * (math.log2(s["env.num_envs"]) - 5) ** 2
            - 40 * (s["env.batch_size"] - 8) ** 2 / (1 + s["env.num_envs"] / 16)
            - 200 * (s["train.intra_op_threads"] - 2) ** 2
            - 150 * (s["train.inter_op_threads"] - 1) ** 2)


def valid(setting: Setting) -> bool:
    s = dict(setting)
    return s["env.batch_size"] <= s["env.num_envs"]


class FakeNode:
    """A fake clock and a measure that costs ``trial_s`` + ``startup`` seconds of it, logs
    what it measured, and raises KeyboardInterrupt at call ``interrupt_at`` (1-based)."""

    def __init__(self, startup: float = 3.0, interrupt_at: int = 0):
        self.now, self.startup, self.interrupt_at = 1000.0, startup, interrupt_at
        self.measured: list[Setting] = []

    def clock(self) -> float:
        return self.now

    def measure(self, setting: Setting, trial_s: float) -> float:
        if len(self.measured) + 1 == self.interrupt_at:
            self.now += trial_s / 2
            raise KeyboardInterrupt
        self.now += trial_s + self.startup
        self.measured.append(setting)
        return surface(setting)


def descent() -> CoordinateDescent:
    return CoordinateDescent(dict(START), lambda key, best: GRID[key], valid)


def brute_force_best() -> Setting:
    settings = [make_setting(dict(zip(TUNED_KEYS, vs))) for vs in
                itertools.product(*(GRID[k] for k in TUNED_KEYS))]
    return max((s for s in settings if valid(s)), key=surface)


def test_search_finds_the_optimum_measuring_each_setting_once():
    node = FakeNode()
    out = search(descent(), node.measure, budget_s=1e6, trial_s=10, clock=node.clock)
    assert out.converged and not out.interrupted
    assert out.best == brute_force_best()
    assert out.best_rate == pytest.approx(surface(brute_force_best()))
    assert len(node.measured) == len(set(node.measured))  # never measured twice
    assert all(valid(s) for s in node.measured)
    grid_size = math.prod(len(v) for v in GRID.values())
    assert len(node.measured) < grid_size / 4  # a search, not the grid
    assert node.measured[0] == make_setting(START)
    assert [s for s, _, _ in out.trials] == node.measured


def test_invalid_settings_are_skipped_not_measured():
    node = FakeNode()
    d = CoordinateDescent(dict(START), lambda key, best: GRID[key], valid)
    out = search(d, node.measure, budget_s=1e6, trial_s=10, clock=node.clock)
    assert out.skipped and not any(valid(s) for s in out.skipped)
    assert not set(out.skipped) & set(node.measured)


@pytest.mark.parametrize("budget", [20.0, 45.0, 100.0])
def test_search_keeps_the_time_budget(budget):
    node = FakeNode(startup=3.0)
    start = node.now
    out = search(descent(), node.measure, budget_s=budget, trial_s=10, clock=node.clock)
    assert node.now - start <= budget
    # a trial takes 13 s: every trial that fit was run (the first one's estimate is
    # trial_s + STARTUP_S, the others the longest trial so far)
    first_fits = budget >= 10 + STARTUP_S
    expected = 0 if not first_fits else 1 + int((budget - 13) // 13)
    assert len(node.measured) == expected
    assert not out.converged
    assert out.best == (max(node.measured, key=surface) if node.measured else None)


def test_resume_skips_measured_settings_and_ends_where_one_run_ends():
    whole = FakeNode()
    one_go = search(descent(), whole.measure, budget_s=1e6, trial_s=10, clock=whole.clock)

    first = FakeNode()
    part = search(descent(), first.measure, budget_s=60, trial_s=10, clock=first.clock)
    assert 0 < len(first.measured) < len(whole.measured)
    known = {s: rate for s, rate, _ in part.trials}
    second = FakeNode()
    rest = search(descent(), second.measure, budget_s=1e6, trial_s=10, clock=second.clock,
                  known=known)
    assert not set(second.measured) & set(known)  # nothing measured again
    assert first.measured + second.measured == whole.measured
    assert rest.best == one_go.best and rest.converged
    assert [fresh for _, _, fresh in rest.trials] == [s not in known for s, _, _ in
                                                      rest.trials]


def test_ctrl_c_keeps_the_best_so_far():
    node = FakeNode(interrupt_at=5)
    out = search(descent(), node.measure, budget_s=1e6, trial_s=10, clock=node.clock)
    assert out.interrupted and not out.converged
    assert len(out.trials) == 4 == len(node.measured)
    assert out.best == max(node.measured, key=surface)
    assert out.best_rate == pytest.approx(surface(out.best))


def test_failed_trials_never_win():
    def measure(setting: Setting, trial_s: float) -> float | None:
        return None if dict(setting)["env.num_envs"] == 32 else surface(setting)

    node = FakeNode()
    out = search(descent(), measure, budget_s=1e6, trial_s=10, clock=node.clock)
    assert out.converged and out.best is not None
    assert dict(out.best)["env.num_envs"] != 32
    assert any(rate is None for _, rate, _ in out.trials)


def test_candidates_come_from_the_config_and_the_cores():
    cartpole = load_config("configs/cartpole.yaml")
    values = make_candidates(cartpole, 6)
    start = {"env.num_envs": 16, "env.batch_size": 0, "train.intra_op_threads": 0,
             "train.inter_op_threads": 0}
    assert values("env.num_envs", start) == [8, 12, 16, 32]
    assert values("env.batch_size", start) == [0]  # gymnasium envs step all envs at once
    assert values("train.intra_op_threads", start) == [0, 1, 3, 6]
    assert values("train.inter_op_threads", start) == [0, 1, 2]
    breakout = load_config("configs/breakout.yaml", ["env.num_envs=12", "env.batch_size=6"])
    assert make_candidates(breakout, 2)("env.batch_size", {**start, "env.num_envs": 20}) == \
        [5, 6, 20]
