"""The overlapped step of collective aggregation: communication hidden behind compute.

:class:`StagedTraining` is :meth:`dba3c.training.worker.Worker.train` with the step cut into
buckets (one per layer with parameters, :func:`dba3c.distributed.roles.make_shard_plan`):

- the backward pass hands each bucket of the gradient to the client as soon as it is made,
  the last layer first (:meth:`~dba3c.core.StagedClient.offer`: its reduce-scatter starts);
- once every bucket is offered, :meth:`~dba3c.core.StagedClient.finish` applies the
  optimizer to this rank's shard and starts the allgathers of theta_{t+1}, bucket 0 first;
- the next forward pass runs each layer as soon as its bucket of theta_{t+1} has arrived
  (:meth:`StagedTraining.before_forward`), while a
  :class:`~dba3c.distributed.transport.poller.Poller` thread lets the communication advance;
- so step t's ``after_step`` runs once theta_{t+1} has wholly arrived
  (:meth:`StagedTraining.land`), during step t+1's forward pass. Whether to stop is the
  client's to say (``client.stopping``, the same on every rank), so ``after_step``'s answer
  is not needed.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from dba3c.core import Incoming, Params, StagedClient
from dba3c.distributed.transport.poller import Poller
from dba3c.training.faults import non_finite_due
from dba3c.training.report import WorkerReport
from dba3c.training.worker import AfterBackward, AfterStep, Worker

# The Poller of a staged step tests the collectives in flight every PROGRESS_CAPS x
# dist.collective_poll_us (200 us by default): every wake takes the GIL from the actor and
# TensorFlow's callbacks, so polling at every cap slows real ranks that share a node's few
# cores (docs/decisions.md, "progress every 4 caps"). The collectives it advances are the
# hidden ones; a rank blocked on one polls at the cap itself.
PROGRESS_CAPS = 4


def overlap_pays(wait_s: np.ndarray, compute_s: np.ndarray,
                 cost: float) -> tuple[bool, str]:
    """Whether overlapping pays, from every rank's serial steps: ``wait_s[r]`` the seconds
    rank r's step waited in its collectives (and the shard's update), ``compute_s[r]`` the
    rest of its step. A rank's wait also holds the time it waited for slower ranks, which
    overlap cannot hide; the slowest rank, s = argmin(wait_s), waits for the collectives
    alone. Overlap hides at most ``wait_s[s]`` a step and costs ``cost`` x
    ``compute_s[s]`` (``dist.overlap_cost``), so it pays when
    ``wait_s[s] > cost x compute_s[s]``: the same answer on every rank. Also the line that
    says so."""
    s = int(np.argmin(wait_s))
    wait, compute = float(wait_s[s]), float(compute_s[s])
    pays = wait > cost * compute
    return pays, (f"collective overlap {'on' if pays else 'off'}: the slowest rank's serial "
                  f"step waited {1000 * wait:.1f} ms for its collectives, "
                  f"{'more' if pays else 'no more'} than overlapping costs "
                  f"({cost:g} x {1000 * compute:.1f} ms of compute = "
                  f"{1000 * cost * compute:.1f} ms)")


def offering(client: StagedClient, version: int,
             poison: bool) -> AfterBackward:
    """The staged gradient's ``after_backward``: each bucket to ``client`` as gradient of
    ``version``; ``poison`` makes them non-finite (``debug.nan_at_step``: every shard skips
    the step)."""
    def after_backward(bucket: int, g_bucket: np.ndarray) -> None:
        client.offer(version, bucket, np.full_like(g_bucket, np.nan) if poison else g_bucket)
    return after_backward


class StagedTraining:
    """One worker's training loop with overlapped steps (see the module docstring).

    Args:
      worker: the rank's trainer (mini-batches, the staged gradient, counters, reports).
      client: the parameter store, bucket by bucket.
      after_step: called with each version once it has wholly arrived, and its step's
        report.
    """

    def __init__(self, worker: Worker, client: StagedClient, after_step: AfterStep):
        self.worker, self.client, self.after_step = worker, client, after_step
        self.arriving: Incoming | None = None  # the next version's parameters, on their way

    def before_forward(self, bucket: int) -> None:
        """Load bucket ``bucket`` of the arriving version into the training variables,
        waiting for it (the wait counts as waiting for parameters, though with more than one
        inter-op thread it may pass while the stage before it computes)."""
        if self.arriving is not None:
            t0 = time.perf_counter()
            theta_bucket = self.arriving.wait(bucket)
            self.worker.t_wait_params += time.perf_counter() - t0
            self.worker.learner.assign_bucket(bucket, theta_bucket)

    def land(self, report: WorkerReport) -> Params:
        """The arriving version, wholly arrived, into the prediction variables; its step's
        ``after_step``."""
        assert self.arriving is not None, "a version is on its way"
        params = self.arriving.params()
        self.worker.learner.set_params(params.theta, params.version, bucketed=True)
        self.after_step(params, report)
        return params

    def run(self) -> Params | None:
        """Train until the client ends the run; the last parameters (None if the client
        ended it without them), as :meth:`~dba3c.training.worker.Worker.train`. The first
        ``dist.overlap_probe_steps`` steps are serial, the second half of them timed (the
        first traces the graphs); the rest overlap if :func:`overlap_pays` for every rank's
        timings (gathered: each rank reaches the same answer), else stay serial."""
        worker, client = self.worker, self.client
        params = worker.start(client)
        if worker.cfg.train.reached_max_steps(params.version):
            return params
        try:
            probe = worker.cfg.dist.overlap_probe_steps
            if probe:
                timed = probe - probe // 2
                for steps in (probe // 2, timed):
                    started, waited = time.perf_counter(), worker.t_wait_params
                    probed = worker.train_from(client, self.after_step, params, steps)
                    if probed is None or client.stopping:
                        return probed
                    params = probed
                step_s = (time.perf_counter() - started) / timed
                wait_s = (worker.t_wait_params - waited) / timed
                times = client.gather(np.array([wait_s, step_s - wait_s]))
                overlap, why = overlap_pays(times[:, 0], times[:, 1],
                                            worker.cfg.dist.overlap_cost)
                if worker.rank == 0:
                    print(f"from step {params.version}: {why}", file=sys.stderr, flush=True)
                if not overlap:
                    return worker.train_from(client, self.after_step, params)
            return self.overlapped(params)
        finally:
            worker.stop()

    def overlapped(self, params: Params) -> Params | None:
        """Overlapped steps from ``params`` (loaded, no collective in flight) to the end."""
        worker, client = self.worker, self.client
        lap = worker.laps.trainer.lap
        report = worker.report({}, 0.0)
        with Poller(client.progress, PROGRESS_CAPS * worker.cfg.dist.collective_poll_s):
            while True:
                batch = worker.next_batch(params.version)
                lap("wait data")
                version = params.version if self.arriving is None else self.arriving.version
                after_backward = offering(client, version,
                                          non_finite_due(worker.cfg.debug, version))
                losses = worker.staged_gradient(batch, self.before_forward, after_backward,
                                                version)
                lap("gradient (and the parameters of its forward pass)")
                if self.arriving is not None:  # theta_version has wholly arrived
                    params = self.land(report)
                    lap("after step (report, metrics, checkpoints)")
                t0 = time.perf_counter()
                self.arriving = client.finish()
                worker.t_wait_params += time.perf_counter() - t0
                lap("push")
                if self.arriving is None:
                    return None
                worker.check_streak(self.arriving.nonfinite_streak, self.arriving.version)
                report = worker.report(losses, float(version - batch.version.mean()))
                if client.stopping:
                    return self.land(report)
