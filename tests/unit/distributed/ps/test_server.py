"""The parameter server's state machine, one poll at a time: no threads, no MPI.

The PS (rank 1) and the ranks around it (chief 0, workers 2 and 3) share one in-process
world; the test plays the chief and the workers by sending encoded messages, calls
``ParameterServer.poll`` and reads what the PS sent. Expected parameters are recomputed with
``adam_update`` on the whole vector.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from dba3c.config import Config
from dba3c.core import ANY_SOURCE
from dba3c.distributed.mailbox import Inbox
from dba3c.distributed.ps.server import ParameterServer, PsState
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.wire import (
    END,
    Command,
    ControlMsg,
    GradMsg,
    InfoMsg,
    Message,
    ParamsMsg,
    StateMsg,
    StatusMsg,
    Tag,
    framed_size,
)
from dba3c.learning.rules import OptimizerState, adam_update
from tests.support.world import N, PostedReceives, grad_of, make_cfg

CHIEF, PS, WORKERS = 0, 1, (2, 3)


def start(cfg: Config, version: int = 0) -> tuple[ParameterServer, list[InProcessTransport]]:
    """A PS at ``version`` with theta0 = linspace(-1, 1) and fresh Adam state."""
    world = InProcessTransport.create_world(4)
    theta0 = np.linspace(-1, 1, N).astype(np.float32)
    zeros = np.zeros(N, np.float32)
    init = StateMsg(version, version, False, theta0, zeros, zeros)
    return ParameterServer(world[PS], make_roles(4, cfg), cfg, init), world


def state_of(ps: ParameterServer) -> PsState:
    """``ps.state`` read afresh: mypy would keep an earlier assert's narrowing of the
    attribute across the ``ps.poll()`` that changes it."""
    return ps.state


def sent_to(t: InProcessTransport, kind: type[Message], size: int,
            tag: Tag | None = None) -> list:
    """Every message of ``kind`` the PS has sent to rank ``t`` so far, decoded, in order."""
    out: list[Message] = []
    while True:
        buf = np.zeros(size, kind.DTYPE)
        if not t.irecv(buf, PS, kind.TAG if tag is None else tag).test():
            return out
        out.append(kind.decode(buf))


def params_to(t: InProcessTransport) -> list[ParamsMsg]:
    """The PARAMS messages the PS has sent to worker ``t``."""
    return sent_to(t, ParamsMsg, framed_size(N))


def push(world: list[InProcessTransport], worker: int, version: int) -> None:
    """Worker ``worker`` sends its gradient at ``version``."""
    world[worker].isend(GradMsg(version, worker, grad_of(worker, version)).encode(), PS,
                        Tag.GRAD)


def command(world: list[InProcessTransport], cmd: Command, argument: int = 0) -> None:
    """The chief sends a CONTROL command."""
    world[CHIEF].isend(ControlMsg(cmd, argument).encode(), PS, Tag.CONTROL)


def bye(world: list[InProcessTransport], worker: int) -> None:
    """Worker ``worker`` says BYE."""
    world[worker].isend(GradMsg(END, worker).encode(), PS, Tag.GRAD)


def expected_theta(cfg: Config, steps: int) -> np.ndarray:
    """theta after ``steps`` Adam updates on the mean gradient of both workers."""
    theta, state = np.linspace(-1, 1, N).astype(np.float32), OptimizerState.zeros(N)
    for t in range(steps):
        mean = cast(np.ndarray,
                    np.mean([grad_of(w, t) for w in WORKERS], axis=0, dtype=np.float32))
        adam_update(theta, mean, state, lr=cfg.train.lr, beta1=cfg.adam.beta1,
                    beta2=cfg.adam.beta2, epsilon=cfg.adam.epsilon)
    return theta


def test_a_running_ps_applies_the_mean_of_every_gradient_and_answers_every_worker():
    cfg = make_cfg(workers=2, ps=1, max_steps=10)
    ps, world = start(cfg)
    assert state_of(ps) is PsState.RUNNING
    push(world, 2, 0)
    assert ps.poll(0.0) and ps.server.version == 0  # one of two gradients: no update yet
    push(world, 3, 0)
    ps.poll(0.0)
    assert ps.server.version == 1 and state_of(ps) is PsState.RUNNING
    for w in WORKERS:
        first, second = params_to(world[w])
        assert (first.version, second.version, second.final) == (0, 1, False)
        np.testing.assert_allclose(second.theta_shard, expected_theta(cfg, 1), rtol=1e-6)
    infos = sent_to(world[CHIEF], InfoMsg, InfoMsg.SIZE)
    assert [i.version for i in infos] == [0, 1]
    assert not ps.poll(0.0)  # nothing arrived


def test_stop_freezes_until_stop_at_and_the_last_update_is_marked_final():
    cfg = make_cfg(workers=2, ps=1, max_steps=10)
    ps, world = start(cfg)
    command(world, Command.STOP)
    ps.poll(0.0)
    assert state_of(ps) is PsState.FROZEN
    assert sent_to(world[CHIEF], ControlMsg, ControlMsg.SIZE) == [
        ControlMsg(Command.FROZEN, 0)]
    push(world, 2, 0)
    push(world, 3, 0)
    ps.poll(0.0)
    assert ps.server.version == 0 and state_of(ps) is PsState.FROZEN  # left queued
    command(world, Command.STOP_AT, 1)
    ps.poll(0.0)  # STOP_AT, then the queued gradients: step 1 is the last
    assert ps.stop_at == 1 and ps.server.version == 1 and state_of(ps) is PsState.FINISHED
    for w in WORKERS:
        start_params, last, done = params_to(world[w])
        assert (start_params.final, last.version, last.final, done.is_done) == (
            False, 1, True, True)
    (state,) = sent_to(world[CHIEF], StateMsg, StateMsg.size(N))
    assert (state.version, state.opt_count, state.final) == (1, 1, True)
    np.testing.assert_allclose(state.theta_shard, expected_theta(cfg, 1), rtol=1e-6)
    bye(world, 2)
    ps.poll(0.0)
    assert state_of(ps) is PsState.FINISHED  # worker 3 has not said BYE yet
    bye(world, 3)
    ps.poll(0.0)
    assert state_of(ps) is PsState.DRAINED


def test_stop_at_a_version_already_reached_finishes_without_an_update():
    cfg = make_cfg(workers=2, ps=1, max_steps=10)
    ps, world = start(cfg, version=3)
    command(world, Command.STOP)
    ps.poll(0.0)
    command(world, Command.STOP_AT, 3)
    ps.poll(0.0)
    assert state_of(ps) is PsState.FINISHED and ps.server.version == 3
    assert [m.version for m in params_to(world[2])] == [3, END]


def test_a_finished_ps_drains_late_gradients_without_applying_them():
    cfg = make_cfg(workers=2, ps=1, max_steps=1)
    ps, world = start(cfg)
    push(world, 2, 0)
    push(world, 3, 0)
    ps.poll(0.0)
    assert state_of(ps) is PsState.FINISHED  # train.max_steps=1 reached
    push(world, 2, 1)  # computed on the final parameters: dropped
    ps.poll(0.0)
    assert ps.server.version == 1 and ps.server.stats.applied == 1
    assert state_of(ps) is PsState.FINISHED
    command(world, Command.QUERY)  # a finished PS reads no more commands
    bye(world, 2)
    bye(world, 3)
    ps.poll(0.0)
    assert state_of(ps) is PsState.DRAINED
    assert sent_to(world[CHIEF], StatusMsg, StatusMsg.size(2)) == []


def test_query_names_the_workers_whose_gradient_for_this_version_arrived():
    cfg = make_cfg(workers=2, ps=1, max_steps=10)
    ps, world = start(cfg)
    command(world, Command.QUERY)
    ps.poll(0.0)
    push(world, 3, 0)
    command(world, Command.QUERY)
    ps.poll(0.0)  # the command first, then the gradient: it has arrived, and is counted
    assert sent_to(world[CHIEF], StatusMsg, StatusMsg.size(2)) == [
        StatusMsg(0, ()), StatusMsg(0, (3,))]


def test_query_counts_gradients_that_arrived_behind_one_stuck_mid_transfer():
    # a link cut while worker 2's gradient is on the wire: its receive, matched first, never
    # completes, and worker 3's gradient completes behind it. The PS hands gradients over in
    # the order they matched, so it has taken neither, but the status must name only worker
    # 2 as missing (the stall watchdog blames the workers a status lacks)
    cfg = make_cfg(workers=2, ps=1, max_steps=10)
    ps, world = start(cfg)
    wire = PostedReceives()
    ps.grads = Inbox(wire, ANY_SOURCE, GradMsg, framed_size(N), depth=2)
    wire.arrive(GradMsg(0, 2, grad_of(2, 0)), complete=False)
    wire.arrive(GradMsg(0, 3, grad_of(3, 0)))
    command(world, Command.QUERY)
    ps.poll(0.0)
    assert ps.server.version == 0 and ps.arrived == set()  # nothing taken yet
    assert sent_to(world[CHIEF], StatusMsg, StatusMsg.size(2)) == [StatusMsg(0, (3,))]


def test_async_stop_finishes_at_once_and_each_gradient_answers_its_sender():
    cfg = make_cfg(workers=2, ps=1, max_steps=10, mode="async")
    ps, world = start(cfg)
    push(world, 2, 0)
    ps.poll(0.0)
    assert ps.server.version == 1
    assert [m.version for m in params_to(world[2])] == [0, 1]
    assert [m.version for m in params_to(world[3])] == [0]
    command(world, Command.STOP)
    ps.poll(0.0)
    assert state_of(ps) is PsState.FINISHED
    assert [m.version for m in params_to(world[3])] == [END]


def test_a_finished_run_started_again_finishes_on_creation():
    cfg = make_cfg(workers=2, ps=1, max_steps=4)
    ps, world = start(cfg, version=4)
    assert state_of(ps) is PsState.FINISHED
    assert [m.version for m in params_to(world[2])] == [4, END]
