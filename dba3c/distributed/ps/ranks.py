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
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import ReportMsg
from dba3c.learning.models import NetSpec
from dba3c.training.report import WorkerReport
from dba3c.training.worker import Worker

if TYPE_CHECKING:
    from dba3c.games.evaluation import BackgroundEvaluator
    from dba3c.training.chief import Chief


def run_worker(t: Transport, roles: Roles, cfg: Config, spec: NetSpec, worker: Worker,
               link: ChiefLink | None = None, chief: Chief | None = None,
               evaluator: BackgroundEvaluator | None = None) -> None:
    """Train ``worker`` on this rank; the chief (rank 0) passes its link and Chief to do its
    duties while it waits for parameters, and its evaluator thread if it evaluates."""
    client = RemoteParameterClient(t, roles, cfg, spec.layout().num_params,
                                   idle=link.poll if link else None)
    sender = Sender(t)

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
            for evaluation in finished:
                chief.on_eval(evaluation)
        return False

    worker.train(client, lambda params, report: send_report(params, report, False))
    send_report(None, worker.report({}, 0.0), True)
    client.close()
    wait_until(sender.idle)


def run_chief(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
              make_worker: Callable[[], Worker]) -> None:
    """Rank 0: resume or initialise, hand the parameter servers their shards, train if
    ``dist.chief_trains`` (then, without an evaluator rank, evaluate in a thread), and keep
    the run directory until every rank is done."""
    from dba3c.training.checkpoint import load_start
    from dba3c.training.chief import Chief

    start = load_start(cfg, spec)
    trains = 0 in roles.workers
    with Chief(cfg, start.ckpt, spec.layout(), roles.num_workers, t.hosts,
               start.changes) as chief, \
            chief.evaluator_thread(spec, trains and roles.evaluator is None) as evaluator:
        chief.install_signal_handlers()
        link = ChiefLink(t, roles, cfg, chief, spec.layout().num_params)
        link.send_init(start.step, start.theta, start.opt_state)
        if trains:
            run_worker(t, roles, cfg, spec, make_worker(), link, chief, evaluator)

        def finished() -> bool:
            link.poll()
            return link.finished

        wait_until(finished)
        chief.finish_evaluations(evaluator, link.final_params)
