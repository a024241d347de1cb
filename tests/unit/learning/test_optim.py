"""RMSProp on flat shards and the learning-rate schedule (dba3c.learning.optim):
hand-computed values, the formulas, Keras, shard equivalence, the shard server's one update
call, checkpoint and resume."""

from typing import TypedDict

import numpy as np
import pytest
import tensorflow as tf

from dba3c.config import AdamConfig, RMSPropConfig
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.single import LocalParameterServer
from dba3c.errors import UserError
from dba3c.learning.optim import (
    Optimizer,
    learning_rate,
    make_optimizer,
    optimizer_update,
    rmsprop_update,
)
from dba3c.learning.params import shard_bounds
from dba3c.learning.rules import OptimizerState, adam_update
from dba3c.preset import load_config
from dba3c.training import checkpoint


class RMSPropHyper(TypedDict):
    """rmsprop_update's hyperparameters, passed as ``**hyper``."""

    lr: float
    alpha: float
    epsilon: float


A3C = RMSPropHyper(lr=7e-4, alpha=0.99, epsilon=0.1)


def _grads(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 2)).astype(np.float32)
            for _ in range(steps)]


def test_rmsprop_two_steps_by_hand():
    # alpha 0.99, eps 0.1, lr 0.01; g starts at 0
    # step 1, d = [0.5, -4, 0]: g = 0.01 d^2 = [0.0025, 0.16, 0]
    #   theta = [1, -2, 0] - 0.01 d / sqrt(g + 0.1) = [1 - 0.005/sqrt(0.1025),
    #           -2 + 0.04/sqrt(0.26), 0] = [0.98438262, -1.92155330, 0]
    # step 2, d = [1, 0, -1]: g = 0.99 g + 0.01 d^2 = [0.012475, 0.1584, 0.01]
    #   theta -= 0.01 d / sqrt(g + 0.1) -> [0.98438262 - 0.01/sqrt(0.112475), -1.92155330,
    #           0.01/sqrt(0.11)] = [0.95456526, -1.92155330, 0.03015113]
    theta = np.array([1.0, -2.0, 0.0], np.float32)
    state = OptimizerState.zeros(3)
    hyper = RMSPropHyper(lr=0.01, alpha=0.99, epsilon=0.1)
    rmsprop_update(theta, np.array([0.5, -4.0, 0.0], np.float32), state, **hyper)
    np.testing.assert_allclose(state.v_shard, [0.0025, 0.16, 0.0], rtol=1e-6)
    np.testing.assert_allclose(theta, [0.98438262, -1.92155330, 0.0], rtol=1e-6)
    rmsprop_update(theta, np.array([1.0, 0.0, -1.0], np.float32), state, **hyper)
    np.testing.assert_allclose(state.v_shard, [0.012475, 0.1584, 0.01], rtol=1e-6)
    np.testing.assert_allclose(theta, [0.95456526, -1.92155330, 0.03015113], rtol=1e-6)
    assert state.count == 2
    np.testing.assert_array_equal(state.m_shard, np.zeros(3, np.float32))  # unused slot


@pytest.mark.parametrize("with_scratch", [False, True], ids=["allocating", "scratch"])
def test_rmsprop_update_is_bit_identical_to_the_formulas_with_temporaries(with_scratch):
    n = 1001
    theta0 = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    lr, alpha, eps = (np.float32(A3C[k]) for k in ("lr", "alpha", "epsilon"))
    ref_theta, ref_g = theta0.copy(), np.zeros(n, np.float32)
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    scratch = np.full((2, n), np.nan, np.float32) if with_scratch else None
    for t, d in enumerate(_grads(n, 6, seed=4), start=1):
        ref_g = alpha * ref_g + np.float32(1.0 - A3C["alpha"]) * (d * d)
        ref_theta = ref_theta - (lr * d) / np.sqrt(ref_g + eps)
        rmsprop_update(theta, d, state, **A3C, scratch=scratch)
        assert np.array_equal(state.v_shard, ref_g), f"step {t}"
        assert np.array_equal(theta, ref_theta), f"step {t}"
        assert state.count == t


@pytest.mark.parametrize("hyper", [A3C, RMSPropHyper(lr=0.0224, alpha=0.99, epsilon=0.1),
                                   RMSPropHyper(lr=1e-3, alpha=0.9, epsilon=1e-7)],
                         ids=["a3c", "paac", "keras_defaults"])
def test_rmsprop_update_matches_keras3_rmsprop(hyper):
    # Keras 3 puts epsilon inside the square root too: same formula, same epsilon
    n, steps = 37, 6
    theta0 = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    var = tf.Variable(theta0)
    opt = tf.keras.optimizers.RMSprop(learning_rate=hyper["lr"], rho=hyper["alpha"],
                                      epsilon=hyper["epsilon"], momentum=0.0, centered=False)
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    for t, d in enumerate(_grads(n, steps), start=1):
        opt.apply_gradients([(tf.constant(d), var)])
        rmsprop_update(theta, d, state, **hyper)
        np.testing.assert_allclose(theta, var.numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=f"step {t}")
    assert not np.array_equal(theta, theta0)


def test_epsilon_outside_the_root_would_differ():
    # PyTorch / Keras 2 placement: lr d / (sqrt(g) + eps): with PAAC's eps 0.1 and a small
    # gradient the first step differs by far more than float error
    d = np.array([1e-2], np.float32)
    theta, state = np.zeros(1, np.float32), OptimizerState.zeros(1)
    rmsprop_update(theta, d, state, lr=1.0, alpha=0.99, epsilon=0.1)
    inside = -1e-2 / np.sqrt(0.01 * 1e-4 + 0.1)
    outside = -1e-2 / (np.sqrt(0.01 * 1e-4) + 0.1)
    np.testing.assert_allclose(theta, [inside], rtol=1e-6)
    assert abs(inside - outside) > 0.1 * abs(inside)


@pytest.mark.parametrize("num_shards", [1, 2, 3, 7])
def test_sharded_rmsprop_equals_whole_vector_rmsprop(num_shards):
    n, steps = 23, 4
    theta0 = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    whole, whole_state = theta0.copy(), OptimizerState.zeros(n)
    bounds = shard_bounds(n, num_shards)
    shards = [theta0[a:b].copy() for a, b in bounds]
    states = [OptimizerState.zeros(b - a) for a, b in bounds]
    for d in _grads(n, steps, seed=3):
        rmsprop_update(whole, d, whole_state, **A3C)
        for (a, b), shard, st in zip(bounds, shards, states):
            rmsprop_update(shard, d[a:b], st, **A3C)
    assert np.array_equal(np.concatenate(shards), whole)
    assert np.array_equal(np.concatenate([s.v_shard for s in states]), whole_state.v_shard)
    assert all(s.count == steps for s in states)


def test_learning_rate_schedules():
    assert learning_rate(0.5, "constant", 123, 0) == 0.5
    assert learning_rate(0.5, "linear", 0, 100) == 0.5
    assert learning_rate(0.5, "linear", 25, 100) == pytest.approx(0.375)
    assert learning_rate(0.5, "linear", 99, 100) == pytest.approx(0.005)
    assert learning_rate(0.5, "linear", 100, 100) == 0.0
    assert learning_rate(0.5, "linear", 150, 100) == 0.0  # never negative
    with pytest.raises(ValueError, match="cosine"):
        learning_rate(0.5, "cosine", 1, 100)


@pytest.mark.parametrize("kind", ["adam", "rmsprop"])
def test_optimizer_update_applies_the_scheduled_rate_at_the_given_step(kind):
    n, max_steps = 9, 40
    opt = Optimizer(kind, 0.01, "linear", max_steps, AdamConfig(0.8, 0.75, 1e-8),
                    RMSPropConfig(0.99, 0.1))
    theta, state = np.ones(n, np.float32), OptimizerState.zeros(n)
    ref, ref_state = theta.copy(), OptimizerState.zeros(n)
    for step, d in zip([10, 11, 30], _grads(n, 3, seed=8)):
        optimizer_update(theta, d, state, opt, step=step)
        lr = 0.01 * (1 - step / max_steps)
        if kind == "adam":
            adam_update(ref, d, ref_state, lr=lr, beta1=0.8, beta2=0.75, epsilon=1e-8)
        else:
            rmsprop_update(ref, d, ref_state, lr=lr, alpha=0.99, epsilon=0.1)
        assert np.array_equal(theta, ref) and np.array_equal(state.v_shard, ref_state.v_shard)
    # from max_steps on the rate is 0: nothing moves, the statistics still do
    before = theta.copy()
    optimizer_update(theta, np.ones(n, np.float32), state, opt, step=max_steps)
    assert np.array_equal(theta, before) and state.count == 4


def test_shard_server_runs_rmsprop_with_the_schedule_from_its_version():
    opt = Optimizer("rmsprop", 0.05, "linear", 20, rmsprop=RMSPropConfig(0.9, 0.01))
    theta0 = np.linspace(-1, 1, 6).astype(np.float32)
    srv = ShardServer(theta0.copy(), OptimizerState.zeros(6), 4, mode="sync", replicas=2,
                      optimizer=opt)
    ref, st = theta0.copy(), OptimizerState.zeros(6)
    for version, (g1, g2) in zip([4, 5, 6], zip(_grads(6, 3, 1), _grads(6, 3, 2))):
        srv.offer(version, g1)
        assert srv.offer(version, g2) is True
        mean = (g1 + g2) / np.float32(2)
        rmsprop_update(ref, mean, st, lr=0.05 * (1 - version / 20), alpha=0.9, epsilon=0.01)
        np.testing.assert_allclose(srv.theta_shard, ref, rtol=1e-6, atol=1e-7)
    assert srv.version == 7 and srv.opt_state.count == 3
    np.testing.assert_array_equal(srv.opt_state.m_shard, np.zeros(6, np.float32))


def test_rmsprop_with_linear_schedule_resumes_bit_exactly_through_a_checkpoint():
    """6 steps, checkpoint file round trip, 6 more == 12 steps in one go, bit for bit."""
    opt = Optimizer("rmsprop", 0.01, "linear", 12)
    theta0 = np.random.default_rng(5).standard_normal(8).astype(np.float32)
    grads = _grads(8, 12, seed=6)
    once = LocalParameterServer(theta0.copy(), OptimizerState.zeros(8), 0, opt)
    for d in grads:
        once.push(once.pull().version, d)
    first = LocalParameterServer(theta0.copy(), OptimizerState.zeros(8), 0, opt)
    for d in grads[:6]:
        first.push(first.pull().version, d)
    s = first
    ckpt = checkpoint.decode(checkpoint.encode(checkpoint.Checkpoint(
        s.version, s.theta, s.opt_state.m_shard, s.opt_state.v_shard, s.opt_state.count, {})),
        "mem")
    second = LocalParameterServer(ckpt.theta.copy(), OptimizerState(ckpt.adam_m.copy(),
                                  ckpt.adam_v.copy(), ckpt.adam_count), ckpt.step, opt)
    for d in grads[6:]:
        second.push(second.pull().version, d)
    assert second.version == once.version == 12
    assert np.array_equal(second.theta, once.theta)
    assert np.array_equal(second.opt_state.v_shard, once.opt_state.v_shard)
    assert second.opt_state.count == once.opt_state.count == 12


def test_make_optimizer_reads_the_config():
    cfg = load_config("configs/cartpole.yaml", ["optim.kind=rmsprop", "rmsprop.alpha=0.95",
                                                "rmsprop.epsilon=0.01", "train.lr=0.002",
                                                "train.lr_schedule=linear"])
    assert make_optimizer(cfg) == Optimizer("rmsprop", 0.002, "linear", cfg.train.max_steps,
                                            cfg.adam, RMSPropConfig(0.95, 0.01))
    assert make_optimizer(load_config("configs/cartpole.yaml")).kind == "adam"


def test_optimizer_config_errors_are_reported_together():
    with pytest.raises(UserError) as e:
        load_config("configs/cartpole.yaml", ["optim.kind=sgd", "rmsprop.alpha=1.0",
                                              "rmsprop.epsilon=0", "train.lr_schedule=cosine"])
    msg = str(e.value)
    assert "optim.kind='sgd' must be one of adam, rmsprop" in msg
    assert "rmsprop.alpha=1.0 must be a number in [0, 1)" in msg
    assert "rmsprop.epsilon=0 must be a number in (0, 1]" in msg
    assert "train.lr_schedule='cosine' must be one of constant, linear" in msg
    with pytest.raises(UserError, match="train.lr_schedule='linear' decays to 0 at "
                                        "train.max_steps, and train.max_steps=0"):
        load_config("configs/cartpole.yaml", ["train.lr_schedule=linear", "train.max_steps=0"])
