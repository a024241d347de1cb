"""The evaluator rank: plays the newest complete snapshot the shards' owners send (the
parameter servers, or with collective aggregation the workers)."""

from __future__ import annotations

import time

from dba3c.config import Config
from dba3c.core import Transport
from dba3c.distributed.mailbox import Inbox, Sender, ShardFeed
from dba3c.distributed.roles import Roles, make_shard_plan
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import END, Command, ControlMsg, EvalMsg, Tag
from dba3c.learning.models import NetSpec

IDLE_S = 0.01  # sleep between looks for a new snapshot
FRAMES_EVERY_S = 1.0  # between FRAMES messages while the run waits for its last evaluation


class EvaluatorRank:
    """Evaluates each new complete snapshot (every ``eval.every`` steps) and sends the
    scores to the chief (with ``eval.stop_below_target``, those of the games played once
    the target is out of reach), with each layer's active units on the probe frames
    (:class:`~dba3c.games.evaluation.UnitProbe`).

    When the run ends (an owner sent its last shard or DONE), with ``eval.at_end`` it
    finishes the evaluation in progress, then evaluates the final snapshot (every owner
    sends it before DONE) and tells the chief of each game it plays meanwhile and, every
    second, of the frames played (PLAYED and FRAMES: progress, and a sign of life for the
    stall watchdog); without ``eval.at_end`` it drops
    the evaluation in progress. The chief's STOP (a signal stopped the run) drops it at any
    time. A dropped evaluation is reported as one without scores.
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, spec: NetSpec):
        from dba3c.games.evaluation import UnitProbe, make_eval_pool, stop_rule
        from dba3c.learning.learner import Learner

        self.cfg = cfg
        owners = roles.shard_owners  # the parameter servers, or the collective's workers
        self.feed = ShardFeed(t, owners, make_shard_plan(cfg, spec.layout(), len(owners)),
                              Tag.SNAPSHOT)
        self.control = Inbox(t, 0, ControlMsg, ControlMsg.SIZE)
        self.sender = Sender(t)
        self.learner = Learner(spec, cfg.train, spec.init_params(0))
        self.probe = UnitProbe(cfg, spec)
        self.pool = make_eval_pool(cfg, cfg.eval.episodes)
        self.give_up = stop_rule(cfg)
        self.evaluated = -1
        self.stopped = False  # the chief's STOP arrived
        self._frames_sent = -float("inf")  # when the last FRAMES message went

    def _poll(self) -> None:
        """Take the snapshots and the chief's STOP that arrived."""
        self.feed.poll()
        while self.control.poll() is not None:  # STOP: the one command the chief sends
            self.stopped = True

    @property
    def dropping(self) -> bool:
        """Whether evaluations are over: the chief's STOP, or the run's end without
        ``eval.at_end``."""
        return self.stopped or (self.feed.ended and not self.cfg.eval.at_end)

    def _should_stop(self) -> bool:
        self._poll()
        return self.dropping

    def _played(self, games: int, _score: float) -> None:
        if self.feed.ended:
            self.sender.post(ControlMsg(Command.PLAYED, games), [0])

    def _framed(self, frames: int) -> None:
        now = time.monotonic()
        if self.feed.ended and now - self._frames_sent >= FRAMES_EVERY_S:
            self._frames_sent = now
            self.sender.post(ControlMsg(Command.FRAMES, frames), [0])

    @property
    def finished(self) -> bool:
        """Nothing is left to evaluate: evaluations are over, or every owner sent DONE and
        the newest complete snapshot was evaluated."""
        return self.dropping or (all(self.feed.done)
                                 and self.feed.complete_version() <= self.evaluated)

    def poll(self) -> bool:
        """Evaluate the newest complete snapshot if it is new (once the run ended, when
        every owner sent its last); True if one was played."""
        from dba3c.games.evaluation import play

        self._poll()
        step = self.feed.complete_version()
        if self.dropping or step <= self.evaluated or (self.feed.ended
                                                       and not all(self.feed.done)):
            return False
        theta = self.feed.params().theta
        self.learner.set_params(theta)
        scores = play(self.learner.predict, self.pool, self.cfg.eval.episodes,
                      greedy=self.cfg.eval.greedy, seed=self.cfg.run.seed + step,
                      on_game=self._played, on_frames=self._framed,
                      should_stop=self._should_stop,
                      give_up=self.give_up)
        self.evaluated = step
        gave_up = self.give_up is not None and self.give_up(scores)
        complete = len(scores) == self.cfg.eval.episodes or gave_up
        self.sender.post(EvalMsg(step, tuple(scores), self.probe.active_units(theta))
                         if complete else EvalMsg(step), [0])
        return True

    def close(self) -> None:
        """Wait for every owner's DONE (all their sends matched before the barrier), tell
        the chief the evaluator has finished (END) and wait for its STOP, which it sends
        once either way: no message is left in flight."""
        self.pool.close()

        def owners_done() -> bool:
            self._poll()
            return all(self.feed.done)

        def stop_received() -> bool:
            self._poll()
            return self.stopped and self.sender.idle()

        wait_until(owners_done)
        self.sender.post(EvalMsg(END), [0])
        wait_until(stop_received)


def run_evaluator(t: Transport, roles: Roles, cfg: Config, spec: NetSpec) -> None:
    """Evaluate snapshots until the run ends; report to the chief."""
    evaluator = EvaluatorRank(t, roles, cfg, spec)
    while not evaluator.finished:
        if not evaluator.poll():
            time.sleep(IDLE_S)
    evaluator.close()
