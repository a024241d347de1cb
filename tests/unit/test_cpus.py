"""dba3c.cpus: CPU lists, the pools sized from the bound CPUs, the simulator threads' priority
(read back from /proc), the binding warning, the precision ``model.precision: auto`` picks
from a CPU's flags (faked here: Sapphire Rapids and Zen 4 have native bfloat16, Zen 3 has
not), the CPU's description and a rank's first line, with expected values written out here."""

import os
import threading
from pathlib import Path

import pytest

from dba3c.config import EnvConfig, TrainConfig
from dba3c.cpus import (
    Threads,
    binding_warning,
    bound_cpus,
    cpu_description,
    cpu_flags,
    cpu_ranges,
    first_cpu,
    niced_threads,
    precision_for,
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
    assert threads_for(EnvConfig(nice=10), train, 2) == Threads(2, 2, 2, simulator_nice=10)
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
    niced = rank_line("node07", 3, "worker", (0, 1), 12, Threads(2, 2, 2, simulator_nice=10))
    assert niced.endswith("threads: 2 simulator (nice +10), 2 intra-op, 2 inter-op")


def nice_of(tid: int) -> int:
    """A thread's nice value, field 19 of /proc/self/task/TID/stat (the fields after the
    command's closing parenthesis start at field 3)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19 - 3])


def started_thread(stop: threading.Event) -> int:
    """A thread that runs until ``stop`` is set; its thread id, once it runs."""
    ready = threading.Event()

    def run() -> None:
        ready.set()
        stop.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait()
    assert thread.native_id is not None
    return thread.native_id


@pytest.mark.parametrize("increment", [0, 3, 40])
def test_threads_started_in_the_block_run_that_many_nice_levels_down(increment):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    stop = threading.Event()
    before = started_thread(stop)
    with niced_threads(increment):
        inside = started_thread(stop)
    after = started_thread(stop)
    try:
        assert nice_of(inside) == min(19, base + increment)  # 40: capped at 19
        for thread in (before, after):
            assert nice_of(thread) == base
        assert nice_of(threading.get_native_id()) == base  # the caller keeps its level
    finally:
        stop.set()


SAPPHIRE_RAPIDS = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8".split()
ZEN_4 = "fpu avx2 avx512f avx512_bf16".split()
ZEN_3 = "fpu avx2 fma".split()


@pytest.mark.parametrize(("flags", "native"), [(SAPPHIRE_RAPIDS, True), (ZEN_4, True),
                                               (["amx_bf16"], True), (ZEN_3, False),
                                               ([], False)])
def test_auto_picks_bfloat16_only_on_a_cpu_with_native_bfloat16(flags, native):
    auto = precision_for("auto", flags)
    assert auto.dtype == ("bfloat16" if native else "float32")
    assert auto.warning() is None  # auto never warns
    assert precision_for("float32", flags).dtype == "float32"  # explicit choices stand
    assert precision_for("bfloat16", flags).dtype == "bfloat16"


def test_bfloat16_asked_for_without_native_bfloat16_is_warned_once():
    assert precision_for("bfloat16", SAPPHIRE_RAPIDS).warning() is None
    assert precision_for("float32", ZEN_3).warning() is None
    warning = precision_for("bfloat16", ZEN_3).warning()
    assert warning is not None and "\n" not in warning
    assert "amx_bf16, avx512_bf16" in warning and "model.precision=auto" in warning


def test_the_flags_are_the_first_processor_s():
    cpuinfo = ("processor\t: 0\nmodel name\t: Xeon\nflags\t\t: fpu avx512_bf16 amx_bf16\n\n"
               "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx512_bf16", "amx_bf16"}
    assert first_cpu(cpuinfo)["model name"] == "Xeon"
    assert cpu_flags("") == frozenset()
    assert precision_for("auto", cpu_flags(cpuinfo)).dtype == "bfloat16"


def test_cpu_description_names_the_first_cpu_and_its_widest_vector_instructions():
    first = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
             "model name\t: AMD EPYC 9B14\ncpu MHz\t\t: 2596.144\n"
             "flags\t\t: fpu sse2 avx2 fma avx512f avx512bw\n")
    second = "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n"
    assert (cpu_description(first + "\n" + second)
            == "AMD EPYC 9B14 (family 25, model 17, 2.6 GHz, AVX-512)")
    assert cpu_description(first.replace(" avx512f avx512bw", "")).endswith("GHz, AVX2)")
    assert cpu_description("flags\t: fpu\n") == "unknown CPU (family ?, model ?, no AVX2)"
    assert cpu_description(first.replace("avx512bw", "avx512bw avx512_bf16")).endswith(
        "GHz, AVX-512, native bfloat16)")


def test_the_first_line_of_a_training_rank_says_its_precision_and_why():
    threads = Threads(4, 4, 4)
    native = rank_line("n1", 0, "worker", (0,), 1, threads, precision_for("auto", ZEN_4))
    assert native.endswith("; computes in bfloat16 (auto; the CPU has native bfloat16)")
    emulated = rank_line("n1", 0, "worker", (0,), 1, threads, precision_for("auto", ZEN_3))
    assert emulated.endswith("; computes in float32 (auto; the CPU has no native bfloat16)")
    asked = rank_line("n1", 0, "worker", (0,), 1, threads, precision_for("bfloat16", ZEN_3))
    assert asked.endswith("; computes in bfloat16 (model.precision; the CPU has no native "
                          "bfloat16)")


def test_an_atari_pool_s_emulator_threads_run_its_nice_levels_down():
    """Real ale-py Pong with 2 emulator threads at nice +4: two more of this process's
    threads run 4 levels below it, and the caller stays where it was."""
    from dba3c.games.envs import EnvPool

    base = os.getpriority(os.PRIO_PROCESS, 0)

    def niced() -> int:
        return sum(nice_of(int(tid)) == min(19, base + 4) for tid in os.listdir("/proc/self/task"))

    already = niced()
    pool = EnvPool("pong", 2, batch_size=1, num_threads=2, nice=4)
    try:
        assert niced() - already == 2
        assert nice_of(threading.get_native_id()) == base
    finally:
        pool.close()
