"""The parameter-server rank: one shard of theta and its Adam state."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from dba3c.adam import AdamState
from dba3c.config import Config
from dba3c.core import EvalSchedule, ShardServer
from dba3c.dist.mailbox import Inbox, Sender
from dba3c.dist.wire import (CONTROL, FROZEN, GRAD, HEADER, PARAMS, PSINFO, QUERY, SNAPSHOT,
                             STATE, STATUS, STOP, STOP_AT, header, message, payload)
from dba3c.pacing import ReplyPacer
from dba3c.params import shard_bounds
from dba3c.roles import Roles
from dba3c.transport import Transport, wait_until


def run_ps(t: Transport, roles: Roles, cfg: Config, num_params: int) -> None:
    """Serve shard ``rank - 1`` until the run ends and every worker said BYE."""
    lo, hi = shard_bounds(num_params, len(roles.ps))[t.rank - 1]
    n = hi - lo
    init = message(3 * n)
    wait_until(t.irecv(init, 0, STATE).test)
    start, count = int(header(init)[0]), int(header(init)[1])
    body = payload(init)
    server = ShardServer(body[:n].copy(), AdamState(body[n:2 * n].copy(), body[2 * n:].copy(),
                                                    count), start, mode=cfg.dist.mode,
                         replicas=roles.replicas, lr=cfg.train.lr, beta1=cfg.adam.beta1,
                         beta2=cfg.adam.beta2, epsilon=cfg.adam.epsilon)
    sender = Sender(t)
    pacer = ReplyPacer()  # sleeps through the workers' gradient computations
    grads = {w: Inbox(t, w, GRAD, HEADER + n) for w in roles.workers}
    control = Inbox(t, 0, CONTROL, 2, np.int64)
    finished, frozen = False, False
    stop_at: int | None = None
    byes: set[int] = set()
    arrived: set[int] = set()  # workers whose gradient for the current version is summed

    def params_message(version: int, theta_shard: np.ndarray) -> np.ndarray:
        buf = message(n)
        header(buf)[:2] = (version, server.nonfinite_streak)
        payload(buf)[:] = theta_shard
        return buf

    evaluators = [] if roles.evaluator is None else [roles.evaluator]

    def send_snapshot(version: int, theta_shard: np.ndarray) -> None:
        sender.send(params_message(version, theta_shard), evaluators, SNAPSHOT)

    snapshots = EvalSchedule(cfg.eval.every if evaluators else 0, send_snapshot)

    def send_state(final: bool) -> None:
        buf = message(3 * n)
        header(buf)[:3] = (server.version, server.adam.count, int(final))
        payload(buf)[:] = np.concatenate([server.theta_shard, server.adam.m_shard,
                                          server.adam.v_shard])
        sender.send(buf, [0], STATE)

    def send_info() -> None:
        s = server.stats
        stale = s.staleness[-1000:]
        info = np.array([server.version, s.dropped_late, s.nonfinite_skipped,
                         float(np.sum(stale)), len(stale), max(stale, default=0)], np.float64)
        sender.send(info, [0], PSINFO)

    def finish() -> None:
        nonlocal finished
        send_state(final=True)
        done = message(0)  # header only: sent eagerly, never waits on a receive
        header(done)[0] = -1
        sender.send(done, roles.workers, PARAMS)
        if roles.evaluator is not None:
            sender.send(done, [roles.evaluator], SNAPSHOT)
        finished = True

    def send_params(version: int, workers: Sequence[int]) -> None:
        sender.send(params_message(version, server.theta_shard), workers, PARAMS)
        pacer.sent(workers, version, time.monotonic())

    def after_update(reply_to: list[int]) -> None:
        v = server.version
        send_params(v, reply_to)
        send_info()
        if cfg.run.checkpoint_every and v % cfg.run.checkpoint_every == 0:
            send_state(final=False)
        snapshots.after_step(v, server.theta_shard)
        if (stop_at is not None and v >= stop_at) or cfg.train.reached_max_steps(v):
            finish()

    send_params(start, roles.workers)
    send_info()
    if cfg.train.reached_max_steps(start):
        finish()  # a finished run started again: nothing left to do
    while not (finished and len(byes) == len(roles.workers) and sender.idle()):
        busy = False
        command = None if finished else control.poll()
        if command is not None:
            busy = True
            if command[0] == QUERY:
                status = np.zeros(2 + len(roles.workers), np.int64)
                status[:2] = (server.version, len(arrived))
                status[2:2 + len(arrived)] = sorted(arrived)
                sender.send(status, [0], STATUS)
            elif command[0] == STOP and cfg.dist.mode == "async":
                finish()
            elif command[0] == STOP:
                frozen = True
                sender.send(np.array([FROZEN, server.version], np.int64), [0], CONTROL)
            elif command[0] == STOP_AT:
                stop_at = int(command[1])
                if server.version >= stop_at:
                    finish()
        if frozen and stop_at is None:
            time.sleep(1e-4)
            continue
        for w, inbox in grads.items():
            if w in byes:
                continue
            msg = inbox.poll()
            if msg is None:
                continue
            busy = True
            version = int(header(msg)[0])
            pacer.received(w, version, time.monotonic())
            if version == -1:
                byes.add(w)
            elif not finished and server.offer(version, payload(msg)):
                arrived.clear()
                reply = [w] if cfg.dist.mode == "async" else list(roles.workers)
                after_update(reply)
            elif not finished and version == server.version:
                arrived.add(w)
        if not busy:
            time.sleep(pacer.pause(time.monotonic(), sending=not sender.idle()))

