"""``dba3c tune``'s command (dba3c.launchers.tune) on a fake node: the config validator, the
state file, Ctrl-C, no successful trial."""

from __future__ import annotations

import json
from typing import TypedDict

import pytest
import yaml

from dba3c.cli import make_parser
from dba3c.config import overrides_file
from dba3c.errors import UserError
from dba3c.launchers.tune import tune_command
from dba3c.launchers.tune_search import (
    TUNED_KEYS,
    Setting,
    make_setting,
)
from dba3c.preset import load_config


class TuneArgs(TypedDict):
    """tune_command's keyword arguments the calls of a test share, passed as ``**args``."""

    seconds: float
    trial_seconds: float | None
    state: str | None
    num_cpus: int | None


def fake_measure(setting: Setting, trial_s: float) -> float:
    s = dict(setting)
    return 1000.0 + s["env.num_envs"] + 10 * s["env.batch_size"] + s["train.inter_op_threads"]


def test_tune_command_uses_the_config_validator_and_keeps_state(tmp_path, capsys):
    state = tmp_path / "state.json"
    preset = tmp_path / "best.yaml"
    args = TuneArgs(seconds=60.0, trial_seconds=1.0, state=str(state), num_cpus=2)
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
    # only the node's keys, none of the layout: any preset takes the file
    written = yaml.safe_load(preset.read_text())
    assert written == {"env": {"num_envs": best["env.num_envs"],
                               "batch_size": best["env.batch_size"]},
                       "train": {"intra_op_threads": best["train.intra_op_threads"],
                                 "inter_op_threads": best["train.inter_op_threads"]}}
    cfg = load_config("configs/breakout_64.yaml", overrides_file(str(preset)))
    assert (cfg.env.num_envs, cfg.env.batch_size, cfg.train.intra_op_threads,
            cfg.train.inter_op_threads) == tuple(best[k] for k in TUNED_KEYS)
    assert (cfg.dist.ps, cfg.dist.workers, cfg.eval.rank) == (4, 64, True)

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
    calls: list[Setting] = []

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


def test_write_into_a_missing_directory_is_refused_before_any_trial(tmp_path):
    def no_measure(setting: Setting, trial_s: float) -> float:
        raise AssertionError("measured before the --write check")

    write = tmp_path / "missing" / "node.yaml"
    with pytest.raises(UserError, match=f"^--write {write}: its directory {write.parent} does "
                                        f"not exist"):
        tune_command("configs/cartpole.yaml", [], seconds=60.0, trial_seconds=1.0,
                     write=str(write), state=str(tmp_path / "s.json"), measure=no_measure,
                     num_cpus=2)
    assert list(tmp_path.iterdir()) == []


def test_help_says_write_writes_an_overrides_file_not_a_preset(capsys):
    with pytest.raises(SystemExit):
        make_parser().parse_args(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--write FILE also write the best setting's node keys (env.num_envs, " in text
    assert "a new overrides file that any preset takes: dba3c train PRESET --overrides FILE" \
        in text and "preset YAML" not in text
