"""Mixed precision (``model.precision: bfloat16``, dba3c.learning.models): one update from a
gradient computed in bfloat16 against float32's, on the same parameters and mini-batch.

The tolerance. bfloat16 keeps 8 significant bits (each rounding errs by at most 2^-8), but a
ReLU network's gradient is not smooth in its parameters: a unit whose pre-activation lies
within rounding of zero switches on or off, and moves a whole row of its kernel's gradient.
So float32's own update moves by far more than 2^-8 when its parameters are merely rounded to
bfloat16: by 0.2-8% with RMSProp and 5-28% with Adam, here. That is the yardstick: the
relative difference of the mixed-precision update from float32's,
||d_bf16 - d_f32|| / ||d_f32||, may be at most 3 x the difference float32's update shows on
the parameters rounded to bfloat16. Measured on the AMX-BF16 development machine over 5
seeds x 3 networks x 2 rules: 1.0-2.2 x. On this batch (seed 0) RMSProp's update differs by
1.2% (A3C-FF), 3.6% (the paper's net) and 0.3% (MLP), Adam's by 8%, 26% and 5%: Adam's first
step is lr x g / (|g| + epsilon), about lr x sign(g), so every near-zero element whose sign
flips counts fully.
"""

import ml_dtypes
import numpy as np
import pytest

from dba3c.config import TrainConfig
from dba3c.learning.learner import Learner
from dba3c.learning.models import NetSpec
from dba3c.learning.optim import Optimizer, optimizer_update
from dba3c.learning.rules import OptimizerState
from dba3c.training.worker import synthetic_batch

NETWORKS = {  # the presets' networks (pong_small's A3C-FF, the paper's), and an MLP
    "a3c_ff": NetSpec("a3c_ff", 256, (4, 84, 84), 6),
    "ba3c": NetSpec("ba3c", 128, (4, 84, 84), 6),
    "mlp": NetSpec("mlp", 64, (4,), 2),
}
TIMES_ROUNDING = 3.0


def update(theta: np.ndarray, g: np.ndarray, rule: str) -> np.ndarray:
    """The parameter change of one update of ``rule`` (lr 1e-3, the config's settings)
    from fresh optimizer state."""
    after = theta.copy()
    optimizer_update(after, g, OptimizerState.zeros(len(theta)), Optimizer(rule, 1e-3), step=0)
    return after - theta


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b||."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("name", list(NETWORKS))
def test_one_mixed_precision_update_is_within_bfloat16_rounding_of_float32s(name):
    spec = NETWORKS[name]
    theta = spec.init_params(0, "he")
    batch = synthetic_batch(spec, 32, (0, 0, 3))
    rounded = theta.astype(ml_dtypes.bfloat16).astype(np.float32)

    def gradient(params: np.ndarray, precision: str) -> np.ndarray:
        g, _ = Learner(spec, TrainConfig(), params, precision=precision).gradient(
            batch.obs, batch.a, batch.R)
        assert g.dtype == np.float32  # what the optimizer and the wire receive
        return g

    g32, g16, g32_rounded = (gradient(theta, "float32"), gradient(theta, "bfloat16"),
                             gradient(rounded, "float32"))
    for rule in ("rmsprop", "adam"):
        d32 = update(theta, g32, rule)
        error = relative(update(theta, g16, rule), d32)
        yardstick = relative(update(theta, g32_rounded, rule), d32)
        assert error <= TIMES_ROUNDING * yardstick, (rule, error, yardstick)
        assert error > 1e-4, rule  # bfloat16 computed: float32 would agree to ~1e-7


def test_a_bfloat16_learner_predicts_float32_probabilities_near_float32s():
    spec = NETWORKS["a3c_ff"]
    theta = spec.init_params(0, "he")
    obs = synthetic_batch(spec, 8, (0, 0, 3)).obs
    pi32, v32 = Learner(spec, TrainConfig(), theta).predict(obs)
    pi16, v16 = Learner(spec, TrainConfig(), theta, precision="bfloat16").predict(obs)
    assert pi16.dtype == np.float32 and v16.dtype == np.float32
    np.testing.assert_allclose(pi16.sum(axis=1), 1.0, rtol=1e-6)  # a float32 softmax
    # 2^-5 relative: a few bfloat16 roundings (2^-8 each) per layer, as for the forward pass
    # against its float64 reference (tests/unit/learning/test_models.py)
    np.testing.assert_allclose(pi16, pi32, rtol=2 ** -5)
    np.testing.assert_allclose(v16, v32, atol=2 ** -5 * np.abs(v32).max())
