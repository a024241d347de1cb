"""The TensorFlow side of a worker: batched prediction and flat gradients.

One :class:`Learner` holds the network's variables. The actor thread predicts;
the trainer thread calls :meth:`gradient` and :meth:`set_params`. Every entry point is a
``tf.function`` with an input signature, so Python is traced once and each call is one graph
execution. Gradients leave as one flat float32 vector in the parameter layout.
"""

from __future__ import annotations

import threading

import numpy as np
import tensorflow as tf

from dba3c.config import TrainConfig
from dba3c.models import NetSpec, forward
from dba3c.params import unflatten
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

    Threading contract: one thread predicts (the actor) while another (the trainer) computes
    gradients and loads new parameters; each prediction sees exactly one parameter version.
    Loading a flat vector assigns the variables one by one (one assign op per variable in a
    ``tf.function``; its ops run concurrently with another thread's graph, not as one atomic
    step), so a prediction running meanwhile could read some layers old and some new (it did,
    in up to 8% of predictions, see docs/architecture.md). A lock around each prediction and
    each assignment rules that out, and :meth:`predict_with_version` says which version
    acted. :meth:`gradient` takes no lock: it runs on the thread that assigns, and it may
    overlap a prediction (both only read).
    """

    def __init__(self, spec: NetSpec, train_cfg: TrainConfig, theta: np.ndarray):
        set_tensorflow_threads(train_cfg.intra_op_threads, train_cfg.inter_op_threads)
        self.spec = spec
        self.layout = spec.layout()
        self.variables = [tf.Variable(t, name=n.replace("/", "_"))
                          for n, t in zip(self.layout.names,
                                         unflatten(self.layout, np.asarray(theta, np.float32)))]
        obs_sig = tf.TensorSpec([None, *spec.obs_shape],
                                tf.float32 if spec.kind == "mlp" else tf.uint8)
        beta, value_w = train_cfg.entropy_beta, train_cfg.value_weight
        clip, mode = train_cfg.grad_clip, train_cfg.grad_clip_mode

        @tf.function(input_signature=[obs_sig])
        def predict(obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits, v = forward(spec, self.variables, obs)
            return tf.nn.softmax(logits), v

        @tf.function(input_signature=[obs_sig, tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([None], tf.float32)])
        def gradient(obs: tf.Tensor, a: tf.Tensor, R: tf.Tensor) -> tuple:
            with tf.GradientTape() as tape:
                logits, v = forward(spec, self.variables, obs)
                loss, parts = a3c_loss(logits, v, a, R, entropy_beta=beta,
                                       value_weight=value_w)
            grads = clip_gradients(tape.gradient(loss, self.variables), clip, mode)
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
            return flat, loss, parts

        @tf.function(input_signature=[tf.TensorSpec([self.layout.num_params], tf.float32)])
        def assign(flat: tf.Tensor) -> None:
            for var, t in zip(self.variables, tf.split(flat, list(self.layout.sizes))):
                var.assign(tf.reshape(t, var.shape))

        self._predict, self._gradient, self._assign = predict, gradient, assign
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
        stats = {"loss/total": float(loss)}
        stats.update({f"loss/{k}": float(v) for k, v in parts.items()})
        return flat.numpy(), stats

    def set_params(self, theta: np.ndarray, version: int = 0) -> None:
        """Load a flat parameter vector, parameter version ``version``, into the variables
        (after any prediction in progress, which finishes on the previous parameters)."""
        with self._params_lock:
            self._assign(theta)
            self._version = version

    def get_params(self) -> np.ndarray:
        """The variables as one flat float32 vector."""
        return np.concatenate([v.numpy().ravel() for v in self.variables])

