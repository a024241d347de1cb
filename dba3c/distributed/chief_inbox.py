"""What reaches the chief in either aggregation mode: worker reports, evaluator results,
and the shards' states that make a checkpoint."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dba3c.config import Config
from dba3c.core import Transport
from dba3c.distributed.mailbox import Inbox
from dba3c.distributed.roles import Roles
from dba3c.distributed.transport import ANY_SOURCE
from dba3c.distributed.watchdog import StallClock
from dba3c.distributed.wire import END, EvalMsg, ReportMsg, StateMsg
from dba3c.learning.params import ShardPlan

if TYPE_CHECKING:
    from dba3c.training.chief import Chief


class ChiefInbox:
    """What reaches the chief in either aggregation mode: the workers' reports (their final
    ones counted) and the evaluator rank's results; each final one restarts the stall
    ``clock``."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief,
                 clock: StallClock):
        self.chief, self.clock = chief, clock
        self.stats = Inbox(t, ANY_SOURCE, ReportMsg, ReportMsg.SIZE)
        self.evals = (Inbox(t, roles.evaluator, EvalMsg, EvalMsg.size(cfg.eval.episodes))
                      if roles.evaluator is not None else None)
        self.final_reports: set[int] = set()
        self.evaluator_done = roles.evaluator is None

    def poll(self) -> None:
        """Hand every report and evaluation that arrived to the chief."""
        while (report := self.stats.poll()) is not None:
            self.chief.worker_report(report.rank, report.report)
            if report.final:
                self.final_reports.add(report.rank)
                self.clock.progress(time.monotonic())
        while self.evals is not None and (result := self.evals.poll()) is not None:
            if result.step == END:
                self.evaluator_done = True
                self.clock.progress(time.monotonic())
            else:
                self.chief.on_eval(result.step, list(result.scores))


def save_shards(chief: Chief, plan: ShardPlan, ordered: list[StateMsg]) -> None:
    """The checkpoint of the shards' states at one version (in shard order), unless the run
    started from that version."""
    version = ordered[0].version
    if version > chief.start_step:
        chief.save_checkpoint(version, plan.flat_chunks([s.theta_shard for s in ordered]),
                              plan.flat_chunks([s.m_shard for s in ordered]),
                              plan.flat_chunks([s.v_shard for s in ordered]),
                              ordered[0].opt_count)
