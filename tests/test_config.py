"""Configuration (dba3c.config) and the rank layout (dba3c.distributed.roles), in-process.

The paper's values (Adamski et al. 2018, its best run): lr 1e-3,
batch 32 per worker, FC 128, 10 simulators per worker, Adam beta1 0.8, beta2 0.75,
epsilon 1e-8, gamma 0.99, t_max 5, entropy beta 0.01, per-tensor gradient clip by average
norm 0.1, synchronous updates; evaluation every 1000 steps, 50 games, greedy, target 300.
"""

import dataclasses
from pathlib import Path

import pytest

from dba3c.config import (
    Config,
    ale_games,
    all_keys,
    describe_keys,
    dump_yaml,
    num_shards_error,
    parse_overrides,
)
from dba3c.distributed.roles import make_roles, required_world_size
from dba3c.errors import UserError
from dba3c.preset import from_dict, load_config, validate

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs").glob("*.yaml"))


def cfg_with(**sections) -> Config:
    """A validated default config with some sections overridden: cfg_with(dist={"ps": 2})."""
    return from_dict(sections)


# --------------------------------------------------------------------------- defaults

def test_defaults_are_the_papers_values():
    cfg = Config()
    assert cfg.train.lr == 1e-3
    assert cfg.train.gamma == 0.99
    assert cfg.train.t_max == 5
    assert cfg.train.batch_size == 32
    assert cfg.train.entropy_beta == 0.01
    assert cfg.train.grad_clip == 0.1 and cfg.train.grad_clip_mode == "average_norm"
    assert (cfg.adam.beta1, cfg.adam.beta2, cfg.adam.epsilon) == (0.8, 0.75, 1e-8)
    assert cfg.adam.beta2 != cfg.adam.beta1  # the published code's beta2 == beta1 defect
    assert cfg.model.kind == "ba3c" and cfg.model.hidden == 128
    assert cfg.env.num_envs == 10
    assert cfg.dist.mode == "sync"
    assert (cfg.eval.every, cfg.eval.episodes, cfg.eval.target_score) == (1000, 50, 300.0)
    assert cfg.eval.greedy is True


def test_default_config_validates_and_types_match_annotations():
    cfg = validate(Config())
    for section in cfg.to_dict():
        for f in dataclasses.fields(getattr(cfg, section)):
            value = getattr(getattr(cfg, section), f.name)
            expected = {"int": int, "float": (int, float), "bool": bool, "str": str}[f.type]
            assert isinstance(value, expected), f"{section}.{f.name}"


def test_all_keys_are_dotted_unique_and_documented():
    keys = all_keys()
    assert len(keys) == len(set(keys))
    assert {"train.lr", "adam.beta2", "dist.ps", "eval.greedy", "model.hidden"} <= set(keys)
    described = describe_keys()
    assert [k for k, _, _ in described] == keys
    assert all(doc for _, _, doc in described)


def test_reached_max_steps_is_never_true_without_a_step_limit():
    limited = cfg_with(train={"max_steps": 5}).train
    unlimited = cfg_with(train={"max_steps": 0, "max_seconds": 60}).train
    assert [limited.reached_max_steps(s) for s in (0, 4, 5, 6)] == [False, False, True, True]
    assert not unlimited.reached_max_steps(10**9)


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train = None
    assert cfg.train.lr == 1e-3


def test_dump_yaml_round_trips():
    cfg = cfg_with(train={"lr": 0.0005, "t_max": 20}, dist={"ps": 3}, eval={"greedy": False})
    import yaml

    back = from_dict(yaml.safe_load(dump_yaml(cfg)))
    assert back == cfg


# --------------------------------------------------------------------------- overrides

def test_parse_overrides_uses_yaml_typing():
    tree = parse_overrides(["train.gamma=0.95", "eval.greedy=false", "model.hidden=64",
                            "env.id=pong", "run.dir=", "train.lr=0.002"])
    assert tree == {"train": {"gamma": 0.95, "lr": 0.002}, "eval": {"greedy": False},
                    "model": {"hidden": 64}, "env": {"id": "pong"}, "run": {"dir": ""}}
    assert type(tree["model"]["hidden"]) is int
    assert type(tree["train"]["gamma"]) is float
    assert tree["eval"]["greedy"] is False


def test_parse_overrides_last_one_wins():
    assert parse_overrides(["train.lr=0.1", "train.lr=0.2"]) == {"train": {"lr": 0.2}}


@pytest.mark.parametrize("bad", ["notakeyvalue", "lr=0.1", "=3"])
def test_parse_overrides_rejects_malformed_items(bad):
    with pytest.raises(UserError, match="section.key=value"):
        parse_overrides([bad])


def test_overrides_apply_on_top_of_a_preset_and_keep_its_other_keys():
    cfg = load_config(str(ROOT / "configs/breakout.yaml"),
                      ["train.lr=0.002", "eval.greedy=false", "model.hidden=64"])
    assert cfg.train.lr == 0.002
    assert cfg.eval.greedy is False
    assert cfg.model.hidden == 64 and type(cfg.model.hidden) is int
    # untouched keys keep the preset's values (breakout.yaml: max_seconds 1800, 16 envs)
    assert cfg.train.max_seconds == 1800
    assert cfg.env.num_envs == 16 and cfg.env.batch_size == 8


def test_override_in_exponent_notation_is_a_float():
    cfg = load_config(str(ROOT / "configs/breakout.yaml"), ["train.lr=3e-4", "adam.epsilon=1e-3"])
    assert cfg.train.lr == 3e-4
    assert cfg.adam.epsilon == 1e-3


def test_yaml_file_with_exponent_notation_loads(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("adam:\n  epsilon: 1e-8\ntrain:\n  lr: 5e-4\n")
    cfg = load_config(str(path))
    assert cfg.adam.epsilon == 1e-8 and cfg.train.lr == 5e-4


# --------------------------------------------------------------------------- validation

def test_every_bad_value_is_reported_at_once():
    with pytest.raises(UserError) as e:
        from_dict({"train": {"gamma": -1, "lr": 0, "batch_size": 2.5},
                   "model": {"kind": "resnet"}})
    msg = str(e.value)
    for fragment in ["train.gamma=-1", "train.lr=0", "train.batch_size=2.5",
                     "model.kind='resnet'"]:
        assert fragment in msg, fragment


def test_every_unknown_key_is_reported_at_once_with_suggestions():
    with pytest.raises(UserError) as e:
        from_dict({"train": {"lrr": 0.1, "gama": 0.9}, "trian": {"lr": 0.1}})
    msg = str(e.value)
    assert "did you mean 'train.lr'" in msg
    assert "did you mean 'train.gamma'" in msg
    assert "unknown section 'trian'" in msg and "did you mean 'train'" in msg


def test_unknown_key_without_close_match_lists_allowed_keys():
    # (adam.learning_rate_schedule, used here before, is now close to train.lr_schedule)
    with pytest.raises(UserError) as e:
        from_dict({"adam": {"weight_decay_coefficient": 1}})
    msg = str(e.value)
    assert "unknown key 'adam.weight_decay_coefficient'" in msg
    assert "did you mean" not in msg
    assert "adam.beta1" in msg and "adam.beta2" in msg and "adam.epsilon" in msg


def test_every_cross_field_error_is_reported_at_once():
    with pytest.raises(UserError) as e:
        from_dict({"env": {"num_envs": 4, "batch_size": 5},
                   "train": {"max_steps": 0, "max_seconds": 0},
                   "dist": {"mode": "async", "replicas_to_aggregate": 2}})
    msg = str(e.value)
    assert "env.batch_size=5 must be <= env.num_envs=4" in msg
    assert "would never end" in msg
    assert "no meaning in dist.mode=async" in msg


@pytest.mark.parametrize("kind, size, smallest", [("a3c_ff", 19, 20), ("ba3c", 51, 52)])
def test_a_frame_too_small_for_the_network_is_a_user_error(kind, size, smallest):
    with pytest.raises(UserError, match=f"model.frame_size={size} is too small for model.kind="
                                        f"'{kind}': its layers need frames of at least "
                                        f"{smallest}"):
        from_dict({"env": {"id": "pong"}, "model": {"kind": kind, "frame_size": size}})
    assert from_dict({"env": {"id": "pong"},
                      "model": {"kind": kind, "frame_size": smallest}}).model.frame_size == smallest


def test_unknown_key_and_bad_value_are_reported_together():
    with pytest.raises(UserError) as e:
        from_dict({"train": {"lrr": 0.1, "gamma": -1}})
    assert "train.lrr" in str(e.value) and "train.gamma=-1" in str(e.value)


@pytest.mark.parametrize("value,ok", [(True, True), (1, False), ("true", False),
                                      (False, True), (None, False)])
def test_bool_fields_accept_only_booleans(value, ok):
    tree = {"eval": {"greedy": value}}
    if ok:
        assert from_dict(tree).eval.greedy is value
    else:
        with pytest.raises(UserError, match="eval.greedy=.* must be true or false"):
            from_dict(tree)


def test_int_field_refuses_bool_and_float_field_accepts_int():
    with pytest.raises(UserError, match="train.t_max=True must be an integer"):
        from_dict({"train": {"t_max": True}})
    assert from_dict({"train": {"lr": 1}}).train.lr == 1  # int is a number; 1 is in (0, 1]


@pytest.mark.parametrize("key,value,ok", [
    ("train.lr", 1e-9, True), ("train.lr", 0.0, False), ("train.lr", 1.0, True),
    ("train.lr", 1.01, False), ("train.gamma", 0.0, True), ("train.gamma", 1.0, True),
    ("adam.beta1", 0.0, True), ("adam.beta1", 1.0, False), ("adam.epsilon", 0.0, False),
    ("env.num_envs", 1, True), ("env.num_envs", 0, False), ("dist.ps", 0, False),
])
def test_range_bounds_open_and_closed(key, value, ok):
    section, name = key.split(".")
    tree = {section: {name: value}}
    if ok:
        assert getattr(getattr(from_dict(tree), section), name) == value
    else:
        with pytest.raises(UserError, match=f"{key}="):
            from_dict(tree)


def test_not_a_mapping_is_refused():
    with pytest.raises(UserError, match="mapping"):
        from_dict(["train"])
    with pytest.raises(UserError, match="section 'train'.*mapping"):
        from_dict({"train": 3})


# --------------------------------------------------------------------------- presets

@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
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


# --------------------------------------------------------------------------- roles

def test_ale_games_are_ale_pys_roms_without_importing_it():
    """The ROM list comes from ale-py's own md5.json in a fresh process that loads a config
    but imports neither ale_py nor gymnasium (each rank of a run loads its config)."""
    import subprocess
    import sys

    from ale_py.roms import get_all_rom_ids

    assert ale_games() == tuple(sorted(get_all_rom_ids()))
    assert "breakout" in ale_games() and "pong" in ale_games()
    code = ("import sys; from dba3c.preset import load_config; "
            "load_config('configs/breakout.yaml', ['env.id=pong']); "
            "print(sorted(m for m in ('ale_py', 'gymnasium') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_world_size_one_is_the_single_node_trainer():
    roles = make_roles(1, Config())
    assert roles.ps == () and roles.workers == (0,) and roles.evaluator is None
    assert roles.replicas == 1 and roles.role(0) == "chief+worker"


def test_roles_default_layout_world_4():
    # chief trains, 1 PS, no evaluator: 0 chief+worker, 1 ps, 2-3 workers -> 3 workers
    roles = make_roles(4, Config())
    assert roles.ps == (1,) and roles.workers == (0, 2, 3) and roles.evaluator is None
    assert roles.replicas == 3
    assert [roles.role(r) for r in range(4)] == ["chief+worker", "ps", "worker", "worker"]


def test_roles_non_training_chief_with_evaluator():
    # ps 2, evaluator, chief does not train, world 7:
    # 0 chief, 1-2 ps, 3 evaluator (the rank after the PS), 4-6 workers
    cfg = cfg_with(dist={"ps": 2, "chief_trains": False}, eval={"rank": True})
    roles = make_roles(7, cfg)
    assert roles.ps == (1, 2) and roles.evaluator == 3 and roles.workers == (4, 5, 6)
    assert [roles.role(r) for r in range(7)] == ["chief", "ps", "ps", "evaluator", "worker",
                                                  "worker", "worker"]
    assert required_world_size(cfg, 3) == 7


@pytest.mark.parametrize("ps,chief_trains,eval_rank", [(1, True, False), (2, True, True),
                                                       (3, False, False), (1, False, True)])
@pytest.mark.parametrize("num_workers", [2, 3, 5])
def test_roles_partition_every_rank(ps, chief_trains, eval_rank, num_workers):
    cfg = cfg_with(dist={"ps": ps, "chief_trains": chief_trains}, eval={"rank": eval_rank})
    world = required_world_size(cfg, num_workers)
    # world = W + P (+1 non-training chief) (+1 evaluator), by the roles docstring
    assert world == num_workers + ps + (0 if chief_trains else 1) + (1 if eval_rank else 0)
    roles = make_roles(world, cfg)
    assert roles.num_workers == num_workers and roles.replicas == num_workers
    assert roles.ps == tuple(range(1, ps + 1))
    assert roles.evaluator == (ps + 1 if eval_rank else None)
    assert (0 in roles.workers) == chief_trains
    # every rank has exactly one role; the chief is rank 0 only
    names = [roles.role(r) for r in range(world)]
    assert names[0] == ("chief+worker" if chief_trains else "chief")
    assert names.count("ps") == ps and names.count("evaluator") == int(eval_rank)
    assert names.count("worker") + (1 if chief_trains else 0) == num_workers
    # with at least one non-chief worker the last rank is a worker
    assert names[-1] == "worker"


def test_every_parameter_server_needs_a_non_empty_shard():
    assert num_shards_error(7, 7) is None  # one parameter each: allowed
    assert "dist.ps=8 must be <= the model's 7 parameters" in num_shards_error(8, 7)


def test_validator_refuses_more_parameter_servers_than_parameters_at_any_world_size():
    # CartPole (4 inputs, 2 actions), MLP with 1 unit: dense 4x1+1, dense 1x1+1,
    # policy 1x2+2, value 1x1+1 = 13 parameters
    cartpole = {"env": {"id": "CartPole-v1"}, "model": {"kind": "mlp", "hidden": 1}}
    assert from_dict({**cartpole, "dist": {"ps": 13}}).dist.ps == 13
    with pytest.raises(UserError) as refused:
        from_dict({"env": {"id": "CartPole-v1", "num_envs": 2, "batch_size": 3},
                   "model": cartpole["model"], "dist": {"ps": 14}})
    message = str(refused.value)  # reported together with the other cross-field errors
    assert "dist.ps=14 must be <= the model's 13 parameters" in message
    assert "env.batch_size=3 must be <= env.num_envs=2" in message


def test_roles_async_aggregates_one_gradient():
    roles = make_roles(5, cfg_with(dist={"mode": "async"}))
    assert roles.num_workers == 4 and roles.replicas == 1


def test_roles_backup_workers():
    # paper: 60 of 64 gradients per step; here 2 of 3
    roles = make_roles(4, cfg_with(dist={"replicas_to_aggregate": 2}))
    assert roles.num_workers == 3 and roles.replicas == 2


@pytest.mark.parametrize("world,sections,need", [
    (2, {"dist": {"ps": 2}}, 3),                                    # 2 PS + chief-worker
    (3, {"dist": {"ps": 2, "chief_trains": False}}, 4),             # + a non-training chief
    (4, {"dist": {"ps": 2, "chief_trains": False}, "eval": {"rank": True}}, 5),
])
def test_roles_too_small_world_is_a_user_error(world, sections, need):
    with pytest.raises(UserError, match=f"world size {world} is too small.*"
                                        f"need at least {need} ranks"):
        make_roles(world, cfg_with(**sections))
    make_roles(need, cfg_with(**sections))  # and the suggested size works


def test_roles_worker_count_mismatch_is_a_user_error():
    cfg = cfg_with(dist={"workers": 4})
    with pytest.raises(UserError, match="dist.workers=4 but world size 4 gives 3 workers; "
                                        "need 5 ranks"):
        make_roles(4, cfg)
    assert make_roles(5, cfg).num_workers == 4


def test_roles_more_replicas_than_workers_is_a_user_error():
    with pytest.raises(UserError, match=r"must be <= the number of workers \(2\)"):
        make_roles(3, cfg_with(dist={"replicas_to_aggregate": 3}))


def test_roles_describe_names_each_group():
    roles = make_roles(7, cfg_with(dist={"ps": 2, "chief_trains": False}, eval={"rank": True}))
    text = "\n".join(roles.describe())
    assert "rank 0: chief" in text and "ranks 1-2: parameter servers (2 shards)" in text
    assert "rank 3: evaluator" in text and "ranks 4-6: workers" in text
    assert "workers: 3, gradients per step: 3" in text


# --------------------------------------------------------------------------- aggregation

COLLECTIVE = {"aggregation": "collective", "ps": 0}


def test_collective_refuses_what_needs_parameter_servers_all_at_once():
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"aggregation": "collective", "ps": 2, "mode": "async",
                            "workers": 4, "replicas_to_aggregate": 3, "chief_trains": False}})
    msg = str(e.value)
    assert "dist.ps=2 has no meaning with dist.aggregation=collective" in msg
    assert "dist.mode=async needs dist.aggregation: ps" in msg
    assert "dist.replicas_to_aggregate=3 (backup workers) needs dist.aggregation: ps" in msg
    assert "dist.chief_trains=false needs dist.aggregation: ps" in msg
    assert msg.count(";") == 4  # these four, and async's own rule on replicas_to_aggregate


def test_ps_aggregation_needs_a_parameter_server_and_collective_none():
    with pytest.raises(UserError, match="dist.ps=0 must be at least 1 with dist.aggregation=ps"):
        from_dict({"dist": {"ps": 0}})
    assert from_dict({"dist": COLLECTIVE}).dist.aggregation == "collective"
    # all workers' gradients, said explicitly, is no backup worker
    from_dict({"dist": {**COLLECTIVE, "workers": 4, "replicas_to_aggregate": 4}})


def test_collective_roles_have_no_parameter_servers_and_every_worker_owns_a_shard():
    roles = make_roles(5, cfg_with(dist=COLLECTIVE, eval={"rank": True}))
    assert roles.ps == () and roles.evaluator == 1 and roles.workers == (0, 2, 3, 4)
    assert roles.shard_owners == roles.workers and roles.replicas == 4
    assert required_world_size(cfg_with(dist=COLLECTIVE, eval={"rank": True}), 4) == 5
    text = "\n".join(roles.describe())
    assert "parameter servers" not in text and "ranks 2-4: workers" in text
    assert "each worker holds one of 4 shards" in text
    ps_roles = make_roles(4, cfg_with(dist={"ps": 2}))
    assert ps_roles.shard_owners == ps_roles.ps == (1, 2)


def test_collective_backup_workers_are_refused_when_the_world_decides_the_count():
    with pytest.raises(UserError, match="dist.replicas_to_aggregate=2 .backup workers. needs "
                                        "dist.aggregation: ps"):
        make_roles(3, cfg_with(dist={**COLLECTIVE, "replicas_to_aggregate": 2}))


def test_poll_caps_and_the_collective_algorithm_are_reported_together():
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"poll_max_ms": 0, "collective_poll_us": -5,
                            "collective_algorithm": "ring"}})
    assert str(e.value) == ("dist.poll_max_ms=0 must be a number in (0, 1000]; "
                            "dist.collective_poll_us=-5 must be a number in (0, 1000000]; "
                            "dist.collective_algorithm='ring' must be one of recursive, mpi")
    dist = from_dict({"dist": {**COLLECTIVE, "collective_poll_us": 500}}).dist
    assert dist.collective_poll_us == 500 and dist.collective_poll_s == pytest.approx(5e-4)
