"""The TensorFlow side of a worker: batched prediction and flat gradients.

One :class:`Learner` holds the network's parameters. The actor thread predicts;
the trainer thread calls :meth:`gradient` and :meth:`set_params`. Every entry point is a
``tf.function`` with an input signature, so Python is traced once and each call is one graph
execution. Gradients leave as one flat float32 vector in the parameter layout, whatever
the network computes in (``precision``: float32, or bfloat16 with float32 parameters, loss
and gradients, :mod:`dba3c.learning.models`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

from dba3c.config import TrainConfig
from dba3c.core import parameters_loaded
from dba3c.cpus import bound_cpus, tensorflow_threads
from dba3c.learning.models import NetSpec, forward, stage_forward, stage_params
from dba3c.learning.params import layer_buckets, unflatten
from dba3c.learning.rl import a3c_loss, clip_gradients


def set_tensorflow_threads(train_cfg: TrainConfig, num_cpus: int) -> None:
    """Size this process's TensorFlow thread pools: ``train.intra_op_threads`` and
    ``train.inter_op_threads``, or one thread per bound CPU (:mod:`dba3c.cpus`).

    They are fixed when TensorFlow first runs an op: a later call asking for the sizes
    already in place does nothing; one whose config asks for others raises RuntimeError.
    A default is applied only while the pool is unsized and TensorFlow not yet running
    (else TensorFlow's own choice stands, which it also makes from the bound CPUs).
    """
    threading_cfg = tf.config.threading
    wanted = tensorflow_threads(train_cfg, num_cpus)
    for configured, size, get, set_ in (
            (train_cfg.intra_op_threads, wanted[0], threading_cfg.get_intra_op_parallelism_threads,
             threading_cfg.set_intra_op_parallelism_threads),
            (train_cfg.inter_op_threads, wanted[1], threading_cfg.get_inter_op_parallelism_threads,
             threading_cfg.set_inter_op_parallelism_threads)):
        if configured and get() != configured:
            set_(configured)
        elif not configured and get() == 0:
            with contextlib.suppress(RuntimeError):  # TensorFlow is running: its choice
                set_(size)


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs its oneDNN CPU kernels (``dba3c/__init__.py``
    turns them on unless ``TF_ENABLE_ONEDNN_OPTS`` says otherwise)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


class Learner:
    """Parameters, prediction and gradient computation for one network.

    The prediction parameters (what :meth:`predict` and :meth:`get_params` read, and
    :meth:`gradient` too) are immutable tensors, one per parameter tensor of the layout:
    :meth:`set_params` makes new ones from the flat vector and puts them in place of the old
    ones with their version, one Python assignment. A Learner made with ``staged=True``,
    for :meth:`staged_gradient`, whose parameters arrive bucket by bucket
    (:meth:`assign_bucket`) while predictions go on with the last whole version, also has
    training variables (:attr:`train_variables`), which that gradient reads and
    :meth:`set_params` loads as well.

    Threading contract: one thread predicts (the actor) while another (the trainer) computes
    gradients and loads new parameters; each prediction sees exactly one parameter version,
    and :meth:`predict_with_version` says which. A prediction takes the current (tensors,
    version) pair once and computes on it, so it can neither see a load half done nor wait
    for one, and a load never waits for a prediction (it once assigned variables under a
    lock: the trainer waited for the actor's prediction in progress, docs/decisions.md,
    "immutable prediction parameters"). The training variables belong to the trainer thread
    alone: :meth:`assign_bucket` writes one bucket of them, without a lock.
    """

    def __init__(self, spec: NetSpec, train_cfg: TrainConfig, theta: np.ndarray, *,
                 staged: bool = False, precision: str = "float32"):
        set_tensorflow_threads(train_cfg, len(bound_cpus()))
        self.spec = spec
        self.layout = spec.layout()
        tensors = unflatten(self.layout, np.asarray(theta, np.float32))
        self._current: tuple[tuple[tf.Tensor, ...], int] = (as_tensors(tensors), 0)
        self.buckets = layer_buckets(self.layout)
        self._clip, self._clip_mode = train_cfg.grad_clip, train_cfg.grad_clip_mode
        obs_sig = tf.TensorSpec([None, *spec.obs_shape],
                                tf.float32 if spec.kind == "mlp" else tf.uint8)
        batch_sig = [obs_sig, tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32)]
        params_sig = tuple(tf.TensorSpec(shape, tf.float32) for shape in self.layout.shapes)
        loss_fn = functools.partial(a3c_loss, entropy_beta=train_cfg.entropy_beta,
                                    value_weight=train_cfg.value_weight)
        clip = functools.partial(clip_gradients, clip=self._clip, mode=self._clip_mode)

        @tf.function(input_signature=[params_sig, obs_sig])
        def predict(params: tuple[tf.Tensor, ...], obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits, v = forward(spec, params, obs, precision)
            return tf.nn.softmax(logits), v

        @tf.function(input_signature=[params_sig, *batch_sig])
        def gradient(params: tuple[tf.Tensor, ...], obs: tf.Tensor, a: tf.Tensor,
                     R: tf.Tensor) -> tuple:
            with tf.GradientTape() as tape:
                tape.watch(params)
                loss, parts = loss_fn(*forward(spec, params, obs, precision), a, R)
            return flat_concat(clip(tape.gradient(loss, params))), loss, parts

        self._predict, self._gradient = predict, gradient
        bounds = [*self.buckets, self.layout.num_params]
        flat = np.asarray(theta, np.float32)
        self.train_variables = ([tf.Variable(flat[lo:hi], name=f"train_bucket{b}")
                                 for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]
                                if staged else None)
        self._copy = (TrainingCopy(spec, self.train_variables, loss_fn, clip, batch_sig,
                                   precision)
                      if self.train_variables is not None else None)
        self._bounds = list(zip(bounds[:-1], bounds[1:]))  # each bucket's [lo, hi)
        # what the training variables are to hold, when they do not yet: a flat copy of the
        # last parameters loaded (None: they hold them)
        self._train_pending: np.ndarray | None = None

    def predict(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs [B, ...] -> (pi [B, A] action probabilities, v [B] values), NumPy."""
        pi, v, _ = self.predict_with_version(obs)
        return pi, v

    def predict_with_version(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`predict`, and the version (as given to :meth:`set_params`) of the
        parameters that made the prediction."""
        params, version = self._current  # one version, whatever set_params does meanwhile
        pi, v = self._predict(params, obs)
        return pi.numpy(), v.numpy(), version

    def gradient(self, obs: np.ndarray, a: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, dict]:
        """The clipped gradient of the A3C loss on one mini-batch at the prediction
        parameters, flat float32 [N], and the loss terms as floats (``loss/total``,
        ``loss/policy``, ...)."""
        flat, loss, parts = self._gradient(self._current[0], obs, a.astype(np.int32),
                                           R.astype(np.float32))
        return flat.numpy(), loss_stats(loss, parts)

    def staged_gradient(self, obs: np.ndarray, a: np.ndarray, R: np.ndarray,
                        before_forward: Callable[[int], None],
                        after_backward: Callable[[int, np.ndarray], None], *,
                        inline: bool = False) -> dict[str, float]:
        """:meth:`gradient` stage by stage (one stage per bucket of :attr:`buckets`), so that
        communication can overlap it: ``before_forward(b)`` runs before stage b's forward pass
        (it may :meth:`assign_bucket` b; :func:`parameters_loaded`: the forward pass waits
        for no callback), and ``after_backward(b, g_b)`` as soon as bucket b's
        clipped gradient is made, the last bucket first. Returns the loss terms; the g_b
        together are :meth:`gradient`'s vector at the training variables. ``inline``: the
        callbacks in line with the stages rather than beside them. Their order, and why they
        must not call a ``tf.function``: docs/architecture.md, "The staged gradient".

        Raises ValueError without ``staged=True``, or when ``train.grad_clip_mode:
        global_norm`` clips (it needs the whole gradient before any bucket can leave).
        """
        copy = self._training_copy("staged_gradient")
        if self._clip > 0 and self._clip_mode == "global_norm":
            raise ValueError("a staged gradient clips bucket by bucket: train.grad_clip_mode "
                             "global_norm needs the whole gradient (use gradient())")
        gradient = copy.graph(inline, forward_hooks=before_forward is not parameters_loaded)
        with copy.hooks.calling(before_forward, after_backward):
            loss, parts, g_0 = gradient(obs, a.astype(np.int32), R.astype(np.float32))
        after_backward(0, g_0.numpy())
        return loss_stats(loss, parts)

    def set_params(self, theta: np.ndarray, version: int = 0, *,
                   bucketed: bool = False) -> None:
        """Load a flat parameter vector, parameter version ``version``, as the prediction
        parameters (a prediction in progress finishes on the previous ones). With
        ``staged=True`` the training variables hold it from then on: they are loaded when
        next used, unless ``bucketed`` says :meth:`assign_bucket` has already loaded every
        bucket of ``theta`` into them (the overlapped step's case)."""
        flat = np.asarray(theta, np.float32)
        self._current = (as_tensors(unflatten(self.layout, flat)), version)
        self._train_pending = (None if bucketed or self._copy is None
                               else np.array(flat, copy=True))

    def assign_bucket(self, bucket: int, theta_bucket: np.ndarray) -> None:
        """Load bucket ``bucket`` of the parameters, flat float32
        ``theta[buckets[bucket]:buckets[bucket + 1]]``, into the training variables only
        (no lock: the trainer thread owns them; predictions keep their version): one
        assignment, the bucket's variable being flat. Needs ``staged=True``."""
        self._training_copy("assign_bucket").buckets[bucket].assign(theta_bucket)

    def _training_copy(self, method: str) -> TrainingCopy:
        """The training copy, holding the last parameters loaded (and the buckets assigned
        since): each bucket assigned from the flat copy :meth:`set_params` kept (one
        assignment a bucket; concatenating the prediction tensors took 2.7x as long)."""
        if self._copy is None:
            raise ValueError(f"Learner.{method} needs a Learner made with staged=True (its "
                             "own copy of the training variables)")
        if self._train_pending is not None:
            for var, (lo, hi) in zip(self._copy.buckets, self._bounds):
                var.assign(self._train_pending[lo:hi])
            self._train_pending = None
        return self._copy

    def get_params(self) -> np.ndarray:
        """The prediction parameters as one flat float32 vector."""
        return np.concatenate([t.numpy().ravel() for t in self._current[0]])


def as_tensors(arrays: list[np.ndarray]) -> tuple[tf.Tensor, ...]:
    """Each array as an immutable float32 tensor of its own (a copy)."""
    return tuple(tf.constant(a, tf.float32) for a in arrays)


def flat_concat(tensors: list[tf.Tensor]) -> tf.Tensor:
    """Tensors -> one flat vector, in order."""
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


def loss_stats(loss: tf.Tensor, parts: dict[str, tf.Tensor]) -> dict[str, float]:
    """``loss/total`` and ``loss/<term>`` for every term of :func:`dba3c.learning.rl.a3c_loss`."""
    stats = {"loss/total": float(loss)}
    stats.update({f"loss/{k}": float(v) for k, v in parts.items()})
    return stats


class TrainingCopy:
    """What only a ``staged=True`` Learner has: its training variables, one flat variable
    per bucket (:attr:`buckets`, holding the stage's tensors of :attr:`shapes` in layout
    order), the staged gradient over them as ``tf.function``s of (obs, a, R) (:meth:`graph`;
    see :meth:`Learner.staged_gradient`) and the callbacks of the call in progress
    (:attr:`hooks`). ``loss_fn(logits, v, a, R)``,
    ``clip(grads)``; ``precision`` is what the network computes in."""

    def __init__(self, spec: NetSpec, train_variables: list[tf.Variable],
                 loss_fn: Callable[..., tuple], clip: Callable[[list], list],
                 batch_sig: list[tf.TensorSpec], precision: str = "float32"):
        self.buckets = train_variables
        self.shapes = stage_params(spec, spec.layout().shapes)
        self.hooks = StageHooks()
        self._spec, self._loss_fn, self._clip, self._precision = spec, loss_fn, clip, precision
        self._batch_sig = batch_sig
        self._graphs: dict[tuple[bool, bool], Callable[..., tuple]] = {}

    def graph(self, inline: bool, forward_hooks: bool = True) -> Callable[..., tuple]:
        """The staged gradient's ``tf.function`` (traced at its first call): the callbacks in
        line with the compute (``inline``, or one inter-op thread, which cannot run a callback
        beside it) or beside it; without ``forward_hooks`` no ``before_forward`` (the
        parameters are loaded: the forward pass waits for no Python, which needs the GIL)."""
        key = (inline or inter_op_threads() == 1, forward_hooks)
        if key not in self._graphs:
            self._graphs[key] = tf.function(
                functools.partial(self._graph, inline=key[0], forward_hooks=forward_hooks),
                input_signature=self._batch_sig)
        return self._graphs[key]

    def _graph(self, obs: tf.Tensor, a: tf.Tensor, R: tf.Tensor, inline: bool,
               forward_hooks: bool) -> tuple:
        return staged_graph(self._spec, list(zip(self.buckets, self.shapes)), self.hooks,
                            obs, a, R, self._loss_fn, self._clip, inline=inline,
                            forward_hooks=forward_hooks, precision=self._precision)


def inter_op_threads() -> int:
    """The size of this process's TensorFlow inter-op pool (when TensorFlow chooses, one
    per bound CPU, :mod:`dba3c.cpus`)."""
    return tf.config.threading.get_inter_op_parallelism_threads() or len(bound_cpus())


class StageHooks:
    """The callbacks of the staged gradient in progress, for the ``tf.numpy_function`` ops of
    :func:`staged_graph` (traced once, called with new callbacks each time)."""

    def __init__(self) -> None:
        self.before_forward: Callable[[int], None] = lambda b: None
        self.after_backward: Callable[[int, np.ndarray], None] = lambda b, g_b: None
        self.error: BaseException | None = None

    @contextlib.contextmanager
    def calling(self, before_forward: Callable[[int], None],
                after_backward: Callable[[int, np.ndarray], None]) -> Iterator[None]:
        """Use these callbacks for one call; a callback's exception, which TensorFlow
        reports as an op error, leaves the call as itself."""
        self.before_forward, self.after_backward, self.error = (before_forward,
                                                                after_backward, None)
        try:
            yield
        except tf.errors.OpError:
            if self.error is None:
                raise
            raise self.error from None

    def op(self, b: int, g_b: tf.Tensor | None = None) -> tf.Tensor:
        """A ``tf.numpy_function`` op calling ``before_forward(b)``, or ``after_backward(b,
        g_b)`` with g_b when given: NumPy's view of the tensor, no copy (the view holds a
        reference to the tensor's buffer, so the callback may keep it and TensorFlow reuses
        the buffer only once it is dropped; tests/unit/learning/test_learner.py); its output
        (a bool) is for control deps.
        (``tf.py_function`` costs about twice as much per op; docs/decisions.md,
        "numpy_function hooks".)"""

        def call(*g: np.ndarray) -> bool:
            try:
                if g:
                    self.after_backward(b, g[0])
                else:
                    self.before_forward(b)
            except BaseException as e:
                self.error = e
                raise
            return True

        return tf.numpy_function(call, [] if g_b is None else [g_b], tf.bool)


def staged_graph(spec: NetSpec, stages: list[tuple[tf.Variable, list[tuple[int, ...]]]],
                 hooks: StageHooks, obs: tf.Tensor, a: tf.Tensor, R: tf.Tensor,
                 loss_fn: Callable[..., tuple], clip: Callable[[list], list], *,
                 inline: bool = False, forward_hooks: bool = True,
                 precision: str = "float32") -> tuple:
    """The staged gradient inside one ``tf.function``: (L, loss terms, g_0). ``stages``:
    each stage's flat variable and the shapes of the tensors it holds. Forward, each
    stage reads its variable after its ``before_forward`` hook op and takes its input
    through ``tf.stop_gradient``; backward, stage by stage on one tape, each bucket's
    flat clipped g_b goes to its ``after_backward`` hook op (b > 0). ``inline``: a hook
    also waits for the compute before it, and the compute after it for the hook; without
    ``forward_hooks`` the forward pass has none. The derivation: docs/architecture.md, "The
    staged gradient"."""
    x, sources, inputs, outputs = obs, [], [], []
    hook = None  # the last hook op: the next one runs after it
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        for b, (bucket, shapes) in enumerate(stages):
            if forward_hooks:
                after = ([] if hook is None else [hook]) + ([x] if inline else [])
                with tf.control_dependencies(after):
                    hook = hooks.op(b)
            with tf.control_dependencies([] if hook is None else [hook]):
                inputs.append(tf.stop_gradient(x))  # the tape ends each stage here
                values = [tf.reshape(t, shape) for t, shape in zip(
                    tf.split(bucket.read_value(), [math.prod(s) for s in shapes]), shapes)]
            sources.append(values + inputs[-1:] if b > 0 else values)  # obs: no gradient
            tape.watch(sources[-1])
            x = stage_forward(spec, b, values, inputs[-1], precision)
            outputs.append(x)
        logits, v = x
        loss, parts = loss_fn(logits, v, a, R)
    upstream, target = None, loss
    for b in reversed(range(len(stages))):
        grads = tape.gradient(target, sources[b], output_gradients=upstream)
        g_b = flat_concat(clip(grads[:len(stages[b][1])]))
        if b == 0:
            break
        with tf.control_dependencies([] if hook is None else [hook]):
            hook = hooks.op(b, g_b)
        upstream, target = grads[-1], outputs[b - 1]  # dL/d(input of stage b), on to b - 1
        if inline:
            with tf.control_dependencies([hook]):
                upstream = tf.identity(upstream)
    with tf.control_dependencies([] if hook is None else [hook]):
        loss = tf.identity(loss)
    return loss, parts, g_b
