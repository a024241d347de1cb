"""The networks: the paper's BA3C net, Mnih et al.'s A3C-FF, and an MLP for vector inputs.

A network is described by a list of layer specs; from it come the parameter layout, a seeded
NumPy initialisation (the same on every rank), the analytic FLOP count, and the TensorFlow
forward pass. Atari observations arrive as uint8, channels first: [B, stack, S, S] for
grayscale, [B, stack, S, S, 3] for RGB (S = model.frame_size, 84 in the papers); they become
float NHWC inside the graph.

The trunk computes in ``dtype``, float32 or bfloat16 (``model.precision``): in bfloat16 each
stage rounds its float32 parameters (and the first its scaled observations) to bfloat16, so
the forward pass and, through the casts, the backward pass run in bfloat16 while the
gradients of the parameters arrive in float32 (the cast's gradient is the cast back). The
heads, a few thousand multiply-adds, compute in float32 from the trunk's output: the logits
and the value, and so the softmax, the loss and the advantages, keep float32's precision.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dba3c.learning.params import ParamLayout

if TYPE_CHECKING:
    from dba3c.config import ModelConfig


@dataclass(frozen=True)
class Layer:
    """One layer: ``conv`` (k x k, stride, VALID, ReLU), ``pool`` (2x2/2 max) or ``dense``."""

    kind: str
    out: int = 0
    k: int = 0
    stride: int = 1
    bias: bool = True
    act: str = "relu"


HEAD_TENSORS = 4  # policy/kernel, policy/bias, value/kernel, value/bias


@dataclass(frozen=True)
class Stage:
    """A trunk layer with parameters (``name`` as in the layout, ``conv0``, ``fc7``) and the
    max-pool after it, if any: input shape ``shape_in``, the layer's own output
    ``shape_out``, and ``shape_next`` after the pool (the next stage's input)."""

    name: str
    layer: Layer
    shape_in: tuple[int, ...]
    shape_out: tuple[int, ...]
    shape_next: tuple[int, ...]

    @property
    def pooled(self) -> bool:
        """Whether a 2x2/2 max-pool follows the layer."""
        return self.shape_next != self.shape_out


def layer_specs(kind: str, hidden: int) -> list[Layer]:
    """The trunk of each network (heads are added by :class:`NetSpec`)."""
    if kind == "ba3c":  # Adamski et al. 2018: no conv bias, VALID, max-pool 2x2 after conv 1-3
        conv = functools.partial(Layer, "conv", bias=False)
        return [conv(out=32, k=5), Layer("pool"), conv(out=32, k=5), Layer("pool"),
                conv(out=64, k=5), Layer("pool"), conv(out=64, k=3), Layer("dense", out=hidden)]
    if kind == "a3c_ff":  # Mnih et al. 2016
        return [Layer("conv", out=16, k=8, stride=4), Layer("conv", out=32, k=4, stride=2),
                Layer("dense", out=hidden)]
    if kind == "mlp":
        return [Layer("dense", out=hidden, act="tanh"), Layer("dense", out=hidden, act="tanh")]
    raise ValueError(f"unknown model kind {kind!r}")


@dataclass(frozen=True)
class NetSpec:
    """A network for observations of ``obs_shape`` and ``num_actions`` discrete actions."""

    kind: str
    hidden: int
    obs_shape: tuple[int, ...]
    num_actions: int

    @property
    def layers(self) -> list[Layer]:
        """Trunk layers."""
        return layer_specs(self.kind, self.hidden)

    def input_hwc(self) -> tuple[int, ...]:
        """Input shape inside the graph: (H, W, C) for images, (D,) for vectors."""
        if self.kind == "mlp":
            return (int(np.prod(self.obs_shape)),)
        stack, h, w = self.obs_shape[:3]
        colours = self.obs_shape[3] if len(self.obs_shape) == 4 else 1
        return (h, w, stack * colours)

    def _walk(self) -> Iterator[tuple[Layer, tuple[int, ...], tuple[int, ...]]]:
        """Yield (layer, input shape, output shape) through the trunk."""
        shape = self.input_hwc()
        out: tuple[int, ...]
        for layer in self.layers:
            if layer.kind == "conv":
                h, w, _ = shape
                out = ((h - layer.k) // layer.stride + 1, (w - layer.k) // layer.stride + 1,
                       layer.out)
            elif layer.kind == "pool":
                out = (shape[0] // 2, shape[1] // 2, shape[2])
            else:
                out = (layer.out,)
            yield layer, shape, out
            shape = out

    def stages(self) -> list[Stage]:
        """The trunk layers with parameters, each with the max-pool that follows it (one
        stage per bucket of :func:`dba3c.learning.params.layer_buckets`; the heads join the
        last)."""
        walked = list(self._walk())
        stages = []
        for i, (layer, shape_in, shape_out) in enumerate(walked):
            if layer.kind == "pool":
                continue
            pooled = i + 1 < len(walked) and walked[i + 1][0].kind == "pool"
            stages.append(Stage(f"{'conv' if layer.kind == 'conv' else 'fc'}{i}", layer,
                                shape_in, shape_out, walked[i + 1][2] if pooled else shape_out))
        return stages

    def layout(self) -> ParamLayout:
        """Names and shapes of every trainable tensor, in forward order."""
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []
        for stage in self.stages():
            layer = stage.layer
            names.append(f"{stage.name}/kernel")
            shapes.append((layer.k, layer.k, stage.shape_in[-1], layer.out)
                          if layer.kind == "conv" else (int(np.prod(stage.shape_in)), layer.out))
            if layer.bias:
                names.append(f"{stage.name}/bias")
                shapes.append((layer.out,))
        trunk_out = self.layers[-1].out
        names += ["policy/kernel", "policy/bias", "value/kernel", "value/bias"]
        shapes += [(trunk_out, self.num_actions), (self.num_actions,), (trunk_out, 1), (1,)]
        return ParamLayout(tuple(names), tuple(shapes))

    def stage_tensor_counts(self) -> list[int]:
        """How many tensors of the layout each stage holds (kernel, bias; the last stage
        also the four head tensors), in layout order."""
        counts = [1 + stage.layer.bias for stage in self.stages()]
        counts[-1] += HEAD_TENSORS
        return counts

    def stage_flops(self) -> list[int]:
        """Multiply-adds x 2 of each stage's forward pass for one state (pools, biases and
        activations ignored):

            conv:  2 * k * k * c_in * (H_out * W_out * c_out)     dense:  2 * n_in * n_out
            heads (last stage): 2 * n_trunk_out * (A + 1)
        """
        flops = []
        for stage in self.stages():
            layer = stage.layer
            fan_in = (layer.k * layer.k * stage.shape_in[-1] if layer.kind == "conv"
                      else int(np.prod(stage.shape_in)))
            flops.append(2 * fan_in * int(np.prod(stage.shape_out)))
        flops[-1] += 2 * self.layers[-1].out * (self.num_actions + 1)
        return flops

    def flops_per_state(self) -> int:
        """Multiply-adds x 2 of one forward pass: the sum of :meth:`stage_flops`."""
        return sum(self.stage_flops())

    def flops_per_data_point(self) -> int:
        """One prediction while acting plus forward and backward (~2x forward) in training."""
        return 4 * self.flops_per_state()

    def init_params(self, seed: int, scheme: str = "glorot") -> np.ndarray:
        """Seeded kernels and zero biases, as one flat float32 vector (NumPy).

        glorot:  every kernel ~ U[-l, l], l = sqrt(6 / (fan_in + fan_out))
        he:      ReLU trunk kernels ~ N(0, 2 / fan_in) (He et al. 2015; tensorpack's default,
                 so the paper's code); the heads and tanh layers stay Glorot

        (conv fans count the receptive field: fan_in = k * k * c_in). The policy kernel is
        scaled by 0.01 in both, for a near-uniform initial policy.
        """
        if scheme not in ("glorot", "he"):
            raise ValueError(f"unknown initialisation {scheme!r}: glorot or he")
        rng = np.random.default_rng(seed)
        layout = self.layout()
        acts = {f"{stage.name}/kernel": stage.layer.act for stage in self.stages()}
        tensors = []
        for name, shape in zip(layout.names, layout.shapes):
            if name.endswith("bias"):
                tensors.append(np.zeros(shape, np.float32))
                continue
            receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
            if scheme == "he" and acts.get(name) == "relu":
                tensors.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), shape).astype(np.float32))
                continue
            scale = 0.01 if name.startswith("policy") else 1.0  # near-uniform initial policy
            limit = scale * np.sqrt(6.0 / (fan_in + fan_out))
            tensors.append(rng.uniform(-limit, limit, shape).astype(np.float32))
        return np.concatenate([t.ravel() for t in tensors])


def min_frame_size(kind: str) -> int:
    """The smallest frame side S for which every layer of an image network ``kind`` has an
    output of at least 1 x 1 (valid convolutions shrink the frame, pools halve it)."""
    for size in range(1, 1024):
        stages = NetSpec(kind, 1, (1, size, size), 1).stages()
        if all(min(stage.shape_next[:2]) >= 1 for stage in stages if stage.layer.kind == "conv"):
            return size
    raise ValueError(f"no frame side up to 1024 fits model kind {kind!r}")


def make_net_spec(model_cfg: ModelConfig, obs_shape: tuple[int, ...], num_actions: int) -> NetSpec:
    """The NetSpec of a ``model`` config section for an environment's spaces."""
    return NetSpec(model_cfg.kind, model_cfg.hidden, tuple(obs_shape), num_actions)


def preprocess(spec: NetSpec, obs: Any, dtype: str = "float32") -> Any:
    """uint8/float obs [B, ...] -> ``dtype`` [B, *spec.input_hwc()]: pixels scaled by 1/255
    (in float32, then rounded to ``dtype``) and the stacked frames (and colours) moved to the
    channel axis; vectors flattened."""
    import tensorflow as tf

    x = tf.cast(obs, tf.float32)
    if spec.kind == "mlp":
        return tf.cast(tf.reshape(x, [-1, spec.input_hwc()[0]]), dtype)
    x = tf.cast(x * (1.0 / 255.0), dtype)
    if len(spec.obs_shape) == 4:  # [B, S, H, W, C] -> [B, H, W, S, C] -> [B, H, W, S*C]
        x = tf.transpose(x, [0, 2, 3, 1, 4])
    else:  # [B, S, H, W] -> [B, H, W, S]
        x = tf.transpose(x, [0, 2, 3, 1])
    return tf.reshape(x, [-1, *spec.input_hwc()])


def layer_forward(stage: Stage, params: Sequence, x: Any) -> Any:
    """One stage's layer: x [B, *stage.shape_in] -> act(pool(layer(x)) + bias)
    [B, *stage.shape_next]; ``params`` = (kernel[, bias]).

    A max-pool after a conv layer runs before its bias and activation: max over a window
    commutes with adding a per-channel constant and with any non-decreasing activation, so
    act(maxpool(x) + b) == maxpool(act(x + b)) and the gradients agree, while the bias, the
    ReLU and their gradients touch 4x fewer elements (tests/unit/learning/test_models.py
    compares both orders).
    """
    import tensorflow as tf

    layer = stage.layer
    if layer.kind == "conv":
        x = tf.nn.conv2d(x, params[0], layer.stride, "VALID")
        if stage.pooled:
            x = tf.nn.max_pool2d(x, 2, 2, "VALID")
    else:
        x = tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), params[0])
    if layer.bias:
        x = x + params[1]
    return tf.nn.relu(x) if layer.act == "relu" else tf.tanh(x)


def stage_params(spec: NetSpec, variables: Sequence) -> list[list]:
    """The variables (in layout order) grouped by stage (:meth:`NetSpec.stage_tensor_counts`;
    the heads' four with the last stage)."""
    bounds = np.cumsum([0, *spec.stage_tensor_counts()])
    return [list(variables[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def stage_forward(spec: NetSpec, stage: int, params: Sequence, x: Any,
                  dtype: str = "float32") -> Any:
    """Stage ``stage`` of the forward pass, with that stage's float32 variables ``params``,
    computing in ``dtype`` (the module docstring).

    Stage 0 takes the observations (:func:`preprocess`); stage b runs
    :func:`layer_forward` on its parameters cast to ``dtype``; the last stage also the heads,
    in float32, and returns (logits [B, A], v [B]) in float32; the others return the
    activations [B, *shape_next] in ``dtype``.
    """
    import tensorflow as tf

    stages = spec.stages()
    if stage == 0:
        x = preprocess(spec, x, dtype)
    this = stages[stage]
    x = layer_forward(this, [tf.cast(p, dtype) for p in params[:1 + this.layer.bias]], x)
    if stage < len(stages) - 1:
        return x
    x = tf.cast(x, tf.float32)
    policy_w, policy_b, value_w, value_b = params[-HEAD_TENSORS:]
    return tf.matmul(x, policy_w) + policy_b, (tf.matmul(x, value_w) + value_b)[:, 0]


def hidden_activations(spec: NetSpec, variables: Sequence, obs: Any) -> list[Any]:
    """Each trunk stage's output in float32, in order: [B, *stage.shape_next] for uint8/float
    obs [B, ...], the same layers as :func:`forward` without the heads."""
    x, outputs = preprocess(spec, obs), []
    for stage, params in zip(spec.stages(), stage_params(spec, variables)):
        x = layer_forward(stage, params[:1 + stage.layer.bias], x)
        outputs.append(x)
    return outputs


def active_units(activation: np.ndarray) -> int:
    """The units (channels of a convolution's output [B, H, W, C], neurons of a dense
    layer's [B, C]) whose output is positive for at least one of the B inputs: for a ReLU,
    the units that still pass a gradient on those inputs."""
    return int((activation.reshape(-1, activation.shape[-1]) > 0).any(axis=0).sum())


def forward(spec: NetSpec, variables: Sequence, obs: Any,
            dtype: str = "float32") -> tuple[Any, Any]:
    """The forward pass in TensorFlow: uint8/float obs [B, ...] -> (logits [B, A], v [B]),
    the stages of :func:`stage_forward` one after another, computing in ``dtype``."""
    x = obs
    for stage, params in enumerate(stage_params(spec, variables)):
        x = stage_forward(spec, stage, params, x, dtype)
    return x
