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
from collections.abc import Callable

import numpy as np

from dba3c.config import probe_modes
from dba3c.core import Incoming, Params, StagedClient, parameters_loaded
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


def probe_choice(step_s: np.ndarray, modes: tuple[str, ...],
                 was: str | None) -> tuple[str, str | None]:
    """Which mode to keep, from every rank's seconds per step in each mode of a probe
    (``step_s[r, i]``: rank r, ``modes[i]``; :func:`dba3c.config.probe_modes`: serial,
    overlapped, and gathered ahead with ``dist.gather_ahead=auto``): the fastest by the
    ranks' mean, the earlier mode on a tie (gathered, so every rank reaches the same answer;
    the steps are synchronous, so the ranks' times differ only by noise). Also the line that
    says so when the choice is not ``was`` (the one in force; None before the first), else
    None."""
    means = {mode: float(np.mean(step_s[:, i])) for i, mode in enumerate(modes)}
    chosen = modes[int(np.argmin([means[mode] for mode in modes]))]
    if chosen == was:
        return chosen, None
    serial, overlapped = means["serial"], means["overlapped"]
    line = (f"collective overlap {'off' if chosen == 'serial' else 'on'}: overlapped steps "
            f"took {1000 * overlapped:.1f} ms, serial ones {1000 * serial:.1f} ms "
            f"({100 * (overlapped / serial - 1):+.1f}%; the ranks' mean)")
    if "ahead" in means:
        line += (f"; gathered ahead {1000 * means['ahead']:.1f} ms "
                 f"({100 * (means['ahead'] / overlapped - 1):+.1f}% of overlapped): "
                 f"{'on' if chosen == 'ahead' else 'off'}")
    return chosen, line


def probe_mode(step: int, probe: int, every: int,
               modes: tuple[str, ...] = ("serial", "overlapped")) -> str:
    """What a run's ``step``-th step (1, 2, ... from its start) is: one of ``modes``, in
    that order, in a probe (``dist.overlap_probe_steps`` of each, one every
    ``dist.overlap_probe_every`` steps, 0: at the start only), else ``"chosen"``."""
    position = step - 1 if every == 0 else (step - 1) % every
    return modes[position // probe] if position < len(modes) * probe else "chosen"


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

    def land(self, report: WorkerReport, bucketed: bool = True) -> Params:
        """The arriving version, wholly arrived, into the prediction variables (and the
        training variables, unless ``bucketed``: :meth:`before_forward` loaded them); its
        step's ``after_step``. Nothing is arriving after it."""
        assert self.arriving is not None, "a version is on its way"
        params = self.arriving.params()
        self.arriving = None
        self.worker.learner.set_params(params.theta, params.version, bucketed=bucketed)
        self.after_step(params, report)
        return params

    def run(self) -> Params | None:
        """Train until the client ends the run; the last parameters (None if the client
        ended it without them), as :meth:`~dba3c.training.worker.Worker.train`. Without a
        probe (``dist.overlap_probe_steps`` 0) every step overlaps; with one, every
        ``dist.overlap_probe_every`` steps (the first at the start) the ranks time that many
        serial steps, as many overlapped ones and, with ``dist.gather_ahead=auto``, as many
        overlapped ones gathered ahead, and keep the fastest (:func:`probe_choice`: every
        rank gathers every rank's timings, so each reaches the same answer; rank 0 says so
        in one line when the choice changes)."""
        worker, client = self.worker, self.client
        params: Params | None = worker.start(client)
        assert params is not None
        if worker.cfg.train.reached_max_steps(params.version):
            return params
        dist = worker.cfg.dist
        try:
            if not dist.overlap_probe_steps:
                return self.overlapped(params)
            modes = probe_modes(dist)
            steps_of = {"serial": worker.train_from, "overlapped": self.overlapped_steps,
                        "ahead": self.ahead_steps}
            kept: str | None = None
            while params is not None and not client.stopping:
                timings = []
                for name in modes:
                    step_s, params = self.timed(steps_of[name], params,
                                                dist.overlap_probe_steps)
                    if params is None or client.stopping:
                        return params
                    timings.append(step_s)
                kept, line = probe_choice(client.gather(np.array(timings)), modes, kept)
                if line and worker.rank == 0:
                    print(f"from step {params.version}: {line}", file=sys.stderr, flush=True)
                mode = steps_of[kept]
                chosen = dist.overlap_probe_every - len(modes) * dist.overlap_probe_steps
                if dist.overlap_probe_every == 0:
                    return mode(client, self.after_step, params)
                if chosen:
                    params = mode(client, self.after_step, params, chosen)
            return params
        finally:
            worker.stop()

    def timed(self, mode: Callable[..., Params | None], params: Params,
              steps: int) -> tuple[float, Params | None]:
        """``steps`` steps of ``mode`` (:meth:`Worker.train_from
        <dba3c.training.worker.Worker.train_from>` or :meth:`overlapped_steps`) from
        ``params``: the seconds per step of all but the first (which may trace a graph) and
        the parameters after them (None: the client ended the run)."""
        after: Params | None = mode(self.client, self.after_step, params, 1)
        if after is None or self.client.stopping:
            return 0.0, after
        started = time.perf_counter()
        after = mode(self.client, self.after_step, after, steps - 1)
        return (time.perf_counter() - started) / (steps - 1), after

    def overlapped_steps(self, client: StagedClient, after_step: AfterStep, params: Params,
                         max_steps: int | None = None) -> Params | None:
        """:meth:`overlapped` in :meth:`Worker.train_from
        <dba3c.training.worker.Worker.train_from>`'s signature (the client and ``after_step``
        are this loop's own)."""
        assert client is self.client and after_step is self.after_step
        return self.overlapped(params, max_steps)

    def ahead_steps(self, client: StagedClient, after_step: AfterStep, params: Params,
                    max_steps: int | None = None) -> Params | None:
        """:meth:`overlapped_steps` with the last bucket gathered ahead
        (``client.gathering_ahead``), as it was afterwards."""
        was, client.gathering_ahead = client.gathering_ahead, True
        after = self.overlapped_steps(client, after_step, params, max_steps)
        client.gathering_ahead = was  # between steps: nothing is left in flight
        return after

    def overlapped(self, params: Params, max_steps: int | None = None) -> Params | None:
        """Overlapped steps from ``params`` (loaded, no collective in flight) to the end, or
        ``max_steps`` of them; the last parameters, landed (nothing left in flight)."""
        worker, client = self.worker, self.client
        lap = worker.laps.trainer.lap
        report = worker.report({}, 0.0)
        steps = 0
        with Poller(client.progress, PROGRESS_CAPS * worker.cfg.dist.collective_poll_s,
                    client.busy):
            while True:
                batch = worker.next_batch(params.version)
                lap("wait data")
                if self.arriving is not None and self.arriving.arrived():
                    params = self.land(report, bucketed=False)  # nothing left to wait for
                    lap("after step (report, metrics, checkpoints)")
                version = params.version if self.arriving is None else self.arriving.version
                after_backward = offering(client, version,
                                          non_finite_due(worker.cfg.debug, version))
                # a forward pass that waits for parameters calls Python before each stage
                before_forward = (parameters_loaded if self.arriving is None
                                  else self.before_forward)
                losses = worker.staged_gradient(batch, before_forward, after_backward,
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
                steps += 1
                if client.stopping or steps == max_steps:
                    return self.land(report)
