"""dba3c.cpus: CPU lists, the pools sized from the bound CPUs, the binding warning and a
rank's first line, with expected values written out here."""

import os

import pytest

from dba3c.config import EnvConfig, TrainConfig
from dba3c.cpus import (
    Threads,
    binding_warning,
    bound_cpus,
    cpu_ranges,
    rank_line,
    simulator_threads,
    tensorflow_threads,
    threads_for,
)


@pytest.mark.parametrize(("cpus", "text"), [((0,), "0"), ((0, 1, 2, 5), "0-2,5"),
                                            ((3, 1, 2), "1-3"), ((0, 2, 4), "0,2,4"),
                                            ((0, 1, 4, 5, 6, 9), "0-1,4-6,9")])
def test_cpu_ranges_are_written_as_linux_writes_them(cpus, text):
    assert cpu_ranges(cpus) == text


def test_bound_cpus_are_this_process_affinity():
    assert bound_cpus() == tuple(sorted(os.sched_getaffinity(0)))


def test_pools_follow_the_bound_cpus_unless_the_config_sets_them():
    env, train = EnvConfig(num_envs=10), TrainConfig()
    assert threads_for(env, train, 12) == Threads(10, 12, 12)  # one simulator thread per env
    assert threads_for(env, train, 1) == Threads(1, 1, 1)  # a rank bound to one CPU
    assert simulator_threads(0, 4, 12) == 4  # env.num_threads 0, 4 envs, 12 CPUs
    assert simulator_threads(3, 16, 12) == 3
    assert tensorflow_threads(TrainConfig(intra_op_threads=2), 12) == (2, 12)
    assert tensorflow_threads(TrainConfig(inter_op_threads=1), 12) == (12, 1)


@pytest.mark.parametrize(("bound", "node", "ranks", "share"), [(1, 12, 1, 12), (2, 12, 4, 3),
                                                               (1, 2, 1, 2)])
def test_a_rank_below_its_share_of_the_node_is_warned_with_the_fix(bound, node, ranks, share):
    warning = binding_warning(bound, node, ranks)
    assert warning is not None
    assert f"bound to {bound} of the node's {node} CPUs" in warning
    assert f"--cpus-per-task={share}" in warning and "env.num_threads" in warning


@pytest.mark.parametrize(("bound", "node", "ranks"), [(12, 12, 1), (3, 12, 4), (2, 2, 4),
                                                      (1, 2, 4)])
def test_a_rank_with_its_share_is_not_warned(bound, node, ranks):
    # four ranks on a 2-CPU node: a share rounds down, but never below one CPU
    assert binding_warning(bound, node, ranks) is None


def test_the_first_line_names_host_rank_role_cpus_and_pools():
    line = rank_line("node07", 3, "worker", (0, 1, 2, 3), 12, Threads(4, 4, 4))
    assert line == ("rank 3 (worker) on node07: 4 of 12 CPUs bound (0-3); threads: 4 "
                    "simulator, 4 intra-op, 4 inter-op")
    assert rank_line("n1", 1, "ps", (0,), 2, None).endswith("no simulators, no TensorFlow")
