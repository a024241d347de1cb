"""The presets (configs/*.yaml) and dba3c.preset's checks against the network: every preset
loads and validates, the paper's best run, the seed systems' presets (A3C, PAAC, GA3C) and
their CartPole versions."""


from __future__ import annotations

import pytest

from dba3c.analysis.paper import paper_result, table3
from dba3c.analysis.runs import flat_config
from dba3c.distributed.roles import make_roles, required_world_size
from dba3c.errors import UserError
from dba3c.preset import from_dict, load_config, validate
from tests.support import ROOT

PRESETS = sorted((ROOT / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("kind, size, smallest", [("a3c_ff", 19, 20), ("ba3c", 51, 52)])
def test_a_frame_too_small_for_the_network_is_a_user_error(kind, size, smallest):
    with pytest.raises(UserError, match=f"model.frame_size={size} is too small for model.kind="
                                        f"'{kind}': its layers need frames of at least "
                                        f"{smallest}"):
        from_dict({"env": {"id": "pong"}, "model": {"kind": kind, "frame_size": size}})
    assert from_dict({"env": {"id": "pong"},
                      "model": {"kind": kind, "frame_size": smallest}}).model.frame_size == smallest


# --------------------------------------------------------------------------- presets

@pytest.mark.parametrize("path", PRESETS, ids=[str(p.relative_to(ROOT / "configs"))
                                               for p in PRESETS])
def test_every_preset_loads_and_validates(path):
    cfg = load_config(str(path))
    assert validate(cfg) is cfg


def test_presets_exist():
    assert {p.stem for p in PRESETS} >= {"breakout", "breakout_64", "cartpole", "pong_small"}


def test_breakout_64_preset_is_the_papers_best_run():
    cfg = load_config(str(ROOT / "configs/breakout_64.yaml"))
    assert (cfg.dist.ps, cfg.dist.workers, cfg.dist.mode) == (4, 64, "sync")
    assert (cfg.train.lr, cfg.train.batch_size, cfg.model.hidden) == (1e-3, 32, 128)
    assert (cfg.adam.beta1, cfg.adam.beta2, cfg.adam.epsilon) == (0.8, 0.75, 1e-8)
    # 64 workers (chief included) + 4 PS + 1 evaluator = 69 ranks, as its comment says
    assert required_world_size(cfg, 64) == 69
    roles = make_roles(69, cfg)
    assert roles.num_workers == 64 and roles.replicas == 64
    assert roles.ps == (1, 2, 3, 4) and roles.evaluator == 5


@pytest.mark.parametrize("game", list(table3()))
def test_the_paper_presets_of_a_game_aim_at_its_score_in_table_3(game):
    for layout in ("1node", "64"):
        cfg = load_config(str(ROOT / f"configs/paper/{game}_{layout}.yaml"))
        assert (cfg.env.id, cfg.eval.target_score) == (game, paper_result(game).score)
        assert (cfg.eval.episodes, cfg.eval.greedy, cfg.eval.noop_max) == (50, True, 30)
        assert cfg.run.dir == f"runs/paper/{game}_{layout}"


@pytest.mark.parametrize("game", list(table3()))
def test_a_64_node_paper_preset_is_the_papers_best_run_on_its_game(game):
    cfg = load_config(str(ROOT / f"configs/paper/{game}_64.yaml"))
    mine, best = (flat_config(c.to_dict()) for c in (cfg, load_config(
        str(ROOT / "configs/breakout_64.yaml"))))
    assert {key for key in mine if mine[key] != best[key]} <= {
        "env.id", "eval.target_score", "train.max_seconds", "run.dir", "adam.epsilon"}
    # the paper's small epsilon slowed Pong, and only Pong
    assert cfg.adam.epsilon == (1e-3 if game == "pong" else 1e-8)
    # it stops at the paper's score, or after twice the paper's time (2 h at least)
    assert cfg.eval.stop_at_target
    assert cfg.train.max_seconds == max(2 * paper_result(game).hours * 3600, 7200)


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
