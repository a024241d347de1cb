"""Synthetic-compute ranks (dba3c.distributed.synthetic): seeded gradients, step times with
stragglers and jitter, stage times, and a staged synthetic step."""

from __future__ import annotations

import time

import numpy as np

from dba3c.distributed.synthetic import (
    SyntheticWorker,
    slow_ranks,
    stage_seconds,
    step_seconds,
    synthetic_gradient,
)
from dba3c.learning.models import NetSpec
from dba3c.learning.params import layer_buckets
from dba3c.preset import from_dict
from tests.support.world import make_cfg


def test_synthetic_gradient_is_seeded_small_and_per_rank_and_step():
    g = synthetic_gradient(1000, 3, 5, 7)
    assert g.dtype == np.float32 and g.shape == (1000,)
    assert np.array_equal(g, synthetic_gradient(1000, 3, 5, 7))
    assert not np.array_equal(g, synthetic_gradient(1000, 3, 6, 7))
    assert not np.array_equal(g, synthetic_gradient(1000, 3, 5, 8))
    assert 0.8e-3 < float(np.std(g)) < 1.2e-3 and abs(float(np.mean(g))) < 2e-4


def test_step_time_scales_with_stragglers_and_jitter_is_seeded_exponential():
    assert step_seconds(250.0, 0.0, 1.0, (0, 1, 2)) == 0.25
    assert step_seconds(250.0, 0.0, 3.0, (0, 1, 2)) == 0.75
    times = np.array([step_seconds(100.0, 0.5, 1.0, (0, 1, v)) for v in range(4000)])
    assert times.min() >= 0.1  # never faster than the configured compute time
    # 0.1 * (1 + 0.5 * E), E ~ Exp(1): mean 0.15, standard deviation 0.05
    assert abs(times.mean() - 0.15) < 0.005 and abs(times.std() - 0.05) < 0.005
    assert step_seconds(100.0, 0.5, 1.0, (0, 1, 9)) == step_seconds(100.0, 0.5, 1.0, (0, 1, 9))
    assert slow_ranks((0, 3, 4, 5), 2) == (4, 5) and slow_ranks((0, 3), 0) == ()


def test_stage_seconds_split_a_step_by_forward_flops_by_hand():
    # F = (1, 2, 3): forward 1, 2, 3; backward 1 (stage 0), 4, 6; D = 17
    forward, backward = stage_seconds(1.7, [1, 2, 3])
    np.testing.assert_allclose(forward, [0.1, 0.2, 0.3])
    np.testing.assert_allclose(backward, [0.1, 0.4, 0.6])


def test_a_staged_synthetic_step_hands_out_the_seeded_gradient_last_bucket_first():
    spec = NetSpec("ba3c", 128, (4, 84, 84), 4)
    cfg = from_dict({**make_cfg(workers=1, ps=1).to_dict(),
                     "synthetic": {"enabled": True, "compute_ms": 20.0}})
    worker = SyntheticWorker(cfg, 0, spec, (0,))
    starts = layer_buckets(spec.layout())
    calls: list[tuple] = []
    t0 = time.perf_counter()
    worker.compute_staged_gradient((worker.next_batch(7), lambda b: calls.append(("fwd", b)),
                                    lambda b, g: calls.append(("bwd", b, g.copy()))), 7)
    elapsed = time.perf_counter() - t0
    B = len(starts)
    assert [c[:2] for c in calls] == ([("fwd", b) for b in range(B)]
                                      + [("bwd", b) for b in reversed(range(B))])
    grad = synthetic_gradient(spec.layout().num_params, cfg.run.seed, 0, 7)
    handed = {c[1]: c[2] for c in calls if c[0] == "bwd"}
    np.testing.assert_array_equal(np.concatenate([handed[b] for b in range(B)]), grad)
    assert elapsed >= 0.020  # the modelled compute time passes (sleeps end no earlier)


def test_a_staged_synthetic_step_pays_the_staging_cost_of_a_real_rank():
    # compute_ms 20 with dist.overlap_cost 0.5: the staged step's stages take 30 ms
    spec = NetSpec("ba3c", 128, (4, 84, 84), 4)
    tree = make_cfg(workers=1, ps=1).to_dict()
    cfg = from_dict({**tree, "dist": {**tree["dist"], "overlap_cost": 0.5},
                     "synthetic": {"enabled": True, "compute_ms": 20.0}})
    worker = SyntheticWorker(cfg, 0, spec, (0,))
    t0 = time.perf_counter()
    worker.compute_staged_gradient((worker.next_batch(7), lambda b: None, lambda b, g: None), 7)
    assert time.perf_counter() - t0 >= 0.030  # sleeps end no earlier
