"""The chief's side of the protocol: its mailboxes, the stop protocol and the watchdog."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from dba3c.adam import AdamState
from dba3c.config import Config
from dba3c.dist.mailbox import Inbox, Sender
from dba3c.dist.wire import (CONTROL, EVAL, HEADER, PSINFO, QUERY, REPORT_KEYS, STATE, STATS,
                             STATUS, STOP, STOP_AT, header, message, payload, report_dict)
from dba3c.errors import TrainingError
from dba3c.params import shard_bounds
from dba3c.roles import Roles
from dba3c.transport import ANY_SOURCE, Transport
from dba3c.watchdog import StallClock, stalled_ranks

if TYPE_CHECKING:
    from dba3c.chief import Chief


class ChiefLink:
    """The chief's mailboxes: worker reports, PS info and state, evaluations; and STOP."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief, num_params: int):
        self.t, self.roles, self.cfg, self.chief = t, roles, cfg, chief
        self.bounds = shard_bounds(num_params, len(roles.ps))
        self.sender = Sender(t)
        self.stats = Inbox(t, ANY_SOURCE, STATS, len(REPORT_KEYS) + 2, np.float64)
        self.infos = {p: Inbox(t, p, PSINFO, 6, np.float64) for p in roles.ps}
        self.states = {p: Inbox(t, p, STATE, HEADER + 3 * (hi - lo))
                       for p, (lo, hi) in zip(roles.ps, self.bounds)}
        self.replies = {p: Inbox(t, p, CONTROL, 2, np.int64) for p in roles.ps}
        self.statuses = {p: Inbox(t, p, STATUS, 2 + roles.num_workers, np.int64)
                         for p in roles.ps}
        self.answers: dict[int, tuple[int, set[int]]] = {}
        self.clock = StallClock(cfg.dist.stall_timeout, time.monotonic())
        self.evals = (Inbox(t, roles.evaluator, EVAL, cfg.eval.episodes + 2, np.float64)
                      if roles.evaluator is not None else None)
        self.pending_state: dict[int, dict[int, np.ndarray]] = {}
        self.final_states: dict[int, int] = {}  # PS rank -> the version it ended at
        # PS rank -> version of its newest PSINFO (the last version it reported)
        self.info_versions: dict[int, int] = {}
        self.final_reports: set[int] = set()
        self.frozen: dict[int, int] = {}
        self.stop_sent = self.stop_at_sent = False
        self.evaluator_done = roles.evaluator is None

    def send_init(self, step: int, theta: np.ndarray, adam: AdamState) -> None:
        """Hand every PS its shard of the starting parameters and Adam state."""
        for p, (lo, hi) in zip(self.roles.ps, self.bounds):
            buf = message(3 * (hi - lo))
            header(buf)[:2] = (step, adam.count)
            payload(buf)[:] = np.concatenate([theta[lo:hi], adam.m_shard[lo:hi],
                                              adam.v_shard[lo:hi]])
            self.sender.send(buf, [p], STATE)

    @property
    def finished(self) -> bool:
        """Final state from every PS and its PSINFO for that final version (sent before the
        state, but a message of another tag can be received after it: without it the chief
        would end without logging the last step), last report from every worker, evaluator
        done."""
        infos_seen = all(self.info_versions.get(p, -1) >= version
                         for p, version in self.final_states.items())
        return (len(self.final_states) == len(self.roles.ps) and infos_seen
                and self.evaluator_done and len(self.final_reports) == len(self.roles.workers)
                and self.sender.idle())

    def poll(self) -> None:
        """Process whatever arrived; send STOP / STOP_AT when the chief wants to stop."""
        while (vec := self.stats.poll()) is not None:
            rank = int(vec[-1])
            report, final = report_dict(vec[:-1])
            self.chief.worker_report(rank, report)
            if final:
                self.final_reports.add(rank)
                self.clock.progress(time.monotonic())
        for p, inbox in self.infos.items():
            while (info := inbox.poll()) is not None:
                self._ps_info(p, info)
        for p, inbox in self.states.items():
            while (msg := inbox.poll()) is not None:
                self._state(p, msg)
        while self.evals is not None and (res := self.evals.poll()) is not None:
            step, count = int(res[0]), int(res[1])
            if step == -1:
                self.evaluator_done = True
                self.clock.progress(time.monotonic())
            else:
                self.chief.on_eval(step, list(res[2:2 + count]))
        self._stop_protocol()
        self._watch()

    def _watch(self) -> None:
        """The stall watchdog: QUERY the parameter servers shortly before
        ``dist.stall_timeout``; at the timeout fail, naming the ranks the run waits on."""
        for p, inbox in self.statuses.items():
            while (status := inbox.poll()) is not None:
                self.answers[p] = (int(status[0]), set(status[2:2 + status[1]].tolist()))
        now = time.monotonic()
        running = tuple(p for p in self.roles.ps if p not in self.final_states)
        if self.clock.query_due(now) and running:
            self.answers.clear()
            self.sender.send(np.array([QUERY, 0], np.int64), running, CONTROL)
        if not self.clock.expired(now):
            return
        if running:
            ranks, why = stalled_ranks(self.roles.workers, running, self.answers,
                                       self.info_versions)
        else:  # every shard is final: only the workers' (and evaluator's) goodbyes are due
            evaluator = (set() if self.evaluator_done or self.roles.evaluator is None
                         else {self.roles.evaluator})
            ranks = sorted(set(self.roles.workers) - self.final_reports | evaluator)
            why = f"no final report from {ranks}"
        timeout = self.cfg.dist.stall_timeout
        raise TrainingError(f"no step for {timeout:g} s, waiting on ranks {ranks} ({why}; "
                            f"dist.stall_timeout={timeout:g})")

    def _ps_info(self, p: int, info: np.ndarray) -> None:
        self.info_versions[p] = int(info[0])
        if p == self.roles.ps[0]:
            extra = self.chief.extra
            extra["dist/replicas"] = self.roles.replicas
        self.chief.extra[f"dist/dropped_late/ps{p}"] = info[1]
        self.chief.extra["train/nonfinite_skipped"] = info[2]
        if self.cfg.dist.mode == "async" and info[4]:
            self.chief.extra["dist/staleness_mean"] = info[3] / info[4]
            self.chief.extra["dist/staleness_max"] = info[5]
        if p == self.roles.ps[0] and int(info[0]) > self.chief.step:
            self.chief.on_step(int(info[0]))
            self.clock.progress(time.monotonic())

    def _state(self, p: int, msg: np.ndarray) -> None:
        version, count, final = (int(x) for x in header(msg)[:3])
        self.pending_state.setdefault(version, {})[p] = msg
        if final:
            self.final_states[p] = version
            self.clock.progress(time.monotonic())
        shards = self.pending_state[version]
        if len(shards) < len(self.roles.ps):
            return
        parts = [payload(shards[p]) for p in self.roles.ps]
        sizes = [hi - lo for lo, hi in self.bounds]
        theta, m, v = (np.concatenate([part[k * n:(k + 1) * n] for part, n in zip(parts, sizes)])
                       for k in range(3))
        if version > self.chief.start_step:
            self.chief.save_checkpoint(version, theta, m, v, count)
        del self.pending_state[version]

    def _stop_protocol(self) -> None:
        """STOP every PS, then STOP_AT the highest version they froze at. A PS that ended by
        itself (train.max_steps) before it saw STOP counts as frozen at its final version:
        a PS frozen one step behind it is told to catch up instead of waiting forever."""
        if self.chief.stop_reason is None or self.stop_at_sent:
            return
        if not self.stop_sent:
            if not self.final_states:  # once one PS ended at train.max_steps, all will
                self.stop_sent = True
                self.sender.send(np.array([STOP, 0], np.int64), self.roles.ps, CONTROL)
            return
        if self.cfg.dist.mode == "async":
            return
        for p, inbox in self.replies.items():
            if (reply := inbox.poll()) is not None:
                self.frozen[p] = int(reply[1])
        frozen = {**self.frozen, **self.final_states}
        if len(frozen) == len(self.roles.ps):
            self.stop_at_sent = True
            waiting = [p for p in self.roles.ps if p not in self.final_states]
            self.sender.send(np.array([STOP_AT, max(frozen.values())], np.int64), waiting,
                             CONTROL)

