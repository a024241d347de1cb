"""The evaluator rank (dba3c.distributed.evaluator) and the chief's side of it
(dba3c.distributed.chief_inbox) at the end of a run, as threads on the in-process transport:
a parameter server's snapshots (the test plays it) reach a real evaluator playing CartPole.
At a normal end it evaluates the final snapshot and reports each game meanwhile; a signal
during that evaluation drops it; without eval.at_end the evaluation in progress is dropped
when the run ends. Either way the chief's STOP and the evaluator's END leave nothing in
flight."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, cast

from dba3c.config import Config
from dba3c.distributed.chief_inbox import ChiefInbox
from dba3c.distributed.evaluator import run_evaluator
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.watchdog import StallClock
from dba3c.distributed.wire import END, ParamsMsg, Tag
from dba3c.games.envs import env_spaces
from dba3c.games.evaluation import UnitProbe
from dba3c.learning.models import make_net_spec
from tests.support import cfg_with

if TYPE_CHECKING:
    from dba3c.training.chief import Chief


class Recorder:
    """The Chief methods and layout ChiefInbox uses, recording what the evaluator reported;
    with ``signal_at_game`` a signal arrives once the end's evaluation has played that many
    games."""

    def __init__(self, signal_at_game: int | None = None):
        cfg = end_config(1)
        self.layout = make_net_spec(cfg.model, *env_spaces(cfg)).layout()
        self.signal: str | None = None
        self.signal_at_game = signal_at_game
        self.evals: list[tuple[int, int]] = []  # (step, games)
        self.active_units: list[tuple[int, ...]] = []  # of each evaluation
        self.games: list[int] = []  # games over, at each PLAYED
        self.frames: list[int] = []  # frames played, at each FRAMES
        self.dropped: list[int] = []

    def worker_report(self, rank, report):
        raise AssertionError("no worker reports in these tests")

    def on_eval(self, evaluation):
        self.evals.append((evaluation.step, len(evaluation.scores)))
        self.active_units.append(evaluation.active_units)

    def evaluation_progress(self, games, frames):
        if frames != (self.frames or [0])[-1]:
            self.frames.append(frames)
        elif games != (self.games or [0])[-1]:
            self.games.append(games)
        if games == self.signal_at_game:
            self.signal = "SIGTERM"

    def evaluation_dropped(self, step):
        self.dropped.append(step)


def end_config(episodes: int, at_end: bool = True) -> Config:
    """CartPole's MLP (two hidden layers of 8) with a parameter server and an evaluator
    rank, one game at a time."""
    return cfg_with(env={"id": "CartPole-v1"}, model={"kind": "mlp", "hidden": 8},
                    dist={"ps": 1}, eval={"rank": True, "every": 2, "episodes": episodes,
                                          "num_envs": 1, "at_end": at_end})


def run_end(chief: Recorder, snapshots: list[int], episodes: int, at_end: bool = True) -> None:
    """Ranks 0 (chief), 1 (one parameter server, played here: it has sent ``snapshots``,
    then DONE, when the evaluator starts) and 2 (the evaluator, :func:`end_config`), until
    the chief's inbox says the evaluator is done. Snapshot v: the initial parameters of
    seed v."""
    cfg = end_config(episodes, at_end)
    roles = make_roles(3, cfg)
    assert roles.ps == (1,) and roles.evaluator == 2
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    transports = InProcessTransport.create_world(3)
    errors: list[BaseException] = []

    def evaluator() -> None:
        try:
            run_evaluator(transports[2], roles, cfg, spec)
        except BaseException as e:  # surfaced by the test
            errors.append(e)

    for version in snapshots:  # all there before the evaluator looks
        transports[1].isend(ParamsMsg(version, spec.init_params(version)).encode(), 2,
                            Tag.SNAPSHOT)
    transports[1].isend(ParamsMsg(END).encode(), 2, Tag.SNAPSHOT)
    thread = threading.Thread(target=evaluator)
    thread.start()
    inbox = ChiefInbox(transports[0], roles, cfg, cast("Chief", chief),
                       StallClock(0, time.monotonic()))

    def done() -> bool:
        inbox.poll()
        return inbox.evaluator_done or bool(errors)

    wait_until(done)
    thread.join(timeout=60)
    assert not errors and not thread.is_alive(), errors


def test_at_a_normal_end_the_final_snapshot_is_evaluated_and_each_game_reported():
    chief = Recorder()
    run_end(chief, [2, 3], episodes=3)  # 2: every 2 steps; 3: where the run ended
    assert chief.evals == [(3, 3)]  # the run was over before 2 was played: the newest counts
    # with the hidden layer's active units on the probe frames, as the probe counts them
    # (dba3c.games.evaluation.UnitProbe, tested there)
    cfg = end_config(3)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    assert chief.active_units == [UnitProbe(cfg, spec).active_units(spec.init_params(3))]
    assert len(chief.active_units[0]) == 2  # fc0 and fc1
    assert chief.games == [1, 2, 3] and chief.dropped == []
    # the first batch's frames as it was played (one CartPole step: 1 frame); then at
    # most one a second
    assert chief.frames[0] == 1 and chief.frames == sorted(set(chief.frames))


def test_a_signal_during_the_final_evaluation_drops_it():
    chief = Recorder(signal_at_game=1)
    run_end(chief, [2, 3], episodes=1000)
    assert chief.evals == [] and chief.dropped == [3]
    assert chief.games[0] == 1 and len(chief.games) < 1000


def test_without_eval_at_end_the_end_of_the_run_evaluates_nothing_more():
    chief = Recorder()
    run_end(chief, [2], episodes=3, at_end=False)
    assert chief.evals == [] and chief.games == chief.frames == [] and chief.dropped == []
