"""The parameter-server rank: one shard of theta and its optimizer state, as a state machine.

    RUNNING --STOP (sync)--> FROZEN --STOP_AT s--> STOP_AT --version >= s--> FINISHED
    RUNNING --train.max_steps, or STOP (async)----------------------------> FINISHED
    FINISHED --every worker said BYE and every send completed--> DRAINED

RUNNING and STOP_AT apply gradients (:class:`~dba3c.distributed.shard.ShardServer` does the math)
and
answer each update with the new parameters; FROZEN leaves gradients queued until the chief
names the version every shard stops at; FINISHED has sent its final state and DONE and only
drains gradients, so no message is left in flight; DRAINED ends the rank's loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import Enum

import numpy as np

from dba3c.config import Config
from dba3c.core import ANY_SOURCE, Transport
from dba3c.distributed.mailbox import Inbox, Sender, receive_one
from dba3c.distributed.pacing import ReplyPacer
from dba3c.distributed.roles import Roles
from dba3c.distributed.shard import make_shard, state_message
from dba3c.distributed.wire import (
    END,
    Command,
    ControlMsg,
    GradMsg,
    InfoMsg,
    ParamsMsg,
    StateMsg,
    StatusMsg,
    Tag,
    framed_size,
)
from dba3c.games.schedule import EvalSchedule
from dba3c.learning.params import shard_bounds

FROZEN_POLL_S = 1e-4  # a frozen PS only waits for the chief's STOP_AT
# Gradient receives a parameter server keeps posted (from any worker): one per worker would
# hold W shard-sized buffers (83 MB at W = 64, P = 1), more than the rest of the rank
# (docs/decisions.md, "receive pool of 8")
GRAD_RECEIVES = 8



class PsState(Enum):
    """Where a parameter server is in the run (see the module docstring)."""

    RUNNING = "running"
    FROZEN = "frozen"
    STOP_AT = "stop-at"
    FINISHED = "finished"
    DRAINED = "drained"


class ParameterServer:
    """Serves shard ``rank - 1``, starting from the chief's ``init`` state; drive it with
    :meth:`poll` until :attr:`state` is DRAINED. Sends its first parameters on creation."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, init: StateMsg):
        self.roles, self.cfg = roles, cfg
        self.server = make_shard(init, cfg, mode=cfg.dist.mode, replicas=roles.replicas)
        self.sender = Sender(t)
        # sleeps through the workers' gradient computations
        self.pacer = ReplyPacer(fine_max_s=cfg.dist.poll_max_ms / 1000)
        size = framed_size(init.theta_shard.size)
        self.grads = Inbox(t, ANY_SOURCE, GradMsg, size,
                           depth=min(GRAD_RECEIVES, len(roles.workers)))
        self.control = Inbox(t, 0, ControlMsg, ControlMsg.SIZE)
        self.state = PsState.RUNNING
        self.stop_at: int | None = None
        self.byes: set[int] = set()
        self.arrived: set[int] = set()  # workers whose gradient for the current version is in
        self.evaluators = [] if roles.evaluator is None else [roles.evaluator]
        self.snapshots = EvalSchedule(cfg.eval.every if self.evaluators else 0,
                                      self._send_snapshot, at_end=cfg.eval.at_end,
                                      start=init.version)
        self._send_params(init.version, roles.workers, final=False)
        self._send_info()
        if cfg.train.reached_max_steps(init.version):
            self._finish()  # a finished run started again: nothing left to do

    # ---- inputs ---------------------------------------------------------------------------
    def poll(self, now: float) -> bool:
        """Handle a chief command and up to one gradient per worker, if any arrived; True if
        one did."""
        busy = False
        if self.state not in (PsState.FINISHED, PsState.DRAINED):
            command = self.control.poll()
            if command is not None:
                busy = True
                self.on_command(command)
        if self.state is not PsState.FROZEN:
            for _ in self.roles.workers:
                msg = self.grads.poll()
                if msg is None:
                    break
                busy = True
                self.on_grad(msg.rank, msg, now)
        if (self.state is PsState.FINISHED and len(self.byes) == len(self.roles.workers)
                and self.sender.idle()):
            self.state = PsState.DRAINED
        return busy

    def on_command(self, msg: ControlMsg) -> None:
        """QUERY: answer with the status; STOP: freeze (sync) or finish (async); STOP_AT s:
        run on to version s."""
        if msg.command is Command.QUERY:
            behind = {m.rank for m in self.grads.peek() if m.version == self.server.version}
            self.sender.post(StatusMsg(self.server.version,
                                       tuple(sorted(self.arrived | behind))), [0])
        elif msg.command is Command.STOP and self.cfg.dist.mode == "async":
            self._finish()
        elif msg.command is Command.STOP:
            self.state = PsState.FROZEN
            self.sender.post(ControlMsg(Command.FROZEN, self.server.version), [0])
        elif msg.command is Command.STOP_AT:
            self.state, self.stop_at = PsState.STOP_AT, msg.argument
            if self.server.version >= msg.argument:
                self._finish()

    def on_grad(self, worker: int, msg: GradMsg, now: float) -> None:
        """A gradient (or BYE) from ``worker``; an update answers the workers that wait."""
        self.pacer.received(worker, msg.version, now)
        if msg.is_bye:
            self.byes.add(worker)
        elif self.state is PsState.FINISHED:
            return  # drained: the run is over
        elif self.server.offer(msg.version, msg.grad_shard):
            self.arrived.clear()
            self._after_update([worker] if self.cfg.dist.mode == "async"
                               else list(self.roles.workers))
        elif msg.version == self.server.version:
            self.arrived.add(worker)

    def pause(self, now: float) -> float:
        """Seconds to sleep before the next poll when nothing arrived."""
        if self.state is PsState.FROZEN:
            return FROZEN_POLL_S
        return self.pacer.pause(now, sending=not self.sender.idle())

    # ---- outputs --------------------------------------------------------------------------
    def _after_update(self, reply_to: list[int]) -> None:
        v = self.server.version
        last = ((self.stop_at is not None and v >= self.stop_at)
                or self.cfg.train.reached_max_steps(v))
        self._send_params(v, reply_to, final=last)
        self._send_info()
        if self.cfg.run.checkpoint_every and v % self.cfg.run.checkpoint_every == 0:
            self._send_state(final=False)
        self.snapshots.after_step(v, self.server.theta_shard)
        if last:
            self._finish()

    def _send_params(self, version: int, workers: Sequence[int], final: bool) -> None:
        self.sender.post(ParamsMsg(version, self.server.theta_shard,
                                   self.server.nonfinite_streak, final), workers)
        self.pacer.sent(workers, version, time.monotonic())

    def _send_snapshot(self, version: int, theta_shard: np.ndarray) -> None:
        self.sender.post(ParamsMsg(version, theta_shard,
                                   self.server.nonfinite_streak), self.evaluators, Tag.SNAPSHOT)

    def _send_info(self) -> None:
        s = self.server.stats
        stale = s.staleness[-1000:]
        self.sender.post(InfoMsg(self.server.version, s.dropped_late, s.nonfinite_skipped,
                                 float(sum(stale)), len(stale), max(stale, default=0)), [0])

    def _send_state(self, final: bool) -> None:
        self.sender.post(state_message(self.server, final), [0])

    def _finish(self) -> None:
        """Final state to the chief, DONE to every worker; the final shard (unless sent
        already) and DONE to the evaluator."""
        self._send_state(final=True)
        self.sender.post(ParamsMsg(END), self.roles.workers)
        self.snapshots.last(self.server.version, self.server.theta_shard)
        self.sender.post(ParamsMsg(END), self.evaluators, Tag.SNAPSHOT)
        self.state = PsState.FINISHED


def run_ps(t: Transport, roles: Roles, cfg: Config, num_params: int) -> None:
    """Serve shard ``rank - 1`` until the run ends and every worker said BYE."""
    lo, hi = shard_bounds(num_params, len(roles.ps))[t.rank - 1]
    ps = ParameterServer(t, roles, cfg, receive_one(t, 0, StateMsg, StateMsg.size(hi - lo)))
    while ps.state is not PsState.DRAINED:
        if not ps.poll(time.monotonic()) or ps.state is PsState.FROZEN:
            time.sleep(ps.pause(time.monotonic()))
