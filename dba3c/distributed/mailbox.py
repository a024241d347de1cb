"""Nonblocking sends that keep their buffers alive, and standing typed receives."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np

from dba3c.core import Params, Request, Transport
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import Message, ParamsMsg, Tag, assemble, framed_size
from dba3c.learning.params import ShardPlan

M = TypeVar("M", bound=Message)


class Sender:
    """Nonblocking sends whose buffers stay alive until they complete."""

    def __init__(self, transport: Transport):
        self.t = transport
        self._pending: list[tuple] = []

    def post(self, msg: Message, dests: Iterable[int], tag: Tag | None = None) -> None:
        """Encode ``msg`` once and send it to every rank in ``dests`` (with its own tag
        unless ``tag`` says otherwise)."""
        self.send(msg.encode(), dests, msg.TAG if tag is None else tag)

    def send(self, buf: np.ndarray, dests: Iterable[int], tag: int) -> None:
        """Send ``buf`` (not to be modified afterwards) to every rank in ``dests``; buffers
        of sends completed by now are released (a worker sends a gradient every step)."""
        self.idle()
        for dest in dests:
            self._pending.append((self.t.isend(buf, dest, tag), buf))

    def idle(self) -> bool:
        """Forget completed sends; True when none is pending."""
        self._pending = [(r, b) for r, b in self._pending if not r.test()]
        return not self._pending


class Inbox(Generic[M]):
    """Standing receives of messages of one kind from one source (or ANY_SOURCE): ``depth``
    of them, each reposted after its message. ``size``: a buffer's length in the kind's
    dtype; ``tag``: when not the kind's own (SNAPSHOT carries ParamsMsg).

    Receives match messages in the order they were posted (MPI's rule), so taking them in
    that order keeps each source's messages in the order it sent them."""

    def __init__(self, transport: Transport, source: int, kind: type[M], size: int,
                 tag: Tag | None = None, depth: int = 1):
        self.t, self.source, self.kind = transport, source, kind
        self.tag = kind.TAG if tag is None else tag
        self._posted = deque(self._post(np.zeros(size, kind.DTYPE)) for _ in range(depth))

    def _post(self, buf: np.ndarray) -> tuple[Request, np.ndarray]:
        return self.t.irecv(buf, self.source, self.tag), buf

    def poll(self) -> M | None:
        """The next message, decoded from a copy of its buffer, or None; its receive is
        posted again."""
        request, buf = self._posted[0]
        if not request.test():
            return None
        msg = self.kind.decode(buf.copy())
        self._posted.popleft()
        self._posted.append(self._post(buf))
        return msg

    def peek(self) -> list[M]:
        """Copies of the messages that have arrived but :meth:`poll` has not handed over, in
        the order they matched: those behind a receive still in progress (a sender whose
        message stalls mid-transfer, its link cut). A stall watchdog counts their senders as
        heard from; only the stalled one is to blame."""
        return [self.kind.decode(buf.copy()) for request, buf in self._posted if request.test()]


def receive_one(transport: Transport, source: int, kind: type[M], size: int) -> M:
    """Wait for one message of ``kind`` from ``source`` (no standing receive is left)."""
    buf = np.zeros(size, kind.DTYPE)
    wait_until(transport.irecv(buf, source, kind.TAG).test)
    return kind.decode(buf)


NONE_YET = -2  # the version of a shard not received yet


class ShardFeed:
    """The newest parameters from each PS on one tag (PARAMS to a worker, SNAPSHOT to the
    evaluator), until each PS sent DONE."""

    def __init__(self, t: Transport, ps: Sequence[int], plan: ShardPlan, tag: Tag):
        self.plan = plan
        self.inboxes = [Inbox(t, p, ParamsMsg, framed_size(n), tag)
                        for p, n in zip(ps, plan.sizes)]
        self.latest: list[ParamsMsg | None] = [None] * len(ps)
        self.done = [False] * len(ps)
        self.final = False  # a PS sent the last version of the run: train no further

    def poll(self) -> None:
        """Take every message that arrived."""
        for i, inbox in enumerate(self.inboxes):
            while not self.done[i] and (msg := inbox.poll()) is not None:
                if msg.is_done:
                    self.done[i] = True
                else:
                    self.latest[i] = msg
                    self.final = self.final or msg.final

    @property
    def ended(self) -> bool:
        """A PS sent its final parameters or DONE: the run is over."""
        return self.final or any(self.done)

    def versions(self) -> list[int]:
        """The newest version from each PS (NONE_YET where none arrived)."""
        return [NONE_YET if m is None else m.version for m in self.latest]

    def complete_version(self) -> int:
        """The version every PS sent last, or NONE_YET if they differ."""
        versions = set(self.versions())
        return versions.pop() if len(versions) == 1 else NONE_YET

    def params(self) -> Params:
        """The newest shards put together (the newest version; the longest non-finite
        streak)."""
        latest = [m for m in self.latest if m is not None]
        if len(latest) < len(self.latest):
            raise RuntimeError("parameters assembled before every shard arrived")
        return Params(max(m.version for m in latest), assemble(self.plan, [m.theta_shard for m in
        latest]),
                      max(m.nonfinite_streak for m in latest))
