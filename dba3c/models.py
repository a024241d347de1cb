"""The networks: the paper's BA3C net, Mnih et al.'s A3C-FF, and an MLP for vector inputs.

A network is described by a list of layer specs; from it come the parameter layout, a seeded
NumPy initialisation (the same on every rank), the analytic FLOP count, and the TensorFlow
forward pass. Atari observations arrive as uint8, channels first: [B, stack, 84, 84] for
grayscale, [B, stack, 84, 84, 3] for RGB; they become float NHWC inside the graph.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dba3c.params import ParamLayout

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

    def layout(self) -> ParamLayout:
        """Names and shapes of every trainable tensor, in forward order."""
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []
        for i, (layer, shape_in, _) in enumerate(self._walk()):
            if layer.kind == "conv":
                names.append(f"conv{i}/kernel")
                shapes.append((layer.k, layer.k, shape_in[-1], layer.out))
            elif layer.kind == "dense":
                names.append(f"fc{i}/kernel")
                shapes.append((int(np.prod(shape_in)), layer.out))
            else:
                continue
            if layer.bias:
                names.append(f"{names[-1].split('/')[0]}/bias")
                shapes.append((layer.out,))
        trunk_out = self.layers[-1].out
        names += ["policy/kernel", "policy/bias", "value/kernel", "value/bias"]
        shapes += [(trunk_out, self.num_actions), (self.num_actions,), (trunk_out, 1), (1,)]
        return ParamLayout(tuple(names), tuple(shapes))

    def flops_per_state(self) -> int:
        """Multiply-adds x 2 of one forward pass (convs and dense layers; pools ignored)."""
        flops = 0
        for layer, shape_in, shape_out in self._walk():
            if layer.kind == "conv":
                flops += 2 * layer.k * layer.k * shape_in[-1] * int(np.prod(shape_out))
            elif layer.kind == "dense":
                flops += 2 * int(np.prod(shape_in)) * layer.out
        trunk_out = self.layers[-1].out
        return flops + 2 * trunk_out * (self.num_actions + 1)

    def flops_per_data_point(self) -> int:
        """One prediction while acting plus forward and backward (~2x forward) in training."""
        return 4 * self.flops_per_state()

    def init_params(self, seed: int) -> np.ndarray:
        """Glorot-uniform kernels, zero biases, as one flat float32 vector (seeded, NumPy)."""
        rng = np.random.default_rng(seed)
        layout = self.layout()
        tensors = []
        for name, shape in zip(layout.names, layout.shapes):
            if name.endswith("bias"):
                tensors.append(np.zeros(shape, np.float32))
                continue
            receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
            scale = 0.01 if name.startswith("policy") else 1.0  # near-uniform initial policy
            limit = scale * np.sqrt(6.0 / (fan_in + fan_out))
            tensors.append(rng.uniform(-limit, limit, shape).astype(np.float32))
        return np.concatenate([t.ravel() for t in tensors])


def make_net_spec(model_cfg: ModelConfig, obs_shape: tuple[int, ...], num_actions: int) -> NetSpec:
    """The NetSpec of a ``model`` config section for an environment's spaces."""
    return NetSpec(model_cfg.kind, model_cfg.hidden, tuple(obs_shape), num_actions)


def forward(spec: NetSpec, variables: list, obs: Any) -> tuple[Any, Any]:
    """The forward pass in TensorFlow: uint8/float obs [B, ...] -> (logits [B, A], v [B]).

    A max-pool after a conv layer runs before its bias and activation: max over a window
    commutes with adding a per-channel constant and with any non-decreasing activation, so
    act(maxpool(x) + b) == maxpool(act(x + b)) and the gradients agree, while the bias, the
    ReLU and their gradients touch 4x fewer elements (tests/test_models.py compares both
    orders).
    """
    import tensorflow as tf

    x = tf.cast(obs, tf.float32)
    if spec.kind == "mlp":
        x = tf.reshape(x, [-1, spec.input_hwc()[0]])
    else:
        x = x * (1.0 / 255.0)
        if len(spec.obs_shape) == 4:  # [B, S, H, W, C] -> [B, H, W, S, C] -> [B, H, W, S*C]
            x = tf.transpose(x, [0, 2, 3, 1, 4])
        else:  # [B, S, H, W] -> [B, H, W, S]
            x = tf.transpose(x, [0, 2, 3, 1])
        x = tf.reshape(x, [-1, *spec.input_hwc()])
    it = iter(variables)
    layers = spec.layers
    for i, layer in enumerate(layers):
        if layer.kind == "pool":
            continue  # pooled with the conv before it
        if layer.kind == "conv":
            x = tf.nn.conv2d(x, next(it), layer.stride, "VALID")
            if i + 1 < len(layers) and layers[i + 1].kind == "pool":
                x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        else:
            x = tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), next(it))
        if layer.bias:
            x = x + next(it)
        x = tf.nn.relu(x) if layer.act == "relu" else tf.tanh(x)
    logits = tf.matmul(x, next(it)) + next(it)
    v = tf.matmul(x, next(it)) + next(it)
    return logits, v[:, 0]
