"""The TensorFlow side of a worker: batched prediction and flat gradients.

One :class:`Learner` holds the network's variables. The actor thread predicts;
the trainer thread calls :meth:`gradient` and :meth:`set_params`. Every entry point is a
``tf.function`` with an input signature, so Python is traced once and each call is one graph
execution. Gradients leave as one flat float32 vector in the parameter layout.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from dba3c.config import TrainConfig
from dba3c.models import NetSpec, forward, stage_forward, stage_params
from dba3c.params import layer_buckets, unflatten
from dba3c.rl import a3c_loss, clip_gradients


def set_tensorflow_threads(intra_op: int, inter_op: int) -> None:
    """Size this process's TensorFlow thread pools (0 keeps TensorFlow's choice).

    They are fixed when TensorFlow first runs an op: a later call asking for the sizes
    already in place does nothing, one asking for others raises RuntimeError.
    """
    threading_cfg = tf.config.threading
    for wanted, get, set_ in ((intra_op, threading_cfg.get_intra_op_parallelism_threads,
                               threading_cfg.set_intra_op_parallelism_threads),
                              (inter_op, threading_cfg.get_inter_op_parallelism_threads,
                               threading_cfg.set_inter_op_parallelism_threads)):
        if wanted and get() != wanted:
            set_(wanted)


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs its oneDNN CPU kernels (``dba3c/__init__.py``
    turns them on unless ``TF_ENABLE_ONEDNN_OPTS`` says otherwise)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


class Learner:
    """Variables, prediction and gradient computation for one network.

    Two copies of the variables: the prediction variables (:attr:`variables`, what
    :meth:`predict` and :meth:`get_params` read) and the training variables
    (:attr:`train_variables`, what :meth:`gradient` and :meth:`staged_gradient` read).

    Threading contract: one thread predicts (the actor) while another (the trainer) computes
    gradients and loads new parameters; each prediction sees exactly one parameter version.
    Loading a flat vector assigns the variables one by one (one assign op per variable in a
    ``tf.function``; its ops run concurrently with another thread's graph, not as one atomic
    step), so a prediction running meanwhile could read some layers old and some new (it did,
    in up to 8% of predictions, see docs/architecture.md). A lock around each prediction and
    each assignment of the prediction variables rules that out, and
    :meth:`predict_with_version` says which version acted. The training variables belong to
    the trainer thread alone: :meth:`set_params` writes them too (outside the lock),
    :meth:`assign_bucket` writes one bucket of them and nothing else, without a lock, so
    parameters may arrive layer by layer during a :meth:`staged_gradient` while predictions
    go on with the last whole version. The gradients take no lock.
    """

    def __init__(self, spec: NetSpec, train_cfg: TrainConfig, theta: np.ndarray):
        set_tensorflow_threads(train_cfg.intra_op_threads, train_cfg.inter_op_threads)
        self.spec = spec
        self.layout = spec.layout()
        tensors = unflatten(self.layout, np.asarray(theta, np.float32))
        self.variables, self.train_variables = (
            [tf.Variable(t, name=f"{prefix}{n.replace('/', '_')}")
             for n, t in zip(self.layout.names, tensors)] for prefix in ("", "train_"))
        self.buckets = layer_buckets(self.layout)
        self._clip, self._clip_mode = train_cfg.grad_clip, train_cfg.grad_clip_mode
        obs_sig = tf.TensorSpec([None, *spec.obs_shape],
                                tf.float32 if spec.kind == "mlp" else tf.uint8)
        action_sig, return_sig = tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32)
        loss_fn = functools.partial(a3c_loss, entropy_beta=train_cfg.entropy_beta,
                                    value_weight=train_cfg.value_weight)
        clip = functools.partial(clip_gradients, clip=self._clip, mode=self._clip_mode)

        @tf.function(input_signature=[obs_sig])
        def predict(obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits, v = forward(spec, self.variables, obs)
            return tf.nn.softmax(logits), v

        @tf.function(input_signature=[obs_sig, action_sig, return_sig])
        def gradient(obs: tf.Tensor, a: tf.Tensor, R: tf.Tensor) -> tuple:
            with tf.GradientTape() as tape:
                loss, parts = loss_fn(*forward(spec, self.train_variables, obs), a, R)
            return flat_concat(clip(tape.gradient(loss, self.train_variables))), loss, parts

        self._predict, self._gradient = predict, gradient
        self._assign, self._assign_train = map(assign_function, (self.variables,
                                                                 self.train_variables))
        self._stage_params = stage_params(spec, self.train_variables)
        self._assign_bucket = [assign_function(p) for p in self._stage_params]
        self._stage_forward = stage_functions(spec, self._stage_params, obs_sig,
                                              [action_sig, return_sig], loss_fn)
        self._stage_finish = [tf.function(lambda g: flat_concat(clip(g)),
                                          input_signature=[[tf.TensorSpec(v.shape, tf.float32)
                                                            for v in p]])
                              for p in self._stage_params]
        self._params_lock = threading.Lock()  # a prediction sees one version of the variables
        self._version = 0

    def predict(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """obs [B, ...] -> (pi [B, A] action probabilities, v [B] values), NumPy."""
        pi, v, _ = self.predict_with_version(obs)
        return pi, v

    def predict_with_version(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`predict`, and the version (as given to :meth:`set_params`) of the
        parameters that made the prediction."""
        with self._params_lock:
            pi, v = self._predict(obs)
            version = self._version
        return pi.numpy(), v.numpy(), version

    def gradient(self, obs: np.ndarray, a: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, dict]:
        """The clipped gradient of the A3C loss on one mini-batch, flat float32 [N],
        and the loss terms as floats (``loss/total``, ``loss/policy``, ...)."""
        flat, loss, parts = self._gradient(obs, a.astype(np.int32), R.astype(np.float32))
        return flat.numpy(), loss_stats(loss, parts)

    def staged_gradient(self, obs: np.ndarray, a: np.ndarray, R: np.ndarray,
                        before_forward: Callable[[int], None],
                        after_backward: Callable[[int, np.ndarray], None]) -> dict[str, float]:
        """:meth:`gradient` stage by stage (one stage per bucket of :attr:`buckets`, see
        :func:`dba3c.models.stage_forward`), handing out each bucket's gradient as soon as
        the backward pass has it; returns the loss terms.

        Forward: for b = 0 .. B-1, ``before_forward(b)`` runs, then stage b's forward pass
        (so a bucket assigned there by :meth:`assign_bucket` is used). Backward: for
        b = B-1 .. 0, stage b's backward pass gives dL/dtheta_b (clipped, flat float32 in
        layout order, ``theta[buckets[b]:buckets[b + 1]]``) and dL/dx_b for the stage
        before; ``after_backward(b, g_b)`` runs before stage b - 1's backward pass.
        Concatenated, the g_b are :meth:`gradient`'s vector. The forward pass runs once:
        each stage's tape keeps what its backward pass needs.

        Raises ValueError when ``train.grad_clip_mode`` is ``global_norm`` (with clipping
        on): that clip needs the whole gradient before any bucket can leave.
        """
        if self._clip > 0 and self._clip_mode == "global_norm":
            raise ValueError("a staged gradient clips bucket by bucket: train.grad_clip_mode "
                             "global_norm needs the whole gradient (use gradient())")
        a_t, R_t = tf.constant(a, tf.int32), tf.constant(R, tf.float32)
        x, last = tf.constant(obs), len(self._stage_forward) - 1
        taped = []  # per stage: (tape, input, output); the last stage's output is the loss
        for b, fn in enumerate(self._stage_forward):
            before_forward(b)
            with tf.GradientTape() as tape:
                if b > 0:  # stage 0's input is the data: no gradient wanted
                    tape.watch(x)
                out = fn(x) if b < last else fn(x, a_t, R_t)
            taped.append((tape, x, out if b < last else out[0]))
            x = out
        upstream = None  # dL/d(output of stage b)
        for b in reversed(range(len(taped))):
            tape, x_in, x_out = taped[b]
            sources = [*self._stage_params[b], *([x_in] if b > 0 else [])]
            grads = tape.gradient(x_out, sources, output_gradients=upstream)
            after_backward(b, self._stage_finish[b](grads[:len(self._stage_params[b])]).numpy())
            upstream = grads[-1]
        return loss_stats(*x)

    def set_params(self, theta: np.ndarray, version: int = 0) -> None:
        """Load a flat parameter vector, parameter version ``version``, into the prediction
        variables (after any prediction in progress, which finishes on the previous
        parameters) and the training variables."""
        self._assign_train(theta)
        with self._params_lock:
            self._assign(theta)
            self._version = version

    def assign_bucket(self, bucket: int, theta_bucket: np.ndarray) -> None:
        """Load bucket ``bucket`` of the parameters, flat float32
        ``theta[buckets[bucket]:buckets[bucket + 1]]``, into the training variables only
        (no lock: the trainer thread owns them; predictions keep their version)."""
        self._assign_bucket[bucket](theta_bucket)

    def get_params(self) -> np.ndarray:
        """The prediction variables as one flat float32 vector."""
        return np.concatenate([v.numpy().ravel() for v in self.variables])


def flat_concat(tensors: list[tf.Tensor]) -> tf.Tensor:
    """Tensors -> one flat vector, in order."""
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


def loss_stats(loss: tf.Tensor, parts: dict[str, tf.Tensor]) -> dict[str, float]:
    """``loss/total`` and ``loss/<term>`` for every term of :func:`dba3c.rl.a3c_loss`."""
    stats = {"loss/total": float(loss)}
    stats.update({f"loss/{k}": float(v) for k, v in parts.items()})
    return stats


def assign_function(variables: list[tf.Variable]) -> Callable[[np.ndarray], None]:
    """A ``tf.function`` loading one flat float32 vector (the variables' sizes, in order)
    into ``variables``, one assign op per variable."""
    sizes = [int(np.prod(v.shape)) for v in variables]

    @tf.function(input_signature=[tf.TensorSpec([sum(sizes)], tf.float32)])
    def assign(flat: tf.Tensor) -> None:
        for var, t in zip(variables, tf.split(flat, sizes)):
            var.assign(tf.reshape(t, var.shape))

    return assign


def stage_functions(spec: NetSpec, params: list[list[tf.Variable]], obs_sig: tf.TensorSpec,
                    batch_sigs: list[tf.TensorSpec], loss_fn: Callable) -> list[Callable]:
    """One ``tf.function`` per stage of :func:`dba3c.models.stage_forward` on the variables
    ``params[b]``: stage 0 takes obs, stage b activations [B, *stages[b].shape_in]; the
    last also takes (a, R) and returns :func:`dba3c.rl.a3c_loss`'s (L, terms)."""
    stages = spec.stages()
    fns = []
    for b, stage in enumerate(stages):
        x_sig = obs_sig if b == 0 else tf.TensorSpec([None, *stage.shape_in], tf.float32)
        layer = functools.partial(stage_forward, spec, b, params[b])
        if b < len(stages) - 1:
            fns.append(tf.function(layer, input_signature=[x_sig]))
        else:
            fns.append(tf.function(lambda x, a, R, layer=layer: loss_fn(*layer(x), a, R),
                                   input_signature=[x_sig, *batch_sigs]))
    return fns
