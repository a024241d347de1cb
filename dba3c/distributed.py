"""Distributed BA3C over a :class:`~dba3c.transport.Transport`: chief, parameter servers,
workers and an optional evaluator (layout in :mod:`dba3c.roles`).

Messages are float32 buffers whose first 8 slots are an int64 header
(version, aux, flag, 0); the payload follows. Tags:

  GRAD     worker -> PS p   header (version computed at, rank); payload g[shard p].
                            version -1 = BYE (the worker sends nothing more).
  PARAMS   PS p -> worker   header (version, non-finite streak); payload theta[shard p].
                            version -1 = DONE (the run is over).
  SNAPSHOT PS p -> evaluator  like PARAMS, every ``eval.every`` steps.
  STATE    chief <-> PS p   header (version, adam count, final); payload theta, m, v of the
                            shard: the chief's INIT at start, the PS's checkpoints and final.
  PSINFO   PS -> chief      float64 [version, dropped, nonfinite, staleness sum/count/max].
  STATS    worker -> chief  float64 report (REPORT_KEYS); flag slot marks the last one.
  CONTROL  chief <-> PS     int64 [command, argument]: STOP, STOP_AT s, QUERY, and the PS's
                            reply to STOP.
  EVAL     evaluator -> chief float64 [step, n, scores...]; step -1 = evaluator finished.
  STATUS   PS -> chief      int64 [version, n, ranks...]: the answer to QUERY, the workers
                            whose gradient for its current version the PS holds.

Synchronous step t: each worker sends its gradient at theta_t to every PS; each PS averages
the first R gradients for t, applies Adam and broadcasts theta_{t+1}; older gradients are
dropped and counted. Workers always train on the newest version for which they hold every
shard. Asynchronous: each PS applies every gradient on arrival and answers only its sender.
Stopping: a PS finishes at ``train.max_steps``; otherwise the chief sends STOP, each PS
freezes and replies its version, and the chief sends STOP_AT (the highest reply), so every
shard ends at the same version. A PS then sends its final state, DONE, and drains gradients
until every worker said BYE, so no message is left in flight.

Stall watchdog (:mod:`dba3c.watchdog`): when no global step completes for
``dist.stall_timeout`` seconds the chief QUERYs the parameter servers, names the silent ones
and the workers whose gradient they lack, and fails the job.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dba3c.adam import AdamState
from dba3c.config import Config, is_atari
from dba3c.core import EvalSchedule, Params, ShardServer
from dba3c.errors import TrainingError, UserError
from dba3c.metrics import next_steps
from dba3c.models import NetSpec
from dba3c.pacing import ReplyPacer
from dba3c.params import shard_bounds
from dba3c.roles import Roles, make_roles
from dba3c.synthetic import check_slow_workers
from dba3c.transport import ANY_SOURCE, Transport, wait_until
from dba3c.watchdog import StallClock, stalled_ranks
from dba3c.worker import Worker

if TYPE_CHECKING:
    from dba3c.chief import Chief

GRAD, PARAMS, SNAPSHOT, STATE, PSINFO, STATS, CONTROL, EVAL, STATUS = range(1, 10)
HEADER = 8  # float32 slots = 4 int64
STOP, STOP_AT, FROZEN, QUERY = 1, 2, 3, 4
REPORT_KEYS = ("loss/policy", "loss/value", "loss/entropy", "loss/total", "perf/policy_lag",
               "count/data_points", "count/env_frames", "count/episodes",
               "train/online_score", "time/compute", "time/wait_data", "time/wait_params",
               "time/predict", "time/emulate")


def message(n: int) -> np.ndarray:
    """A float32 message buffer with room for the header and ``n`` payload values."""
    return np.zeros(HEADER + n, np.float32)


def header(buf: np.ndarray) -> np.ndarray:
    """The int64 [4] header view of a message buffer."""
    return buf[:HEADER].view(np.int64)


def payload(buf: np.ndarray) -> np.ndarray:
    """The float32 payload view of a message buffer."""
    return buf[HEADER:]


class Sender:
    """Nonblocking sends whose buffers stay alive until they complete."""

    def __init__(self, transport: Transport):
        self.t = transport
        self._pending: list[tuple] = []

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


class Inbox:
    """A standing receive from one source and tag, reposted after each message."""

    def __init__(self, transport: Transport, source: int, tag: int, size: int,
                 dtype: npt.DTypeLike = np.float32):
        self.t, self.source, self.tag = transport, source, tag
        self.buf = np.zeros(size, dtype)
        self._request = transport.irecv(self.buf, source, tag)

    def poll(self) -> np.ndarray | None:
        """A copy of the next message, or None; the receive is reposted."""
        if not self._request.test():
            return None
        data = self.buf.copy()
        self._request = self.t.irecv(self.buf, self.source, self.tag)
        return data


def report_vector(report: dict, final: bool) -> np.ndarray:
    """A worker report as float64 [len(REPORT_KEYS) + 1] (None -> NaN; last slot: final)."""
    values = [report.get(k) for k in REPORT_KEYS]
    return np.array([np.nan if v is None else v for v in values] + [float(final)], np.float64)


def report_dict(vec: np.ndarray) -> tuple[dict, bool]:
    """Inverse of :func:`report_vector`."""
    report = {k: (None if np.isnan(v) else float(v)) for k, v in zip(REPORT_KEYS, vec)}
    return report, bool(vec[-1])


# ---- parameter server -------------------------------------------------------------------
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
    # sleeps through the workers' gradient computations
    pacer = ReplyPacer(fine_max_s=cfg.dist.poll_max_ms / 1000)
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


# ---- worker side --------------------------------------------------------------------------
class RemoteParameterClient:
    """A worker's :class:`~dba3c.core.ParameterClient` over the parameter-server ranks.

    ``idle`` is called while waiting (the chief does its bookkeeping there).
    """

    def __init__(self, t: Transport, roles: Roles, cfg: Config, num_params: int,
                 idle: Callable[[], None] | None = None):
        self.t, self.roles, self.mode, self.idle = t, roles, cfg.dist.mode, idle
        self.max_sleep_s = cfg.dist.poll_max_ms / 1000
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

        wait_until(check, self.idle, self.max_sleep_s)
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

        wait_until(complete_or_ended, self.idle, self.max_sleep_s)
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

        wait_until(closed, self.idle, self.max_sleep_s)


# ---- chief --------------------------------------------------------------------------------
class ChiefLink:
    """The chief's mailboxes: worker reports, PS info and state, evaluations; and STOP."""

    def __init__(self, t: Transport, roles: Roles, cfg: Config, chief: Chief, num_params: int):
        self.t, self.roles, self.cfg, self.chief = t, roles, cfg, chief
        self.bounds = shard_bounds(num_params, len(roles.ps))
        self.sender = Sender(t)
        self.stats = Inbox(t, ANY_SOURCE, STATS, len(REPORT_KEYS) + 2, np.float64)
        self.infos = {p: Inbox(t, p, PSINFO, 6, np.float64) for p in roles.ps}
        self.states = {p: Inbox(t, p, STATE, HEADER + 3 * (hi - lo))
                       for p, (lo, hi) in zip(roles.ps, self.bounds)}
        self.replies = {p: Inbox(t, p, CONTROL, 2, np.int64) for p in roles.ps}
        self.statuses = {p: Inbox(t, p, STATUS, 2 + roles.num_workers, np.int64)
                         for p in roles.ps}
        self.answers: dict[int, tuple[int, set[int]]] = {}
        self.clock = StallClock(cfg.dist.stall_timeout, time.monotonic())
        self.evals = (Inbox(t, roles.evaluator, EVAL, cfg.eval.episodes + 2, np.float64)
                      if roles.evaluator is not None else None)
        self.pending_state: dict[int, dict[int, np.ndarray]] = {}
        self.final_states: dict[int, int] = {}  # PS rank -> the version it ended at
        # PS rank -> version of its newest PSINFO (the last version it reported)
        self.info_versions: dict[int, int] = {}
        self.final_reports: set[int] = set()
        self.frozen: dict[int, int] = {}
        self.stop_sent = self.stop_at_sent = False
        self.evaluator_done = roles.evaluator is None

    def send_init(self, step: int, theta: np.ndarray, adam: AdamState) -> None:
        """Hand every PS its shard of the starting parameters and Adam state."""
        for p, (lo, hi) in zip(self.roles.ps, self.bounds):
            buf = message(3 * (hi - lo))
            header(buf)[:2] = (step, adam.count)
            payload(buf)[:] = np.concatenate([theta[lo:hi], adam.m_shard[lo:hi],
                                              adam.v_shard[lo:hi]])
            self.sender.send(buf, [p], STATE)

    @property
    def finished(self) -> bool:
        """Final state from every PS and its PSINFO for that final version (sent before the
        state, but a message of another tag can be received after it: without it the chief
        would end without logging the last step), last report from every worker, evaluator
        done."""
        infos_seen = all(self.info_versions.get(p, -1) >= version
                         for p, version in self.final_states.items())
        return (len(self.final_states) == len(self.roles.ps) and infos_seen
                and self.evaluator_done and len(self.final_reports) == len(self.roles.workers)
                and self.sender.idle())

    def poll(self) -> None:
        """Process whatever arrived; send STOP / STOP_AT when the chief wants to stop."""
        while (vec := self.stats.poll()) is not None:
            rank = int(vec[-1])
            report, final = report_dict(vec[:-1])
            self.chief.worker_report(rank, report)
            if final:
                self.final_reports.add(rank)
                self.clock.progress(time.monotonic())
        for p, inbox in self.infos.items():
            while (info := inbox.poll()) is not None:
                self._ps_info(p, info)
        for p, inbox in self.states.items():
            while (msg := inbox.poll()) is not None:
                self._state(p, msg)
        while self.evals is not None and (res := self.evals.poll()) is not None:
            step, count = int(res[0]), int(res[1])
            if step == -1:
                self.evaluator_done = True
                self.clock.progress(time.monotonic())
            else:
                self.chief.on_eval(step, list(res[2:2 + count]))
        self._stop_protocol()
        self._watch()

    def _watch(self) -> None:
        """The stall watchdog: QUERY the parameter servers shortly before
        ``dist.stall_timeout``; at the timeout fail, naming the ranks the run waits on."""
        for p, inbox in self.statuses.items():
            while (status := inbox.poll()) is not None:
                self.answers[p] = (int(status[0]), set(status[2:2 + status[1]].tolist()))
        now = time.monotonic()
        running = tuple(p for p in self.roles.ps if p not in self.final_states)
        if self.clock.query_due(now) and running:
            self.answers.clear()
            self.sender.send(np.array([QUERY, 0], np.int64), running, CONTROL)
        if not self.clock.expired(now):
            return
        if running:
            ranks, why = stalled_ranks(self.roles.workers, running, self.answers,
                                       self.info_versions)
        else:  # every shard is final: only the workers' (and evaluator's) goodbyes are due
            evaluator = (set() if self.evaluator_done or self.roles.evaluator is None
                         else {self.roles.evaluator})
            ranks = sorted(set(self.roles.workers) - self.final_reports | evaluator)
            why = f"no final report from {ranks}"
        timeout = self.cfg.dist.stall_timeout
        raise TrainingError(f"no step for {timeout:g} s, waiting on ranks {ranks} ({why}; "
                            f"dist.stall_timeout={timeout:g})")

    def _ps_info(self, p: int, info: np.ndarray) -> None:
        self.info_versions[p] = int(info[0])
        if p == self.roles.ps[0]:
            extra = self.chief.extra
            extra["dist/replicas"] = self.roles.replicas
        self.chief.extra[f"dist/dropped_late/ps{p}"] = info[1]
        self.chief.extra["train/nonfinite_skipped"] = info[2]
        if self.cfg.dist.mode == "async" and info[4]:
            self.chief.extra["dist/staleness_mean"] = info[3] / info[4]
            self.chief.extra["dist/staleness_max"] = info[5]
        if p == self.roles.ps[0] and int(info[0]) > self.chief.step:
            self.chief.on_step(int(info[0]))
            self.clock.progress(time.monotonic())

    def _state(self, p: int, msg: np.ndarray) -> None:
        version, count, final = (int(x) for x in header(msg)[:3])
        self.pending_state.setdefault(version, {})[p] = msg
        if final:
            self.final_states[p] = version
            self.clock.progress(time.monotonic())
        shards = self.pending_state[version]
        if len(shards) < len(self.roles.ps):
            return
        parts = [payload(shards[p]) for p in self.roles.ps]
        sizes = [hi - lo for lo, hi in self.bounds]
        theta, m, v = (np.concatenate([part[k * n:(k + 1) * n] for part, n in zip(parts, sizes)])
                       for k in range(3))
        if version > self.chief.start_step:
            self.chief.save_checkpoint(version, theta, m, v, count)
        del self.pending_state[version]

    def _stop_protocol(self) -> None:
        """STOP every PS, then STOP_AT the highest version they froze at. A PS that ended by
        itself (train.max_steps) before it saw STOP counts as frozen at its final version:
        a PS frozen one step behind it is told to catch up instead of waiting forever."""
        if self.chief.stop_reason is None or self.stop_at_sent:
            return
        if not self.stop_sent:
            if not self.final_states:  # once one PS ended at train.max_steps, all will
                self.stop_sent = True
                self.sender.send(np.array([STOP, 0], np.int64), self.roles.ps, CONTROL)
            return
        if self.cfg.dist.mode == "async":
            return
        for p, inbox in self.replies.items():
            if (reply := inbox.poll()) is not None:
                self.frozen[p] = int(reply[1])
        frozen = {**self.frozen, **self.final_states}
        if len(frozen) == len(self.roles.ps):
            self.stop_at_sent = True
            waiting = [p for p in self.roles.ps if p not in self.final_states]
            self.sender.send(np.array([STOP_AT, max(frozen.values())], np.int64), waiting,
                             CONTROL)


# ---- evaluator ----------------------------------------------------------------------------
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


# ---- one rank -----------------------------------------------------------------------------
def make_worker(cfg: Config, rank: int, spec: NetSpec, roles: Roles) -> Worker:
    """This rank's trainer loop: simulators and a TensorFlow learner, or with
    ``synthetic.enabled`` a :class:`~dba3c.synthetic.SyntheticWorker` (no TensorFlow)."""
    if cfg.synthetic.enabled:
        from dba3c.synthetic import SyntheticWorker

        return SyntheticWorker(cfg, rank, spec.layout().num_params, roles.workers)
    from dba3c.envs import make_env_pool
    from dba3c.learner import Learner

    pool = None if cfg.debug.synthetic_data else make_env_pool(cfg.env, cfg.model)
    return Worker(cfg, rank, Learner(spec, cfg.train, spec.init_params(0)), pool)


def run_worker(t: Transport, roles: Roles, cfg: Config, spec: NetSpec,
               link: ChiefLink | None = None, chief: Chief | None = None) -> None:
    """Train on this rank; the chief (rank 0) passes its link and Chief to do its duties
    while it waits for parameters."""
    worker = make_worker(cfg, t.rank, spec, roles)
    client = RemoteParameterClient(t, roles, cfg, spec.layout().num_params,
                                   idle=link.poll if link else None)
    sender = Sender(t)

    evaluator = None
    if chief is not None and roles.evaluator is None and cfg.eval.every:
        from dba3c.evaluation import BackgroundEvaluator

        evaluator = BackgroundEvaluator(cfg, spec)  # no evaluator rank: evaluate in here
        evaluator.start()

    def send_report(params: Params | None, report: dict, final: bool) -> bool:
        if chief is None:
            sender.send(np.append(report_vector(report, final), t.rank), [0], STATS)
            sender.idle()
            return False
        chief.worker_report(t.rank, report)
        if final:
            assert link is not None, "the chief trains with its link"
            link.final_reports.add(t.rank)
        if evaluator is not None:
            finished = (evaluator.results() if params is None
                        else evaluator.after_step(params.version, params.theta))
            for step, scores in finished:
                chief.on_eval(step, scores)
        return False

    try:
        worker.train(client, lambda params, report: send_report(params, report, False))
    finally:
        if evaluator is not None:
            evaluator.stop()
    send_report(None, worker.report({}, 0.0), True)
    client.close()
    wait_until(sender.idle)


def run_chief(t: Transport, roles: Roles, cfg: Config, spec: NetSpec) -> None:
    """Rank 0: resume or initialise, hand the parameter servers their shards, train if
    ``dist.chief_trains``, and keep the run directory until every rank is done."""
    from dba3c.checkpoint import load_start
    from dba3c.chief import Chief

    start = load_start(cfg, spec)
    chief = Chief(cfg, start.ckpt, spec.layout(), roles.num_workers)
    chief.install_signal_handlers()
    link = ChiefLink(t, roles, cfg, chief, spec.layout().num_params)
    link.send_init(start.step, start.theta, start.adam)
    try:
        if 0 in roles.workers:
            run_worker(t, roles, cfg, spec, link, chief)
        def finished() -> bool:
            link.poll()
            return link.finished

        wait_until(finished)
    finally:
        chief.close()


def run_rank(t: Transport, cfg: Config, spec: NetSpec) -> None:
    """Play this rank's role to the end of the run."""
    roles = make_roles(t.size, cfg)
    role = roles.role(t.rank)
    if t.rank == 0:
        run_chief(t, roles, cfg, spec)
    elif role == "ps":
        run_ps(t, roles, cfg, spec.layout().num_params)
    elif role == "evaluator":
        run_evaluator(t, roles, cfg, spec)
    else:
        run_worker(t, roles, cfg, spec)


def train_distributed(cfg: Config) -> int:
    """``dba3c train`` under mpiexec/srun: any failing rank ends the whole job non-zero."""
    import signal

    from dba3c.envs import env_spaces
    from dba3c.models import make_net_spec
    from dba3c.transport import MpiTransport

    t = MpiTransport()
    try:
        roles = make_roles(t.size, cfg)
        spec = make_net_spec(cfg.model, *env_spaces(cfg))
        if cfg.synthetic.enabled:
            check_slow_workers(cfg.synthetic.slow_workers, roles.num_workers)
    except UserError as e:  # every rank finds the same problem; one reports it
        if t.rank == 0:
            print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    if t.rank != 0:  # the chief coordinates stopping; others ignore the polite signals
        # (mpiexec forwards SIGTERM and SIGINT to every rank, Slurm sends SIGTERM to all tasks)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        run_rank(t, cfg, spec)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        t.abort(2)
    except TrainingError as e:
        print(f"error: rank {t.rank}: {e}", file=sys.stderr, flush=True)
        t.abort(1)
    except BaseException as e:  # noqa: BLE001 - any failure must end the whole job
        role = make_roles(t.size, cfg).role(t.rank)
        print(f"error: rank {t.rank} ({role}) failed: {e!r}\n{traceback.format_exc()}",
              file=sys.stderr, flush=True)
        t.abort(1)
    t.barrier()
    if t.rank == 0:
        print(f"run finished; outputs in {cfg.run.dir}", file=sys.stderr)
        print(next_steps(cfg.run.dir, is_atari(cfg.env.id)), file=sys.stderr)
    return 0
