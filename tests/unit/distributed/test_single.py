"""The single-process trainer (dba3c.distributed.single): its parameter store
(LocalParameterServer: a push is one Adam step; with W emulated workers, one Adam step on the
mean of the step's W gradients) and one process emulating W synchronous workers
(dist.emulate_workers) against a real sync run of W workers."""

import signal
import threading
from dataclasses import replace

import numpy as np
import pytest

from dba3c.config import Config
from dba3c.distributed.run import run_rank
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.single import LocalParameterServer, train_single
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.games.envs import env_spaces
from dba3c.learning.learner import Learner
from dba3c.learning.models import make_net_spec
from dba3c.learning.rules import OptimizerState
from dba3c.preset import load_config
from dba3c.training.rundir import RunDir
from dba3c.training.worker import synthetic_batch
from tests.support import assert_close, latest_checkpoint
from tests.support.adam import PAPER_ADAM, _grads


def test_local_parameter_server_push_is_one_adam_step():
    theta0 = np.array([0.5, -0.5], np.float32)
    ps = LocalParameterServer(theta0.copy(), OptimizerState.zeros(2), 7, PAPER_ADAM)
    p = ps.pull()
    assert p.version == 7
    np.testing.assert_array_equal(p.theta, theta0)
    nxt = ps.push(7, np.array([1.0, -1.0], np.float32))
    assert nxt.version == 8
    np.testing.assert_allclose(nxt.theta, [0.5 - 1e-3, -0.5 + 1e-3], rtol=1e-5)
    p.theta[:] = 99  # pulled copies are independent of the server's vector
    assert ps.pull().theta[0] != 99


# ---- W emulated workers (dist.emulate_workers) ------------------------------------------

def test_the_store_of_emulated_workers_applies_the_mean_of_their_gradients_once_a_step():
    grads = _grads(5, 3, seed=2)
    theta0 = np.linspace(-1, 1, 5).astype(np.float32)
    store = LocalParameterServer(theta0.copy(), OptimizerState.zeros(5), 0, PAPER_ADAM,
                                 workers=3)
    store.offer(0, grads[0])
    store.offer(0, grads[1])
    np.testing.assert_array_equal(store.theta, theta0)  # nothing applied before the last
    nxt = store.push(0, grads[2])
    # a parameter server of 3 workers: its ShardServer, offered the same gradients
    ps = ShardServer(theta0.copy(), OptimizerState.zeros(5), 0, mode="sync", replicas=3,
                     optimizer=PAPER_ADAM)
    assert [ps.offer(0, g) for g in grads] == [False, False, True]
    assert nxt.version == store.version == 1
    assert np.array_equal(nxt.theta, ps.theta_shard)
    assert np.array_equal(store.opt_state.v_shard, ps.opt_state.v_shard)
    with pytest.raises(RuntimeError, match="a step takes 3 gradients"):
        store.push(1, grads[0])  # the step's first gradient cannot end it


def tiny_cfg(run_dir, *overrides: str) -> Config:
    """CartPole with seeded synthetic mini-batches of 8 and the paper's clip (0.1 per tensor,
    so every worker's gradient is clipped), 5 steps, 1 parameter server."""
    return load_config("configs/cartpole.yaml", [
        f"run.dir={run_dir}", "debug.synthetic_data=true", "train.batch_size=8",
        "train.grad_clip=0.1", "train.max_steps=5", "train.max_seconds=0", "eval.every=0",
        "run.progress=none", "run.log_every=1", "run.checkpoint_every=100", "dist.ps=1",
        *overrides])


def real_sync_run(cfg: Config, world_size: int) -> None:
    """``dba3c launch`` of ``cfg`` in this process: every rank's own loop (``run_rank``) on
    the in-process transport, rank 0 (the chief, which installs signal handlers) in this
    thread and the others in threads."""
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    world = InProcessTransport.create_world(world_size)
    errors: list[BaseException] = []

    def rank(t: InProcessTransport) -> None:
        try:
            run_rank(t, cfg, spec)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(t,), daemon=True) for t in world[1:]]
    for thread in threads:
        thread.start()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    try:
        run_rank(world[0], cfg, spec)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors


def test_emulating_two_workers_makes_the_updates_of_a_real_two_worker_sync_run(tmp_path):
    """A real sync run of 2 workers and 1 parameter server (ranks 0 and 2 train) and one
    process emulating 2 workers, on the same seeded mini-batches: each worker's gradient is
    clipped before the mean, so the two end with the same parameters and Adam state."""
    real = tiny_cfg(tmp_path / "real")
    real_sync_run(real, world_size=3)
    emulated = tiny_cfg(tmp_path / "emulated", "dist.emulate_workers=2")
    summary = train_single(emulated)
    assert summary["final_step"] == 5
    want, got = latest_checkpoint(tmp_path / "real"), latest_checkpoint(tmp_path / "emulated")
    assert want.step == got.step == 5
    # the same gradients through the same ShardServer: equal to float tolerance (measured:
    # the same bits, the float64 sum of two float32 gradients being exact)
    for a, b in ((got.theta, want.theta), (got.adam_m, want.adam_m),
                 (got.adam_v, want.adam_v)):
        assert_close(a, b, tol=1e-6)
    assert got.adam_count == want.adam_count == 5
    assert got.meta["num_workers"] == want.meta["num_workers"] == 2

    # what tells the two rules apart: clipping the mean of the two gradients instead
    spec = make_net_spec(real.model, *env_spaces(real))
    learner = Learner(spec, real.train, spec.init_params(real.run.seed, real.model.init))
    unclipped = Learner(spec, replace(real.train, grad_clip=0.0),
                        spec.init_params(real.run.seed, real.model.init))
    batches = [synthetic_batch(spec, 8, (real.run.seed, rank, 0)) for rank in (0, 2)]
    mean_of_clipped = np.mean([learner.gradient(b.obs, b.a, b.R)[0] for b in batches], axis=0)
    mean = np.mean([unclipped.gradient(b.obs, b.a, b.R)[0] for b in batches], axis=0)
    clipped_mean = flat_clip(spec, real.train, mean)
    assert not np.allclose(mean_of_clipped, clipped_mean, rtol=1e-3)


def flat_clip(spec, train_cfg, flat: np.ndarray) -> np.ndarray:
    """``flat`` clipped as one worker's gradient is (train.grad_clip by train.grad_clip_mode)."""
    import tensorflow as tf

    from dba3c.learning.params import unflatten
    from dba3c.learning.rl import clip_gradients

    tensors = [tf.constant(t) for t in unflatten(spec.layout(), flat)]
    clipped = clip_gradients(tensors, clip=train_cfg.grad_clip, mode=train_cfg.grad_clip_mode)
    return np.concatenate([np.asarray(t).ravel() for t in clipped])


def test_an_emulated_run_plays_w_groups_of_simulators_and_logs_w_workers_data(tmp_path,
                                                                             capsys):
    """CartPole for real, 3 emulated workers of 2 simulators and mini-batches of 4: the
    first line says so, the pool holds 6 simulators, a step trains on 12 data points."""
    cfg = load_config("configs/cartpole.yaml", [
        f"run.dir={tmp_path / 'run'}", "dist.emulate_workers=3", "env.num_envs=2",
        "train.batch_size=4", "train.max_steps=6", "train.max_seconds=0", "eval.every=0",
        "run.progress=none", "run.log_every=3"])
    assert train_single(cfg)["final_step"] == 6
    err = capsys.readouterr().err
    assert "rank 0 (chief+worker emulating 3 sync workers, 3 x 2 simulators)" in err
    last = RunDir(cfg.run.dir).read_metrics()[-1]
    assert last["step"] == 6 and last["dist/replicas"] == 3
    assert last["perf/effective_batch"] == 12
    ckpt = latest_checkpoint(tmp_path / "run")
    assert ckpt.step == 6 and ckpt.meta["num_workers"] == 3
