"""Collective aggregation (``dist.aggregation: collective``): the training ranks are their own
parameter servers.

The W training ranks form a group (:meth:`~dba3c.distributed.transport.Transport.split`; an
evaluator rank
stays out). Group rank w owns shard w of the flat parameter vector
(``shard_bounds(num_params, W)``) and its Adam state, in a
:class:`~dba3c.distributed.shard.ShardServer`.
One synchronous step t, in :meth:`CollectiveClient.push`:

  1. a reduce-scatter of the gradients (sum; each rank receives its shard's part) and, in
     flight beside it, an allreduce of a small control vector: how many gradients were not
     finite, and whether the chief asks to stop;
  2. each rank divides its part by W (the mean) and applies Adam to its shard; when any
     gradient was not finite every shard skips the step (parameters and Adam state unchanged,
     the version advances, the streak is counted), as a parameter server does;
  3. an allgather of the updated shards: every rank holds theta_{t+1} and trains on it.

While a rank waits in a collective its actor thread keeps simulating (``dba3c.training.worker``);
waiting polls the requests with sleeps of at most ``dist.collective_poll_us`` (50 us,
``WAIT_MAX_SLEEP_S``; :func:`~dba3c.distributed.transport.wait_until`; the rank's sleeps end on
time,
:func:`~dba3c.distributed.transport.precise_sleeps`), so a waiting rank does not spin a core. The
sleeps
are shorter than elsewhere because a nonblocking collective advances from one round of its
algorithm to the next only inside an MPI call, and every round waits for a poll:
docs/benchmarks.md measured the step and a waiting rank's CPU for 0.5 ms, 50, 20 and 10 us
sleeps against MPI's blocking wait (which spins a whole core).

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

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config, DistConfig, TrainConfig
from dba3c.core import Collectives, Params, Request, Transport
from dba3c.distributed.mailbox import Inbox, Sender, receive_one
from dba3c.distributed.ps.chief_link import ChiefInbox, save_shards
from dba3c.distributed.ps.server import make_shard, state_message
from dba3c.distributed.roles import Roles, make_shard_plan, overlaps
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.transport import collective_wait, wait_until
from dba3c.distributed.watchdog import StallClock
from dba3c.distributed.wire import (
    END,
    Command,
    ControlMsg,
    ParamsMsg,
    ReportMsg,
    StateMsg,
    StatusMsg,
    Tag,
)
from dba3c.errors import TrainingError
from dba3c.games.schedule import EvalSchedule
from dba3c.learning.models import NetSpec
from dba3c.learning.params import ShardPlan
from dba3c.learning.rules import OptimizerState
from dba3c.training.checkpoint import checkpoint_due
from dba3c.training.report import WorkerReport
from dba3c.training.worker import AfterStep, Worker

if TYPE_CHECKING:
    from dba3c.training.chief import Chief

NONFINITE, STOP_REQUESTED = 0, 1  # slots of the control vector reduced with each gradient
WAIT_MAX_SLEEP_S = DistConfig().collective_poll_s  # the config's default poll cap, s
IDLE_EVERY_S = 5e-4  # the idle work (the chief's bookkeeping, QUERY answers) runs this often


class Throttled:
    """``fn`` called at most once every ``seconds`` (the first call runs it)."""

    def __init__(self, fn: Callable[[], None], seconds: float):
        self.fn, self.seconds, self.last = fn, seconds, -float("inf")

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.seconds:
            self.last = now
            self.fn()


class Arriving:
    """theta_{t+1} arriving bucket by bucket (:class:`~dba3c.core.Incoming`): one allgather
    per bucket into the client's theta buffer, bucket 0 posted first."""

    def __init__(self, client: CollectiveClient, requests: list[Request]):
        self.client, self.requests = client, requests
        self.version = client.shard.version
        self.nonfinite_streak = client.shard.nonfinite_streak

    def wait(self, bucket: int) -> np.ndarray:
        """Bucket ``bucket`` of theta (a view of the client's buffer)."""
        self.client.wait(self.requests[bucket])
        lo, hi = self.client.plan.bucket_bounds(bucket)
        return self.client.theta[lo:hi]

    def params(self) -> Params:
        """The whole of theta_{t+1} (a copy)."""
        self.client.wait(*self.requests)
        return Params(self.version, self.client.theta.copy(), self.nonfinite_streak)


class CollectiveClient:
    """A training rank's :class:`~dba3c.core.StagedClient` in collective aggregation.

    Args:
      group: the training ranks' collectives; group rank = index of this rank's shard.
      shard: this rank's shard of theta and its Adam state (sync, one gradient: the mean).
      plan: how the vector is cut into buckets and shards
      (:func:`~dba3c.distributed.roles.make_shard_plan`).
      train: ``train.max_steps`` (every rank stops there) and ``train.max_nonfinite``.
      chief: on the chief a streak of ``train.max_nonfinite`` skipped steps is returned (the
        worker loop raises the error); the other ranks, which reach it at the same step, end
        quietly (one error line per job, not W).
      wants_stop: asked at each step (the chief's stop request).
      idle: called while waiting, at most every ``IDLE_EVERY_S`` (the chief's bookkeeping,
        answering QUERY).

    Buckets are offered last first (the order the backward pass makes them) and gathered
    first first; every rank starts the same collectives in the same order. MPI requests are
    tested under a lock: :meth:`progress` runs on a helper thread while the trainer computes.
    """

    def __init__(self, group: Collectives, shard: ShardServer, plan: ShardPlan,
                 train: TrainConfig, *, chief: bool, wants_stop: Callable[[], bool],
                 idle: Callable[[], None] | None = None,
                 max_sleep_s: float = WAIT_MAX_SLEEP_S):
        self.group, self.shard, self.plan, self.train = group, shard, plan, train
        self.max_sleep_s = max_sleep_s
        self.chief, self.wants_stop = chief, wants_stop
        self.idle = None if idle is None else Throttled(idle, IDLE_EVERY_S)
        self.num_buckets = plan.num_buckets
        self.theta = np.zeros(plan.num_params, np.float32)
        self._part = np.zeros(plan.sizes[group.rank], np.float32)
        self._in_shard = [slice(o, o + hi - lo) for o, (lo, hi) in
                          zip(plan.piece_offsets(group.rank), plan.pieces(group.rank))]
        self._control = np.zeros(2, np.int64)
        self._sent = np.zeros(2, np.int64)
        self._lock = threading.Lock()
        self._in_flight: list[Request] = []  # this step's reduce-scatters, the allgathers
        self._next_bucket = self.num_buckets - 1
        self.stopping = train.reached_max_steps(shard.version)

    def wait(self, *requests: Request) -> None:
        """Poll until ``requests`` completed (sleeping, doing the idle work)."""
        def done() -> bool:
            with self._lock:
                return all([r.test() for r in requests])

        wait_until(done, self.idle, **collective_wait(self.max_sleep_s))

    def progress(self) -> None:
        """Test the requests in flight (MPI advances a nonblocking collective only inside a
        call); skipped while another thread is testing."""
        if self._lock.acquire(blocking=False):
            try:
                self._in_flight = [r for r in self._in_flight if not r.test()]
            finally:
                self._lock.release()

    def _allgathers(self) -> Arriving:
        requests = []
        with self._lock:
            for b, piece in enumerate(self._in_shard):
                lo, hi = self.plan.bucket_bounds(b)
                requests.append(self.group.iallgather(self.shard.theta_shard[piece],
                                                      self.theta[lo:hi], self.plan.counts(b)))
            self._in_flight += requests
        return Arriving(self, requests)

    def pull(self) -> Params:
        """The start parameters: every rank's shard, gathered."""
        return self._allgathers().params()

    def offer(self, version: int, bucket: int, grad_bucket: np.ndarray) -> None:
        """Start the reduce-scatter of one bucket of the gradient computed at ``version``
        (after the last bucket, bucket 0, also the control vector's allreduce)."""
        if version != self.shard.version or bucket != self._next_bucket:
            raise RuntimeError(f"bucket {bucket} of a gradient at version {version} offered "
                               f"where bucket {self._next_bucket} at version "
                               f"{self.shard.version} was due: protocol violated")
        if bucket == self.num_buckets - 1:
            self._sent[:] = (False, self.wants_stop())
        self._sent[NONFINITE] |= not np.isfinite(grad_bucket).all()
        lo, hi = self.plan.bucket_bounds(bucket)
        if grad_bucket.shape != (hi - lo,):
            raise ValueError(f"bucket {bucket} has {hi - lo} parameters, got "
                             f"{grad_bucket.shape}")
        with self._lock:
            self._in_flight.append(self.group.ireduce_scatter(
                grad_bucket, self._part[self._in_shard[bucket]], self.plan.counts(bucket)))
            if bucket == 0:
                self._in_flight.append(self.group.iallreduce(self._sent, self._control))
        self._next_bucket = bucket - 1

    def finish(self) -> Arriving | None:
        """Wait for the reduce-scatters, apply Adam to this rank's shard (every shard skips
        the step when any gradient was not finite), start the allgathers of the new
        parameters; None when the run is over for this rank."""
        if self._next_bucket != -1:
            raise RuntimeError(f"finish with bucket {self._next_bucket} not offered")
        self._next_bucket = self.num_buckets - 1
        self.wait(*self._in_flight)
        with self._lock:
            self._in_flight = []
        if self._control[NONFINITE]:
            self._part[:] = np.nan  # one poisoned gradient: every shard skips this step
        else:
            self._part /= np.float32(self.group.size)
        self.shard.offer(self.shard.version, self._part)
        arriving = self._allgathers()
        self.stopping = (bool(self._control[STOP_REQUESTED])
                         or self.train.reached_max_steps(arriving.version))
        if arriving.nonfinite_streak >= self.train.max_nonfinite:  # the run ends here
            self.wait(*arriving.requests)  # nothing left in flight
            if not self.chief:
                return None
        return arriving

    def push(self, version: int, grad: np.ndarray) -> Params | None:
        """One synchronous step with every training rank, the whole gradient at once; the
        parameters after it (None when the run is over for this rank)."""
        for b in reversed(range(self.num_buckets)):
            lo, hi = self.plan.bucket_bounds(b)
            self.offer(version, b, grad[lo:hi])
        arriving = self.finish()
        return None if arriving is None else arriving.params()


class Snapshots:
    """A training rank's shard to the evaluator rank every ``eval.every`` steps, and DONE at
    the end (as a parameter server sends them); nothing without an evaluator rank."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config):
        self.sender = Sender(t)
        self.evaluators = [] if roles.evaluator is None else [roles.evaluator]
        self.schedule = EvalSchedule(cfg.eval.every if self.evaluators else 0, self._send)

    def _send(self, version: int, theta_shard: np.ndarray) -> None:
        self.sender.post(ParamsMsg(version, theta_shard.copy()), self.evaluators, Tag.SNAPSHOT)

    def after_step(self, shard: ShardServer) -> None:
        """Send the shard if its version is due for evaluation."""
        self.schedule.after_step(shard.version, shard.theta_shard)

    def done(self) -> None:
        """The run is over: DONE to the evaluator."""
        self.sender.post(ParamsMsg(END), self.evaluators, Tag.SNAPSHOT)


class CollectiveChiefLink:
    """The chief's side of collective aggregation: the start state out, reports, shard
    states and evaluations in, checkpoints assembled, the stall watchdog.

    ``poll`` is the chief's idle work while it waits in a collective or for the last states.
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief, plan: ShardPlan):
        self.t, self.roles, self.cfg, self.chief, self.plan = t, roles, cfg, chief, plan
        self.others = tuple(r for r in roles.workers if r != t.rank)
        self.sender = Sender(t)
        self.clock = StallClock(cfg.dist.stall_timeout, time.monotonic())
        self.inbox = ChiefInbox(t, roles, cfg, chief, self.clock)
        self.states = {r: Inbox(t, r, StateMsg, StateMsg.size(n))
                       for r, n in zip(roles.workers, plan.sizes) if r != t.rank}
        self.statuses = {r: Inbox(t, r, StatusMsg, StatusMsg.size(0)) for r in self.others}
        self.pending_state: dict[int, dict[int, StateMsg]] = {}  # version -> rank -> state
        self.final_states: set[int] = set()
        self.answers: dict[int, int] = {}  # rank -> its step, answering the last QUERY
        self.step = chief.start_step

    def send_start(self, step: int, theta: np.ndarray, adam: OptimizerState) -> ShardServer:
        """Hand every other training rank its shard of the start state; the chief's own."""
        own = None
        states = StateMsg.start_shards(step, theta, adam, self.plan)
        for r, state in zip(self.roles.workers, states):
            if r == self.t.rank:
                own = make_shard(state, self.cfg, mode="sync", replicas=1)
            else:
                self.sender.post(state, [r])
        assert own is not None, "the chief is a training rank"
        return own

    def own_state(self, shard: ShardServer, final: bool) -> None:
        """The chief's own shard state at a checkpoint step (or the end)."""
        self._state(self.t.rank, state_message(shard, final))

    def on_step(self, step: int) -> None:
        """A step completed on every rank."""
        self.step = step
        self.clock.progress(time.monotonic())

    @property
    def finished(self) -> bool:
        """Every other rank's final state and final report arrived, the evaluator rank (if
        any) is done, every send completed."""
        return (len(self.final_states) == len(self.others) and self.inbox.evaluator_done
                and len(self.inbox.final_reports) == len(self.others) and self.sender.idle())

    def poll(self) -> None:
        """Process what arrived; fail the job when no step completed for the timeout."""
        self.inbox.poll()
        for r, inbox in self.states.items():
            while (state := inbox.poll()) is not None:
                self._state(r, state)
        self._watch()

    def _state(self, rank: int, state: StateMsg) -> None:
        if state.final and rank != self.t.rank:
            self.final_states.add(rank)
            self.clock.progress(time.monotonic())
        shards = self.pending_state.setdefault(state.version, {})
        shards[rank] = state
        if len(shards) < self.roles.num_workers:
            return
        save_shards(self.chief, self.plan, [shards[r] for r in self.roles.workers])
        del self.pending_state[state.version]

    def _watch(self) -> None:
        """Ask every rank where it is shortly before the timeout; at the timeout name those
        that did not answer: a rank answers only while it waits in a collective, so a silent
        one is the rank the others wait for (stopped, or stuck before its gradient)."""
        for r, inbox in self.statuses.items():
            while (status := inbox.poll()) is not None:
                self.answers[r] = status.version
        now = time.monotonic()
        if self.clock.query_due(now):
            self.answers.clear()
            self.sender.post(ControlMsg(Command.QUERY, self.step), self.others)
        if not self.clock.expired(now):
            return
        silent = [r for r in self.others if r not in self.answers]
        why = (f"workers {silent}: no gradient for step {self.step}, they do not answer"
               if silent else f"every worker waits in the collective of step {self.step}")
        timeout = self.cfg.dist.stall_timeout
        raise TrainingError(f"no step for {timeout:g} s, waiting on ranks {silent} ({why}; "
                            f"dist.stall_timeout={timeout:g})")


class RankWatch:
    """A non-chief training rank's idle work: answer the chief's QUERY with this rank's
    step, and give up when no step completed for twice ``dist.stall_timeout`` (the chief,
    which would have ended a stall after one timeout, is then the one not answering)."""

    def __init__(self, t: Transport, timeout_s: float, shard: ShardServer):
        self.sender, self.timeout_s, self.shard = Sender(t), timeout_s, shard
        self.control = Inbox(t, 0, ControlMsg, ControlMsg.SIZE)
        self.clock = StallClock(2 * timeout_s, time.monotonic())

    def poll(self) -> None:
        """Answer a QUERY; raise TrainingError once the clock expired."""
        while (command := self.control.poll()) is not None:
            if command.command == Command.QUERY:
                self.sender.post(StatusMsg(self.shard.version, ()), [0])
        if self.clock.expired(time.monotonic()):
            raise TrainingError(
                f"no step for {2 * self.timeout_s:g} s at step {self.shard.version}, and the "
                f"chief did not end the job: waiting on ranks [0] (dist.stall_timeout="
                f"{self.timeout_s:g}: the chief names a stalled rank after one timeout)")


def train(worker: Worker, client: CollectiveClient, after_step: AfterStep, overlap: bool) -> None:
    """The worker's training loop: staged (communication overlapping the backward pass and
    the next forward pass) when ``overlap``."""
    if overlap:
        worker.train_staged(client, after_step)
    else:
        worker.train(client, after_step)


def sit_out_collective_run(t: Transport) -> None:
    """A rank of the world outside a collective run of fewer ranks (a
    :class:`~dba3c.distributed.transport.TransportView` of a sequence of runs in one MPI job): join
    the
    world-wide calls the run makes, its one :meth:`~dba3c.distributed.transport.Transport.split`
    (:func:`run_collective_rank`), as a non-member."""
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
                              max_sleep_s=cfg.dist.collective_poll_s)
    sender, snapshots = Sender(t), Snapshots(t, roles, cfg)

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
    snapshots.done()
    wait_until(lambda: sender.idle() and snapshots.sender.idle(),
               watch.poll if watch else None)


def run_collective_chief(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
                         group: Collectives, worker: Worker) -> None:
    """Rank 0: resume or initialise, hand every rank its shard, train, log, checkpoint and
    evaluate, and gather the final state."""
    from dba3c.training.checkpoint import load_start
    from dba3c.training.chief import Chief

    start = load_start(cfg, spec)
    chief = Chief(cfg, start.ckpt, spec.layout(), roles.num_workers)
    chief.install_signal_handlers()
    chief.extra["dist/replicas"] = roles.num_workers
    plan = make_shard_plan(cfg, spec.layout(), group.size)
    link = CollectiveChiefLink(t, roles, cfg, chief, plan)
    shard = link.send_start(start.step, start.theta, start.opt_state)
    client = CollectiveClient(group, shard, plan, cfg.train, chief=True,
                              wants_stop=lambda: chief.stop_reason is not None, idle=link.poll,
                              max_sleep_s=cfg.dist.collective_poll_s)
    snapshots = Snapshots(t, roles, cfg)
    evaluator = None
    if cfg.eval.every and roles.evaluator is None:  # no evaluator rank: evaluate in here
        from dba3c.games.evaluation import BackgroundEvaluator

        evaluator = BackgroundEvaluator(cfg, spec)
        evaluator.start()

    def after_step(params: Params, report: WorkerReport) -> bool:
        chief.worker_report(t.rank, report)
        chief.extra["train/nonfinite_skipped"] = shard.stats.nonfinite_skipped
        link.on_step(params.version)
        link.poll()  # also when the step's collectives had completed before the chief waited
        chief.on_step(params.version)
        if chief.checkpoint_due(params.version) and not client.stopping:
            link.own_state(shard, final=False)
        snapshots.after_step(shard)
        if evaluator is not None:
            for step, scores in evaluator.after_step(params.version, params.theta):
                chief.on_eval(step, scores)
        return client.stopping

    try:
        train(worker, client, after_step, overlaps(cfg))
        chief.worker_report(t.rank, worker.report({}, 0.0))
        link.own_state(shard, final=True)
        snapshots.done()

        def finished() -> bool:
            link.poll()
            return link.finished and snapshots.sender.idle()

        wait_until(finished)
        if evaluator is not None:
            for step, scores in evaluator.results():
                chief.on_eval(step, scores)
    finally:
        if evaluator is not None:
            evaluator.stop()
        chief.close()
