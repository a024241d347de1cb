"""Which collective step a run keeps (dba3c.distributed.collective.staged.probe_choice),
on hand-made step times of several ranks, and which of its steps are probes (probe_mode)."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.collective.staged import probe_choice, probe_mode

TWO = ("serial", "overlapped")
THREE = ("serial", "overlapped", "ahead")


def test_the_faster_mode_by_the_ranks_mean_is_kept_and_said_once():
    serial = [0.0800, 0.0810, 0.0790]  # mean 80.0 ms
    overlapped = [0.0710, 0.0730, 0.0720]  # mean 72.0 ms
    kept, line = probe_choice(np.array([serial, overlapped]).T, TWO, None)
    assert kept == "overlapped"
    assert line == ("collective overlap on: overlapped steps took 72.0 ms, serial ones "
                    "80.0 ms (-10.0%; the ranks' mean)")
    # the same answer again: nothing to say
    assert probe_choice(np.array([serial, overlapped]).T, TWO, "overlapped") == (
        "overlapped", None)
    # a link that got faster: overlapping now costs more than it hides
    kept, line = probe_choice(np.array([serial, [0.0820, 0.0830, 0.0840]]).T, TWO,
                              "overlapped")
    assert kept == "serial"
    assert line == ("collective overlap off: overlapped steps took 83.0 ms, serial ones "
                    "80.0 ms (+3.8%; the ranks' mean)")


def test_gathered_ahead_is_kept_where_it_is_fastest_and_the_line_says_so():
    serial, overlapped = [0.0800, 0.0800], [0.0720, 0.0720]
    kept, line = probe_choice(np.array([serial, overlapped, [0.0690, 0.0660]]).T, THREE,
                              None)  # ahead: mean 67.5 ms
    assert kept == "ahead"
    assert line == ("collective overlap on: overlapped steps took 72.0 ms, serial ones "
                    "80.0 ms (-10.0%; the ranks' mean); gathered ahead 67.5 ms (-6.2% of "
                    "overlapped): on")
    # slower gathered ahead (a float32 FC layer): overlapped, and the line says off
    kept, line = probe_choice(np.array([serial, overlapped, [0.0760, 0.0760]]).T, THREE,
                              "ahead")
    assert kept == "overlapped" and line is not None and line.endswith(
        "gathered ahead 76.0 ms (+5.6% of overlapped): off")
    # serial fastest of all three
    assert probe_choice(np.array([[0.070], [0.072], [0.071]]).T, THREE, None)[0] == "serial"


def test_a_rank_that_measured_alone_does_not_decide_for_the_others():
    # rank 0 saw overlap 20% faster, ranks 1-3 saw it 10% slower: the mean says off
    serial = [0.100, 0.100, 0.100, 0.100]
    overlapped = [0.080, 0.110, 0.110, 0.110]
    assert probe_choice(np.array([serial, overlapped]).T, TWO, None)[0] == "serial"
    # a tie keeps the earlier mode: serial (staging would add work for nothing), and
    # overlapped before gathered ahead
    assert probe_choice(np.array([serial, serial]).T, TWO, None)[0] == "serial"
    assert probe_choice(np.array([serial, overlapped, overlapped]).T, THREE,
                        None)[0] == "serial"
    tie = [0.090] * 4
    assert probe_choice(np.array([serial, tie, tie]).T, THREE, None)[0] == "overlapped"


def test_probes_come_every_n_steps_serial_first():
    modes = [probe_mode(step, 3, 10) for step in range(1, 22)]
    assert modes == (["serial"] * 3 + ["overlapped"] * 3 + ["chosen"] * 4) * 2 + ["serial"]
    # one probe at the start only
    assert [probe_mode(step, 2, 0) for step in (1, 2, 3, 4, 5, 500)] == [
        "serial", "serial", "overlapped", "overlapped", "chosen", "chosen"]
    # probes back to back: the modes alternate
    assert [probe_mode(step, 2, 4) for step in range(1, 9)] == (
        ["serial"] * 2 + ["overlapped"] * 2) * 2
    # with gathered ahead a third mode
    assert [probe_mode(step, 2, 7, THREE) for step in range(1, 9)] == (
        ["serial"] * 2 + ["overlapped"] * 2 + ["ahead"] * 2 + ["chosen", "serial"])
