"""The chief's side of the protocol: its mailboxes, the stop protocol and the watchdog."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config
from dba3c.core import Params, Transport
from dba3c.distributed.chief_inbox import ChiefInbox, save_shards
from dba3c.distributed.mailbox import Inbox, Sender
from dba3c.distributed.roles import Roles
from dba3c.distributed.watchdog import StallClock, stalled_ranks
from dba3c.distributed.wire import (
    Command,
    ControlMsg,
    InfoMsg,
    StateMsg,
    StatusMsg,
)
from dba3c.errors import TrainingError
from dba3c.learning.params import ShardPlan
from dba3c.learning.rules import OptimizerState

if TYPE_CHECKING:
    from dba3c.training.chief import Chief



class ChiefLink:
    """The chief's mailboxes: worker reports, PS info and state, evaluations; and STOP."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief, num_params: int):
        self.t, self.roles, self.cfg, self.chief = t, roles, cfg, chief
        self.plan = ShardPlan(num_params, len(roles.ps))
        self.sender = Sender(t)
        self.clock = StallClock(cfg.dist.stall_timeout, time.monotonic())
        self.inbox = ChiefInbox(t, roles, cfg, chief, self.clock)
        self.final_reports = self.inbox.final_reports
        self.infos = {p: Inbox(t, p, InfoMsg, InfoMsg.SIZE) for p in roles.ps}
        self.states = {p: Inbox(t, p, StateMsg, StateMsg.size(n))
                       for p, n in zip(roles.ps, self.plan.sizes)}
        self.replies = {p: Inbox(t, p, ControlMsg, ControlMsg.SIZE) for p in roles.ps}
        self.statuses = {p: Inbox(t, p, StatusMsg, StatusMsg.size(roles.num_workers))
                         for p in roles.ps}
        self.answers: dict[int, tuple[int, set[int]]] = {}
        self.pending_state: dict[int, dict[int, StateMsg]] = {}  # version -> PS -> state
        self.final_states: dict[int, int] = {}  # PS rank -> the version it ended at
        # PS rank -> version of its newest PSINFO (the last version it reported)
        self.info_versions: dict[int, int] = {}
        self.frozen: dict[int, int] = {}
        self.stop_sent = self.stop_at_sent = False
        self.final_params: Params | None = None  # what the run ended with, once known

    def send_init(self, step: int, theta: np.ndarray, opt_state: OptimizerState) -> None:
        """Hand every PS its shard of the starting parameters and optimizer state."""
        shards = StateMsg.start_shards(step, theta, opt_state, self.plan)
        for p, state in zip(self.roles.ps, shards):
            self.sender.post(state, [p])

    @property
    def finished(self) -> bool:
        """Final state from every PS and its PSINFO for that final version (sent before the
        state, but a message of another tag can be received after it: without it the chief
        would end without logging the last step), last report from every worker, evaluator
        done."""
        infos_seen = all(self.info_versions.get(p, -1) >= version
                         for p, version in self.final_states.items())
        return (len(self.final_states) == len(self.roles.ps) and infos_seen
                and self.inbox.evaluator_done
                and len(self.final_reports) == len(self.roles.workers)
                and self.sender.idle())

    def poll(self) -> None:
        """Process whatever arrived; send STOP / STOP_AT when the chief wants to stop."""
        self.inbox.poll()
        for p, infos in self.infos.items():
            while (info := infos.poll()) is not None:
                self._ps_info(p, info)
        for p, states in self.states.items():
            while (state := states.poll()) is not None:
                self._state(p, state)
        self._stop_protocol()
        self._watch()

    def _watch(self) -> None:
        """The stall watchdog: QUERY the parameter servers shortly before
        ``dist.stall_timeout``; at the timeout fail, naming the ranks the run waits on."""
        for p, inbox in self.statuses.items():
            while (status := inbox.poll()) is not None:
                self.answers[p] = (status.version, set(status.ranks))
        now = time.monotonic()
        running = tuple(p for p in self.roles.ps if p not in self.final_states)
        if self.clock.query_due(now) and running:
            self.answers.clear()
            self.sender.post(ControlMsg(Command.QUERY), running)
        if not self.clock.expired(now):
            return
        if running:
            ranks, why = stalled_ranks(self.roles.workers, running, self.answers,
                                       self.info_versions)
        else:  # every shard is final: only the workers' (and evaluator's) goodbyes are due
            evaluator = (set() if self.inbox.evaluator_done or self.roles.evaluator is None
                         else {self.roles.evaluator})
            ranks = sorted(set(self.roles.workers) - self.final_reports | evaluator)
            why = f"no final report from {ranks}"
        timeout = self.cfg.dist.stall_timeout
        raise TrainingError(f"no step for {timeout:g} s, waiting on ranks {ranks} ({why}; "
                            f"dist.stall_timeout={timeout:g})")

    def _ps_info(self, p: int, info: InfoMsg) -> None:
        self.info_versions[p] = info.version
        if p == self.roles.ps[0]:
            extra = self.chief.extra
            extra["dist/replicas"] = self.roles.replicas
        self.chief.extra[f"dist/dropped_late/ps{p}"] = info.dropped_late
        self.chief.extra["train/nonfinite_skipped"] = info.nonfinite_skipped
        if self.cfg.dist.mode == "async" and info.staleness_count:
            self.chief.extra["dist/staleness_mean"] = info.staleness_sum / info.staleness_count
            self.chief.extra["dist/staleness_max"] = info.staleness_max
        if p == self.roles.ps[0] and info.version > self.chief.step:
            self.chief.on_step(info.version)
            self.clock.progress(time.monotonic())

    def _state(self, p: int, msg: StateMsg) -> None:
        self.pending_state.setdefault(msg.version, {})[p] = msg
        if msg.final:
            self.final_states[p] = msg.version
            self.clock.progress(time.monotonic())
        shards = self.pending_state[msg.version]
        if len(shards) < len(self.roles.ps):
            return
        final = save_shards(self.chief, self.plan, [shards[p] for p in self.roles.ps])
        self.final_params = final or self.final_params
        del self.pending_state[msg.version]

    def _stop_protocol(self) -> None:
        """STOP every PS, then STOP_AT the highest version they froze at. A PS that ended by
        itself (train.max_steps) before it saw STOP counts as frozen at its final version:
        a PS frozen one step behind it is told to catch up instead of waiting forever."""
        if self.chief.stop_reason is None or self.stop_at_sent:
            return
        if not self.stop_sent:
            if not self.final_states:  # once one PS ended at train.max_steps, all will
                self.stop_sent = True
                self.sender.post(ControlMsg(Command.STOP), self.roles.ps)
            return
        if self.cfg.dist.mode == "async":
            return
        for p, inbox in self.replies.items():
            if (reply := inbox.poll()) is not None:
                self.frozen[p] = reply.argument
        frozen = {**self.frozen, **self.final_states}
        if len(frozen) == len(self.roles.ps):
            self.stop_at_sent = True
            waiting = [p for p in self.roles.ps if p not in self.final_states]
            self.sender.post(ControlMsg(Command.STOP_AT, max(frozen.values())), waiting)

