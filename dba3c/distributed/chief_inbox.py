"""What reaches the chief in either aggregation mode: worker reports, the evaluator rank's
messages, and the shards' states that make a checkpoint."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config
from dba3c.core import ANY_SOURCE, Evaluation, Params, Transport
from dba3c.distributed.mailbox import Inbox, Sender
from dba3c.distributed.roles import Roles
from dba3c.distributed.watchdog import StallClock
from dba3c.distributed.wire import END, Command, ControlMsg, EvalMsg, ReportMsg, StateMsg
from dba3c.learning.params import ShardPlan

if TYPE_CHECKING:
    from dba3c.training.chief import Chief


class ChiefInbox:
    """What reaches the chief in either aggregation mode: the workers' reports (their final
    ones counted) and the evaluator rank's results, progress and end; each final one, and
    each game of an evaluation after the run ended, restarts the stall ``clock``.

    The chief sends the evaluator rank STOP exactly once: when a signal stops the run (the
    evaluator drops what it plays), or else in answer to its END (the evaluator waits for
    it, so that neither side leaves a message unreceived).
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief,
                 clock: StallClock):
        self.chief, self.clock, self.evaluator = chief, clock, roles.evaluator
        self.stats = Inbox(t, ANY_SOURCE, ReportMsg, ReportMsg.SIZE)
        self.final_reports: set[int] = set()
        self.sender = Sender(t)
        self.evals = self.control = None
        if roles.evaluator is not None:
            self.evals = Inbox(t, roles.evaluator, EvalMsg,
                               EvalMsg.size(cfg.eval.episodes, len(chief.layout.layers)))
            self.control = Inbox(t, roles.evaluator, ControlMsg, ControlMsg.SIZE)
        self.evaluator_ended = self.stop_sent = roles.evaluator is None
        self.eval_games = self.eval_frames = 0  # the end's evaluation so far (PLAYED, FRAMES)

    @property
    def evaluator_done(self) -> bool:
        """No evaluator rank, or it has ended and has the chief's STOP."""
        return self.evaluator_ended and self.stop_sent and self.sender.idle()

    def poll(self) -> None:
        """Hand every report and evaluation that arrived to the chief; STOP the evaluator
        rank when it is time."""
        while (report := self.stats.poll()) is not None:
            self.chief.worker_report(report.rank, report.report)
            if report.final:
                self.final_reports.add(report.rank)
                self.clock.progress(time.monotonic())
        while self.control is not None and (played := self.control.poll()) is not None:
            self.clock.progress(time.monotonic())
            if played.command == Command.PLAYED:
                self.eval_games = played.argument
            else:
                self.eval_frames = played.argument
            self.chief.evaluation_progress(self.eval_games, self.eval_frames)
        while self.evals is not None and (result := self.evals.poll()) is not None:
            if result.step == END:
                self.evaluator_ended = True
                self.clock.progress(time.monotonic())
            elif result.scores:
                self.chief.on_eval(Evaluation(result.step, result.scores, result.active_units))
            else:
                self.chief.evaluation_dropped(result.step)
        if not self.stop_sent and (self.evaluator_ended or self.chief.signal is not None):
            assert self.evaluator is not None, "stop_sent starts True without one"
            self.stop_sent = True
            self.sender.post(ControlMsg(Command.STOP), [self.evaluator])


def save_shards(chief: Chief, plan: ShardPlan, ordered: list[StateMsg]) -> Params | None:
    """The checkpoint of the shards' states at one version (in shard order), unless the run
    started from that version. Returns the parameters when the states are the final ones
    (what the run ended with), else None."""
    version = ordered[0].version
    theta = plan.flat_chunks([s.theta_shard for s in ordered])
    if version > chief.start_step:
        chief.save_checkpoint(version, theta, plan.flat_chunks([s.m_shard for s in ordered]),
                              plan.flat_chunks([s.v_shard for s in ordered]),
                              ordered[0].opt_count)
    return Params(version, np.concatenate(theta)) if ordered[0].final else None
