"""``dba3c tune``: the coordinate descent on a fake throughput surface with a fake clock (the
optimum found, the budget kept, resuming, Ctrl-C), the state file, bad input, and one real
short run on CartPole."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from dba3c.errors import UserError
from dba3c.launchers.tune import tune_command
from dba3c.launchers.tuning import (
    STARTUP_S,
    TUNED_KEYS,
    CoordinateDescent,
    Setting,
    make_candidates,
    make_setting,
    search,
)
from dba3c.preset import load_config

from conftest import dba3c

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
    assert out.converged
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


def fake_measure(setting: Setting, trial_s: float) -> float:
    s = dict(setting)
    return 1000.0 + s["env.num_envs"] + 10 * s["env.batch_size"] + s["train.inter_op_threads"]


def test_tune_command_uses_the_config_validator_and_keeps_state(tmp_path, capsys):
    state = tmp_path / "state.json"
    preset = tmp_path / "best.yaml"
    args = dict(seconds=60.0, trial_seconds=1.0, state=str(state), num_cpus=2)
    base = ["env.num_envs=6", "env.batch_size=0"]
    code = tune_command("configs/breakout.yaml", base, write=str(preset),
                        measure=fake_measure, **args)
    assert code == 0
    out = capsys.readouterr().out
    saved = json.loads(state.read_text())
    settings = [t["setting"] for t in saved["trials"]]
    assert all(s["env.batch_size"] <= s["env.num_envs"] for s in settings)
    best = max(settings, key=lambda s: fake_measure(make_setting(s), 0))
    overrides = [f"{k}={best[k]}" for k in TUNED_KEYS]
    assert f"overrides: {' '.join(overrides)}" in out
    assert "search converged" in out
    assert "skipped 3 setting(s) the config validator refuses" in out  # 3, 4, 6 envs < 12
    assert len([line for line in out.splitlines() if line[:5].strip().isdigit()]) == \
        len(settings)
    cfg = load_config(str(preset))
    assert (cfg.env.num_envs, cfg.env.batch_size, cfg.train.intra_op_threads,
            cfg.train.inter_op_threads) == tuple(best[k] for k in TUNED_KEYS)
    assert cfg.env.id == "breakout"

    def no_measure(setting: Setting, trial_s: float) -> float:
        raise AssertionError(f"{setting} measured again")

    assert tune_command("configs/breakout.yaml", base, write=None,
                        measure=no_measure, **args) == 0
    assert "(earlier run)" in capsys.readouterr().out
    with pytest.raises(UserError, match="another config"):
        tune_command("configs/breakout.yaml", ["env.num_envs=8", "env.batch_size=0"], write=None,
                     measure=no_measure, **args)
    with pytest.raises(UserError, match="exists"):
        tune_command("configs/breakout.yaml", base, write=str(preset),
                     measure=no_measure, **args)


def test_tune_command_ctrl_c_prints_the_best_so_far(tmp_path, capsys):
    calls = []

    def measure(setting: Setting, trial_s: float) -> float:
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(setting)
        return fake_measure(setting, trial_s)

    state = tmp_path / "state.json"
    code = tune_command("configs/cartpole.yaml", [], seconds=60.0, trial_seconds=1.0,
                        write=str(tmp_path / "p.yaml"), state=str(state), measure=measure,
                        num_cpus=2)
    assert code == 130
    out = capsys.readouterr().out
    assert "interrupted" in out and not (tmp_path / "p.yaml").exists()
    best = max(calls, key=lambda s: fake_measure(s, 0))
    assert f"best: {fake_measure(best, 0):.0f} data points/s" in out
    assert len(json.loads(state.read_text())["trials"]) == 3


def test_no_successful_trial_exits_1_without_a_preset(tmp_path, capsys):
    code = tune_command("configs/cartpole.yaml", [], seconds=60.0, trial_seconds=1.0,
                        write=str(tmp_path / "p.yaml"), state=str(tmp_path / "s.json"),
                        measure=lambda setting, trial_s: None, num_cpus=2)
    assert code == 1
    assert "best: none" in capsys.readouterr().out
    assert not (tmp_path / "p.yaml").exists()


def test_malformed_state_file_is_refused(tmp_path):
    state = tmp_path / "state.json"
    state.write_text('{"format": "something else"}')
    with pytest.raises(UserError, match="not a dba3c tune state"):
        tune_command("configs/cartpole.yaml", [], seconds=60.0, trial_seconds=1.0,
                     write=None, state=str(state), measure=fake_measure, num_cpus=2)
    assert state.read_text() == '{"format": "something else"}'


@pytest.mark.parametrize("args, fragment", [
    (["configs/cartpole.yaml", "--seconds", "0"], "--seconds 0 must be a positive"),
    (["configs/cartpole.yaml", "train.lrr=1"], "did you mean 'train.lr'"),
    (["configs/nope.yaml"], "'configs/nope.yaml' not found"),
    (["configs/cartpole.yaml", "--trial-seconds", "-1"], "--trial-seconds -1 must be"),
    (["configs/cartpole.yaml", "--seconds", "10"], "--seconds 10 fits no trial"),
])
def test_bad_input_is_one_line_exit_2(args, fragment, tmp_path):
    proc = dba3c("tune", *args, "--state", tmp_path / "s.json", check=False, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and fragment in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.json").exists()


def test_real_short_tune_on_cartpole(tmp_path):
    preset, state = tmp_path / "best.yaml", tmp_path / "state.json"
    proc = dba3c("tune", "configs/cartpole.yaml", "--seconds", "26", "--trial-seconds", "5",
                 "--write", preset, "--state", state, timeout=120)
    saved = json.loads(state.read_text())["trials"]
    assert saved and all(t["data_points_per_s"] and t["data_points_per_s"] > 0 for t in saved)
    rows = [line.split() for line in proc.stdout.splitlines() if line[:5].strip().isdigit()]
    assert len(rows) == len(saved)
    for row, trial in zip(rows, saved):
        assert [int(v) for v in row[1:5]] == [trial["setting"][k] for k in TUNED_KEYS]
        assert float(row[5]) == pytest.approx(trial["data_points_per_s"], abs=0.5)
    best = max(saved, key=lambda t: t["data_points_per_s"])
    overrides = " ".join(f"{k}={best['setting'][k]}" for k in TUNED_KEYS)
    assert f"overrides: {overrides}" in proc.stdout
    assert f"best: {best['data_points_per_s']:.0f} data points/s" in proc.stdout
    cfg = load_config(str(preset))
    assert [cfg.env.num_envs, cfg.env.batch_size, cfg.train.intra_op_threads,
            cfg.train.inter_op_threads] == [best["setting"][k] for k in TUNED_KEYS]
    assert "tune: trial 1:" in proc.stderr and "s left" in proc.stderr
