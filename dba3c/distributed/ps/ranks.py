"""The parameter-server mode's rank loops (``dist.aggregation: ps``): a worker trains with a
:class:`~dba3c.distributed.ps.client.RemoteParameterClient`; the chief (rank 0) keeps the run
through its :class:`~dba3c.distributed.ps.chief_link.ChiefLink` and may train as well. The
parameter servers' own loop is :func:`dba3c.distributed.ps.server.run_ps`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dba3c.config import Config
from dba3c.core import Params, Transport
from dba3c.distributed.mailbox import Sender
from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.roles import Roles
from dba3c.distributed.transport import wait_until
from dba3c.distributed.wire import ReportMsg
from dba3c.learning.models import NetSpec
from dba3c.training.report import WorkerReport
from dba3c.training.worker import Worker

if TYPE_CHECKING:
    from dba3c.training.chief import Chief


def run_worker(t: Transport, roles: Roles, cfg: Config, spec: NetSpec, worker: Worker,
               link: ChiefLink | None = None, chief: Chief | None = None) -> None:
    """Train ``worker`` on this rank; the chief (rank 0) passes its link and Chief to do its
    duties while it waits for parameters."""
    client = RemoteParameterClient(t, roles, cfg, spec.layout().num_params,
                                   idle=link.poll if link else None)
    sender = Sender(t)

    evaluator = None
    if chief is not None and roles.evaluator is None and cfg.eval.every:
        from dba3c.games.evaluation import BackgroundEvaluator

        evaluator = BackgroundEvaluator(cfg, spec)  # no evaluator rank: evaluate in here
        evaluator.start()

    def send_report(params: Params | None, report: WorkerReport, final: bool) -> bool:
        if chief is None:
            sender.post(ReportMsg(report, final, t.rank), [0])
            sender.idle()
            return False
        chief.worker_report(t.rank, report)
        if final:
            assert link is not None, "the chief trains with its link"
            link.final_reports.add(t.rank)
        if evaluator is not None:
            finished = (evaluator.results() if params is None
                        else evaluator.after_step(params.version, params.theta))
            for step, scores in finished:
                chief.on_eval(step, scores)
        return False

    try:
        worker.train(client, lambda params, report: send_report(params, report, False))
    finally:
        if evaluator is not None:
            evaluator.stop()
    send_report(None, worker.report({}, 0.0), True)
    client.close()
    wait_until(sender.idle)


def run_chief(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
              make_worker: Callable[[], Worker]) -> None:
    """Rank 0: resume or initialise, hand the parameter servers their shards, train if
    ``dist.chief_trains``, and keep the run directory until every rank is done."""
    from dba3c.training.checkpoint import load_start
    from dba3c.training.chief import Chief

    start = load_start(cfg, spec)
    chief = Chief(cfg, start.ckpt, spec.layout(), roles.num_workers, t.hosts)
    chief.install_signal_handlers()
    link = ChiefLink(t, roles, cfg, chief, spec.layout().num_params)
    link.send_init(start.step, start.theta, start.opt_state)
    try:
        if 0 in roles.workers:
            run_worker(t, roles, cfg, spec, make_worker(), link, chief)
        def finished() -> bool:
            link.poll()
            return link.finished

        wait_until(finished)
    finally:
        chief.close()
