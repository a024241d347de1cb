"""``dba3c tune`` through the command line: bad input, and one real short run on CartPole."""

from __future__ import annotations

import json

import pytest

from dba3c.config import overrides_file
from dba3c.launchers.tune_search import (
    TUNED_KEYS,
)
from dba3c.preset import load_config
from tests.support import dba3c


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
    cfg = load_config("configs/cartpole.yaml", overrides_file(str(preset)))
    assert [cfg.env.num_envs, cfg.env.batch_size, cfg.train.intra_op_threads,
            cfg.train.inter_op_threads] == [best["setting"][k] for k in TUNED_KEYS]
    assert "tune: trial 1:" in proc.stderr and "s left" in proc.stderr
