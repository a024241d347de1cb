"""The chief's side of collective aggregation (start state out; reports, shard states and
evaluations in; checkpoints; the stall watchdog) and the other training ranks' side of it
(answering the chief's QUERY, snapshots to the evaluator rank)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config
from dba3c.core import Params, Transport
from dba3c.distributed.chief_inbox import ChiefInbox, save_shards
from dba3c.distributed.mailbox import Inbox, Sender
from dba3c.distributed.roles import Roles
from dba3c.distributed.shard import ShardServer, make_shard, state_message
from dba3c.distributed.watchdog import StallClock
from dba3c.distributed.wire import (
    END,
    Command,
    ControlMsg,
    ParamsMsg,
    StateMsg,
    StatusMsg,
    Tag,
)
from dba3c.errors import TrainingError
from dba3c.games.schedule import EvalSchedule
from dba3c.learning.params import ShardPlan
from dba3c.learning.rules import OptimizerState

if TYPE_CHECKING:
    from dba3c.training.chief import Chief


class Snapshots:
    """A training rank's shard to the evaluator rank every ``eval.every`` steps, the one the
    run ended with (``eval.at_end``), and DONE at the end (as a parameter server sends
    them); nothing without an evaluator rank."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, start_step: int):
        self.sender = Sender(t)
        self.evaluators = [] if roles.evaluator is None else [roles.evaluator]
        self.schedule = EvalSchedule(cfg.eval.every if self.evaluators else 0, self._send,
                                     at_end=cfg.eval.at_end, start=start_step)

    def _send(self, version: int, theta_shard: np.ndarray) -> None:
        self.sender.post(ParamsMsg(version, theta_shard.copy()), self.evaluators, Tag.SNAPSHOT)

    def after_step(self, shard: ShardServer) -> None:
        """Send the shard if its version is due for evaluation."""
        self.schedule.after_step(shard.version, shard.theta_shard)

    def done(self, shard: ShardServer) -> None:
        """The run is over: the shard it ended with (unless sent already), then DONE to the
        evaluator."""
        self.schedule.last(shard.version, shard.theta_shard)
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
        self.final_params: Params | None = None  # what the run ended with, once known

    def send_start(self, step: int, theta: np.ndarray, opt_state: OptimizerState) -> ShardServer:
        """Hand every other training rank its shard of the start state; the chief's own."""
        own = None
        states = StateMsg.start_shards(step, theta, opt_state, self.plan)
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
    def workers_finished(self) -> bool:
        """Every other rank's final state and final report arrived."""
        return (len(self.final_states) == len(self.others)
                and len(self.inbox.final_reports) == len(self.others))

    @property
    def finished(self) -> bool:
        """The workers finished, the evaluator rank (if any) is done, every send
        completed."""
        return self.workers_finished and self.inbox.evaluator_done and self.sender.idle()

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
        final = save_shards(self.chief, self.plan, [shards[r] for r in self.roles.workers])
        self.final_params = final or self.final_params
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
        evaluator = self.roles.evaluator
        if self.workers_finished and evaluator is not None:  # only its end is due
            silent, why = [evaluator], "the evaluator rank has not ended"
        else:
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
