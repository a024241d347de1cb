"""The update-rule tests' hyperparameters (the paper's Adam) and gradients."""

from typing import TypedDict

import numpy as np

from dba3c.config import AdamConfig
from dba3c.learning.optim import Optimizer


class AdamHyper(TypedDict):
    """adam_update's hyperparameters, passed as ``**hyper``."""

    lr: float
    beta1: float
    beta2: float
    epsilon: float


PAPER = AdamHyper(lr=1e-3, beta1=0.8, beta2=0.75, epsilon=1e-8)


PAPER_ADAM = Optimizer("adam", PAPER["lr"], adam=AdamConfig(PAPER["beta1"], PAPER["beta2"],
                                                            PAPER["epsilon"]))


def _grads(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    # gradients of very different scales per step, so bias correction matters
    return [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 2)).astype(np.float32)
            for _ in range(steps)]
