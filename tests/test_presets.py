"""The seed systems' presets (A3C, PAAC, GA3C): their papers' settings, the CartPole versions
keep them, and each CartPole version learns within 3 minutes."""

from __future__ import annotations

import json

import pytest

from dba3c.preset import load_config

from conftest import dba3c, read_jsonl

# what a CartPole version keeps of its Atari preset (the rest: network, reward clipping,
# evaluation schedule, run length)
KEPT = {"env": ("num_envs", "batch_size"), "optim": ("kind",), "rmsprop": ("alpha", "epsilon"),
        "train": ("batch_size", "t_max", "gamma", "entropy_beta", "lr_schedule", "grad_clip",
                  "grad_clip_mode"),
        "dist": ("mode", "ps")}


# ... and what one also changes (said in its comment): A3C's CartPole version runs 4 envs per
# worker, so an update has 4 x t_max data points instead of 1 x t_max
CHANGED = {"a3c": {"env.num_envs", "env.batch_size", "train.batch_size"}}


def _kept(path, system):
    cfg = load_config(path).to_dict()
    return {f"{s}.{k}": cfg[s][k] for s, keys in KEPT.items() for k in keys
            if f"{s}.{k}" not in CHANGED.get(system, ())}


@pytest.mark.parametrize("system", ["a3c", "paac", "ga3c"])
def test_cartpole_version_keeps_the_atari_presets_settings(system):
    cartpole, pong = (f"configs/{system}_{env}.yaml" for env in ("cartpole", "pong"))
    assert _kept(cartpole, system) == _kept(pong, system)
    if system == "ga3c":
        return  # its trainer takes what the queue holds, not one rollout of every env
    for path in (cartpole, pong):  # an update: t_max steps of each of the worker's envs
        cfg = load_config(path)
        assert cfg.train.batch_size == cfg.env.num_envs * cfg.train.t_max


def test_presets_carry_the_papers_numbers():
    a3c = load_config("configs/a3c_pong.yaml")
    assert (a3c.dist.mode, a3c.optim.kind, a3c.rmsprop.alpha) == ("async", "rmsprop", 0.99)
    assert (a3c.model.kind, a3c.train.t_max, a3c.train.entropy_beta) == ("a3c_ff", 5, 0.01)
    assert a3c.env.num_envs == 1 and a3c.train.batch_size == 5  # one env, one 5-step rollout
    assert a3c.train.lr_schedule == "linear"
    assert a3c.train.max_steps * a3c.train.batch_size * a3c.env.frame_skip == 80_000_000

    paac = load_config("configs/paac_pong.yaml")
    n_e = paac.env.num_envs
    assert n_e == 32 and paac.env.batch_size == n_e  # all emulators step together
    assert paac.train.batch_size == n_e * paac.train.t_max == 160
    assert paac.train.lr == pytest.approx(0.0007 * n_e)
    assert (paac.optim.kind, paac.rmsprop.alpha, paac.rmsprop.epsilon) == ("rmsprop", 0.99, 0.1)
    assert (paac.train.grad_clip, paac.train.grad_clip_mode) == (40.0, "global_norm")
    assert (paac.train.gamma, paac.train.entropy_beta, paac.dist.mode) == (0.99, 0.01, "sync")

    ga3c = load_config("configs/ga3c_pong.yaml")
    assert (ga3c.env.num_envs, ga3c.optim.kind, ga3c.train.lr) == (32, "rmsprop", 0.0003)
    assert (ga3c.rmsprop.alpha, ga3c.rmsprop.epsilon, ga3c.train.grad_clip) == (0.99, 0.1, 0.0)
    assert ga3c.env.batch_size < ga3c.env.num_envs  # prediction overlaps emulation
    for cfg in (a3c, paac, ga3c):
        assert (cfg.env.id, cfg.model.kind, cfg.model.hidden) == ("pong", "a3c_ff", 256)


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
