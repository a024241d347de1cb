"""Which collective step a run keeps (dba3c.distributed.collective.staged.overlap_choice),
on hand-made step times of several ranks, and which of its steps are probes (probe_mode)."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.collective.staged import overlap_choice, probe_mode


def test_the_faster_mode_by_the_ranks_mean_is_kept_and_said_once():
    serial = np.array([0.0800, 0.0810, 0.0790])  # mean 80.0 ms
    overlapped = np.array([0.0710, 0.0730, 0.0720])  # mean 72.0 ms
    overlap, line = overlap_choice(serial, overlapped, None)
    assert overlap
    assert line == ("collective overlap on: overlapped steps took 72.0 ms, serial ones "
                    "80.0 ms (-10.0%; the ranks' mean)")
    # the same answer again: nothing to say
    assert overlap_choice(serial, overlapped, True) == (True, None)
    # a link that got faster: overlapping now costs more than it hides
    overlap, line = overlap_choice(serial, np.array([0.0820, 0.0830, 0.0840]), True)
    assert not overlap
    assert line == ("collective overlap off: overlapped steps took 83.0 ms, serial ones "
                    "80.0 ms (+3.8%; the ranks' mean)")


def test_a_rank_that_measured_alone_does_not_decide_for_the_others():
    # rank 0 saw overlap 20% faster, ranks 1-3 saw it 10% slower: the mean says off
    serial = np.array([0.100, 0.100, 0.100, 0.100])
    overlapped = np.array([0.080, 0.110, 0.110, 0.110])
    assert overlap_choice(serial, overlapped, None)[0] is False
    # a tie keeps the serial step (staging would add work for nothing)
    assert overlap_choice(serial, serial.copy(), None)[0] is False


def test_probes_come_every_n_steps_serial_first():
    modes = [probe_mode(step, 3, 10) for step in range(1, 22)]
    assert modes == (["serial"] * 3 + ["overlapped"] * 3 + ["chosen"] * 4) * 2 + ["serial"]
    # one probe at the start only
    assert [probe_mode(step, 2, 0) for step in (1, 2, 3, 4, 5, 500)] == [
        "serial", "serial", "overlapped", "overlapped", "chosen", "chosen"]
    # probes back to back: the modes alternate
    assert [probe_mode(step, 2, 4) for step in range(1, 9)] == (
        ["serial"] * 2 + ["overlapped"] * 2) * 2
