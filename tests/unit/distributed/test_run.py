"""dba3c.distributed.run: what each role runs, as its first line reports it."""

from dataclasses import replace

from dba3c.config import Config
from dba3c.distributed.run import role_pools
from tests.support import cfg_with


def test_each_role_reports_the_simulators_and_tensorflow_it_runs():
    cfg = cfg_with(env={"num_envs": 10}, eval={"num_envs": 8})
    assert role_pools("ps", cfg) == (None, None)
    for role in ("worker", "chief+worker"):
        env, train = role_pools(role, cfg)
        assert env is not None and env.num_envs == 10 and train == cfg.train
    for role in ("evaluator", "chief"):  # games of the evaluation: eval.num_envs of them
        env, train = role_pools(role, cfg)
        assert env is not None and env.num_envs == 8 and train == cfg.train


def test_a_synthetic_run_has_no_pools_on_any_rank():
    cfg = replace(Config(), synthetic=replace(Config().synthetic, enabled=True))
    assert {role_pools(r, cfg) for r in ("chief+worker", "worker", "evaluator", "ps")} == {
        (None, None)}
