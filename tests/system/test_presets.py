"""The seed systems' presets (A3C, PAAC, GA3C): each CartPole version learns within 3
minutes."""

from __future__ import annotations

import json

import pytest

from dba3c.preset import load_config
from tests.support import dba3c, read_jsonl


def _assert_learned(run_dir):
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert max(e["mean"] for e in evals) >= 195
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["time_to_target_s"] is not None and summary["time_to_target_s"] < 180


@pytest.mark.slow
@pytest.mark.parametrize("system", ["paac", "ga3c"])
def test_single_process_cartpole_version_learns_within_3_minutes(run_dir, system):
    dba3c("train", f"configs/{system}_cartpole.yaml", f"run.dir={run_dir}",
          "run.progress=none", timeout=240)
    _assert_learned(run_dir)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert metrics[-1]["perf/effective_batch"] == load_config(
        f"configs/{system}_cartpole.yaml").train.batch_size


@pytest.mark.slow
def test_a3c_cartpole_version_learns_asynchronously_within_3_minutes(run_dir):
    dba3c("launch", "configs/a3c_cartpole.yaml", "--workers", 2, "--ps", 1,
          f"run.dir={run_dir}", "run.progress=none", timeout=300)
    _assert_learned(run_dir)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert metrics[-1]["perf/effective_batch"] == 20  # each update: one worker's 4 x 5 steps
    assert metrics[-1]["dist/staleness_mean"] > 0  # applied on arrival, some were stale
