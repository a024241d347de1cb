"""A worker's parameter client over the parameter-server ranks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dba3c.config import Config
from dba3c.core import Params, Transport
from dba3c.distributed.mailbox import Sender, ShardFeed
from dba3c.distributed.roles import Roles
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import END, GradMsg, Tag
from dba3c.learning.params import ShardPlan, shard_bounds


class RemoteParameterClient:
    """A worker's :class:`~dba3c.core.ParameterClient` over the parameter-server ranks.

    ``pull`` and ``push`` wait, polling the parameter servers and calling ``idle`` (the chief
    does its bookkeeping there). The run is over for this worker once any PS sent its final
    parameters or DONE; :meth:`close` then says BYE and drains until every PS sent DONE.
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, num_params: int,
                 idle: Callable[[], None] | None = None):
        self.t, self.roles, self.mode, self.idle = t, roles, cfg.dist.mode, idle
        self.wire = cfg.dist.wire_dtype
        self.max_sleep_s = cfg.dist.poll_max_ms / 1000
        self.bounds = shard_bounds(num_params, len(roles.ps))
        self.feed = ShardFeed(t, roles.ps, ShardPlan(num_params, len(roles.ps)), Tag.PARAMS)
        self.sender = Sender(t)

    def _wait(self, ready: Callable[[list[int]], bool]) -> Params | None:
        def check() -> bool:
            self.feed.poll()
            return self.feed.ended or ready(self.feed.versions())

        wait_until(check, self.idle, self.max_sleep_s)
        return None if self.feed.ended else self.feed.params()

    def pull(self) -> Params:
        """The first complete parameters (also when the run ends right after them: a
        finished run started again)."""
        def complete_or_ended() -> bool:
            self.feed.poll()
            return self.feed.complete_version() >= 0 or all(self.feed.done)

        wait_until(complete_or_ended, self.idle, self.max_sleep_s)
        if self.feed.complete_version() < 0:
            raise RuntimeError("the run ended before this worker received parameters")
        return self.feed.params()

    def push(self, version: int, grad: np.ndarray) -> Params | None:
        """Send one gradient slice to each PS (in ``dist.wire_dtype``); wait for the
        parameters to train on next."""
        for p, (lo, hi) in zip(self.roles.ps, self.bounds):
            self.sender.post(GradMsg(version, self.t.rank, grad[lo:hi], self.wire), [p])
        if self.mode == "async":  # one reply from every PS
            self.feed.latest = [None] * len(self.feed.latest)
            return self._wait(lambda v: min(v) >= 0)
        return self._wait(lambda v: len(set(v)) == 1 and v[0] > version)

    def close(self) -> None:
        """Say BYE to every PS and drain their messages until each has sent DONE."""
        self.sender.post(GradMsg(END, self.t.rank), self.roles.ps)

        def closed() -> bool:
            self.feed.poll()
            return all(self.feed.done) and self.sender.idle()

        wait_until(closed, self.idle, self.max_sleep_s)
