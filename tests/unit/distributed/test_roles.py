"""The rank layout (dba3c.distributed.roles) and the world sizes the config allows,
in-process."""


import pytest

from dba3c.config import (
    Config,
    num_shards_error,
)
from dba3c.distributed.roles import emulated_roles, make_roles, required_world_size
from dba3c.errors import UserError
from dba3c.preset import from_dict
from tests.support import COLLECTIVE, cfg_with


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
    error = num_shards_error(8, 7)
    assert error is not None and "dist.ps=8 must be <= the model's 7 parameters" in error


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


def test_emulated_workers_run_in_one_process_and_stand_for_the_real_runs_worker_ranks():
    cfg = cfg_with(dist={"ps": 4, "workers": 64, "emulate_workers": 3}, eval={"rank": True})
    with pytest.raises(UserError) as e:
        make_roles(3, cfg)
    assert str(e.value) == ("dist.emulate_workers=3 emulates workers in one process (`dba3c "
                            "train` alone); a world of 3 ranks runs real ones: set "
                            "dist.emulate_workers=0")
    assert make_roles(1, cfg).workers == (0,)
    # the real run of 3 workers: 0 chief+worker, 1-4 parameter servers, 5 evaluator, 6-7
    assert emulated_roles(cfg).workers == (0, 6, 7)
    assert emulated_roles(cfg_with(dist={"emulate_workers": 1})).workers == (0,)
    assert emulated_roles(cfg_with(dist={**COLLECTIVE, "emulate_workers": 4})).workers == (
        0, 1, 2, 3)
