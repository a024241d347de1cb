"""ReplyPacer: sleep lengths against hand-computed due times (no clocks, no sleeping)."""

import pytest

from dba3c.distributed.pacing import COARSE_MAX_S, FINE_MAX_S, FINE_MIN_S, ReplyPacer


def fine_sequence(n: int) -> list[float]:
    """The first n fine-poll sleeps: 50 us doubling, capped at 0.5 ms."""
    return [min(FINE_MIN_S * 2 ** k, FINE_MAX_S) for k in range(n)]


def test_without_a_reply_time_it_polls_finely_with_a_doubling_sleep():
    pacer = ReplyPacer()
    pacer.sent([1], version=0, now=0.0)
    assert [pacer.pause(0.0) for _ in range(6)] == pytest.approx(fine_sequence(6))


def test_sleeps_until_the_reply_is_due_then_polls_finely():
    pacer = ReplyPacer(margin=0.8)
    pacer.sent([1], version=0, now=10.0)
    pacer.received(1, version=0, now=10.1)  # reply time 0.1 s
    pacer.sent([1], version=1, now=10.2)
    # due at 10.2 + 0.8 * 0.1 = 10.28: capped coarse sleeps before, exact remainder near it
    assert pacer.due(1) == pytest.approx(10.28)
    assert pacer.pause(10.2) == pytest.approx(COARSE_MAX_S)
    assert pacer.pause(10.27) == pytest.approx(0.01)
    assert pacer.pause(10.28) == pytest.approx(FINE_MIN_S)
    assert pacer.pause(10.29) == pytest.approx(2 * FINE_MIN_S)


def test_due_time_uses_the_shortest_recent_reply_time():
    pacer = ReplyPacer(margin=0.5, history=3)
    for version, (t_sent, t_reply) in enumerate([(0.0, 0.4), (1.0, 1.2), (2.0, 2.3),
                                                 (3.0, 3.5), (4.0, 4.6)]):
        pacer.sent([7], version, t_sent)
        pacer.received(7, version, t_reply)
    # reply times 0.4, 0.2, 0.3, 0.5, 0.6; the last 3 are 0.3, 0.5, 0.6 -> min 0.3
    pacer.sent([7], version=5, now=5.0)
    assert pacer.due(7) == pytest.approx(5.0 + 0.5 * 0.3)


def test_a_late_reply_to_an_older_request_is_not_taken_as_a_fast_reply():
    pacer = ReplyPacer(margin=1.0)
    pacer.sent([1, 2], version=0, now=0.0)
    pacer.received(1, version=0, now=1.0)
    pacer.received(2, version=0, now=1.0)
    pacer.sent([1, 2], version=1, now=2.0)
    pacer.received(1, version=1, now=3.0)
    pacer.sent([1, 2], version=2, now=3.0)  # a backup worker's update went ahead without 2
    pacer.received(2, version=1, now=3.01)  # 2's stale gradient: no 0.01 s reply time
    assert pacer.due(2) == pytest.approx(3.0 + 1.0)
    assert pacer.pause(3.5) == pytest.approx(COARSE_MAX_S)


def test_the_earliest_due_peer_sets_the_sleep_and_an_unknown_peer_forces_fine_polls():
    pacer = ReplyPacer(margin=1.0, coarse_max_s=1.0)
    for peer, reply_s in ((1, 0.3), (2, 0.1)):
        pacer.sent([peer], version=0, now=0.0)
        pacer.received(peer, version=0, now=reply_s)
    pacer.sent([1, 2], version=1, now=1.0)
    assert pacer.pause(1.0) == pytest.approx(0.1)  # peer 2 is due first
    pacer.sent([3], version=1, now=1.0)  # no reply time for peer 3 yet
    assert pacer.pause(1.0) == pytest.approx(FINE_MIN_S)


def test_a_send_in_flight_or_nothing_awaited_means_fine_polls_and_messages_restart_them():
    pacer = ReplyPacer()
    pacer.sent([1], version=0, now=0.0)
    pacer.received(1, version=0, now=0.5)
    assert pacer.pause(0.6) == pytest.approx(FINE_MIN_S)  # nothing awaited
    pacer.sent([1], version=1, now=1.0)
    assert [pacer.pause(1.0, sending=True) for _ in range(2)] == pytest.approx(
        [2 * FINE_MIN_S, 4 * FINE_MIN_S])
    pacer.received(1, version=-1, now=1.1)  # any message restarts the fine sleep
    assert pacer.pause(1.1, sending=True) == pytest.approx(FINE_MIN_S)


def test_margin_must_leave_time_before_the_reply():
    with pytest.raises(ValueError, match="margin"):
        ReplyPacer(margin=1.5)


def test_fine_polls_double_up_to_a_chosen_longest_sleep():
    """``fine_max_s`` (dist.poll_max_ms; the scale bench multiplies it by its time scale)
    caps the doubling instead of FINE_MAX_S."""
    pacer = ReplyPacer(fine_max_s=0.005)
    sleeps = [pacer.pause(0.0) for _ in range(10)]
    assert sleeps == [min(FINE_MIN_S * 2 ** k, 0.005) for k in range(10)]
    assert sleeps[-1] == 0.005 > FINE_MAX_S
