"""Collective aggregation's rank loops: every training rank (the chief too) trains with a
:class:`~dba3c.distributed.collective.client.CollectiveClient`; the chief also keeps the run
through its :class:`~dba3c.distributed.collective.chief_link.CollectiveChiefLink`.

Every rank stops at the same step: at ``train.max_steps`` (all know it) or at the step whose
control vector carried the chief's stop request (a signal, ``train.max_seconds``, the target
score). The chief (rank 0, a training rank) owns the run directory as in ``ps`` mode: it hands
every rank its shard of the start state, receives the other ranks' reports, gathers the shard
states (theta, Adam moments) of checkpoint steps into the checkpoint format of ``ps`` mode (a
checkpoint resumes in either mode), evaluates in a thread unless there is an evaluator rank
(then every worker sends it its shard every ``eval.every`` steps, as a parameter server
would, and the chief receives its results), and runs the stall watchdog: shortly before
``dist.stall_timeout`` it asks every rank where it is; the ranks that do not answer (or lag
behind) are named in the error that ends the job. A rank that sees no step for twice the
timeout gives up itself, naming the chief.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dba3c.config import Config
from dba3c.core import Collectives, Params, Transport
from dba3c.distributed.mailbox import Sender, receive_one
from dba3c.distributed.roles import Roles, make_shard_plan, overlaps
from dba3c.distributed.shard import make_shard, state_message
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import (
    ReportMsg,
    StateMsg,
)
from dba3c.learning.models import NetSpec
from dba3c.training.checkpoint import checkpoint_due
from dba3c.training.report import WorkerReport
from dba3c.training.worker import AfterStep, Worker

if TYPE_CHECKING:
    pass

from dba3c.distributed.collective.chief_link import CollectiveChiefLink, RankWatch, Snapshots
from dba3c.distributed.collective.client import CollectiveClient
from dba3c.distributed.collective.staged import StagedTraining


def train(worker: Worker, client: CollectiveClient, after_step: AfterStep, overlap: bool) -> None:
    """The worker's training loop: staged (communication overlapping the backward pass and
    the next forward pass) when ``overlap``."""
    if overlap:
        StagedTraining(worker, client, after_step).run()
    else:
        worker.train(client, after_step)


def sit_out_collective_run(t: Transport) -> None:
    """A rank of the world outside a collective run of fewer ranks (a
    :class:`~dba3c.distributed.transport.mpi.TransportView` of a sequence of runs in one MPI
    job): join the world-wide calls the run makes, its one
    :meth:`~dba3c.core.Transport.split` (:func:`run_collective_rank`), as a non-member."""
    t.split(False)


def run_collective_rank(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
                        make_worker: Callable[[], Worker]) -> bool:
    """Play this rank's part of collective aggregation to the end of the run, if it is a
    worker; False on the evaluator rank (which plays its usual role)."""
    group = t.split(t.rank in roles.workers)
    if group is None:
        return False
    if t.rank == 0:
        run_collective_chief(t, roles, cfg, spec, group, make_worker())
    else:
        run_collective_worker(t, roles, cfg, spec, group, make_worker())
    return True


def run_collective_worker(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
                          group: Collectives, worker: Worker) -> None:
    """A training rank other than the chief: its shard arrives from the chief; each step's
    report and the checkpoint steps' shard state go to the chief."""
    plan = make_shard_plan(cfg, spec.layout(), group.size)
    shard = make_shard(receive_one(t, 0, StateMsg, StateMsg.size(plan.sizes[group.rank])),
                       cfg, mode="sync", replicas=1)
    start_step = shard.version
    watch = RankWatch(t, cfg.dist.stall_timeout, shard) if cfg.dist.stall_timeout else None
    client = CollectiveClient(group, shard, plan, cfg.train, chief=False,
                              wants_stop=lambda: False, idle=watch.poll if watch else None,
                              max_sleep_s=cfg.dist.collective_poll_s, wire=cfg.dist.wire_dtype,
                              gather_ahead=cfg.dist.gather_ahead)
    sender, snapshots = Sender(t), Snapshots(t, roles, cfg, start_step)

    def after_step(params: Params, report: WorkerReport) -> bool:
        if watch is not None:
            watch.clock.progress(time.monotonic())
        sender.post(ReportMsg(report, False, t.rank), [0])
        if checkpoint_due(cfg.run.checkpoint_every, params.version, start_step) \
                and not client.stopping:
            sender.post(state_message(shard, final=False), [0])
        snapshots.after_step(shard)
        return client.stopping

    train(worker, client, after_step, overlaps(cfg))
    sender.post(ReportMsg(worker.report({}, 0.0), True, t.rank), [0])
    sender.post(state_message(shard, final=True), [0])
    snapshots.done(shard)
    wait_until(lambda: sender.idle() and snapshots.sender.idle(),
               watch.poll if watch else None)


def run_collective_chief(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
                         group: Collectives, worker: Worker) -> None:
    """Rank 0: resume or initialise, hand every rank its shard, train, log, checkpoint and
    evaluate, and gather the final state."""
    from dba3c.training.checkpoint import load_start
    from dba3c.training.chief import Chief

    start = load_start(cfg, spec)
    with Chief(cfg, start.ckpt, spec.layout(), roles.num_workers, t.hosts,
               start.changes) as chief, \
            chief.evaluator_thread(spec, roles.evaluator is None) as evaluator:
        chief.install_signal_handlers()
        chief.extra["dist/replicas"] = roles.num_workers
        plan = make_shard_plan(cfg, spec.layout(), group.size)
        link = CollectiveChiefLink(t, roles, cfg, chief, plan)
        shard = link.send_start(start.step, start.theta, start.opt_state)
        client = CollectiveClient(group, shard, plan, cfg.train, chief=True,
                                  wants_stop=lambda: chief.stop_reason is not None,
                                  idle=link.poll, max_sleep_s=cfg.dist.collective_poll_s,
                                  wire=cfg.dist.wire_dtype, gather_ahead=cfg.dist.gather_ahead)
        snapshots = Snapshots(t, roles, cfg, start.step)

        def after_step(params: Params, report: WorkerReport) -> bool:
            chief.worker_report(t.rank, report)
            chief.extra["train/nonfinite_skipped"] = shard.stats.nonfinite_skipped
            link.on_step(params.version)
            link.poll()  # also when the step's collectives had completed before it waited
            chief.on_step(params.version)
            if chief.checkpoint_due(params.version) and not client.stopping:
                link.own_state(shard, final=False)
            snapshots.after_step(shard)
            if evaluator is not None:
                for evaluation in evaluator.after_step(params.version, params.theta):
                    chief.on_eval(evaluation)
            return client.stopping

        train(worker, client, after_step, overlaps(cfg))
        chief.worker_report(t.rank, worker.report({}, 0.0))
        link.own_state(shard, final=True)
        snapshots.done(shard)

        def finished() -> bool:
            link.poll()
            return link.finished and snapshots.sender.idle()

        wait_until(finished)
        chief.finish_evaluations(evaluator, link.final_params)
