"""dba3c.launchers.slurm_site: what submit and sweep ask Slurm for, written out by hand."""

import argparse

import pytest

from dba3c.errors import UserError
from dba3c.launchers.slurm_site import (
    MARGIN_MIN,
    UNTIMED_MIN,
    SlurmSite,
    add_slurm_args,
    allocation_lines,
    executor_parameters,
    nodes_for,
    short_time_limit,
    site_from_args,
    slurm_minutes,
    smallest_node_cpus,
    time_limit_minutes,
)


def parse(*argv):
    p = argparse.ArgumentParser()
    add_slurm_args(p, time_help="minutes")
    return p.parse_args(list(argv))


def test_the_site_options_travel_as_given():
    args = parse("--partition", "cpu", "--account", "proj42", "--qos", "long",
                 "--constraint", "skylake", "--slurm", "mem=0", "--slurm",
                 "cpu-freq=high")
    assert site_from_args(args) == SlurmSite("cpu", "proj42", "long", "skylake",
                                             (("mem", "0"), ("cpu_freq", "high")))
    assert site_from_args(parse()) == SlurmSite()


@pytest.mark.parametrize("bad", ["mem", "=0", "--mem=0"])
def test_a_slurm_option_that_is_not_key_value_is_refused(bad):
    with pytest.raises(UserError, match="must look like KEY=VALUE"):
        site_from_args(parse(f"--slurm={bad}"))


@pytest.mark.parametrize("flag", ["--tasks-per-node", "--cpus-per-task", "--time"])
def test_counts_below_one_are_refused(flag):
    with pytest.raises(UserError, match=f"{flag} 0 must be at least 1"):
        site_from_args(parse(flag, "0"))


def test_the_smallest_node_of_a_partition_sets_the_cpus():
    assert smallest_node_cpus("12\n12\n8\n") == 8
    assert smallest_node_cpus("48+\n") == 48  # sinfo marks a mixed count with +
    assert smallest_node_cpus("") is None


def test_every_rank_gets_a_node_unless_told_otherwise():
    assert nodes_for(69, 1) == 69
    assert nodes_for(8, 4) == 2
    with pytest.raises(UserError, match="5 ranks do not fill nodes of 2 tasks"):
        nodes_for(5, 2)


def test_the_time_limit_follows_max_seconds_plus_a_margin():
    assert time_limit_minutes(1800, None) == 30 + MARGIN_MIN
    assert time_limit_minutes(170, None) == 3 + MARGIN_MIN  # whole minutes, rounded up
    assert time_limit_minutes(0, None) == UNTIMED_MIN
    assert time_limit_minutes(1800, 45) == 45  # --time wins


def test_a_time_limit_without_the_margin_after_max_seconds_is_warned():
    # 2 hours of training in a 2-hour job: the signal would stop it and requeue it
    warning = short_time_limit(120, 7200)
    assert warning is not None and "120 min leaves less than 10 min after " \
        "train.max_seconds=7200" in warning and f"--time={120 + MARGIN_MIN}" in warning
    assert short_time_limit(120 + MARGIN_MIN, 7200) is None
    assert short_time_limit(None, 7200) is None  # no limit known
    assert short_time_limit(5, 0) is None  # a run without its own limit


def test_the_job_and_its_srun_get_the_cpus_the_plugin_and_the_site():
    params = executor_parameters(nodes=69, tasks_per_node=1, minutes=130, cpus_per_task=12,
                                 site=SlurmSite("cpu", "proj42", None, None, (("mem", "0"),)),
                                 mpi_plugin="pmix_v4", signal_delay=120)
    assert params == {
        "nodes": 69, "tasks_per_node": 1, "timeout_min": 130, "name": "dba3c",
        "slurm_signal_delay_s": 120, "cpus_per_task": 12,
        "slurm_srun_args": ["--mpi=pmix_v4", "--kill-on-bad-exit=1", "--cpus-per-task=12"],
        "slurm_partition": "cpu", "slurm_account": "proj42",
        "slurm_additional_parameters": {"requeue": True, "mem": "0"}}
    plain = executor_parameters(nodes=1, tasks_per_node=2, minutes=60, cpus_per_task=None,
                                site=SlurmSite(), mpi_plugin="pmi2", signal_delay=60)
    assert "cpus_per_task" not in plain
    assert plain["slurm_srun_args"] == ["--mpi=pmi2", "--kill-on-bad-exit=1"]


@pytest.mark.parametrize(("text", "minutes"), [("2:00:00", 120), ("30:00", 30),
                                                ("1-00:00:00", 1440), ("0:30", 1),
                                                ("10:00:01", 601), ("UNLIMITED", None),
                                                ("", None)])
def test_slurm_time_limits_are_read_in_whole_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


def test_the_allocation_names_nodes_tasks_and_the_node_hours_it_can_spend():
    # the paper's layout: 69 ranks, one per node, 2 hours + 10 minutes
    assert allocation_lines(69, 1, 130, 300.0) == [
        "allocation: 69 node(s) x 1 task(s) = 69 tasks (ranks), every CPU of a node shared "
        "by its tasks",
        "time limit: 130 min -> at most 149.5 node-hours",
        "the run ends earlier once a greedy evaluation reaches 300 (eval.stop_at_target)"]
    six = allocation_lines(6, 6, None, None)
    assert six[0].startswith("allocation: 1 node(s) x 6 task(s) = 6 tasks")
    assert six[1:] == ["time limit: none known, so no bound on the node-hours"]
