"""``dba3c bench stages --config CONFIG``: what a staged gradient costs.

:meth:`dba3c.learning.learner.Learner.staged_gradient` computes the gradient stage by stage (one
stage
per layer bucket) so that collective aggregation could move each bucket while the rest
computes. On the config's network and a synthetic batch of ``train.batch_size``
(:func:`dba3c.training.worker.synthetic_batch`), after warm-up, this times ``--calls`` calls of
``gradient()`` and of ``staged_gradient()`` (no-op callbacks) interleaved, and prints their
medians; then ``--calls`` staged calls (callbacks in line, ``inline=True``) whose callbacks
stamp the time, giving each stage's forward and backward time as a fraction of the staged
step beside its FLOP fraction (forward F_b, backward 2 F_b, F_0 for stage 0, which needs no
gradient for its input).
The callbacks cannot split the last stage's forward pass from its backward pass (nothing
is called between them): its row gives both together.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from dba3c.cpus import this_cpu_precision
from dba3c.preset import load_config


def flop_fractions(stage_flops: list[int]) -> tuple[list[float], list[float]]:
    """(forward, backward) FLOP fraction of each stage in one training step.

        forward_b = F_b / T,   backward_b = 2 F_b / T (b > 0),   backward_0 = F_0 / T,
        T = sum_b F_b + sum_b 2 F_b - F_0

    (a backward pass needs the gradients of the weights and of the input, each about one
    forward's work; stage 0's input is the data).
    """
    backward = [2 * f for f in stage_flops]
    backward[0] = stage_flops[0]
    total = sum(stage_flops) + sum(backward)
    return [f / total for f in stage_flops], [f / total for f in backward]


def stage_spans(forward_at: list[float],
                backward_at: list[float]) -> tuple[list[float], list[float], float]:
    """Seconds per stage of one staged step from its callback times.

    forward_at[b]: when ``before_forward(b)`` ran; backward_at[b]: when
    ``after_backward(b, .)`` ran. Returns (forward seconds of
    stages 0 .. B-2, backward seconds of stages 0 .. B-2 (each up to its bucket in NumPy),
    the last stage's forward and backward together).
    """
    num_stages = len(forward_at)
    forward = [forward_at[b + 1] - forward_at[b] for b in range(num_stages - 1)]
    backward = [backward_at[b] - backward_at[b + 1] for b in range(num_stages - 1)]
    return forward, backward, backward_at[-1] - forward_at[-1]


class StageClock:
    """Callbacks for a staged gradient that note when each ran (``time.perf_counter``)."""

    def __init__(self, num_stages: int):
        self.forward_at = [0.0] * num_stages
        self.backward_at = [0.0] * num_stages

    def before_forward(self, b: int) -> None:
        """Note the start of stage b's forward pass."""
        self.forward_at[b] = time.perf_counter()

    def after_backward(self, b: int, g_b: np.ndarray) -> None:
        """Note the end of stage b's backward pass (its bucket in NumPy)."""
        self.backward_at[b] = time.perf_counter()


def median_ms(samples: list[float]) -> float:
    """Median of seconds, in milliseconds."""
    return 1000 * statistics.median(samples)


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(config: str, overrides: list[str], calls: int, warmup: int = 3) -> dict:
    """Time ``gradient`` against ``staged_gradient`` and the stages on the config's
    network; the results as a dict (seconds)."""
    from dba3c.games.envs import env_spaces
    from dba3c.learning.learner import Learner
    from dba3c.learning.models import make_net_spec
    from dba3c.training.worker import synthetic_batch

    cfg = load_config(config, overrides)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    precision = this_cpu_precision(cfg.model.precision).dtype
    learner = Learner(spec, cfg.train, spec.init_params(0), staged=True, precision=precision)
    batch = synthetic_batch(spec, cfg.train.batch_size, (0, 0, 1))
    data = (batch.obs, batch.a, batch.R)

    def one_call() -> None:
        learner.gradient(*data)

    def staged() -> None:
        learner.staged_gradient(*data, lambda b: None, lambda b, g: None)

    for _ in range(warmup):
        one_call()
        staged()
    one_s, staged_s = [], []
    for _ in range(calls):
        one_s.append(timed(one_call))
        staged_s.append(timed(staged))
    spans = []
    for _ in range(calls):
        clock = StageClock(len(learner.buckets))
        start = time.perf_counter()
        learner.staged_gradient(*data, clock.before_forward, clock.after_backward, inline=True)
        step = time.perf_counter() - start
        spans.append((step, *stage_spans(clock.forward_at, clock.backward_at)))
    bounds = [*learner.buckets, learner.layout.num_params]
    return {"config": config, "overrides": overrides, "kind": spec.kind,
            "precision": precision, "batch": cfg.train.batch_size, "calls": calls,
            "gradient_ms": median_ms(one_s), "staged_ms": median_ms(staged_s),
            "bucket_params": [hi - lo for lo, hi in zip(bounds[:-1], bounds[1:])],
            "stage_flops": spec.stage_flops(),
            "step_ms": median_ms([s[0] for s in spans]),
            "forward_frac": [statistics.median(s[1][b] / s[0] for s in spans)
                             for b in range(len(bounds) - 2)],
            "backward_frac": [statistics.median(s[2][b] / s[0] for s in spans)
                              for b in range(len(bounds) - 2)],
            "last_frac": statistics.median(s[3] / s[0] for s in spans)}


def stages_table(r: dict) -> str:
    """The results as a Markdown table, one row per stage."""
    flops_f, flops_b = flop_fractions(r["stage_flops"])
    num_stages = len(r["stage_flops"])
    lines = [f"{r['config']} ({r['kind']} in {r['precision']}, batch {r['batch']}): gradient() "
             f"{r['gradient_ms']:.1f} ms, staged_gradient() {r['staged_ms']:.1f} ms "
             f"(x{r['staged_ms'] / r['gradient_ms']:.3f}), medians of {r['calls']} "
             f"interleaved calls; stage fractions of a {r['step_ms']:.1f} ms staged step:", "",
             "| stage | params | forward time | forward FLOPs | backward time | backward FLOPs |",
             "|---|---:|---:|---:|---:|---:|"]
    for b in range(num_stages - 1):
        lines.append(f"| {b} | {r['bucket_params'][b]:,} | {r['forward_frac'][b]:.3f} | "
                     f"{flops_f[b]:.3f} | {r['backward_frac'][b]:.3f} | {flops_b[b]:.3f} |")
    last = num_stages - 1
    lines.append(f"| {last} (+ heads, loss) | {r['bucket_params'][last]:,} | "
                 f"{r['last_frac']:.3f} (forward + backward) | "
                 f"{flops_f[last] + flops_b[last]:.3f} (both) | | |")
    accounted = sum(r["forward_frac"]) + sum(r["backward_frac"]) + r["last_frac"]
    lines += ["", f"Outside the stages (before stage 0, after bucket 0): "
                  f"{1 - accounted:.3f} of the step."]
    return "\n".join(lines)
