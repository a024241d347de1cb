"""A worker's parameter client over the parameter-server ranks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dba3c.config import Config
from dba3c.core import Params
from dba3c.dist.mailbox import Inbox, Sender
from dba3c.dist.wire import GRAD, HEADER, PARAMS, header, message, payload
from dba3c.params import shard_bounds
from dba3c.roles import Roles
from dba3c.transport import Transport, wait_until


class RemoteParameterClient:
    """A worker's :class:`~dba3c.core.ParameterClient` over the parameter-server ranks.

    ``idle`` is called while waiting (the chief does its bookkeeping there).
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, num_params: int,
                 idle: Callable[[], None] | None = None):
        self.t, self.roles, self.mode, self.idle = t, roles, cfg.dist.mode, idle
        self.bounds = shard_bounds(num_params, len(roles.ps))
        self.inboxes = [Inbox(t, p, PARAMS, HEADER + hi - lo)
                        for p, (lo, hi) in zip(roles.ps, self.bounds)]
        self.latest: list[np.ndarray | None] = [None] * len(roles.ps)  # newest message per PS
        self.done = [False] * len(roles.ps)
        self.sender = Sender(t)
        self.theta = np.zeros(num_params, np.float32)

    def _drain(self) -> None:
        for i, inbox in enumerate(self.inboxes):
            while not self.done[i]:
                msg = inbox.poll()
                if msg is None:
                    break
                if header(msg)[0] == -1:
                    self.done[i] = True
                else:
                    self.latest[i] = msg

    def _versions(self) -> list[int]:
        return [-2 if m is None else int(header(m)[0]) for m in self.latest]

    def _wait(self, ready: Callable[[list[int]], bool]) -> Params | None:
        def check() -> bool:
            self._drain()
            return any(self.done) or ready(self._versions())

        wait_until(check, self.idle)
        if any(self.done):
            return None
        return self._params()

    def _params(self) -> Params:
        latest = [m for m in self.latest if m is not None]
        if len(latest) < len(self.latest):
            raise RuntimeError("parameters assembled before every shard arrived")
        for (lo, hi), msg in zip(self.bounds, latest):
            self.theta[lo:hi] = payload(msg)
        streak = max(int(header(m)[1]) for m in latest)
        return Params(max(self._versions()), self.theta.copy(), streak)

    def pull(self) -> Params:
        """The first complete parameters (also when the run ends right after them: a
        finished run started again)."""
        def complete() -> bool:
            v = self._versions()
            return min(v) >= 0 and len(set(v)) == 1

        def complete_or_ended() -> bool:
            self._drain()
            return complete() or all(self.done)

        wait_until(complete_or_ended, self.idle)
        if not complete():
            raise RuntimeError("the run ended before this worker received parameters")
        return self._params()

    def push(self, version: int, grad: np.ndarray) -> Params | None:
        """Send one gradient slice to each PS; wait for the parameters to train on next."""
        for p, (lo, hi) in zip(self.roles.ps, self.bounds):
            buf = message(hi - lo)
            header(buf)[:2] = (version, self.t.rank)
            payload(buf)[:] = grad[lo:hi]
            self.sender.send(buf, [p], GRAD)
        if self.mode == "async":  # one reply from every PS
            for i in range(len(self.latest)):
                self.latest[i] = None
            return self._wait(lambda v: min(v) >= 0)
        return self._wait(lambda v: len(set(v)) == 1 and v[0] > version)

    def close(self) -> None:
        """Say BYE to every PS and drain their messages until each has sent DONE."""
        bye = message(0)
        header(bye)[0] = -1
        self.sender.send(bye, self.roles.ps, GRAD)
        def closed() -> bool:
            self._drain()
            return all(self.done) and self.sender.idle()

        wait_until(closed, self.idle)

