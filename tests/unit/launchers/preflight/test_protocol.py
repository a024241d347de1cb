"""dba3c.launchers.preflight.protocol: the ranks' exchange over an in-process world."""

import threading
from typing import cast

import pytest

from dba3c.core import Transport
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.launchers.preflight.findings import RankReport
from dba3c.launchers.preflight.protocol import REPORT_TAG, Outcome, run_ranks
from tests.support.preflight import row


class Announcing:
    """A rank's transport that says when the rank's report went to rank 0."""

    def __init__(self, t: InProcessTransport):
        self.t, self.reported = t, threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.t, name)

    def isend(self, buf, dest, tag):
        request = self.t.isend(buf, dest, tag)
        if tag == REPORT_TAG:
            self.reported.set()
        return request


def _world(size: int, silent: set[int] | None = None, timeout_s: float = 5.0):
    """Run run_ranks on a world of threads; ranks in ``silent`` never start, and rank 0 makes
    its report (and starts its ``timeout_s`` for theirs) once every other rank sent its own,
    so only a silent rank is ever late. The threads share one host (as they do): their
    pairs move through memory, measured but not judged, so no verdict here rests on how
    fast this machine copies memory at the time."""
    world = [Announcing(t) for t in InProcessTransport.create_world(size)]
    live = [r for r in range(size) if r not in (silent or set())]
    outcomes: dict[int, Outcome | RuntimeError] = {}
    lines: list[str] = []

    def report(r: int) -> RankReport:
        if r == 0:
            assert all(world[o].reported.wait(60) for o in live if o != 0)
        return row(r, host="node1")

    def play(r: int) -> None:
        try:
            outcomes[r] = run_ranks(cast(Transport, world[r]), lambda: report(r), timeout_s,
                                    lines.append)
        except RuntimeError as e:  # an aborted in-process world
            outcomes[r] = e

    threads = [threading.Thread(target=play, args=(r,), daemon=True) for r in live]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return outcomes, lines


def _done(outcome: Outcome | RuntimeError) -> Outcome:
    assert isinstance(outcome, Outcome), outcome
    return outcome


def test_the_ranks_exchange_reports_and_measure_every_pair_with_rank_0():
    outcomes, lines = _world(3)
    zero = _done(outcomes[0])
    assert zero.code == 0 and zero.problem is None
    assert [r.rank for r in zero.rows] == [0, 1, 2]
    assert [(p.a, p.b) for p in zero.pairs] == [(0, 1), (0, 2)]
    assert all(p.bytes_per_s > 0 and p.latency_s > 0 for p in zero.pairs)
    assert [_done(outcomes[r]).code for r in (1, 2)] == [0, 0]
    assert len(lines) == 3 and lines[1].startswith("doctor: reports from 3 of 3 rank(s)")


def test_a_rank_that_never_answers_ends_the_world_named(capsys):
    outcomes, _ = _world(3, silent={2}, timeout_s=0.5)
    assert isinstance(outcomes[0], RuntimeError) and "aborted" in str(outcomes[0])
    err = capsys.readouterr().err
    assert "error: rank(s) 2 sent no report within 0.5 s" in err


@pytest.mark.parametrize("size", [1, 2])
def test_small_worlds_need_no_pairs_or_one(size):
    outcomes, _ = _world(size)
    assert len(_done(outcomes[0]).pairs) == size - 1
