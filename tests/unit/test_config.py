"""Configuration (dba3c.config), in-process: defaults, overrides, validation, aggregation.

The paper's values (Adamski et al. 2018, its best run): lr 1e-3,
batch 32 per worker, FC 128, 10 simulators per worker, Adam beta1 0.8, beta2 0.75,
epsilon 1e-8, gamma 0.99, t_max 5, entropy beta 0.01, per-tensor gradient clip by average
norm 0.1, synchronous updates; evaluation every 1000 steps, 50 games, greedy, target 300."""

import dataclasses

import pytest

from dba3c.config import (
    SECTIONS,
    Config,
    ale_games,
    all_keys,
    describe_keys,
    dump_yaml,
    overrides_file,
    parse_overrides,
)
from dba3c.errors import UserError
from dba3c.preset import from_dict, load_config, validate
from tests.support import COLLECTIVE, ROOT, cfg_with

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


PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int, "float": (int, float), "bool": bool, "str": str}


def test_default_config_validates_and_types_match_annotations():
    cfg = validate(Config())
    for section in cfg.to_dict():
        for f in dataclasses.fields(getattr(cfg, section)):
            value = getattr(getattr(cfg, section), f.name)
            expected = PYTHON_TYPES[str(f.type)]  # the annotations are strings
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
        cfg.train.lr = 0.5  # type: ignore[misc]  # frozen: the assignment must raise
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train = None  # type: ignore[misc, assignment]  # frozen: must raise
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
        from_dict(["train"])  # type: ignore[arg-type]  # not a mapping: refused
    with pytest.raises(UserError, match="section 'train'.*mapping"):
        from_dict({"train": 3})


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


def test_an_overlap_probe_times_two_steps_of_each_mode_and_ends_before_the_next():
    with pytest.raises(UserError, match=r"dist.overlap_probe_steps=1 times nothing \(a "
                       r"mode's first step is not timed\): use 0 \(no probe\) or at least 2"):
        from_dict({"dist": {"overlap_probe_steps": 1}})
    with pytest.raises(UserError) as e:  # dist.gather_ahead=auto: a third mode
        from_dict({"dist": {"overlap_probe_steps": 5, "overlap_probe_every": 14}})
    assert str(e.value) == ("dist.overlap_probe_every=14 must be 0 or at least 3 x "
                            "dist.overlap_probe_steps=5 (a probe's 15 steps: serial, "
                            "overlapped, ahead)")
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"overlap_probe_steps": 5, "overlap_probe_every": 9,
                            "gather_ahead": "never"}})
    assert str(e.value) == ("dist.overlap_probe_every=9 must be 0 or at least 2 x "
                            "dist.overlap_probe_steps=5 (a probe's 10 steps: serial, "
                            "overlapped)")
    for every, ahead in ((0, "auto"), (15, "auto"), (10, "always")):  # once; back to back
        assert from_dict({"dist": {"overlap_probe_steps": 5, "overlap_probe_every": every,
                                   "gather_ahead": ahead}}).dist.overlap_probe_every == every
    with pytest.raises(UserError, match="dist.gather_ahead=True must be one of auto, always, "
                       "never"):
        from_dict({"dist": {"gather_ahead": True}})
    assert from_dict({"dist": {"overlap_probe_steps": 0, "overlap_probe_every": 1}})


def test_poll_caps_and_the_collective_algorithm_are_reported_together():
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"poll_max_ms": 0, "collective_poll_us": -5,
                            "collective_algorithm": "ring"}})
    assert str(e.value) == ("dist.poll_max_ms=0 must be a number in (0, 1000]; "
                            "dist.collective_poll_us=-5 must be a number in (0, 1000000]; "
                            "dist.collective_algorithm='ring' must be one of recursive, mpi")
    dist = from_dict({"dist": {**COLLECTIVE, "collective_poll_us": 500}}).dist
    assert dist.collective_poll_us == 500 and dist.collective_poll_s == pytest.approx(5e-4)


def test_the_precision_is_float32_unless_asked_and_one_of_three():
    assert Config().model.precision == "float32"
    for precision in ("auto", "float32", "bfloat16"):
        assert from_dict({"model": {"precision": precision}}).model.precision == precision
    with pytest.raises(UserError) as e:
        from_dict({"model": {"precision": "float16"}})
    assert str(e.value) == ("model.precision='float16' must be one of auto, float32, "
                            "bfloat16")


def test_the_wire_carries_float32_unless_bfloat16_is_asked_for():
    assert Config().dist.wire_dtype == "float32"
    assert from_dict({"dist": {**COLLECTIVE, "wire_dtype": "bfloat16"}}).dist.wire_dtype == \
        "bfloat16"
    with pytest.raises(UserError, match="dist.wire_dtype='float16' must be one of float32, "
                       "bfloat16"):
        from_dict({"dist": {"wire_dtype": "float16"}})


def test_an_overrides_file_becomes_key_value_items_in_its_order(tmp_path):
    node = tmp_path / "node.yaml"
    node.write_text("env:\n  num_envs: 16\n  id: pong\ntrain:\n  lr: 0.0005\n"
                    "eval:\n  greedy: false\n")
    assert overrides_file(str(node)) == ["env.num_envs=16", 'env.id="pong"',
                                         "train.lr=0.0005", "eval.greedy=false"]
    cfg = from_dict(parse_overrides(overrides_file(str(node))))  # the values come back typed
    assert (cfg.env.num_envs, cfg.env.id, cfg.train.lr, cfg.eval.greedy) == (16, "pong",
                                                                               5e-4, False)
    (tmp_path / "list.yaml").write_text("- env.num_envs=16\n")
    with pytest.raises(UserError, match="must be a mapping of sections"):
        overrides_file(str(tmp_path / "list.yaml"))
    with pytest.raises(UserError, match="not found"):
        overrides_file(str(tmp_path / "missing.yaml"))


def test_run_allow_changes_names_config_keys():
    cfg = from_dict({"run": {"allow_changes": "train.lr, run.seed,"}})
    assert cfg.run.allowed_changes == {"train.lr", "run.seed"}
    assert from_dict({}).run.allowed_changes == frozenset()
    with pytest.raises(UserError) as e:
        from_dict({"run": {"allow_changes": "train.lr,train.lrr"}})
    assert str(e.value) == ("run.allow_changes='train.lr,train.lrr' must be config keys "
                            "separated by commas, e.g. train.lr,run.seed; not a key: "
                            "train.lrr (did you mean 'train.lr'?)")


FLOAT_KEYS = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)
              if f.type == "float"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_for_every_float_key(value):
    assert "train.max_seconds" in FLOAT_KEYS and "eval.target_score" in FLOAT_KEYS
    for key in FLOAT_KEYS:
        section, name = key.split(".")
        with pytest.raises(UserError, match=f"^{key}={value!r} must be a finite number"):
            from_dict({section: {name: value}})


def test_a_non_finite_value_is_told_the_range_and_what_0_means():
    with pytest.raises(UserError) as e:
        load_config(str(ROOT / "configs/breakout.yaml"),
                    ["train.max_seconds=.inf", "train.lr=.nan", "dist.stall_timeout=1e999"])
    assert str(e.value) == ("train.lr=nan must be a finite number in (0, 1]; "
                            "train.max_seconds=inf must be a finite number >= 0 (0 = no limit); "
                            "dist.stall_timeout=inf must be a finite number >= 0 (0 = never)")


@pytest.mark.parametrize("env_id,rom", [("ALE/Breakout-v5", "breakout"),
                                        ("BreakoutNoFrameskip-v4", "breakout"),
                                        ("ALE/SpaceInvaders-v5", "space_invaders")])
def test_a_gymnasium_atari_id_is_answered_with_its_rom_name(env_id, rom):
    with pytest.raises(UserError) as e:
        from_dict({"env": {"id": env_id}})
    assert str(e.value) == (f"env.id={env_id!r} is a gymnasium Atari id; Atari games are "
                            f"given by their ALE ROM name: env.id={rom}")  # and nothing on mlp


def test_an_unknown_rom_without_a_close_name_lists_every_rom():
    with pytest.raises(UserError) as e:
        from_dict({"env": {"id": "nosuchgamexyz"}})
    assert str(e.value) == (f"env.id='nosuchgamexyz' is not an ALE ROM (the ROM names: "
                            f"{', '.join(ale_games())})")
    assert "breakout" in ale_games() and "describe --games" not in str(e.value)


def test_an_unknown_key_is_blamed_on_where_it_was_given(tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text("train:\n  lrr: 0.1\n")
    node = tmp_path / "node.yaml"
    node.write_text("env:\n  num_envz: 16\nfoo:\n  x: 1\n")
    with pytest.raises(UserError) as e:
        load_config(str(preset), ["train.gama=0.9", "bar.x=1"])
    msg = str(e.value)
    assert f"unknown key 'train.lrr' in {preset} (did you mean 'train.lr'?)" in msg
    assert "unknown key 'train.gama' in the override train.gama=0.9 (did you mean" in msg
    assert "unknown section 'bar' in the override bar.x=1" in msg
    with pytest.raises(UserError) as e:
        overrides_file(str(node))
    assert f"unknown key 'env.num_envz' in the overrides file {node} (did you mean " \
           f"'env.num_envs'?)" in str(e.value)
    assert f"unknown section 'foo' in the overrides file {node}" in str(e.value)


def test_emulated_workers_are_counted_from_zero_and_refuse_what_they_cannot_be():
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"emulate_workers": -1}})
    assert str(e.value) == "dist.emulate_workers=-1 must be a number in [0, inf]"
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"emulate_workers": 4, "mode": "async"}})
    assert str(e.value) == ("dist.emulate_workers=4 emulates synchronous workers: it needs "
                            "dist.mode=sync")
    with pytest.raises(UserError) as e:
        from_dict({"dist": {"emulate_workers": 4, "replicas_to_aggregate": 3},
                   "synthetic": {"enabled": True}, "eval": {"every": 0}})
    msg = str(e.value)
    assert "\n" not in msg and msg.count(";") == 1, msg
    assert msg.startswith("dist.replicas_to_aggregate=3 (backup workers) has no meaning with "
                          "dist.emulate_workers=4: every emulated worker's gradient arrives")
    assert msg.endswith("; dist.emulate_workers=4 computes real gradients in one process "
                        "and synthetic.enabled=true runs synthetic ranks under mpiexec (set "
                        "one of them off)")
    with pytest.raises(UserError) as e:  # W gradients averaged in one process: no wire
        from_dict({"dist": {"emulate_workers": 4, "wire_dtype": "bfloat16"}})
    assert str(e.value) == ("dist.wire_dtype=bfloat16 has no meaning with dist.emulate_workers=4: "
                            "its gradients are averaged in the process, never on a wire (use "
                            "float32)")
    dist = from_dict({"dist": {"emulate_workers": 64, "replicas_to_aggregate": 64,
                               "wire_dtype": "float32"}}).dist
    assert dist.emulate_workers == 64 and Config().dist.emulate_workers == 0
