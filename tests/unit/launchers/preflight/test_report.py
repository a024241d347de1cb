"""dba3c.launchers.preflight.report: the verdict and the table on hand-made reports and
launchers."""

import dataclasses

import pytest

from dba3c.launchers.local import mpiexec_family
from dba3c.launchers.preflight.findings import LaunchInfo, PairResult
from dba3c.launchers.preflight.report import (
    launch_lines,
    launch_problem,
    mpiexec_name,
    table,
    verdict,
)
from tests.support.preflight import row

MB = 1e6


def pair(b: int, mb_per_s: float, latency_ms: float = 0.05) -> PairResult:
    return PairResult(0, b, latency_ms / 1e3, mb_per_s * MB)


ROWS = [row(r) for r in range(4)]
PAIRS = [pair(1, 1180), pair(2, 1175), pair(3, 1190)]


def test_all_good_is_no_problem():
    assert verdict(ROWS, PAIRS, world_size=4) is None
    assert verdict(ROWS[:1], [], world_size=1) is None


def test_a_rank_bound_to_one_cpu_of_many_is_named():
    rows = [*ROWS[:2], row(2, cpus=1), ROWS[3]]
    problem = verdict(rows, PAIRS, world_size=4)
    assert problem is not None
    assert problem.startswith("rank 2 on node3 is bound to 1 of the node's 12 CPUs")
    assert "--cpus-per-task=12" in problem


def test_one_cpu_each_is_fine_when_the_ranks_share_a_node_fairly():
    """Twelve ranks on a 12-CPU node, one CPU each: their share (binding_warning's rule)."""
    rows = [row(r, host="node1", cpus=1) for r in range(12)]
    assert verdict(rows, [], world_size=12) is None
    assert verdict([row(0, cpus=1, node_cpus=1)], [], world_size=1) is None


def test_a_game_that_does_not_open_is_named():
    rows = [*ROWS[:3], row(3, rom_error="RuntimeError: ROM not found")]
    problem = verdict(rows, PAIRS, world_size=4)
    assert problem is not None
    assert problem.startswith("rank 3 on node4 cannot open the game breakout: RuntimeError: "
                              "ROM not found")


def test_a_slow_pair_is_named_against_the_median():
    # median of 1180, 1175, 1190, 400 is (1175 + 1180) / 2 = 1177.5; half of it is 588.75
    rows = [*ROWS, row(4)]
    pairs = [*PAIRS, pair(4, 400)]
    problem = verdict(rows, pairs, world_size=5)
    assert problem == ("rank 0 <-> rank 4 (node1 <-> node5) moves 400.0 MB/s, below 0.5 x the "
                       "median of the 4 pairs between hosts (1177.5 MB/s): check node5's link")
    # 600 MB/s is above half the median (median (1175 + 1180) / 2 again): fine
    assert verdict(rows, [*PAIRS, pair(4, 600)], world_size=5) is None


def test_the_slowest_of_several_slow_pairs_is_named():
    # median of 1000, 1000, 300, 200, 1000 is 1000
    rows = [row(r) for r in range(6)]
    pairs = [pair(1, 1000), pair(2, 1000), pair(3, 300), pair(4, 200), pair(5, 1000)]
    problem = verdict(rows, pairs, world_size=6)
    assert problem is not None and problem.startswith("rank 0 <-> rank 4 (node1 <-> node5)")
    assert "(1000.0 MB/s)" in problem


def test_pairs_on_one_host_are_not_judged():
    rows = [row(r, host="vm", cpus=2, node_cpus=2) for r in range(3)]
    assert verdict(rows, [pair(1, 10000), pair(2, 3000)], world_size=3) is None
    text = table(rows, [pair(1, 10000), pair(2, 3000)])
    assert text.count("one host (memory, not judged)") == 2 and "slowest" not in text


def test_silent_ranks_and_silent_pairs_are_named():
    problem = verdict(ROWS[:2], [], world_size=4, timeout_s=30)
    assert problem is not None
    assert problem.startswith("rank(s) 2, 3 sent no report within 30 s")
    silent = PairResult(0, 2, 0.0, 0.0, "rank 2 stopped answering")
    assert verdict(ROWS, [PAIRS[0], silent], world_size=4) == ("rank 0 <-> rank 2 (node1 <-> "
                                                               "node3): rank 2 stopped answering")


def test_the_first_problem_wins():
    rows = [row(0), row(1, rom_error="no ROM"), row(2, cpus=1), row(3)]
    pairs = [pair(1, 1000), pair(2, 1000), pair(3, 10)]
    problem = verdict(rows, pairs, world_size=4)
    assert problem is not None and problem.startswith("rank 1 on node2 cannot open")
    # within a rank the CPU binding comes before the game
    rows = [row(0), row(1, cpus=1, rom_error="no ROM"), row(2), row(3)]
    problem = verdict(rows, pairs, world_size=4)
    assert problem is not None and problem.startswith("rank 1 on node2 is bound to 1")
    # silent ranks before anything else
    problem = verdict(rows[:3], pairs, world_size=4)
    assert problem is not None and problem.startswith("rank(s) 3 sent no report")
    # a rank's problem before a slow pair
    rows = [row(0), row(1), row(2), row(3, rom_error="no ROM")]
    problem = verdict(rows, pairs, world_size=4)
    assert problem is not None and problem.startswith("rank 3 on node4 cannot open")


def test_the_table_has_a_row_per_rank_then_the_pairs():
    rows = [*ROWS, row(4)]
    pairs = [*PAIRS, pair(4, 400.04, latency_ms=0.125)]
    lines = table(rows, pairs).splitlines()
    assert lines[0].split()[:3] == ["rank", "host", "cpus"]
    assert [line.split()[:2] for line in lines[1:6]] == [[str(r), f"node{r + 1}"]
                                                         for r in range(5)]
    assert "12/12 (0-11)" in lines[1] and "srun --mpi=pmi2 [SLURM_MPI_TYPE PMI_FD" in lines[1]
    assert "breakout ok" in lines[1] and "500.0 GB (/scratch)" in lines[1]
    assert "10/12/12" in lines[1] and " on " in lines[1]
    assert lines[6] == "" and lines[7].split()[:2] == ["pair", "hosts"]
    assert lines[8].split()[:4] == ["0", "<->", "1", "node1"]
    assert lines[11].split() == ["0", "<->", "4", "node1", "<->", "node5", "0.125", "ms",
                                 "400.0", "MB/s", "slowest"]
    assert table(ROWS[:1], []).count("\n") == 2  # alone: the header and one row


# ---- the MPI library's file and the launchers ---------------------------------------------
HYDRA = ("HYDRA build details:\n    Version:                                 5.0.2\n"
         "    Release Date:                            Fri Sep 25 20:45:26 UTC 2026\n")
PRTE = "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
INTEL_HYDRA = "Intel(R) MPI Library for Linux* OS, Version 2021.19 Build 20250611 (id: 1c8ee9a)\n"
SRUN = ("srun --mpi=pmi2 (chosen; srun offers pmix, none, cray_shasta, pmi2, pmix_v4; MPI: "
        "MPICH Version:      5.0.2)")


def launch(version: str = HYDRA, srun: str = SRUN, error: str | None = None,
           judged: bool = False) -> LaunchInfo:
    return LaunchInfo("/venv/bin/mpiexec", version, srun, error, judged)


@pytest.mark.parametrize(("text", "family", "name"), [
    (HYDRA, "mpich", "MPICH hydra 5.0.2"), (PRTE, "openmpi", "Open MPI 5.0.11"),
    (INTEL_HYDRA, "intel", INTEL_HYDRA.strip()), ("", "unknown", "")])
def test_an_mpiexec_is_named_from_its_version_text(text, family, name):
    assert mpiexec_family(text) == family and mpiexec_name(text) == name


def test_an_mpiexec_of_another_mpi_than_the_library_is_a_problem():
    """The shadowing of the issue: the venv's MPICH mpiexec in front of a site's Open MPI
    that mpi4py loads (or the other way round); PMI-speaking relatives may mix."""
    problem = launch_problem(launch(HYDRA), "Open MPI v5.0.11", "/site/lib/libmpi.so.40")
    assert problem is not None and problem.startswith(
        "mpiexec /venv/bin/mpiexec is MPICH hydra 5.0.2's, but mpi4py loads Open MPI v5.0.11 "
        "(/site/lib/libmpi.so.40)")
    assert "make install MPI=" in problem
    assert launch_problem(launch(PRTE), "MPICH Version: 5.0.2") is not None
    assert launch_problem(launch(PRTE), "Open MPI v5.0.11") is None
    assert launch_problem(launch(HYDRA), "MPICH Version: 5.0.2") is None
    assert launch_problem(launch(INTEL_HYDRA), "MPICH Version: 5.0.2") is None
    assert launch_problem(launch(""), "Open MPI v5.0.11") is None  # no mpiexec: nothing to judge


def test_an_srun_choice_that_fails_is_a_problem_only_where_a_job_would_fail_on_it():
    error = "DBA3C_SRUN_MPI=pmix_v99 is not a plugin of this srun (srun offers pmi2)"
    assert launch_problem(launch(srun="", error=error, judged=True), "MPICH") == error
    assert launch_problem(launch(srun="", error=error, judged=False), "MPICH") is None
    rows = [row(0), row(1)]
    assert verdict(rows, [pair(1, 1000)], world_size=2,
                   launch=launch(srun="", error=error, judged=True)) == error
    # silent ranks still come first
    problem = verdict(rows[:1], [], world_size=2, launch=launch(srun="", error=error,
                                                               judged=True))
    assert problem is not None and problem.startswith("rank(s) 1 sent no report")


def test_the_launchers_follow_the_table_in_two_lines():
    text = table(ROWS[:1], [], launch())
    blocks = text.split("\n\n")
    assert len(blocks) == 2 and blocks[1].splitlines() == [
        "mpiexec: /venv/bin/mpiexec (MPICH hydra 5.0.2)", "srun: " + SRUN.removeprefix("srun ")]
    assert launch_lines(LaunchInfo("", "", "", None, False)) == [
        "mpiexec: none found (no MPI wheel in this venv, no mpiexec on PATH)",
        "srun: not on PATH"]
    assert launch_lines(launch(srun="", error="no srun PMI plugin fits"))[1] == (
        "srun: no srun PMI plugin fits")


def test_the_table_says_what_each_rank_trains_in_and_whether_its_cpu_has_bfloat16():
    rows = [dataclasses.replace(row(0), precision="bfloat16", native_bfloat16=True),
            dataclasses.replace(row(1), precision="float32")]
    lines = table(rows, []).splitlines()
    assert "precision" in lines[0].split()
    assert "bfloat16 (native bf16)" in lines[1] and "float32 (no native bf16)" in lines[2]


def test_the_table_names_the_library_file_beside_its_name():
    rows = [dataclasses.replace(row(0), mpi_file="/venv/lib/libmpi.so.12")]
    assert "MPICH Version: 4.3.0 (/venv/lib/libmpi.so.12)" in table(rows, [])
