"""The chief's side of the parameter-server protocol (dba3c.distributed.ps.chief_link), one
poll at a time on the in-process transport: when the run is finished, and the STOP / STOP_AT
commands to parameter servers that froze or ended."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.wire import (
    Command,
    ControlMsg,
    InfoMsg,
    StateMsg,
    Tag,
)
from dba3c.learning.params import shard_bounds
from tests.support.world import FakeChief, N, make_cfg, send_final_report


def final_state(version: int, n: int) -> np.ndarray:
    """A PS's final StateMsg at ``version`` (Adam count = version) for a shard of ``n``."""
    zeros = np.zeros(n, np.float32)
    return StateMsg(version, version, True, zeros, zeros, zeros).encode()


def test_chief_is_not_finished_before_the_final_steps_psinfo_arrives():
    # A PS sends PSINFO(t) and then its final STATE(t), but they have different tags: the
    # chief can receive the STATE in the same poll after it looked for PSINFO. It must then
    # keep polling, or the run ends without the chief ever seeing step t (no metrics line).
    cfg = make_cfg(workers=1, ps=1, max_steps=5)
    roles = make_roles(3, cfg)
    chief_t, ps_t, worker_t = InProcessTransport.create_world(3)
    chief = FakeChief()
    link = ChiefLink(chief_t, roles, cfg, chief.as_chief(), N)
    ps_t.isend(final_state(5, N), 0, Tag.STATE)  # version 5, Adam count 5, final
    send_final_report(worker_t, 2)
    link.poll()
    assert link.final_states == {1: 5} and link.final_reports == {2}
    assert not link.finished and chief.step == 0
    ps_t.isend(InfoMsg(5, 0, 0, 0.0, 0, 0).encode(), 0, Tag.PSINFO)
    link.poll()
    assert link.finished and chief.step == 5


def control_messages(t: InProcessTransport) -> list[list[int]]:
    """The CONTROL messages rank ``t`` has been sent by the chief, in order."""
    received: list[list[int]] = []
    while True:
        buf = np.zeros(2, np.int64)
        if not t.irecv(buf, 0, Tag.CONTROL).test():
            return received
        received.append(buf.tolist())


def test_a_ps_frozen_behind_one_that_already_ended_is_told_to_catch_up():
    # The chief stops at train.max_steps=5 on PS 1's PSINFO and sends STOP before PS 1's
    # final state arrives. PS 1 has ended at 5 and never answers STOP; PS 2, descheduled,
    # saw STOP before the last gradients and froze at 4. PS 1 counts as frozen at 5, so
    # PS 2 gets STOP_AT 5 (it used to wait for it forever: a hang).
    cfg = make_cfg(workers=1, ps=2, max_steps=5)
    roles = make_roles(4, cfg)
    chief_t, ps1_t, ps2_t, _ = InProcessTransport.create_world(4)
    chief = FakeChief()
    link = ChiefLink(chief_t, roles, cfg, chief.as_chief(), N)
    chief.step, chief.stop_reason = 5, "train.max_steps=5 reached"
    link.poll()
    (lo, hi), _ = shard_bounds(N, 2)
    ps1_t.isend(final_state(5, hi - lo), 0, Tag.STATE)
    ps2_t.isend(ControlMsg(Command.FROZEN, 4).encode(), 0, Tag.CONTROL)
    link.poll()
    assert control_messages(ps2_t) == [[Command.STOP, 0], [Command.STOP_AT, 5]]
    assert control_messages(ps1_t) == [[Command.STOP, 0]]  # nothing more for a PS that has ended


def test_no_stop_once_a_ps_ended_at_max_steps_by_itself():
    cfg = make_cfg(workers=1, ps=2, max_steps=5)
    chief_t, ps1_t, ps2_t, _ = InProcessTransport.create_world(4)
    chief = FakeChief()
    link = ChiefLink(chief_t, make_roles(4, cfg), cfg, chief.as_chief(), N)
    (lo, hi), _ = shard_bounds(N, 2)
    ps1_t.isend(final_state(5, hi - lo), 0, Tag.STATE)
    chief.step, chief.stop_reason = 5, "train.max_steps=5 reached"
    link.poll()
    assert control_messages(ps1_t) == control_messages(ps2_t) == []  # PS 2 ends by itself
