"""Collective aggregation (``dist.aggregation: collective``).

- The transport's collectives: in-process (threads) and MPI (a real mpiexec world in which
  one rank stays out of the group), against sums and concatenations computed here.
- The step (:class:`~dba3c.distributed.collective.ranks.CollectiveClient`) on the in-process
transport:
  one rank equals the single-process store bit for bit; W ranks equal W workers + P
  parameter servers within float32 summation-order tolerance after 20 steps; one rank's
  non-finite gradient makes every shard skip the same step.
- Real runs (``dba3c launch``, synthetic-compute ranks: no TensorFlow) against an independent
  float64 Adam: exact ``train.max_steps``; a checkpoint written in one mode resumes in the
  other; SIGTERM / SIGUSR2 stop with a checkpoint and a bit-exact resume; SIGKILL of any rank
  ends the job non-zero within 30 s; non-finite gradients are skipped at the same step on
  every rank, a long streak ends the job with one error line; a rank that stops answering
  is named by the stall watchdog.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from dba3c.config import DistConfig
from dba3c.distributed.collective.client import CollectiveClient
from dba3c.distributed.roles import make_roles
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.transport import (
    PR_GET_TIMERSLACK,
    TIMER_SLACK_NS,
    InProcessTransport,
    collective_environment,
    offsets,
    precise_sleeps,
)
from dba3c.launchers.local import find_mpiexec
from dba3c.learning.models import NetSpec
from dba3c.learning.optim import make_optimizer
from dba3c.learning.params import ShardPlan
from dba3c.learning.rules import OptimizerState
from dba3c.training.runner import LocalParameterServer

from conftest import ROOT, dba3c, latest_checkpoint, read_jsonl
from test_protocol import N, grad_of, make_cfg, run_world, train_loop
from test_reliability import (
    Job,
    assert_identical,
    assert_stopped_by_signal,
    ckpt_steps,
    error_lines,
    stop_with_signal,
    summary,
    wait_for_steps,
)
from test_synthetic import SEED, rank_pid, reference_run, stall_error


def run_threads(fn, size: int) -> list:
    """fn(transport) on every rank of an in-process world, as threads; their results."""
    transports = InProcessTransport.create_world(size)
    results: list = [None] * size
    errors: list = []

    def one(rank: int) -> None:
        try:
            results[rank] = fn(transports[rank])
        except BaseException as e:  # surfaced by the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


COUNTS = [3, 2, 2]  # group ranks' parts of a 7-vector


def contribution(world_rank: int) -> np.ndarray:
    return np.random.default_rng([world_rank]).normal(size=sum(COUNTS)).astype(np.float32)


def collectives_on(transport) -> tuple | None:
    """World rank 1 stays out; the others reduce-scatter, allreduce and allgather, with the
    three operations in flight at once."""
    group = transport.split(transport.rank != 1)
    if group is None:
        return None
    mine = contribution(transport.rank)
    part = np.zeros(COUNTS[group.rank], np.float32)
    total = np.zeros(2, np.int64)
    gathered = np.zeros(sum(COUNTS), np.float32)
    start = offsets(COUNTS)[group.rank]
    requests = [group.ireduce_scatter(mine, part, COUNTS),
                group.iallreduce(np.array([group.rank, 1], np.int64), total),
                group.iallgather(mine[start:start + COUNTS[group.rank]], gathered, COUNTS)]
    while not all([r.test() for r in requests]):
        pass
    return group.rank, group.size, part, total, gathered


def check_collectives(results: list) -> None:
    members = [0, 2, 3]
    assert results[1] is None
    full = sum(contribution(r).astype(np.float64) for r in members)
    pieces = np.concatenate([contribution(r)[o:o + n] for r, o, n in
                             zip(members, offsets(COUNTS), COUNTS)])
    for group_rank, world_rank in enumerate(members):
        rank, size, part, total, gathered = results[world_rank]
        assert (rank, size) == (group_rank, 3)
        o, n = offsets(COUNTS)[rank], COUNTS[rank]
        np.testing.assert_allclose(part, full[o:o + n], rtol=1e-6)
        assert total.tolist() == [0 + 1 + 2, 3]
        assert np.array_equal(gathered, pieces)


def test_in_process_collectives_sum_and_gather_over_the_members_only():
    check_collectives(run_threads(collectives_on, 4))


def test_recursive_collectives_set_mpichs_variables_unless_the_user_did():
    halving = "MPIR_CVAR_IREDUCE_SCATTER_INTRA_ALGORITHM"
    doubling = "MPIR_CVAR_IALLGATHERV_INTRA_ALGORITHM"
    assert collective_environment("recursive", {"PATH": "/bin"}) == {
        halving: "sched_recursive_halving", doubling: "sched_recursive_doubling"}
    assert collective_environment("recursive", {halving: "sched_pairwise"}) == {
        doubling: "sched_recursive_doubling"}
    assert collective_environment("mpi", {}) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_precise_sleeps_set_the_timer_slack_of_the_thread_and_the_threads_it_starts():
    # a rank polls its collectives with sleeps of tens of us: Linux's default 50 us of timer
    # slack would make each sleep ~50 us longer
    prctl = ctypes.CDLL(None).prctl
    slack: dict[str, int] = {}

    def rank_main() -> None:
        slack["before"] = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
        precise_sleeps()
        slack["after"] = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
        actor = threading.Thread(
            target=lambda: slack.update(started=prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)))
        actor.start()
        actor.join()

    rank = threading.Thread(target=rank_main)
    rank.start()
    rank.join()
    assert slack["before"] == prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) != TIMER_SLACK_NS
    assert slack["after"] == slack["started"] == TIMER_SLACK_NS


def test_in_process_sums_are_added_in_rank_order_in_float32():
    def add(transport):
        group = transport.split(True)
        out = np.zeros(1, np.float32)
        request = group.iallreduce(np.array([[1.0, 1e8, -1e8][transport.rank]], np.float32),
                                   out)
        while not request.test():
            pass
        return out[0]

    # (1 + 1e8) - 1e8 in float32 is 0: the order is fixed, not the exact sum
    assert run_threads(add, 3) == [0.0, 0.0, 0.0]


MPI_SCRIPT = """
import pickle, sys
sys.path.insert(0, {tests!r})
from dba3c.distributed.transport import MpiTransport
from test_collective import collectives_on
t = MpiTransport({algorithm!r})
result = collectives_on(t)
with open({out!r} + str(t.rank), "wb") as f:
    pickle.dump(result, f)
"""


@pytest.mark.parametrize("algorithm", ["recursive", "mpi"])
def test_mpi_collectives_sum_and_gather_over_the_members_only(tmp_path, algorithm):
    """Both of MPICH's algorithm choices (dist.collective_algorithm) on a group of 3 ranks
    (not a power of two) with uneven shards."""
    import pickle

    out = str(tmp_path / "rank")
    script = MPI_SCRIPT.format(tests=str(ROOT / "tests"), out=out, algorithm=algorithm)
    subprocess.run([find_mpiexec(), "-n", "4", sys.executable, "-c", script], cwd=ROOT,
                   check=True, timeout=120)
    results = [pickle.loads((tmp_path / f"rank{r}").read_bytes()) for r in range(4)]
    check_collectives(results)


# ---- the step, in process -----------------------------------------------------------------
STEPS = 20
THETA0 = np.linspace(-1, 1, N).astype(np.float32)


def collective_world(cfg, num_ranks: int, gradient, buckets=(0,), staged=False) -> list[list]:
    """``num_ranks`` training ranks as threads, each pushing ``gradient(group_rank, version)``
    until ``train.max_steps`` (the vector cut into ``buckets``, :class:`ShardPlan`; ``staged``:
    offered bucket by bucket, the new parameters waited for bucket by bucket, as
    ``Worker.train_staged`` does); every rank's received Params and its final shard."""
    plan = ShardPlan(N, num_ranks, buckets)

    def staged_push(client, version: int, grad: np.ndarray):
        for b in reversed(range(plan.num_buckets)):
            lo, hi = plan.bucket_bounds(b)
            client.offer(version, b, grad[lo:hi])
        arriving = client.finish()
        theta = np.concatenate([arriving.wait(b).copy() for b in range(plan.num_buckets)])
        params = arriving.params()
        assert np.array_equal(theta, params.theta)
        return params

    def rank_loop(transport) -> tuple[list, ShardServer]:
        group = transport.split(True)
        theta_shard = plan.shard_of(THETA0, group.rank)
        shard = ShardServer(theta_shard, OptimizerState.zeros(theta_shard.size), 0, mode="sync",
                            replicas=1, optimizer=make_optimizer(cfg))
        client = CollectiveClient(group, shard, plan, cfg.train, chief=group.rank == 0,
                                  wants_stop=lambda: False)
        received = [client.pull()]
        push = functools.partial(staged_push, client) if staged else client.push
        while not client.stopping:
            params = push(received[-1].version, gradient(group.rank, received[-1].version))
            assert params is not None
            received.append(params)
        return received, shard

    return run_threads(rank_loop, num_ranks)


def test_one_rank_equals_the_single_process_store_bit_for_bit():
    cfg = make_cfg(workers=1, ps=1, max_steps=STEPS)

    def gradient(rank, version):  # with a poisoned step: skipped alike
        return grad_of(rank, version) * (np.nan if version == 7 else 1)

    [(received, shard)] = collective_world(cfg, 1, gradient)
    store = LocalParameterServer(THETA0.copy(), OptimizerState.zeros(N), 0, make_optimizer(cfg))
    expected = [store.pull()] + [store.push(v, gradient(0, v)) for v in range(STEPS)]
    assert [p.version for p in received] == list(range(STEPS + 1))
    for got, want in zip(received, expected):
        assert np.array_equal(got.theta.view(np.uint32), want.theta.view(np.uint32))
        assert got.nonfinite_streak == want.nonfinite_streak
    assert np.array_equal(shard.opt_state.m_shard, store.opt_state.m_shard)
    assert np.array_equal(shard.opt_state.v_shard, store.opt_state.v_shard)
    assert shard.opt_state.count == store.opt_state.count == STEPS - 1


# PS sums the workers' gradients in arrival order, the collective in rank order (MPI: in its
# algorithm's order): float32 sums that differ in the last bits; after 20 Adam steps the
# parameters agree to |a - b| <= 1e-6 (1 + |b|) (measured: at most 2e-7 in theta, m and v)
SUMMATION_TOL = 1e-6


BUCKETS = [(0,), (0, 2, N // 2)]  # contiguous shards; three buckets (one shorter than W)


@pytest.mark.parametrize("buckets", BUCKETS)
def test_w_ranks_equal_w_workers_and_p_parameter_servers_within_summation_tolerance(buckets):
    cfg = make_cfg(workers=3, ps=2, max_steps=STEPS)
    ps_workers = make_roles(6, cfg).workers  # (3, 4, 5): gradients keyed by these ranks
    chief, ps_received = run_world(cfg, train_loop(), THETA0)
    theta_ps, m_ps, v_ps, count_ps = chief.checkpoints[STEPS]
    ranks = collective_world(cfg, 3, lambda r, v: grad_of(ps_workers[r], v), buckets)
    for received, _ in ranks:
        assert [p.version for p in received] == list(range(STEPS + 1))
        for got, want in zip(received, ps_received[ps_workers[0]]):
            np.testing.assert_allclose(got.theta, want.theta, rtol=SUMMATION_TOL,
                                       atol=SUMMATION_TOL)
    theta = ranks[0][0][-1].theta
    np.testing.assert_allclose(theta, theta_ps, rtol=SUMMATION_TOL, atol=SUMMATION_TOL)
    plan = ShardPlan(N, 3, buckets)
    m = np.concatenate(plan.flat_chunks([shard.opt_state.m_shard for _, shard in ranks]))
    v = np.concatenate(plan.flat_chunks([shard.opt_state.v_shard for _, shard in ranks]))
    np.testing.assert_allclose(m, m_ps, rtol=SUMMATION_TOL, atol=SUMMATION_TOL)
    np.testing.assert_allclose(v, v_ps, rtol=SUMMATION_TOL, atol=SUMMATION_TOL)
    assert {shard.opt_state.count for _, shard in ranks} == {count_ps} == {STEPS}


def test_buckets_offered_one_by_one_give_what_the_whole_gradient_gives_bit_for_bit():
    cfg = make_cfg(workers=3, ps=1, max_steps=STEPS)
    buckets = (0, 2, N // 2)

    def gradient(rank, version):  # with a poisoned step
        return grad_of(rank, version) * (np.nan if version == 5 else 1)

    whole = collective_world(cfg, 3, gradient, buckets)
    staged = collective_world(cfg, 3, gradient, buckets, staged=True)
    for (got, got_shard), (want, want_shard) in zip(staged, whole):
        assert [p.version for p in got] == list(range(STEPS + 1))
        for a, b in zip(got, want):
            assert np.array_equal(a.theta.view(np.uint32), b.theta.view(np.uint32))
            assert a.nonfinite_streak == b.nonfinite_streak
        assert np.array_equal(got_shard.opt_state.v_shard, want_shard.opt_state.v_shard)


def test_buckets_out_of_order_are_refused_as_a_protocol_violation():
    cfg = make_cfg(workers=1, ps=1, max_steps=STEPS)
    plan = ShardPlan(N, 1, (0, 4))

    def rank_loop(transport):
        group = transport.split(True)
        shard = ShardServer(THETA0.copy(), OptimizerState.zeros(N), 0, mode="sync", replicas=1,
                            optimizer=make_optimizer(cfg))
        client = CollectiveClient(group, shard, plan, cfg.train, chief=True,
                                  wants_stop=lambda: False)
        client.pull()
        with pytest.raises(RuntimeError, match="bucket 0 .* where bucket 1 at version 0"):
            client.offer(0, 0, np.zeros(4, np.float32))
        with pytest.raises(RuntimeError, match="bucket 1 .* version 3 .* at version 0"):
            client.offer(3, 1, np.zeros(N - 4, np.float32))
        client.offer(0, 1, np.zeros(N - 4, np.float32))
        with pytest.raises(RuntimeError, match="finish with bucket 0 not offered"):
            client.finish()

    run_threads(rank_loop, 1)


@pytest.mark.parametrize("buckets", BUCKETS)
def test_one_ranks_non_finite_gradient_makes_every_shard_skip_the_same_step(buckets):
    cfg = make_cfg(workers=3, ps=1, max_steps=6)
    poisoned = {(2, 3)}  # group rank 2 at version 3 only: one shard's mean would stay finite

    def gradient(rank, version):
        g = grad_of(rank, version)
        if (rank, version) in poisoned:
            g[-1] = np.inf  # the last shard's element only
        return g

    ranks = collective_world(cfg, 3, gradient, buckets)
    for received, shard in ranks:
        assert [p.nonfinite_streak for p in received] == [0, 0, 0, 0, 1, 0, 0]
        assert shard.stats.nonfinite_skipped == 1 and shard.opt_state.count == 5
        assert np.isfinite(received[-1].theta).all()
        # step 3 changed nothing: theta_4 == theta_3 on every rank
        assert np.array_equal(received[4].theta, received[3].theta)
        assert not np.array_equal(received[5].theta, received[4].theta)


# ---- real runs ----------------------------------------------------------------------------
COLLECTIVE = ["dist.aggregation=collective", "--ps", 0]
SYN = ["configs/breakout.yaml", "synthetic.enabled=true", "synthetic.compute_ms=10",
       "eval.every=0", "eval.rank=false", "run.progress=none", "run.log_every=1",
       f"run.seed={SEED}", "train.max_seconds=0"]
THETA0_BREAKOUT = NetSpec("ba3c", 128, (4, 84, 84), 4).init_params(SEED)


def launch(workers: int, *args, collective: bool = True, **kw):
    """``dba3c launch`` of synthetic-compute ranks (``collective`` or 1 parameter server)."""
    mode = COLLECTIVE if collective else ["--ps", 1]
    return dba3c("launch", *SYN, "--workers", workers, *mode, *args, timeout=180, **kw)


def assert_adam_of_the_mean(run, steps: int, workers_at) -> None:
    """The run's last checkpoint is at ``steps`` and holds the float64 reference's theta."""
    ckpt = latest_checkpoint(run)
    assert ckpt.step == steps
    expected = reference_run(THETA0_BREAKOUT, workers_at, steps)
    np.testing.assert_allclose(ckpt.theta, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overlap", ["true", "false"])
def test_a_collective_run_ends_at_exactly_max_steps_with_adam_of_the_mean(tmp_path, overlap):
    run = tmp_path / "run"
    launch(3, "train.max_steps=12", "run.checkpoint_every=5", f"run.dir={run}",
           f"dist.collective_overlap={overlap}")
    assert ckpt_steps(run) == [5, 10, 12]
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, 13))
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["dist/replicas"] == 3 and last["perf/effective_batch"] == 96
    assert summary(run)["stop_reason"] == "train.max_steps=12 reached"
    assert latest_checkpoint(run).adam_count == 12
    assert_adam_of_the_mean(run, 12, lambda v: [0, 1, 2])


def test_a_checkpoint_resumes_in_the_other_mode(tmp_path):
    """ps (ranks 0 chief+worker, 1 PS, 2 worker) to step 4, collective (ranks 0, 1) to 8,
    ps again to 12: one continuous run of Adam on each step's workers' mean gradient."""
    run = tmp_path / "run"
    launch(2, "train.max_steps=4", f"run.dir={run}", collective=False)
    launch(2, "train.max_steps=8", f"run.dir={run}")
    launch(2, "train.max_steps=12", f"run.dir={run}", collective=False)
    assert ckpt_steps(run)[-3:] == [4, 8, 12]
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, 13))
    assert latest_checkpoint(run).adam_count == 12
    assert_adam_of_the_mean(run, 12, lambda v: [0, 1] if 4 <= v < 8 else [0, 2])


def test_what_needs_parameter_servers_is_refused_with_one_line_before_any_work(tmp_path):
    run = tmp_path / "run"
    proc = dba3c("launch", "configs/cartpole.yaml", "--workers", 2, "dist.aggregation=collective",
                 "dist.mode=async", f"run.dir={run}", check=False, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: dist.ps=1 has no meaning with dist.aggregation="
                               "collective"), lines
    assert "dist.mode=async needs dist.aggregation: ps" in lines[0]
    assert not run.exists()


def test_the_slurm_layout_check_counts_no_parameter_servers():
    check = [sys.executable, "-m", "dba3c.launchers.slurm_check", "configs/breakout_64.yaml",
             "65", "dist.workers=0", "dist.aggregation=collective", "dist.ps=0"]
    out = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "rank 1: evaluator; ranks 2-64: workers; workers: 64" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2], ids=lambda s: s.name)
def test_a_signal_stops_a_collective_run_with_a_checkpoint_and_it_resumes_bit_for_bit(
        tmp_path, sig):
    """SIGTERM to the launcher (forwarded to every rank; rank 0 decides), or SIGUSR2 to rank
    0 (Slurm's warning before the time limit): exit 0, a checkpoint at the step every rank
    stopped at, and the resumed run ends bit for bit where an uninterrupted one does."""
    run = tmp_path / "run"
    with Job("launch", *SYN, "--workers", 2, *COLLECTIVE, "synthetic.compute_ms=20",
             "train.max_steps=1000000", "run.checkpoint_every=0", f"run.dir={run}") as job:
        wait_for_steps(run, job, 10)
        pid = job.proc.pid if sig == signal.SIGTERM else rank_pid(job, 0)
        assert stop_with_signal(job, pid, sig, timeout=10) == 0, job.output[-3000:]
        s = assert_stopped_by_signal(job, run, sig)
    launch(2, f"train.max_steps={s + 3}", "run.checkpoint_every=0", f"run.dir={run}")
    ref = tmp_path / "ref"
    launch(2, f"train.max_steps={s + 3}", "run.checkpoint_every=0", f"run.dir={ref}")
    assert_identical(latest_checkpoint(run), latest_checkpoint(ref))
    assert latest_checkpoint(run).step == s + 3
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, s + 4))


@pytest.mark.parametrize("killed", [0, 2])
def test_sigkill_of_any_rank_ends_the_job_nonzero_within_30_s(tmp_path, killed):
    run = tmp_path / "run"
    with Job("launch", *SYN, "--workers", 3, *COLLECTIVE, "train.max_steps=1000000",
             "run.checkpoint_every=0", f"run.dir={run}") as job:
        wait_for_steps(run, job, 3)
        os.kill(rank_pid(job, killed), signal.SIGKILL)
        t0 = time.monotonic()
        rc = job.wait(timeout=60)
        assert rc != 0 and job.ended - t0 < 30, (rc, job.ended - t0)
        time.sleep(0.5)
        assert not job.survivors(), f"left running: {job.survivors()}"


def test_non_finite_gradients_are_skipped_on_every_rank_at_the_same_step(tmp_path):
    run = tmp_path / "run"
    k = 5  # gradients computed at versions 5 and 6 are poisoned (on every rank)
    launch(3, "train.max_steps=12", "run.checkpoint_every=4", f"debug.nan_at_step={k}",
           "debug.nan_steps=2", "train.max_nonfinite=3", f"run.dir={run}")
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert [m["train/nonfinite_skipped"] for m in metrics] == [
        max(0, min(2, step - k)) for step in range(1, 13)]
    final = latest_checkpoint(run)
    assert final.adam_count == 10  # every shard skipped the same two steps
    assert np.isfinite(final.adam_m).all() and np.isfinite(final.adam_v).all()
    assert_adam_of_the_mean(run, 12, lambda v: [] if k <= v < k + 2 else [0, 1, 2])


def test_a_long_non_finite_streak_ends_a_collective_run_with_one_error_line(tmp_path):
    run = tmp_path / "run"
    proc = launch(3, "run.checkpoint_every=4", "debug.nan_at_step=5", "debug.nan_steps=100",
                  "train.max_nonfinite=3", "train.max_steps=1000", f"run.dir={run}",
                  check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-3000:]
    errors = error_lines(output)
    assert len(errors) == 1 and "train.max_nonfinite=3" in errors[0], output[-3000:]
    assert "stopped at step 8" in errors[0] and "Traceback" not in output
    assert ckpt_steps(run) == [4]  # the last good state


def test_a_rank_that_stops_answering_ends_the_collective_job_naming_it(tmp_path):
    error = stall_error(["launch", *SYN, "--workers", 3, *COLLECTIVE, "synthetic.compute_ms=20",
                         "train.max_steps=1000000", "run.checkpoint_every=0"],
                        tmp_path / "run", stopped=2, timeout=5)
    assert "waiting on ranks [2] (workers [2]: no gradient for step" in error, error
    assert "do not answer" in error


def test_a_rank_waiting_in_the_collectives_does_not_spin_a_core():
    """Rank 1 waits ~20 ms per round for rank 0 in the reduce-scatter: polled as the
    collective client polls (quick polls for 20 caps, then sleeps of at most
    dist.collective_poll_us: transport.collective_wait), it uses a part of a
    core, at most half of what MPI_Wait spins in the same place (~1.0 idle;
    docs/benchmarks.md has both). Compared in one run, so a loaded host lowers both."""
    from dba3c.benchmarks.waiting import PAPER_PARAMS, run_point, waiting_table

    polled = f"quick-{DistConfig().collective_poll_us:g}us"  # the client's waits
    poll = run_point(2, polled, PAPER_PARAMS, rounds=10, late_ms=20.0)
    block = run_point(2, "block", PAPER_PARAMS, rounds=10, late_ms=20.0)
    assert poll["ranks"] == 2 and poll["strategy"] == polled and poll["step_ms"] > 0
    assert poll["wait_cpu"] < 0.5 * block["wait_cpu"], (poll, block)
    table = waiting_table([poll, block])
    assert table.splitlines()[0].startswith(f"| ranks | step ms, {polled} | step ms, block | ")
    row = table.splitlines()[-1]
    assert row.startswith(f"| 2 | {poll['step_ms']:.2f} | {block['step_ms']:.2f} | "), row
    assert f" | {poll['wait_cpu']:.2f} | {block['wait_cpu']:.2f} | " in row, row


@pytest.mark.slow
def test_the_evaluator_rank_evaluates_the_workers_shards_and_can_stop_the_run(tmp_path):
    """CartPole, 2 collective workers + an evaluator rank, whose snapshots come from every
    worker's shard; the first evaluation reaches the (zero) target and stops the run."""
    run = tmp_path / "run"
    dba3c("launch", "configs/cartpole.yaml", "--workers", 2, *COLLECTIVE, "--evaluator",
          "train.max_steps=1000000", "train.max_seconds=240", "eval.every=5",
          "eval.episodes=2", "eval.target_score=0", "eval.stop_at_target=true",
          "run.progress=none", "run.checkpoint_every=0", f"run.dir={run}", timeout=300)
    evals = read_jsonl(run / "eval.jsonl")
    assert evals and all(e["step"] % 5 == 0 and e["episodes"] == 2 for e in evals)
    done = summary(run)
    assert done["stop_reason"] == "eval.target_score=0 reached"
    assert done["target_step"] == evals[0]["step"]
    assert ckpt_steps(run) == [done["final_step"]] and done["final_step"] > evals[0]["step"]
