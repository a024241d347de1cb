"""The evaluator rank: plays the newest complete snapshot the parameter servers send."""

from __future__ import annotations

import time

import numpy as np

from dba3c.config import Config
from dba3c.dist.mailbox import Inbox, Sender
from dba3c.dist.wire import EVAL, HEADER, SNAPSHOT, header, payload
from dba3c.models import NetSpec
from dba3c.params import shard_bounds
from dba3c.roles import Roles
from dba3c.transport import Transport, wait_until


def run_evaluator(t: Transport, roles: Roles, cfg: Config, spec: NetSpec) -> None:
    """Evaluate the newest complete snapshot whenever one arrives; report to the chief."""
    from dba3c.evaluation import make_eval_pool, play
    from dba3c.learner import Learner

    bounds = shard_bounds(spec.layout().num_params, len(roles.ps))
    inboxes = [Inbox(t, p, SNAPSHOT, HEADER + hi - lo) for p, (lo, hi) in zip(roles.ps, bounds)]
    latest: list[np.ndarray | None] = [None] * len(roles.ps)
    done = [False] * len(roles.ps)
    sender = Sender(t)

    def drain() -> bool:
        """Take what arrived; True once any PS has finished (stop evaluating then)."""
        for i, inbox in enumerate(inboxes):
            while not done[i] and (msg := inbox.poll()) is not None:
                if header(msg)[0] == -1:
                    done[i] = True
                else:
                    latest[i] = msg
        return any(done)

    learner = Learner(spec, cfg.train, spec.init_params(0))
    pool = make_eval_pool(cfg, cfg.eval.episodes)
    theta, evaluated = np.zeros(spec.layout().num_params, np.float32), -1
    while not drain():
        versions = {-2 if m is None else int(header(m)[0]) for m in latest}
        step = versions.pop() if len(versions) == 1 else -2
        if step <= evaluated:
            time.sleep(0.01)
            continue
        for (lo, hi), msg in zip(bounds, latest):
            assert msg is not None, "step >= 0: every shard has this version"
            theta[lo:hi] = payload(msg)
        learner.set_params(theta)
        scores = play(learner.predict, pool, cfg.eval.episodes, greedy=cfg.eval.greedy,
                      seed=cfg.run.seed + step, should_stop=drain)
        evaluated = step
        if len(scores) == cfg.eval.episodes:
            sender.send(np.array([step, len(scores), *scores], np.float64), [0], EVAL)
    pool.close()
    wait_until(lambda: drain() and all(done))  # every PS's sends matched before the barrier
    sender.send(np.array([-1, 0], np.float64), [0], EVAL)
    wait_until(sender.idle)

