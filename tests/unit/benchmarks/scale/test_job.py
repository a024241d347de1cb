"""The lines a ``dba3c bench scale`` job's rank 0 prints (``dba3c.benchmarks.scale.job``)."""

from __future__ import annotations

from dba3c.benchmarks.scale.job import event_line, job_event


def test_rank_zero_lines_name_the_point_and_nothing_else_matches():
    assert event_line("start", 12) == "dba3c-scalejob start 12\n"
    assert job_event(event_line("start", 12)) == ("start", 12)
    assert job_event(event_line("end", 0)) == ("end", 0)
    for other in ["dba3c-scalejob start x\n", "dba3c-scalejob stop 1\n", "run finished\n",
                  "dba3c-scalejob start 1 2\n", ""]:
        assert job_event(other) is None, other
