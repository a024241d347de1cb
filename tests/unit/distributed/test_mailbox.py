"""Sends and receives in flight (dba3c.distributed.mailbox): the Sender releases completed
buffers, the Inbox hands messages over in the order they matched."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from dba3c.core import ANY_SOURCE
from dba3c.distributed.mailbox import Inbox, Sender
from dba3c.distributed.wire import (
    END,
    GradMsg,
    Tag,
    framed_size,
)
from tests.support.world import FakeTransport, PostedReceives


class ManualSends(FakeTransport):
    """A transport whose sends complete only when the test says so."""

    def __init__(self):
        self.completed = 0  # sends 0 .. completed-1 have completed
        self.count = 0

    def isend(self, buf, dest, tag):
        index, self.count = self.count, self.count + 1
        transport = self

        class Request:
            def test(self) -> bool:
                return index < transport.completed
        return Request()


def take(inbox: Inbox[GradMsg]) -> GradMsg:
    """The next message ``inbox`` hands over; there must be one."""
    msg = inbox.poll()
    assert msg is not None
    return msg


def test_sender_keeps_buffers_in_flight_and_releases_completed_ones():
    # a worker sends a gradient shard every step (1.3 MB for the paper network): the
    # buffers of completed sends must be freed, or memory grows by that much per step
    transport = ManualSends()
    sender, refs = Sender(transport), []
    for step in range(50):
        buf = np.full(1000, step, np.float32)
        refs.append(weakref.ref(buf))
        sender.send(buf, [1], Tag.GRAD)
        del buf
        if step < 40:
            transport.completed = step + 1  # sends up to this step have completed
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    # sends 40..49 have not completed: MPI may still read them, so they stay alive; every
    # completed one was released by the next send
    assert alive == list(range(40, 50))
    transport.completed = 50
    assert sender.idle()
    gc.collect()
    assert all(r() is None for r in refs)


def test_inbox_with_several_receives_hands_messages_over_in_the_order_they_matched():
    # a parameter server keeps 8 gradient receives posted from any worker: a later receive
    # can complete first (a small message behind a large one), but messages must come out in
    # the order they matched, or a worker's BYE could overtake its last gradient
    transport = PostedReceives()
    inbox = Inbox(transport, ANY_SOURCE, GradMsg, framed_size(4), depth=3)
    assert len(transport.posted) == 3
    first = transport.arrive(GradMsg(7, 2, np.full(4, 1.0, np.float32)), complete=False)
    transport.arrive(GradMsg(END, 2))
    transport.arrive(GradMsg(7, 5, np.full(4, 5.0, np.float32)))
    assert inbox.poll() is None  # the first matched receive is still in progress
    # but what completed behind it can be seen (not taken): a stall names only the sender
    # whose message is stuck
    assert [(m.version, m.rank) for m in inbox.peek()] == [(END, 2), (7, 5)]
    first["done"] = True
    got = [take(inbox) for _ in range(3)]
    assert [(m.version, m.rank) for m in got] == [(7, 2), (END, 2), (7, 5)]
    assert got[0].grad_shard.tolist() == [1.0] * 4 and got[2].grad_shard.tolist() == [5.0] * 4
    assert inbox.poll() is None and inbox.peek() == []
    # each buffer was posted again after its message: still 3 receives waiting, and the next
    # message lands in the first of them
    assert len([e for e in transport.posted if not e["matched"]]) == 3
    transport.arrive(GradMsg(8, 5, np.full(4, 6.0, np.float32)))
    assert take(inbox).grad_shard.tolist() == [6.0] * 4
