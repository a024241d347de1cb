"""A training rank's parameter store in collective aggregation (``dist.aggregation:
collective``): the training ranks are their own parameter servers.

The W training ranks form a group (:meth:`~dba3c.core.Transport.split`; an evaluator
rank stays out). Group rank w owns shard w of the flat parameter vector
(``shard_bounds(num_params, W)``) and its Adam state, in a
:class:`~dba3c.distributed.shard.ShardServer`. One synchronous step t, in
:meth:`CollectiveClient.push`:

  1. a reduce-scatter of the gradients (sum; each rank receives its shard's part) and, in
     flight beside it, an allreduce of a small control vector: how many gradients were not
     finite, and whether the chief asks to stop. With ``dist.wire_dtype: bfloat16`` the
     gradients travel in bfloat16 (half the bytes): where two partial sums meet they are
     added in float32 and the sum is rounded to bfloat16 again before it moves on;
  2. each rank divides its part (in float32) by W (the mean) and applies Adam to its shard;
     when any gradient was not finite every shard skips the step (parameters and Adam state
     unchanged, the version advances, the streak is counted), as a parameter server does;
  3. an allgather of the updated shards: every rank holds theta_{t+1} and trains on it.
     With ``dist.wire_dtype: bfloat16`` the update travels, not the parameters: each rank
     rounds its shard's change d = theta_{t+1} - theta_t to bfloat16, applies the rounded
     change to its own shard too, and every rank adds the gathered changes to its copy of
     theta_t in float32. So every copy holds the same bits, the allgather carries half the
     bytes, and each parameter moves by its Adam step rounded to 8 significant bits (a
     relative error of at most 2^-9 of the step, not of the parameter); the Adam moments are
     not rounded. The start parameters (:meth:`CollectiveClient.pull`) travel in float32.

With a replicated first bucket (``ShardPlan.replicated_first``, ``dist.replicate_first_bucket``)
every rank holds bucket 0 whole: its gradient is summed by an allreduce in step 1, every rank
applies the same Adam update to all of it in step 2, and step 3 has nothing to gather for it.
The copies stay equal while every rank receives the same bits of the sum: MPICH's
recursive doubling (``dist.collective_algorithm: recursive``) has both ranks of a pair add
the same two partial sums, and a float sum of two does not depend on their order. An MPI
that does otherwise is caught: each step's control vector also carries every rank's
checksum of its copy, and copies that differ end the run with an error.

Gathered ahead (``dist.gather_ahead``): the last bucket (the fully connected layer and the
heads, the most bytes, made first by the backward pass) does not wait for the others. Once
its reduce-scatter has completed, the rank computes its shard's piece of Adam's update
ahead (:meth:`~dba3c.distributed.shard.ShardServer.update_ahead`: side copies, the shard
unchanged) and starts that piece's allgather on a duplicate of the group (its ranks reach
this point at different times, so it must not share the group's order of operations), during
the rest of the backward pass. Step 2 then commits the piece with the rest of the shard, the
same bits as updating the whole; a skipped step drops it, and the gathered bucket is not
landed, so every copy keeps theta_t.

While a rank waits in a collective its actor thread keeps simulating
(``dba3c.training.worker``); waiting polls the requests with sleeps of at most
``dist.collective_poll_us`` (50 us, ``WAIT_MAX_SLEEP_S``;
:func:`~dba3c.distributed.transport.waiting.wait_until`; the rank's sleeps end on time,
:func:`~dba3c.distributed.transport.waiting.precise_sleeps`), so a waiting rank does not spin a
core.
The sleeps are shorter than elsewhere because a nonblocking collective advances from one round
of its algorithm to the next only inside an MPI call, and every round waits for a poll; MPI's
blocking wait, faster on a quiet node, spins a whole core (docs/decisions.md, "50 us poll cap").
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import DistConfig, TrainConfig
from dba3c.core import Collectives, Completed, Params, Request
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.transport.waiting import collective_wait, wait_until
from dba3c.distributed.wire import from_wire, to_wire
from dba3c.learning.params import ShardPlan

if TYPE_CHECKING:
    pass

# slots of the control vector reduced with each gradient (the sum of the ranks' checksums of
# a replicated bucket 0 is W times each one's while the copies are equal)
NONFINITE, STOP_REQUESTED, CHECKSUM = 0, 1, 2
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
        self.client.land_changes(bucket)
        lo, hi = self.client.plan.bucket_bounds(bucket)
        return self.client.theta[lo:hi]

    def params(self) -> Params:
        """The whole of theta_{t+1} (a copy)."""
        self.client.wait(*self.requests)
        for bucket in range(self.client.num_buckets):
            self.client.land_changes(bucket)
        return Params(self.version, self.client.theta.copy(), self.nonfinite_streak)

    def arrived(self) -> bool:
        """Whether every bucket has arrived (tested once, not waited for)."""
        return self.client.completed(self.requests)


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
      wire: the type of the gradients and of the parameters' changes in the collectives
        (``dist.wire_dtype``): float32 or bfloat16.
      gather_ahead: ``dist.gather_ahead``: the last bucket's update and allgather start as
        soon as its reduce-scatter has completed (with more than one bucket): ``always``;
        ``auto``: while :attr:`gathering_ahead` is set (the overlap probe's choice, off at
        first); ``never``.

    Buckets are offered last first (the order the backward pass makes them) and gathered
    first first; every rank starts the same collectives in the same order. MPI requests are
    tested under a lock: :meth:`progress` runs on a helper thread while the trainer computes,
    woken by :attr:`busy` while any is in flight.
    """

    def __init__(self, group: Collectives, shard: ShardServer, plan: ShardPlan,
                 train: TrainConfig, *, chief: bool, wants_stop: Callable[[], bool],
                 idle: Callable[[], None] | None = None,
                 max_sleep_s: float = WAIT_MAX_SLEEP_S, wire: str = "float32",
                 gather_ahead: str = "never"):
        self.group, self.shard, self.plan, self.train = group, shard, plan, train
        self.max_sleep_s = max_sleep_s
        self.chief, self.wants_stop = chief, wants_stop
        self.idle = None if idle is None else Throttled(idle, IDLE_EVERY_S)
        self.num_buckets = plan.num_buckets
        self.theta = np.zeros(plan.num_params, np.float32)
        self.wire = wire
        self._part = to_wire(np.zeros(plan.sizes[group.rank], np.float32), wire)
        # bfloat16: this rank's shard's change and every rank's, gathered (uint16 bits: MPI
        # moves them without knowing the type; empty on the float32 wire); which buckets'
        # changes theta still lacks
        self._changes_travel = wire != "float32"
        self._change = to_wire(np.zeros(plan.sizes[group.rank] * self._changes_travel,
                                        np.float32), wire)
        self._changes = to_wire(np.zeros(plan.num_params * self._changes_travel, np.float32),
                                wire)
        self._unlanded: set[int] = set()
        # gathered ahead: the last bucket (None: not), on a group of its own; its
        # reduce-scatter until its update has gone ahead, then its allgather; on the float32
        # wire its parameters arrive beside theta (theta_t stays until the step is kept)
        can_go_ahead = gather_ahead != "never" and self.num_buckets > 1
        self._ahead = self.num_buckets - 1 if can_go_ahead and gather_ahead == "always" \
            else None
        self._ahead_group = group.duplicate() if can_go_ahead else None
        self._ahead_reduction: Request | None = None
        self._ahead_gather: Request = Completed()
        ahead_size = 0 if not can_go_ahead or self._changes_travel else \
            plan.num_params - plan.bucket_starts[self.num_buckets - 1]
        self._ahead_params = np.zeros(ahead_size, np.float32)
        self._pieces = plan.pieces(group.rank)  # this shard's [lo, hi) in theta, per bucket
        self._in_shard = [slice(o, o + hi - lo) for o, (lo, hi) in
                          zip(plan.piece_offsets(group.rank), self._pieces)]
        self._control = np.zeros(3, np.int64)
        self._sent = np.zeros(3, np.int64)
        self._lock = threading.Lock()
        self._in_flight: list[Request] = []  # this step's reduce-scatters, the allgathers
        self._reductions: list[Request] = []  # this step's reduce-scatters and control
        self.busy = threading.Event()  # set while _in_flight holds any (the Poller's cue)
        self._next_bucket = self.num_buckets - 1
        self.stopping = train.reached_max_steps(shard.version)

    @property
    def gathering_ahead(self) -> bool:
        """Whether the last bucket goes ahead (``dist.gather_ahead``); set between steps
        (nothing in flight), and only where it can (not ``never``, more than one bucket)."""
        return self._ahead is not None

    @gathering_ahead.setter
    def gathering_ahead(self, on: bool) -> None:
        if on and self._ahead_group is None:
            raise RuntimeError("gathering ahead needs dist.gather_ahead always or auto and "
                               "more than one bucket")
        if self._next_bucket != self.num_buckets - 1:
            raise RuntimeError("gathering ahead switched inside a step")
        self._ahead = self.num_buckets - 1 if on else None

    def completed(self, requests: Sequence[Request]) -> bool:
        """Whether every one of ``requests`` has completed (each tested once)."""
        with self._lock:
            return all([r.test() for r in requests])

    def wait(self, *requests: Request) -> None:
        """Poll until ``requests`` completed (sleeping, doing the idle work)."""
        wait_until(lambda: self.completed(requests), self.idle,
                   **collective_wait(self.max_sleep_s))

    def progress(self) -> None:
        """Test the requests in flight (MPI advances a nonblocking collective only inside a
        call); skipped while another thread is testing."""
        if self._lock.acquire(blocking=False):
            try:
                self._keep([r for r in self._in_flight if not r.test()])
                self._go_ahead()
            finally:
                self._lock.release()

    def _keep(self, requests: list[Request]) -> None:
        """The requests in flight are ``requests`` (under the lock); :attr:`busy` says
        whether there are any."""
        self._in_flight = requests
        if requests:
            self.busy.set()
        else:
            self.busy.clear()

    def _post(self, requests: list[Request]) -> None:
        """Keep ``requests`` for :meth:`progress` to advance (under the lock)."""
        self._keep(self._in_flight + requests)

    def _gathering(self, bucket: int, new: np.ndarray, changes: bool,
                   ahead: bool = False) -> Request:
        """Start gathering bucket ``bucket`` of theta_{t+1} (``ahead``: on the ahead group):
        this rank's piece of it is ``new``. ``changes`` (the bfloat16 wire): every rank's
        change d to it travels, rounded, and ``new`` becomes theta_t + d, as every copy does;
        :meth:`land_changes` adds the gathered ones. Without, the pieces themselves travel:
        into theta, or, gathered ahead, beside it."""
        group = self._ahead_group if ahead else self.group
        assert group is not None, "gathered ahead without an ahead group"
        lo, hi = self.plan.bucket_bounds(bucket)
        mine_lo, mine_hi = self._pieces[bucket]
        counts = self.plan.counts(bucket)
        if changes:
            change = self._change[self._in_shard[bucket]]
            change[:] = to_wire(new - self.theta[mine_lo:mine_hi], self.wire)
            new[:] = self.theta[mine_lo:mine_hi] + from_wire(change)
            return group.iallgather(change.view(np.uint16),
                                    self._changes[lo:hi].view(np.uint16), counts)
        return group.iallgather(new, self._ahead_params if ahead else self.theta[lo:hi],
                                counts)

    def _allgathers(self, changes: bool, ahead: bool = False) -> Arriving:
        """Start gathering theta_{t+1}: every rank's shard, or (``changes``, the bfloat16
        wire) every rank's change to it (:meth:`_gathering`); ``ahead``: the last bucket's
        allgather has started already, and it lands unless the step was skipped."""
        requests: list[Request] = []
        theta_shard = self.shard.theta_shard
        with self._lock:
            for b, piece in enumerate(self._in_shard):
                lo, hi = self.plan.bucket_bounds(b)
                if ahead and b == self._ahead:  # posted by _go_ahead
                    requests.append(self._ahead_gather)
                    if self.shard.nonfinite_streak == 0:  # the step was kept
                        self._unlanded.add(b)
                elif self.plan.replicated(b):
                    self.theta[lo:hi] = theta_shard[piece]
                    requests.append(Completed())
                else:
                    requests.append(self._gathering(b, theta_shard[piece], changes))
                    self._post(requests[-1:])
                    if changes:
                        self._unlanded.add(b)
        return Arriving(self, requests)

    def _go_ahead(self) -> None:
        """(Under the lock.) Once the last bucket's reduce-scatter has completed: its piece
        of this step's update, ahead of the rest (the shard unchanged until :meth:`finish`),
        and its allgather on the ahead group."""
        request = self._ahead_reduction
        if request is None or not request.test():
            return
        self._ahead_reduction = None
        assert self._ahead is not None
        piece = self._in_shard[self._ahead]
        g_tail = from_wire(self._part[piece]) / np.float32(self.group.size)  # as finish's mean
        new = self.shard.update_ahead(piece.start, g_tail)
        self._ahead_gather = self._gathering(self._ahead, new, self._changes_travel,
                                             ahead=True)
        self._post([self._ahead_gather])

    def land_changes(self, bucket: int) -> None:
        """Land bucket ``bucket``'s gathered values in theta, once (its allgather has
        completed): add the changes (bfloat16 wire), or copy the bucket gathered ahead;
        nothing to do for a float32 bucket gathered into theta, or for a skipped step's."""
        if bucket in self._unlanded:
            self._unlanded.discard(bucket)
            lo, hi = self.plan.bucket_bounds(bucket)
            if self._changes_travel:
                self.theta[lo:hi] += from_wire(self._changes[lo:hi])
            else:
                self.theta[lo:hi] = self._ahead_params

    def _checksum(self) -> int:
        """A checksum of this rank's copy of a replicated bucket 0 (0 without one)."""
        if not self.plan.replicated(0):
            return 0
        return zlib.crc32(self.shard.theta_shard[self._in_shard[0]].tobytes())

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (float64 [k]) as [ranks, k] (an allgather, waited for)."""
        k = values.size
        out = np.zeros(self.group.size * k, np.float64)
        with self._lock:
            request = self.group.iallgather(np.ascontiguousarray(values, np.float64), out,
                                            [k] * self.group.size)
        self.wait(request)
        return out.reshape(self.group.size, k)

    def pull(self) -> Params:
        """The start parameters: every rank's shard, gathered."""
        return self._allgathers(changes=False).params()

    def offer(self, version: int, bucket: int, grad_bucket: np.ndarray) -> None:
        """Start the reduce-scatter of one bucket of the gradient computed at ``version``
        (after the last bucket, bucket 0, also the control vector's allreduce)."""
        if version != self.shard.version or bucket != self._next_bucket:
            raise RuntimeError(f"bucket {bucket} of a gradient at version {version} offered "
                               f"where bucket {self._next_bucket} at version "
                               f"{self.shard.version} was due: protocol violated")
        if bucket == self.num_buckets - 1:
            self._sent[:] = (False, self.wants_stop(), self._checksum())
        self._sent[NONFINITE] |= not np.isfinite(grad_bucket).all()
        lo, hi = self.plan.bucket_bounds(bucket)
        if grad_bucket.shape != (hi - lo,):
            raise ValueError(f"bucket {bucket} has {hi - lo} parameters, got "
                             f"{grad_bucket.shape}")
        part, grad_bucket = self._part[self._in_shard[bucket]], to_wire(grad_bucket, self.wire)
        with self._lock:
            if self.plan.replicated(bucket):
                requests = [self.group.iallreduce(grad_bucket, part)]
            else:
                requests = [self.group.ireduce_scatter(grad_bucket, part,
                                                       self.plan.counts(bucket))]
            if bucket == self._ahead:
                self._ahead_reduction = requests[0]
            if bucket == 0:
                requests.append(self.group.iallreduce(self._sent, self._control))
            self._reductions += requests
            self._post(requests)
            self._go_ahead()
        self._next_bucket = bucket - 1

    def finish(self) -> Arriving | None:
        """Wait for the reduce-scatters, apply Adam to this rank's shard (every shard skips
        the step when any gradient was not finite), start the allgathers of the new
        parameters (those of a bucket gathered ahead have started); None when the run is
        over for this rank. Copies of a replicated bucket 0 that differ are a RuntimeError
        on the chief (the other ranks return None)."""
        if self._next_bucket != -1:
            raise RuntimeError(f"finish with bucket {self._next_bucket} not offered")
        self._next_bucket = self.num_buckets - 1
        self.wait(*self._reductions)
        with self._lock:
            self._reductions = []
            self._go_ahead()  # if no call since its reduce-scatter completed has
            self._keep([r for r in self._in_flight if not r.test()])
        if self._control[CHECKSUM] != self.group.size * self._sent[CHECKSUM]:
            if not self.chief:  # the chief's error ends the job: one line, not W
                return None
            raise RuntimeError(
                f"the ranks' copies of the first layer's parameters differ at step "
                f"{self.shard.version} (dist.replicate_first_bucket: this MPI's allreduce "
                f"gave the ranks different sums); run with dist.replicate_first_bucket=false")
        mean = from_wire(self._part)  # the received part itself when float32
        if self._control[NONFINITE]:
            mean[:] = np.nan  # one poisoned gradient: every shard skips this step
        else:
            mean /= np.float32(self.group.size)
        if self._unlanded:  # a change not yet added: theta_t is what every change is from
            raise RuntimeError(f"step {self.shard.version} finished before buckets "
                               f"{sorted(self._unlanded)} of its parameters arrived")
        self.shard.offer(self.shard.version, mean)  # commits or drops a piece gone ahead
        arriving = self._allgathers(self._changes_travel, ahead=self._ahead is not None)
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
