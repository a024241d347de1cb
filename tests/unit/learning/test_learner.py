"""The Learner (dba3c.learning.learner): its threading contract (a prediction made while
another thread loads new parameters sees exactly one parameter version, and reports which;
the actor tags data points with that version), and the staged gradient against the
one-call gradient."""

import collections
import itertools
import queue
import threading
import time
from typing import cast

import numpy as np
import pytest
import tensorflow as tf

from dba3c.config import TrainConfig
from dba3c.core import Step, parameters_loaded
from dba3c.games.envs import EnvPool
from dba3c.learning.learner import Learner
from dba3c.learning.models import NetSpec
from dba3c.learning.params import layer_buckets
from dba3c.learning.rollout import GroupedAssembler
from dba3c.training.worker import Actor, synthetic_batch

SPEC = NetSpec("mlp", 16, (4,), 3)  # 8 variables: fc0, fc1, policy, value (kernel, bias)


def outputs_equal(a: tuple, b: tuple) -> bool:
    """Whether two (pi, v) predictions agree to float32 rounding."""
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(a, b))


def two_versions() -> tuple[Learner, dict[int, np.ndarray], np.ndarray, dict[int, tuple]]:
    """A Learner; parameter versions 1 and 2 (every variable, biases too, differs between
    them); a batch of observations; and each version's (pi, v) on it. Version 2 is loaded."""
    rng = np.random.default_rng(0)
    num_params = SPEC.layout().num_params
    theta = {v: rng.normal(0.0, 0.5, num_params).astype(np.float32) for v in (1, 2)}
    obs = rng.normal(size=(32, 4)).astype(np.float32)
    learner = Learner(SPEC, TrainConfig(), theta[1])
    expected = {}
    for version in (1, 2):
        learner.set_params(theta[version], version)
        expected[version] = learner.predict(obs)
    return learner, theta, obs, expected


def test_every_mix_of_two_versions_gives_outputs_unlike_both():
    """What makes the concurrency test below able to fail: any prediction that read some
    variables of version 1 and others of version 2 is told apart from both."""
    learner, theta, obs, pure = two_versions()
    assert not outputs_equal(pure[1], pure[2])
    layout = SPEC.layout()
    bounds = np.cumsum((0, *layout.sizes))
    for choice in itertools.product((1, 2), repeat=len(layout.sizes)):
        if len(set(choice)) == 1:
            continue
        mixed = np.concatenate([theta[v][lo:hi]
                                for v, lo, hi in zip(choice, bounds[:-1], bounds[1:])])
        learner.set_params(mixed)
        out = learner.predict(obs)
        assert not outputs_equal(out, pure[1]) and not outputs_equal(out, pure[2]), choice


def test_a_prediction_sees_exactly_one_version_while_another_thread_assigns():
    learner, theta, obs, expected = two_versions()
    stop = threading.Event()

    def assign_alternately():
        while not stop.is_set():
            for version in (1, 2):
                learner.set_params(theta[version], version)
                time.sleep(0.0002)  # Python's lock is not fair: let the predictions in

    assigner = threading.Thread(target=assign_alternately, daemon=True)
    assigner.start()
    seen = {1: 0, 2: 0}
    try:
        for _ in range(1000):  # with the lock made a no-op, 283 of 1000 failed here
            pi, v, version = learner.predict_with_version(obs)
            assert outputs_equal((pi, v), expected[version]), f"mixed versions after {seen}"
            seen[version] += 1
    finally:
        stop.set()
        assigner.join()
    assert seen[1] > 0 and seen[2] > 0, seen  # the assignments did interleave


def test_a_load_does_not_wait_for_a_prediction_in_progress():
    learner, theta, obs, expected = two_versions()
    learner.set_params(theta[1], 1)
    in_prediction, release = threading.Event(), threading.Event()
    predict = learner._predict

    def slow_predict(params, obs):  # a prediction that lasts until the test releases it
        out = predict(params, obs)
        in_prediction.set()
        assert release.wait(30)
        return out

    learner._predict = slow_predict
    slow: list = []
    actor = threading.Thread(target=lambda: slow.append(learner.predict_with_version(obs)))
    actor.start()
    try:
        assert in_prediction.wait(30)
        loader = threading.Thread(target=learner.set_params, args=(theta[2], 2))
        loader.start()
        loader.join(30)
        assert not loader.is_alive(), "set_params waited for the prediction in progress"
        learner._predict = predict
        pi, v, version = learner.predict_with_version(obs)
        assert version == 2 and outputs_equal((pi, v), expected[2])
    finally:
        release.set()
        actor.join(30)
    (pi, v, version), = slow  # the prediction in progress finished on version 1
    assert version == 1 and outputs_equal((pi, v), expected[1])


class NewVersionAfterEachPrediction:
    """One simulator whose observation at step t is (t, 0, 0, 0). Right after each prediction
    (when the actor sends its actions) it loads version t + 1, as the trainer may do before
    the actor has filed the data point; it stops the actor after ``num_steps``."""

    num_envs, frames_per_step = 1, 1

    def __init__(self, learner: Learner, theta: dict[int, np.ndarray], num_steps: int):
        self.learner, self.theta, self.num_steps = learner, theta, num_steps
        self.t = 0
        self.actor: Actor | None = None

    def _step(self) -> Step:
        return Step(np.array([[self.t, 0, 0, 0]], np.float32), np.ones(1, np.float32),
                    np.zeros(1, bool), np.zeros(1, bool), np.zeros(1, np.int64),
                    np.ones(1, np.int64))

    def reset(self, seed: int) -> Step:
        return self._step()

    def as_pool(self) -> EnvPool:
        """This fake where the actor takes an EnvPool: it has what the actor uses."""
        return cast(EnvPool, self)

    def send(self, actions: np.ndarray) -> None:
        self.learner.set_params(self.theta[1 + self.t % 2], self.t + 1)

    def recv(self) -> Step:
        self.t += 1
        if self.t == self.num_steps:
            assert self.actor is not None
            self.actor.stopping.set()
        return self._step()

    def close(self) -> None:
        pass


def test_the_actor_tags_each_data_point_with_the_version_that_predicted():
    learner, theta, _, _ = two_versions()
    learner.set_params(theta[2], 0)
    pool = NewVersionAfterEachPrediction(learner, theta, num_steps=13)
    out: queue.Queue = queue.Queue()
    assembler = GroupedAssembler(1, 1, t_max=3, gamma=0.5, reward_clip=0.0, batch_size=3)
    pool.actor = Actor(pool.as_pool(), learner, assembler, out, seed=0, episodic_life=False)
    pool.actor.run()  # in this thread: it returns when the pool stops it
    assert pool.actor.error is None
    batches = [batch for _ in range(out.qsize()) for batch in out.get_nowait()]
    states = np.concatenate([b.obs[:, 0] for b in batches])
    versions = np.concatenate([b.version for b in batches])
    # the state at step t was predicted on version t (loaded after the prediction at t - 1)
    assert states.tolist() == list(range(12))
    assert versions.tolist() == list(range(12))


# --------------------------------------------------------------------------- staged gradient

STAGED = {  # the paper's net as configured for Breakout, A3C-FF, an MLP
    "ba3c": NetSpec("ba3c", 128, (4, 84, 84), 6),
    "a3c_ff": NetSpec("a3c_ff", 32, (4, 84, 84), 6),
    "mlp": NetSpec("mlp", 16, (4,), 3),
}
NUM_STAGES = {"ba3c": 5, "a3c_ff": 3, "mlp": 2}
BATCH = 4


def staged_setup(name: str, cfg: TrainConfig | None = None) -> tuple:
    """A Learner on parameters theta1, a second parameter vector theta2 (every element
    differs), and a batch whose returns are large enough for the average-norm clip to bite
    on the heads."""
    spec = STAGED[name]
    theta1, theta2 = spec.init_params(1), spec.init_params(2)
    theta2[theta2 == 0] = 0.05  # biases too
    batch = synthetic_batch(spec, BATCH, (0, 0, 3))
    learner = Learner(spec, cfg or TrainConfig(), theta1, staged=True)
    return learner, theta1, theta2, (batch.obs, batch.a, 10.0 * batch.R)


def run_staged(learner: Learner, batch: tuple[np.ndarray, np.ndarray, np.ndarray],
               before_forward=lambda b: None, inline: bool = False) -> tuple:
    """The staged gradient with recording callbacks: (flat gradient in bucket order, losses,
    the calls as ("forward", b) / ("backward", b))."""
    calls: list[tuple[str, int]] = []
    buckets: dict[int, np.ndarray] = {}

    def forward_hook(b: int) -> None:
        calls.append(("forward", b))
        before_forward(b)

    def backward_hook(b: int, g_b: np.ndarray) -> None:
        calls.append(("backward", b))
        assert g_b.dtype == np.float32
        buckets[b] = g_b.copy()

    stats = learner.staged_gradient(*batch, forward_hook, backward_hook, inline=inline)
    return np.concatenate([buckets[b] for b in sorted(buckets)]), stats, calls


def assert_same_gradient(staged: np.ndarray, whole: np.ndarray) -> None:
    # float32: the stages run the same kernels on the same values, but TensorFlow may fuse
    # or order the sums differently across graphs (conv gradients sum over up to 80 x 80 x 4
    # positions); 1e-5 relative, and 1e-5 of the largest entry for entries near zero, as
    # for the pooled-first forward in tests/unit/learning/test_models.py
    assert staged.shape == whole.shape
    np.testing.assert_allclose(staged, whole, rtol=1e-5, atol=1e-5 * np.abs(whole).max())


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("name", list(STAGED))
def test_staged_gradient_buckets_concatenate_to_the_one_call_gradient(name, inline):
    learner, _, _, batch = staged_setup(name)
    whole, stats = learner.gradient(*batch)
    staged, staged_stats, calls = run_staged(learner, batch, inline=inline)
    assert_same_gradient(staged, whole)
    assert staged_stats.keys() == stats.keys()
    for key in stats:  # float32 scalars from the same math
        assert staged_stats[key] == pytest.approx(stats[key], rel=1e-6, abs=1e-7), key
    # every forward stage before the first bucket leaves, then the buckets last to first
    stages = NUM_STAGES[name]
    assert len(layer_buckets(learner.layout)) == stages
    assert calls == ([("forward", b) for b in range(stages)]
                     + [("backward", b) for b in reversed(range(stages))])


@pytest.mark.parametrize("name", list(STAGED))
def test_a_bfloat16_staged_gradient_is_its_one_call_gradient(name):
    # the stages hand bfloat16 activations and their gradients on; what leaves is float32
    # (run_staged checks each bucket's dtype)
    _, theta1, _, batch = staged_setup(name)
    learner = Learner(STAGED[name], TrainConfig(), theta1, staged=True, precision="bfloat16")
    whole, stats = learner.gradient(*batch)
    staged, staged_stats, _ = run_staged(learner, batch)
    assert_same_gradient(staged, whole)
    assert staged_stats["loss/total"] == pytest.approx(stats["loss/total"], rel=1e-6)
    float32, _ = Learner(STAGED[name], TrainConfig(), theta1).gradient(*batch)
    assert not np.allclose(whole, float32, rtol=1e-4, atol=0)  # computed in bfloat16


@pytest.mark.parametrize("inline", [False, True])
def test_with_the_parameters_loaded_the_forward_pass_calls_no_hook(inline):
    # the overlapped step whose next parameters all arrived before it: no before_forward
    learner, _, theta2, batch = staged_setup("ba3c")
    learner.set_params(theta2)
    got: dict[int, np.ndarray] = {}
    learner.staged_gradient(*batch, parameters_loaded,
                            lambda b, g_b: got.__setitem__(b, g_b.copy()), inline=inline)
    assert list(got) == list(reversed(range(NUM_STAGES["ba3c"])))
    assert_same_gradient(np.concatenate([got[b] for b in sorted(got)]),
                         learner.gradient(*batch)[0])
    ops = learner._copy.graph(inline, forward_hooks=False).get_concrete_function().graph
    hooks = [op for op in ops.get_operations() if op.type == "PyFunc"]
    assert len(hooks) == NUM_STAGES["ba3c"] - 1  # after_backward of b > 0 only


def test_a_bucket_kept_by_after_backward_keeps_its_values():
    # after_backward gets NumPy's view of the bucket, no copy: the view holds the tensor's
    # buffer, so later steps (other parameters, other gradients) do not write over it
    learner, theta1, theta2, batch = staged_setup("a3c_ff")
    kept: dict[int, np.ndarray] = {}
    learner.staged_gradient(*batch, lambda b: None, kept.__setitem__)
    first = {b: g_b.copy() for b, g_b in kept.items()}
    learner.set_params(theta2)
    for _ in range(3):
        run_staged(learner, batch)
    for b, g_b in kept.items():
        np.testing.assert_array_equal(g_b, first[b])
    assert not np.allclose(np.concatenate([first[b] for b in sorted(first)]),
                           run_staged(learner, batch)[0])  # theta2's gradient differs


def test_the_clip_bites_in_the_staged_comparison():
    # what makes the comparison above cover clipping: the MLP's heads exceed the average-norm
    # threshold on that batch, so the clipped gradient differs from the unclipped one
    clipped, _, _, batch = staged_setup("mlp")
    unclipped, _, _, _ = staged_setup("mlp", TrainConfig(grad_clip=0.0))
    assert not np.allclose(clipped.gradient(*batch)[0], unclipped.gradient(*batch)[0])
    assert_same_gradient(run_staged(unclipped, batch)[0], unclipped.gradient(*batch)[0])


@pytest.mark.parametrize("name", list(STAGED))
def test_before_forward_runs_before_its_stage(name):
    # bucket b of theta2 arrives in before_forward(b): the staged gradient is theta2's
    learner, theta1, theta2, batch = staged_setup(name)
    bounds = [*learner.buckets, learner.layout.num_params]
    staged, _, _ = run_staged(learner, batch, lambda b: learner.assign_bucket(
        b, theta2[bounds[b]:bounds[b + 1]]))
    learner.set_params(theta2)
    on_theta2 = learner.gradient(*batch)[0]
    assert_same_gradient(staged, on_theta2)
    learner.set_params(theta1)
    assert not np.allclose(learner.gradient(*batch)[0], on_theta2)  # theta2 mattered


def test_assign_bucket_loads_the_training_variables_only():
    learner, theta1, theta2, batch = staged_setup("a3c_ff")
    pi_v = learner.predict(batch[0])
    bounds = [*learner.buckets, learner.layout.num_params]
    for b in range(len(learner.buckets)):
        learner.assign_bucket(b, theta2[bounds[b]:bounds[b + 1]])
    assert outputs_equal(learner.predict(batch[0]), pi_v)  # predictions keep theta1
    np.testing.assert_array_equal(learner.get_params(), theta1)
    after_assign = run_staged(learner, batch)[0]  # the staged gradient uses theta2
    learner.set_params(theta2)
    assert_same_gradient(after_assign, learner.gradient(*batch)[0])
    assert not outputs_equal(learner.predict(batch[0]), pi_v)


def test_a_bucket_assigned_after_a_load_replaces_only_its_part_of_it():
    # set_params loads the training variables when they are next used: a bucket assigned
    # before that lands on the loaded vector, not on the one before it
    learner, theta1, theta2, batch = staged_setup("ba3c")
    bounds = [*learner.buckets, learner.layout.num_params]
    learner.set_params(theta2)
    learner.assign_bucket(1, theta1[bounds[1]:bounds[2]])
    mixed = theta2.copy()
    mixed[bounds[1]:bounds[2]] = theta1[bounds[1]:bounds[2]]
    learner.set_params(mixed, bucketed=True)  # what the staged step does once all arrived
    on_mixed = run_staged(learner, batch)[0]
    assert_same_gradient(on_mixed, learner.gradient(*batch)[0])
    assert not np.allclose(on_mixed, Learner(learner.spec, TrainConfig(), theta2).gradient(
        *batch)[0])  # bucket 1 mattered
    learner.set_params(theta1)  # and the next load replaces it all
    assert_same_gradient(run_staged(learner, batch)[0], learner.gradient(*batch)[0])


def test_a_bucketed_load_leaves_the_training_variables_as_the_buckets_left_them():
    learner, theta1, theta2, batch = staged_setup("a3c_ff")
    learner.set_params(theta2, bucketed=True)  # untrue here: nothing was assigned
    assert_same_gradient(run_staged(learner, batch)[0],
                         Learner(learner.spec, TrainConfig(), theta1).gradient(*batch)[0])
    assert_same_gradient(learner.gradient(*batch)[0],  # predictions and gradient(): theta2
                         Learner(learner.spec, TrainConfig(), theta2).gradient(*batch)[0])


def test_without_staged_one_load_serves_both_and_buckets_are_refused():
    spec = STAGED["a3c_ff"]
    theta1, theta2 = spec.init_params(1), spec.init_params(2)
    learner = Learner(spec, TrainConfig(), theta1)
    assert learner.train_variables is None
    batch = synthetic_batch(spec, BATCH, (0, 0, 3))
    data = (batch.obs, batch.a, 10.0 * batch.R)
    learner.set_params(theta2)  # one load: predictions and gradients both see theta2
    fresh = Learner(spec, TrainConfig(), theta2)
    assert outputs_equal(learner.predict(batch.obs), fresh.predict(batch.obs))
    assert_same_gradient(learner.gradient(*data)[0], fresh.gradient(*data)[0])
    with pytest.raises(ValueError, match="staged=True"):
        learner.assign_bucket(0, theta1[:learner.buckets[1]])
    with pytest.raises(ValueError, match="staged=True"):
        learner.staged_gradient(*data, lambda b: None, lambda b, g: None)


def test_a_staged_gradient_refuses_global_norm_clipping():
    learner, _, _, batch = staged_setup("mlp", TrainConfig(grad_clip_mode="global_norm"))
    with pytest.raises(ValueError, match="train.grad_clip_mode"):
        run_staged(learner, batch)


def test_a_callback_s_exception_leaves_the_staged_gradient_as_itself():
    learner, _, _, batch = staged_setup("mlp")

    def fail_at_bucket_1(b: int, g_b: np.ndarray) -> None:
        if b == 1:
            raise KeyError("bucket 1")

    with pytest.raises(KeyError, match="bucket 1"):
        learner.staged_gradient(*batch, lambda b: None, fail_at_bucket_1)
    assert_same_gradient(run_staged(learner, batch)[0], learner.gradient(*batch)[0])


def test_the_staged_graph_runs_each_layer_once_forward_and_once_backward():
    # the same convolutions, pools and matmuls, forward and backward, as the one-call graph:
    # nothing recomputed, and no stage's gradient reaches back into the stages before it
    # (before stop_gradient at the stage inputs it held 14 Conv2DBackpropFilter ops, not 4)
    learner, _, _, _ = staged_setup("ba3c")

    def layer_ops(fn, *args) -> dict[str, int]:
        ops = fn.get_concrete_function(*args).graph.get_operations()
        return {k: n for k, n in collections.Counter(op.type for op in ops).items()
                if k.startswith(("Conv2D", "MaxPool", "MatMul"))}

    batch_sig = (tf.TensorSpec([None, *learner.spec.obs_shape], tf.uint8),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32))
    staged = layer_ops(learner._copy.graph(inline=False))
    params_sig = tuple(tf.TensorSpec(shape, tf.float32) for shape in learner.layout.shapes)
    whole = layer_ops(learner._gradient, params_sig, *batch_sig)
    assert staged == whole
    assert staged["Conv2D"] == 4 and staged["Conv2DBackpropFilter"] == 4


def test_the_training_variables_load_the_vector_as_set_params_was_given_it():
    # they are loaded when next used, from set_params' own copy: a caller that reuses its
    # buffer meanwhile changes nothing
    learner, theta1, theta2, batch = staged_setup("ba3c")
    buffer = theta2.copy()
    learner.set_params(buffer)
    buffer[:] = theta1
    on_theta2 = Learner(learner.spec, TrainConfig(), theta2).gradient(*batch)[0]
    assert_same_gradient(run_staged(learner, batch)[0], on_theta2)
