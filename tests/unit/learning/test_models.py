"""The networks (dba3c.learning.models): parameter counts and FLOPs worked out by hand from the
layer shapes, seeded initialisation, and the TensorFlow forward pass against a plain NumPy one.

The paper's network (Adamski et al. 2018, as its code builds it): input 84x84 x frames; conv layers
without bias, VALID padding, ReLU; max-pool 2x2/2:
conv 32@5x5 -> pool -> conv 32@5x5 -> pool -> conv 64@5x5 -> pool -> conv 64@3x3 -> 5x5x64
-> FC H (with bias) -> policy (A, bias) and value (1, bias).
"""

import numpy as np
import pytest
import tensorflow as tf

from dba3c.config import ModelConfig
from dba3c.learning.models import (
    NetSpec,
    active_units,
    forward,
    hidden_activations,
    make_net_spec,
    min_frame_size,
    stage_forward,
    stage_params,
)
from dba3c.learning.params import layer_buckets, unflatten

GRAY = (4, 84, 84)  # 4 stacked grayscale frames, channels first
RGB = (4, 84, 84, 3)
A = 6


def conv_out(size, k, stride=1):
    """VALID convolution output size."""
    return (size - k) // stride + 1


# --------------------------------------------------------------------------- spatial sizes

# ba3c on 84x84 (VALID, pools floor):
#   conv0 5x5: 84 - 5 + 1 = 80   pool: 40
#   conv1 5x5: 40 - 5 + 1 = 36   pool: 18
#   conv2 5x5: 18 - 5 + 1 = 14   pool: 7
#   conv3 3x3:  7 - 3 + 1 = 5    -> 5 x 5 x 64 = 1600 inputs to the FC layer
BA3C_SPATIAL = [80, 36, 14, 5]
BA3C_FC_IN = 5 * 5 * 64
# a3c_ff on 84x84: conv 8x8/4: (84 - 8) // 4 + 1 = 20; conv 4x4/2: (20 - 4) // 2 + 1 = 9
# -> 9 x 9 x 32 = 2592 inputs to the FC layer
A3C_SPATIAL = [20, 9]
A3C_FC_IN = 9 * 9 * 32


def test_hand_spatial_sizes_are_consistent():
    # guards the arithmetic the counts below rely on
    s = 84
    sizes = []
    for k, pool in [(5, True), (5, True), (5, True), (3, False)]:
        s = conv_out(s, k)
        sizes.append(s)
        s = s // 2 if pool else s
    assert sizes == BA3C_SPATIAL
    assert [conv_out(84, 8, 4), conv_out(20, 4, 2)] == A3C_SPATIAL


# --------------------------------------------------------------------------- parameter counts

def ba3c_params(hidden, channels, actions):
    conv = (5 * 5 * channels * 32      # conv0, no bias
            + 5 * 5 * 32 * 32          # conv1
            + 5 * 5 * 32 * 64          # conv2
            + 3 * 3 * 64 * 64)         # conv3
    fc = BA3C_FC_IN * hidden + hidden
    heads = (hidden * actions + actions) + (hidden * 1 + 1)
    return conv + fc + heads


def test_ba3c_param_count_hidden_128_by_hand():
    # conv: 3200 + 25600 + 51200 + 36864 = 116864
    # fc:   1600 * 128 + 128 = 204928
    # heads: 128 * 6 + 6 = 774 ; 128 + 1 = 129
    # total 116864 + 204928 + 774 + 129 = 322695
    assert ba3c_params(128, 4, 6) == 322695
    assert NetSpec("ba3c", 128, GRAY, 6).layout().num_params == 322695


def test_ba3c_param_count_hidden_256_by_hand():
    # 116864 + (1600 * 256 + 256 = 409856) + (256 * 6 + 6 = 1542) + 257 = 528519
    assert ba3c_params(256, 4, 6) == 528519
    assert NetSpec("ba3c", 256, GRAY, 6).layout().num_params == 528519


def test_ba3c_param_count_paper_16_channels():
    # the paper fed RGB x 4 frames zero-padded to 16 channels: conv0 has 5*5*16*32 = 12800
    # weights instead of 3200 -> 322695 + 9600 = 332295 and 528519 + 9600 = 538119
    assert ba3c_params(128, 16, 6) == 332295
    assert ba3c_params(256, 16, 6) == 538119
    # 16 "frames" of grayscale give 16 input channels too
    assert NetSpec("ba3c", 128, (16, 84, 84), 6).layout().num_params == 332295


def test_ba3c_rgb_stacks_frames_times_colours_as_channels():
    # RGB x 4 frames = 12 channels: conv0 5*5*12*32 = 9600 -> 322695 + 6400 = 329095
    spec = NetSpec("ba3c", 128, RGB, 6)
    assert spec.input_hwc() == (84, 84, 12)
    assert spec.layout().shapes[0] == (5, 5, 12, 32)
    assert spec.layout().num_params == 329095


def test_ba3c_layout_shapes_and_no_conv_bias():
    layout = NetSpec("ba3c", 128, GRAY, 6).layout()
    assert layout.shapes == ((5, 5, 4, 32), (5, 5, 32, 32), (5, 5, 32, 64), (3, 3, 64, 64),
                             (1600, 128), (128,), (128, 6), (6,), (128, 1), (1,))
    conv_names = [n for n in layout.names if n.startswith("conv")]
    assert len(conv_names) == 4 and all(n.endswith("kernel") for n in conv_names)
    assert layout.names[-4:] == ("policy/kernel", "policy/bias", "value/kernel", "value/bias")


def test_a3c_ff_param_count_by_hand():
    # conv0 8x8x4x16 + 16 = 4112; conv1 4x4x16x32 + 32 = 8224
    # fc 2592 * 256 + 256 = 663808; heads 256*6 + 6 = 1542, 256 + 1 = 257
    # total 4112 + 8224 + 663808 + 1542 + 257 = 677943
    expected = (8 * 8 * 4 * 16 + 16) + (4 * 4 * 16 * 32 + 32) + (A3C_FC_IN * 256 + 256) \
        + (256 * 6 + 6) + (256 + 1)
    assert expected == 677943
    assert NetSpec("a3c_ff", 256, GRAY, 6).layout().num_params == 677943


def test_mlp_param_count_by_hand():
    # CartPole: 4 inputs, two tanh layers of 64, 2 actions
    # 4*64 + 64 = 320; 64*64 + 64 = 4160; 64*2 + 2 = 130; 64 + 1 = 65 -> 4675
    assert NetSpec("mlp", 64, (4,), 2).layout().num_params == 4675


def test_unknown_kind_raises():
    with pytest.raises(ValueError, match="resnet"):
        NetSpec("resnet", 128, GRAY, 6).layout()


def test_make_net_spec_reads_the_model_section():
    spec = make_net_spec(ModelConfig(kind="a3c_ff", hidden=32), (4, 84, 84), 9)
    assert spec == NetSpec("a3c_ff", 32, (4, 84, 84), 9)
    assert spec.layout().shapes[-4] == (32, 9)


@pytest.mark.parametrize("overrides, spaces, num_params", [
    (["env.id=pong"], ((4, 84, 84), 6), 322695),  # 4 gray frames, A=6
    (["env.id=CartPole-v1", "model.kind=mlp", "model.hidden=64"], ((4,), 2), 4675),
    # 42 x 42 frames: conv 8x8/4 -> 9x9x16, conv 4x4/2 -> 3x3x32; with biases
    # (8*8*4 + 1) * 16 + (4*4*16 + 1) * 32 + (288 + 1) * 256 + (256 + 1) * (6 + 1) = 88,119
    (["env.id=pong", "model.kind=a3c_ff", "model.hidden=256", "model.frame_size=42"],
     ((4, 42, 42), 6), 88119),
])
def test_the_network_of_a_config_comes_from_the_env_spaces(overrides, spaces, num_params):
    from dba3c.games.envs import env_spaces
    from dba3c.preset import load_config

    cfg = load_config("configs/breakout.yaml", overrides)
    assert env_spaces(cfg) == spaces
    assert make_net_spec(cfg.model, *env_spaces(cfg)).layout().num_params == num_params


def test_min_frame_size_by_hand():
    # a3c_ff: conv 8x8/4 then 4x4/2 needs (S - 8) // 4 + 1 >= 4, so S >= 20
    # ba3c: S -5+1, /2, -5+1, /2, -5+1, /2, -3+1 >= 1 back to front: 3 <- 6 <- 10 <- 20 <- 24
    # <- 48 <- 52
    assert min_frame_size("a3c_ff") == 20
    assert min_frame_size("ba3c") == 52
    assert NetSpec("a3c_ff", 8, (4, 20, 20), 2).stages()[1].shape_out == (1, 1, 32)
    assert NetSpec("a3c_ff", 8, (4, 19, 19), 2).stages()[1].shape_out == (0, 0, 32)


# --------------------------------------------------------------------------- FLOPs

# FLOPs per state = 2 x multiply-adds:
#   conv: 2 * (k * k * c_in) * (H_out * W_out * c_out);  dense: 2 * n_in * n_out
#   heads: 2 * hidden * (A + 1); pools, biases and activations are not counted.

def test_ba3c_flops_by_hand():
    macs = (80 * 80 * 32 * (5 * 5 * 4)       # conv0: 20,480,000
            + 36 * 36 * 32 * (5 * 5 * 32)    # conv1: 33,177,600
            + 14 * 14 * 64 * (5 * 5 * 32)    # conv2: 10,035,200
            + 5 * 5 * 64 * (3 * 3 * 64)      # conv3:    921,600
            + 1600 * 128                     # fc:       204,800
            + 128 * 7)                       # heads:        896
    assert 2 * macs == 129_640_192
    spec = NetSpec("ba3c", 128, GRAY, 6)
    assert spec.flops_per_state() == 2 * macs
    # about 130 MFLOP per state (conv1 66M, conv0 41M, conv2 20M)
    assert 125e6 < spec.flops_per_state() < 135e6
    assert spec.flops_per_data_point() == 4 * 2 * macs


def test_ba3c_flops_grow_with_hidden_only_through_fc_and_heads():
    # hidden 128 -> 256 adds 2 * (1600 * 128) + 2 * (128 * 7) = 409600 + 1792 FLOPs
    f128 = NetSpec("ba3c", 128, GRAY, 6).flops_per_state()
    f256 = NetSpec("ba3c", 256, GRAY, 6).flops_per_state()
    assert f256 - f128 == 409600 + 1792


def test_a3c_ff_flops_by_hand():
    macs = (20 * 20 * 16 * (8 * 8 * 4)       # conv0: 1,638,400
            + 9 * 9 * 32 * (4 * 4 * 16)      # conv1:   663,552
            + 2592 * 256                     # fc:      663,552
            + 256 * 7)                       # heads:     1,792
    spec = NetSpec("a3c_ff", 256, GRAY, 6)
    assert spec.flops_per_state() == 2 * macs == 5_934_592
    # ~20x cheaper than ba3c
    ratio = NetSpec("ba3c", 128, GRAY, 6).flops_per_state() / spec.flops_per_state()
    assert 15 < ratio < 30


def test_mlp_flops_by_hand():
    # 2 * (4*64 + 64*64 + 64*(2+1)) = 2 * (256 + 4096 + 192) = 9088
    assert NetSpec("mlp", 64, (4,), 2).flops_per_state() == 9088


def test_mlp_stage_flops_by_hand():
    # stage 0 = fc0: 2 * 4 * 64 = 512; stage 1 = fc1 + heads: 2 * 64 * 64 + 2 * 64 * (2 + 1)
    # = 8192 + 384 = 8576; together the 9088 above
    assert NetSpec("mlp", 64, (4,), 2).stage_flops() == [512, 8576]


def test_ba3c_stage_flops_by_hand_follow_the_layer_buckets():
    # one stage per bucket (conv0, conv2, conv4, conv6, fc7 + heads), each 2 x the
    # multiply-adds of test_ba3c_flops_by_hand
    spec = NetSpec("ba3c", 128, GRAY, 6)
    assert spec.stage_flops() == [2 * 20_480_000, 2 * 33_177_600, 2 * 10_035_200,
                                  2 * 921_600, 2 * (204_800 + 896)]
    assert len(spec.stage_flops()) == len(layer_buckets(spec.layout())) == 5


# --------------------------------------------------------------------------- initialisation

SPECS = {
    "ba3c": NetSpec("ba3c", 16, GRAY, A),
    "ba3c_rgb": NetSpec("ba3c", 16, RGB, A),
    "a3c_ff": NetSpec("a3c_ff", 32, GRAY, A),
    "mlp": NetSpec("mlp", 8, (4,), 2),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_init_params_deterministic_per_seed_and_differs_across_seeds(name):
    spec = SPECS[name]
    a, b, c = spec.init_params(7), spec.init_params(7), spec.init_params(8)
    assert a.dtype == np.float32 and a.shape == (spec.layout().num_params,)
    assert np.array_equal(a, b)
    kernels = [i for i, n in enumerate(spec.layout().names) if n.endswith("kernel")]
    for i in kernels:
        ta, tc = unflatten(spec.layout(), a)[i], unflatten(spec.layout(), c)[i]
        assert not np.array_equal(ta, tc)


@pytest.mark.parametrize("name", list(SPECS))
def test_init_params_glorot_uniform_kernels_zero_biases(name):
    spec = SPECS[name]
    layout = spec.layout()
    for tname, shape, t in zip(layout.names, layout.shapes,
                               unflatten(layout, spec.init_params(0))):
        if tname.endswith("bias"):
            assert np.all(t == 0), tname
            continue
        # Glorot: limit = sqrt(6 / (fan_in + fan_out)); conv fan = k*k*c (receptive field);
        # the policy kernel is scaled by 0.01 (near-uniform initial policy)
        receptive = shape[0] * shape[1] if len(shape) == 4 else 1
        limit = np.sqrt(6.0 / (receptive * shape[-2] + receptive * shape[-1]))
        if tname.startswith("policy"):
            limit *= 0.01
        assert np.abs(t).max() <= limit * (1 + 1e-6), tname
        if t.size >= 100:  # a uniform sample fills its range
            assert np.abs(t).max() > 0.9 * limit, tname
            assert abs(t.mean()) < 0.1 * limit, tname


@pytest.mark.parametrize("name", ["ba3c", "a3c_ff"])
def test_he_init_draws_relu_kernels_with_variance_2_over_fan_in_and_keeps_the_heads(name):
    spec = SPECS[name]
    layout = spec.layout()
    glorot = dict(zip(layout.names, unflatten(layout, spec.init_params(5))))
    he = dict(zip(layout.names, unflatten(layout, spec.init_params(5, "he"))))
    for tname, shape in zip(layout.names, layout.shapes):
        t = he[tname]
        if tname.endswith("bias"):
            assert np.all(t == 0), tname
        elif tname.startswith(("policy", "value")):  # linear heads: Glorot, as before
            limit = np.sqrt(6.0 / (shape[0] + shape[1]))
            limit *= 0.01 if tname.startswith("policy") else 1.0
            assert np.abs(t).max() <= limit * (1 + 1e-6), tname
        else:  # ReLU trunk: N(0, 2 / fan_in); conv fan_in = k * k * c_in
            fan_in = int(np.prod(shape[:-1]))
            assert abs(t.std() / np.sqrt(2.0 / fan_in) - 1) < 0.1, tname
            assert abs(t.mean()) < 0.1 * np.sqrt(2.0 / fan_in), tname
            assert np.abs(t).max() > np.sqrt(6.0 / fan_in), tname  # unbounded, not uniform
            assert not np.array_equal(t, glorot[tname]), tname


def test_he_init_keeps_the_mean_square_through_a_relu_layer():
    """He et al.: E[relu(W x)^2] = fan_in * Var(w) * E[x^2] / 2 = E[x^2] for Var(w) = 2/fan_in;
    Glorot's Var(w) = 2 / (fan_in + fan_out) shrinks it by fan_in / (fan_in + fan_out)."""
    spec = SPECS["a3c_ff"]
    layout = spec.layout()
    x = np.random.default_rng(0).normal(size=(4096, A3C_FC_IN)).astype(np.float32)
    for scheme, want in (("he", 1.0), ("glorot", A3C_FC_IN / (A3C_FC_IN + 32))):
        kernel = dict(zip(layout.names, unflatten(layout, spec.init_params(2, scheme))))
        h = np.maximum(x @ kernel["fc2/kernel"], 0.0)
        assert abs(np.mean(h ** 2) / want - 1) < 0.05, scheme


def test_a_fresh_run_starts_from_the_configured_init(tmp_path):
    from dba3c.preset import load_config
    from dba3c.training.checkpoint import load_start

    cfg = load_config("configs/pong_small.yaml", ["model.init=he", "run.seed=4",
                                                  f"run.dir={tmp_path / 'run'}"])
    spec = make_net_spec(cfg.model, GRAY, A)
    start = load_start(cfg, spec)
    assert start.step == 0 and start.ckpt is None
    assert np.array_equal(start.theta, spec.init_params(4, "he"))
    assert not np.array_equal(start.theta, spec.init_params(4, "glorot"))


def test_he_init_leaves_tanh_layers_glorot_and_rejects_unknown_schemes():
    spec = SPECS["mlp"]
    assert np.array_equal(spec.init_params(3, "he"), spec.init_params(3, "glorot"))
    with pytest.raises(ValueError, match="orthogonal"):
        spec.init_params(3, "orthogonal")


# --------------------------------------------------------------------------- forward pass

def _variables(spec, theta):
    return [tf.constant(t) for t in unflatten(spec.layout(), theta)]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", list(SPECS))
def test_forward_output_shapes(name, batch):
    spec = SPECS[name]
    rng = np.random.default_rng(batch)
    obs: np.ndarray
    if spec.kind == "mlp":
        obs = rng.standard_normal((batch, *spec.obs_shape)).astype(np.float32)
    else:
        obs = rng.integers(0, 256, (batch, *spec.obs_shape), dtype=np.uint8)
    logits, v = forward(spec, _variables(spec, spec.init_params(0)), obs)
    assert logits.shape == (batch, spec.num_actions)
    assert v.shape == (batch,)
    assert logits.dtype == tf.float32 and v.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy())) and np.all(np.isfinite(v.numpy()))


def test_forward_accepts_uint8_and_scales_by_1_over_255():
    spec = SPECS["a3c_ff"]
    variables = _variables(spec, spec.init_params(1))
    obs = np.random.default_rng(0).integers(0, 256, (2, *GRAY), dtype=np.uint8)
    lu, vu = forward(spec, variables, obs)
    lf, vf = forward(spec, variables, obs.astype(np.float32))  # same pixel values
    np.testing.assert_allclose(lu.numpy(), lf.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(vu.numpy(), vf.numpy(), rtol=1e-6, atol=1e-7)
    # a black screen gives a3c_ff's zero-bias net zero activations: all outputs are 0
    l0, v0 = forward(spec, variables, np.zeros((1, *GRAY), np.uint8))
    assert np.all(l0.numpy() == 0) and np.all(v0.numpy() == 0)


# ---- an independent NumPy forward pass (float64) -------------------------------------------

def _np_conv_valid(x, kernel, stride):
    """x [B, H, W, C], kernel [k, k, C, O] -> [B, Ho, Wo, O] (cross-correlation, like TF)."""
    k = kernel.shape[0]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))  # [B,H',W',C,k,k]
    win = win[:, ::stride, ::stride]
    return np.einsum("bhwcij,ijco->bhwo", win, kernel)


def _np_pool(x):
    b, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, :2 * h2, :2 * w2].reshape(b, h2, 2, w2, 2, c).max(axis=(2, 4))


def _np_forward(kind, tensors, obs):
    t = [np.asarray(x, np.float64) for x in tensors]
    relu = lambda z: np.maximum(z, 0.0)  # noqa: E731
    if kind == "mlp":
        x = obs.reshape(len(obs), -1).astype(np.float64)
        x = np.tanh(x @ t[0] + t[1])
        x = np.tanh(x @ t[2] + t[3])
        rest = t[4:]
    else:
        x = obs.astype(np.float64) / 255.0
        if x.ndim == 5:  # frames x colours -> channel index frame * 3 + colour
            b, s, h, w, c = x.shape
            x = np.stack([x[:, i, :, :, j] for i in range(s) for j in range(c)], axis=-1)
        else:  # channel i = frame i
            x = np.stack([x[:, i] for i in range(x.shape[1])], axis=-1)
        if kind == "ba3c":
            x = _np_pool(relu(_np_conv_valid(x, t[0], 1)))
            x = _np_pool(relu(_np_conv_valid(x, t[1], 1)))
            x = _np_pool(relu(_np_conv_valid(x, t[2], 1)))
            x = relu(_np_conv_valid(x, t[3], 1))
            x = relu(x.reshape(len(x), -1) @ t[4] + t[5])  # HWC flatten order
            rest = t[6:]
        else:  # a3c_ff
            x = relu(_np_conv_valid(x, t[0], 4) + t[1])
            x = relu(_np_conv_valid(x, t[2], 2) + t[3])
            x = relu(x.reshape(len(x), -1) @ t[4] + t[5])
            rest = t[6:]
    logits = x @ rest[0] + rest[1]
    v = (x @ rest[2] + rest[3])[:, 0]
    return logits, v


def _against_reference(spec, dtype="float32"):
    """(logits, v) of :func:`forward` computing in ``dtype``, the float64 reference's, and the
    reference's largest output, on parameters and observations where every term of the pass
    matters."""
    layout = spec.layout()
    theta = spec.init_params(3)
    tensors = unflatten(layout, theta)
    # full-scale policy kernel and non-zero biases so every term of the pass matters
    rng = np.random.default_rng(11)
    for tname, tensor in zip(layout.names, tensors):
        if tname == "policy/kernel":
            tensor *= 100.0
        if tname.endswith("bias"):
            tensor[...] = rng.uniform(-0.1, 0.1, tensor.shape)
    obs: np.ndarray
    if spec.kind == "mlp":
        obs = rng.standard_normal((3, *spec.obs_shape)).astype(np.float32)
    else:
        obs = rng.integers(0, 256, (3, *spec.obs_shape), dtype=np.uint8)
    logits, v = forward(spec, _variables(spec, theta), obs, dtype)
    ref_logits, ref_v = _np_forward(spec.kind, tensors, obs)
    scale = max(np.abs(ref_logits).max(), np.abs(ref_v).max())
    assert scale > 1e-3  # the comparison is not vacuous
    return (logits.numpy(), v.numpy()), (ref_logits, ref_v), scale


@pytest.mark.parametrize("name", list(SPECS))
def test_forward_matches_numpy_reference(name):
    (logits, v), (ref_logits, ref_v), scale = _against_reference(SPECS[name])
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(v, ref_v, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", list(SPECS))
def test_forward_in_bfloat16_matches_numpy_reference_to_its_rounding(name):
    # bfloat16 keeps 8 significant bits: each rounding errs by at most 2^-8 relative, and a
    # pass rounds the inputs, weights and output of each of its (at most 5) trunk layers:
    # 2^-5 of the outputs' scale is 8 such roundings (measured: 0.003-0.007 of the scale).
    # An error above 2^-12 (float32 errs below 1e-6 here) shows bfloat16 computed at all.
    (logits, v), (ref_logits, ref_v), scale = _against_reference(SPECS[name], "bfloat16")
    assert logits.dtype == np.float32 and v.dtype == np.float32  # the heads' float32
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=2 ** -5 * scale)
    np.testing.assert_allclose(v, ref_v, rtol=0, atol=2 ** -5 * scale)
    err = max(np.abs(logits - ref_logits).max(), np.abs(v - ref_v).max())
    assert err > 2 ** -12 * scale


def test_a_bfloat16_trunk_hands_bfloat16_activations_between_stages():
    spec = SPECS["a3c_ff"]
    params = stage_params(spec, _variables(spec, spec.init_params(0)))
    obs = np.zeros((1, *GRAY), np.uint8)
    x = stage_forward(spec, 0, params[0], obs, "bfloat16")
    assert x.dtype == tf.bfloat16
    assert stage_forward(spec, 0, params[0], obs).dtype == tf.float32


def test_forward_depends_on_frame_order():
    # the frames are separate channels: reversing their order changes the output
    spec = SPECS["ba3c"]
    variables = _variables(spec, spec.init_params(4))
    obs = np.random.default_rng(5).integers(0, 256, (1, *GRAY), dtype=np.uint8)
    _, v = forward(spec, variables, obs)
    _, v_rev = forward(spec, variables, obs[:, ::-1].copy())
    assert not np.allclose(v.numpy(), v_rev.numpy())


def _tf_forward_relu_then_pool(spec, variables, obs):
    """The paper net in its written order, conv -> ReLU -> max-pool (forward pools first)."""
    x = tf.transpose(tf.cast(obs, tf.float32) / 255.0, [0, 2, 3, 1])
    for i in range(3):
        x = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, variables[i], 1, "VALID")), 2, 2,
                             "VALID")
    x = tf.nn.relu(tf.nn.conv2d(x, variables[3], 1, "VALID"))
    x = tf.nn.relu(tf.matmul(tf.reshape(x, [tf.shape(x)[0], -1]), variables[4]) + variables[5])
    return tf.matmul(x, variables[6]) + variables[7], (tf.matmul(x, variables[8])
                                                        + variables[9])[:, 0]


def test_pooling_before_relu_gives_the_same_outputs_and_gradients():
    # max-pool and ReLU commute: the pass that pools first must match the written order in
    # its outputs and in the gradient of every variable (ties at 0 included: an all-negative
    # window gets no gradient either way)
    spec = SPECS["ba3c"]
    variables = [tf.Variable(t) for t in unflatten(spec.layout(), spec.init_params(7))]
    obs = np.random.default_rng(8).integers(0, 256, (2, *GRAY), dtype=np.uint8)
    w = tf.constant(np.random.default_rng(9).standard_normal((2, A + 1)), tf.float32)

    def outputs_and_gradients(fn):
        with tf.GradientTape() as tape:
            logits, v = fn(spec, variables, obs)
            out = tf.concat([logits, v[:, None]], axis=1)
            loss = tf.reduce_sum(out * w)
        return out.numpy(), [g.numpy() for g in tape.gradient(loss, variables)]

    out, grads = outputs_and_gradients(forward)
    ref_out, ref_grads = outputs_and_gradients(_tf_forward_relu_then_pool)
    np.testing.assert_allclose(out, ref_out, rtol=1e-6, atol=1e-7)
    for g, ref in zip(grads, ref_grads):
        assert np.abs(ref).max() > 0  # every variable gets a gradient to compare
        # float32 sums over up to 80 x 80 x 2 positions in another order: 1e-5 of the scale
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


# --------------------------------------------------------------------------- active units

def test_active_units_counts_channels_positive_for_some_input():
    # [B=2, H=1, W=2, C=3]: channel 0 never above 0, channel 1 once, channel 2 zero only
    a = np.array([[[[-1.0, 0.0, 0.0], [-2.0, 0.5, 0.0]]],
                  [[[-1.0, -1.0, 0.0], [-3.0, 0.0, 0.0]]]])
    assert active_units(a) == 1
    assert active_units(np.array([[0.1, -0.1], [0.0, 2.0]])) == 2  # dense [B, C]


def test_hidden_activations_follow_hand_set_biases_and_feed_the_heads():
    """a3c_ff with zero kernels: each layer's output is relu(its bias) whatever the frames,
    so its active units are the biases set above 0 (5, 7 and 100 of 16, 32, 256)."""
    spec = NetSpec("a3c_ff", 256, GRAY, A)
    theta = np.zeros(spec.layout().num_params, np.float32)
    variables = [np.array(v) for v in unflatten(spec.layout(), theta)]
    names = spec.layout().names
    for name, positive in (("conv0/bias", 5), ("conv1/bias", 7), ("fc2/bias", 100)):
        bias = variables[names.index(name)]
        bias[:] = -1.0
        bias[:positive] = 1.0
    obs = np.random.default_rng(0).integers(0, 256, (3, *GRAY), dtype=np.uint8)
    outputs = [o.numpy() for o in hidden_activations(spec, variables, obs)]
    assert [o.shape for o in outputs] == [(3, 20, 20, 16), (3, 9, 9, 32), (3, 256)]
    assert [active_units(o) for o in outputs] == [5, 7, 100]
    # with real parameters, the last output through the heads is the forward pass's
    variables = unflatten(spec.layout(), spec.init_params(0))
    hidden = hidden_activations(spec, variables, obs)[-1].numpy()
    logits, _ = forward(spec, variables, obs)
    np.testing.assert_allclose(hidden @ variables[names.index("policy/kernel")]
                               + variables[names.index("policy/bias")], logits.numpy(),
                               rtol=1e-5, atol=1e-5)
