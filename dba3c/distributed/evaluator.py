"""The evaluator rank: plays the newest complete snapshot the shards' owners send (the
parameter servers, or with collective aggregation the workers)."""

from __future__ import annotations

import time

from dba3c.config import Config
from dba3c.core import Transport
from dba3c.distributed.mailbox import Sender, ShardFeed
from dba3c.distributed.roles import Roles, make_shard_plan
from dba3c.distributed.transport import wait_until
from dba3c.distributed.wire import END, EvalMsg, Tag
from dba3c.learning.models import NetSpec

IDLE_S = 0.01  # sleep between looks for a new snapshot


class EvaluatorRank:
    """Evaluates each new complete snapshot (every ``eval.every`` steps) and sends the
    scores to the chief; an evaluation in progress stops once any PS has finished (nothing
    sent), or with ``eval.stop_below_target`` once it cannot reach the target (the games
    played sent)."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, spec: NetSpec):
        from dba3c.games.evaluation import make_eval_pool, stop_rule
        from dba3c.learning.learner import Learner

        self.cfg = cfg
        owners = roles.shard_owners  # the parameter servers, or the collective's workers
        self.feed = ShardFeed(t, owners, make_shard_plan(cfg, spec.layout(), len(owners)),
                              Tag.SNAPSHOT)
        self.sender = Sender(t)
        self.learner = Learner(spec, cfg.train, spec.init_params(0))
        self.pool = make_eval_pool(cfg, cfg.eval.episodes)
        self.give_up = stop_rule(cfg)
        self.evaluated = -1

    def _ended(self) -> bool:
        self.feed.poll()
        return self.feed.ended

    def poll(self) -> bool:
        """Evaluate the newest complete snapshot if it is new; True if one was played."""
        from dba3c.games.evaluation import play

        if self._ended():
            return False
        step = self.feed.complete_version()
        if step <= self.evaluated:
            return False
        self.learner.set_params(self.feed.params().theta)
        scores = play(self.learner.predict, self.pool, self.cfg.eval.episodes,
                      greedy=self.cfg.eval.greedy, seed=self.cfg.run.seed + step,
                      should_stop=self._ended, give_up=self.give_up)
        self.evaluated = step
        gave_up = self.give_up is not None and self.give_up(scores)
        if len(scores) == self.cfg.eval.episodes or gave_up:
            self.sender.post(EvalMsg(step, tuple(scores)), [0])
        return True

    def close(self) -> None:
        """Wait for every PS's DONE (all their sends matched before the barrier), then tell
        the chief the evaluator has finished."""
        self.pool.close()
        wait_until(lambda: self._ended() and all(self.feed.done))
        self.sender.post(EvalMsg(END), [0])
        wait_until(self.sender.idle)


def run_evaluator(t: Transport, roles: Roles, cfg: Config, spec: NetSpec) -> None:
    """Evaluate snapshots until the run ends; report to the chief."""
    evaluator = EvaluatorRank(t, roles, cfg, spec)
    while not evaluator.feed.ended:
        if not evaluator.poll():
            time.sleep(IDLE_S)
    evaluator.close()
