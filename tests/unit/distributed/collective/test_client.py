"""The collective step (:class:`~dba3c.distributed.collective.client.CollectiveClient`) on the
in-process transport: one rank equals the single-process store bit for bit; W ranks equal
W workers + P parameter servers within float32 summation-order tolerance after 20 steps;
buckets offered one by one equal the whole gradient, and out of order are refused; a
replicated first bucket equals a cut one bit for bit, and copies of it that differ end the
run; the last bucket gathered ahead gives the same bits, and its update goes ahead of the
step without touching the shard; one rank's non-finite gradient makes every shard skip the
same step."""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest

from dba3c.distributed.collective.client import CollectiveClient
from dba3c.distributed.roles import make_roles
from dba3c.distributed.shard import ShardServer
from dba3c.distributed.single import LocalParameterServer
from dba3c.distributed.transport.waiting import wait_until
from dba3c.learning.optim import make_optimizer
from dba3c.learning.params import ShardPlan
from dba3c.learning.rules import OptimizerState
from tests.support.world import (
    N,
    grad_of,
    make_cfg,
    round_to_bfloat16,
    run_threads,
    run_world,
    train_loop,
)

# ---- the step, in process -----------------------------------------------------------------
STEPS = 20
THETA0 = np.linspace(-1, 1, N).astype(np.float32)


def rank_client(transport, plan: ShardPlan, cfg) -> CollectiveClient:
    """This rank's client of a world where every rank trains, its shard cut from THETA0."""
    group = transport.split(True)
    theta_shard = plan.shard_of(THETA0, group.rank)
    shard = ShardServer(theta_shard, OptimizerState.zeros(theta_shard.size), 0, mode="sync",
                        replicas=1, optimizer=make_optimizer(cfg))
    return CollectiveClient(group, shard, plan, cfg.train, chief=group.rank == 0,
                            wants_stop=lambda: False, wire=cfg.dist.wire_dtype,
                            gather_ahead=cfg.dist.gather_ahead)


def collective_world(cfg, num_ranks: int, gradient, buckets=(0,), staged=False,
                     replicated_first=False, on_client=lambda client: None) -> list[list]:
    """``num_ranks`` training ranks as threads, each pushing ``gradient(group_rank, version)``
    until ``train.max_steps`` (the vector cut into ``buckets``, :class:`ShardPlan`, bucket 0
    whole in every shard with ``replicated_first``; ``staged``: offered bucket by bucket, the
    new parameters waited for bucket by bucket, as ``Worker.train_staged`` does; each new
    client is handed to ``on_client`` first); every rank's received Params and its final
    shard."""
    plan = ShardPlan(N, num_ranks, buckets, replicated_first)

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
        client = rank_client(transport, plan, cfg)
        on_client(client)
        shard = client.shard
        received = [client.pull()]
        push = functools.partial(staged_push, client) if staged else client.push
        while not client.stopping:
            params = push(received[-1].version,
                          gradient(client.group.rank, received[-1].version))
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


@pytest.mark.parametrize("staged", [False, True])
def test_a_replicated_first_bucket_gives_what_a_cut_one_gives_bit_for_bit(staged):
    # the in-process sums add in rank order either way, so the two steps round alike: the
    # allreduce's sum of bucket 0 is the reduce-scatter's, and Adam is elementwise
    cfg = make_cfg(workers=3, ps=1, max_steps=STEPS)
    buckets = (0, 4, 7)  # bucket 0 longer than the 3 shards, so a cut one is cut

    def gradient(rank, version):  # with a poisoned step, in bucket 0 only
        g = grad_of(rank, version)
        g[0] *= np.nan if version == 5 else 1
        return g

    cut = collective_world(cfg, 3, gradient, buckets, staged)
    replicated = collective_world(cfg, 3, gradient, buckets, staged, replicated_first=True)
    plan = ShardPlan(N, 3, buckets, replicated_first=True)
    for (got, _), (want, _) in zip(replicated, cut):
        assert [p.version for p in got] == list(range(STEPS + 1))
        assert [p.nonfinite_streak for p in got] == [p.nonfinite_streak for p in want]
        for a, b in zip(got, want):
            assert np.array_equal(a.theta.view(np.uint32), b.theta.view(np.uint32))
    shards = [shard for _, shard in replicated]
    assert [shard.theta_shard.size for shard in shards] == plan.sizes == [4 + 1 + 2, 6, 6]
    for state in ("m_shard", "v_shard"):
        flat_cut = np.concatenate(ShardPlan(N, 3, buckets).flat_chunks(
            [getattr(shard.opt_state, state) for _, shard in cut]))
        flat = np.concatenate(plan.flat_chunks([getattr(s.opt_state, state) for s in shards]))
        assert np.array_equal(flat, flat_cut)
        copies = [getattr(s.opt_state, state)[:4] for s in shards]  # bucket 0, every rank
        assert all(np.array_equal(c, flat_cut[:4]) for c in copies)


@pytest.mark.parametrize("replicated_first", [False, True])
def test_a_bfloat16_wire_step_is_float32_s_to_bfloat16_rounding(replicated_first):
    # each rank's gradient travels rounded to bfloat16 (b_r, round_to_bfloat16: written from
    # the format), and the in-process sums add in rank order, each sum of two in float32
    # rounded again: every shard applies (b_0 + b_1 + b_2) so rounded, / 3, in float32. Three
    # roundings of at most 2^-8 of what they round put that within 2^-8 x sum |g_r| of
    # float32's mean.
    cfg = make_cfg(workers=3, ps=1, max_steps=1, wire_dtype="bfloat16")
    plan = ShardPlan(N, 3, (0, 4), replicated_first)  # bucket 0 by allreduce or cut
    applied: dict[int, np.ndarray] = {}

    def rank_loop(transport):
        client = rank_client(transport, plan, cfg)
        offer, rank = client.shard.offer, client.group.rank

        def recorded(version, g):
            applied[rank] = g.copy()
            return offer(version, g)

        client.shard.offer = recorded  # type: ignore[method-assign]
        client.pull()
        return client.push(0, grad_of(rank, 0))

    run_threads(rank_loop, 3)
    mean = np.concatenate(plan.flat_chunks([applied[r] for r in range(3)]))
    grads = [grad_of(r, 0) for r in range(3)]
    b = [round_to_bfloat16(g) for g in grads]
    expected = round_to_bfloat16(round_to_bfloat16(b[0] + b[1]) + b[2]) / np.float32(3)
    assert mean.dtype == np.float32 and np.array_equal(mean, expected)
    float32 = np.mean(grads, axis=0, dtype=np.float32)
    assert np.all(np.abs(mean - float32) <= 2.0 ** -8 * np.sum(np.abs(grads), axis=0))
    assert not np.array_equal(mean, float32)


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("replicated_first", [False, True])
def test_on_a_bfloat16_wire_every_copy_moves_by_the_adam_step_rounded_to_bfloat16(
        replicated_first, staged):
    # each shard's Adam step d = theta_adam - theta_t travels rounded to bfloat16; every copy,
    # the shard's own included, becomes theta_t + round(d) in float32, bit for bit. Replayed
    # here from each shard's applied mean gradients: a reference shard takes the exact Adam
    # step, then the rounding is done by hand (round_to_bfloat16, from the format) on every
    # piece but a replicated bucket 0's (every rank applies that one whole, unrounded).
    cfg = make_cfg(workers=3, ps=1, max_steps=STEPS, wire_dtype="bfloat16")
    plan = ShardPlan(N, 3, (0, 2, N // 2), replicated_first)
    applied: dict[int, list[np.ndarray]] = {0: [], 1: [], 2: []}

    def gradient(rank, version):  # rank 1 poisons step 7: every shard skips it
        return grad_of(rank, version) * (np.nan if (rank, version) == (1, 7) else 1)

    def record_offers(client):  # each shard's mean gradients, as it applies them
        offer, rank = client.shard.offer, client.group.rank

        def recorded(version, g):
            applied[rank].append(g.copy())
            return offer(version, g)
        client.shard.offer = recorded

    results = collective_world(cfg, 3, gradient, plan.bucket_starts, staged, replicated_first,
                               on_client=record_offers)

    thetas = [[p.theta for p in received] for received, _ in results]
    assert len(thetas[0]) == STEPS + 1
    for version in range(STEPS + 1):  # every copy the same bits
        assert all(np.array_equal(t[version].view(np.uint32), thetas[0][version].view(np.uint32))
                   for t in thetas)
    exact_differs = False
    for rank, (_, shard) in enumerate(results):
        reference = ShardServer(plan.shard_of(THETA0, rank), OptimizerState.zeros(
            plan.sizes[rank]), 0, mode="sync", replicas=1, optimizer=make_optimizer(cfg))
        offsets = plan.piece_offsets(rank)
        for version, g in enumerate(applied[rank]):
            before = reference.theta_shard.copy()
            reference.offer(version, g)
            exact = reference.theta_shard.copy()
            for b, (lo, hi) in enumerate(plan.pieces(rank)):
                if plan.replicated(b):
                    continue
                piece = slice(offsets[b], offsets[b] + hi - lo)
                reference.theta_shard[piece] = before[piece] + round_to_bfloat16(
                    exact[piece] - before[piece])
            exact_differs |= not np.array_equal(exact, reference.theta_shard)
            got = plan.shard_of(thetas[rank][version + 1], rank)
            assert np.array_equal(got.view(np.uint32), reference.theta_shard.view(np.uint32))
        assert np.array_equal(shard.theta_shard, reference.theta_shard)  # the shard's own copy
        assert np.array_equal(shard.opt_state.m_shard, reference.opt_state.m_shard)
        assert shard.nonfinite_streak == 0 and reference.stats.nonfinite_skipped == 1
    assert exact_differs  # the rounding did something: the test can tell the two apart


@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
@pytest.mark.parametrize("staged", [False, True])
def test_the_last_bucket_gathered_ahead_gives_the_same_bits(wire, staged):
    # rank 1 poisons step 5 in bucket 0 only (the last bucket's update, computed ahead, is
    # finite and must be dropped), rank 2 step 9 in the last bucket only
    buckets = (0, 4, 7)

    def gradient(rank, version):
        g = grad_of(rank, version)
        g[{(1, 5): 0, (2, 9): N - 1}.get((rank, version), slice(0))] = np.nan
        return g

    worlds = [collective_world(make_cfg(workers=3, ps=1, max_steps=STEPS, wire_dtype=wire,
                                        gather_ahead=ahead), 3, gradient, buckets, staged,
                               replicated_first=True)
              for ahead in ("never", "always")]
    for (got, got_shard), (want, want_shard) in zip(worlds[1], worlds[0]):
        assert [p.version for p in got] == list(range(STEPS + 1))
        assert [p.nonfinite_streak for p in got] == [p.nonfinite_streak for p in want]
        assert sum(p.nonfinite_streak for p in got) == 2  # the two poisoned steps skipped
        for a, b in zip(got, want):
            assert np.array_equal(a.theta.view(np.uint32), b.theta.view(np.uint32))
        for state in ("m_shard", "v_shard"):
            assert np.array_equal(getattr(got_shard.opt_state, state),
                                  getattr(want_shard.opt_state, state))
        assert np.array_equal(got_shard.theta_shard, want_shard.theta_shard)
        assert got_shard.opt_state.count == want_shard.opt_state.count == STEPS - 2


def test_the_last_buckets_update_goes_ahead_before_finish_and_leaves_the_shard_as_it_was():
    # every rank offers the last bucket only: its reduce-scatter completes, and polling
    # (the staged step's progress thread) computes that piece's update and starts its
    # allgather; the shard (what a checkpoint reads) still holds version 0 until finish
    cfg = make_cfg(workers=2, ps=1, max_steps=STEPS, gather_ahead="always")
    plan = ShardPlan(N, 2, (0, 4))
    offered = threading.Barrier(2)

    def rank_loop(transport):
        client = rank_client(transport, plan, cfg)
        went_ahead = []
        update_ahead = client.shard.update_ahead

        def recorded(start, g_tail):
            went_ahead.append(start)
            return update_ahead(start, g_tail)

        client.shard.update_ahead = recorded  # type: ignore[method-assign]
        client.pull()
        before = client.shard.theta_shard.copy()
        grad = grad_of(client.group.rank, 0)
        client.offer(0, 1, grad[4:])
        offered.wait()
        def polled() -> bool:
            client.progress()
            return bool(went_ahead)

        wait_until(polled)
        assert went_ahead == [plan.piece_offsets(client.group.rank)[1]]
        assert np.array_equal(client.shard.theta_shard, before) and client.shard.version == 0
        client.offer(0, 0, grad[:4])
        arriving = client.finish()
        assert arriving is not None
        params = arriving.params()
        assert client.shard.version == 1 and not np.array_equal(client.shard.theta_shard,
                                                                before)
        return params

    thetas = [p.theta for p in run_threads(rank_loop, 2)]
    assert np.array_equal(thetas[0], thetas[1])


def test_gathering_ahead_switches_between_steps_only_and_only_where_it_can():
    # auto: off at first, on and off between steps (the probe's choice), the same bits as
    # never throughout; never, or one bucket: it cannot be switched on
    def rank_loop(transport, gather_ahead, buckets, switch_at):
        cfg = make_cfg(workers=2, ps=1, max_steps=STEPS, gather_ahead=gather_ahead)
        plan = ShardPlan(N, 2, buckets)
        client = rank_client(transport, plan, cfg)
        thetas = [client.pull().theta]
        assert client.gathering_ahead is False
        for version in range(6):
            client.gathering_ahead = version in switch_at
            grad = grad_of(client.group.rank, version)
            for b in reversed(range(plan.num_buckets)):
                lo, hi = plan.bucket_bounds(b)
                client.offer(version, b, grad[lo:hi])
                if b == plan.num_buckets - 1 and plan.num_buckets > 1:
                    with pytest.raises(RuntimeError, match="switched inside a step"):
                        client.gathering_ahead = False
            arriving = client.finish()
            assert arriving is not None
            thetas.append(arriving.params().theta)
        return thetas

    auto = run_threads(lambda t: rank_loop(t, "auto", (0, 4), {1, 2, 4}), 2)
    never = run_threads(lambda t: rank_loop(t, "never", (0, 4), set()), 2)
    for got, want in zip(auto, never):
        assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(got, want))
    for gather_ahead, buckets in (("never", (0, 4)), ("always", (0,))):
        with pytest.raises(AssertionError, match="needs dist.gather_ahead always or auto "
                           "and more than one bucket"):  # run_threads lists the ranks' errors
            run_threads(functools.partial(rank_loop, gather_ahead=gather_ahead,
                                          buckets=buckets, switch_at={0}), 2)


def test_copies_of_a_replicated_first_bucket_that_differ_end_the_run_on_the_chief():
    cfg = make_cfg(workers=3, ps=1, max_steps=STEPS)
    plan = ShardPlan(N, 3, (0, 5), replicated_first=True)

    def rank_loop(transport):
        client = rank_client(transport, plan, cfg)
        client.pull()
        for version in range(2):
            if version == 1 and client.group.rank == 2:
                client.shard.theta_shard[3] += 1e-7  # one copy drifts by a rounding
            for b in (1, 0):
                lo, hi = plan.bucket_bounds(b)
                client.offer(version, b, grad_of(client.group.rank, version)[lo:hi])
            if version == 0:
                arriving = client.finish()
                assert arriving is not None
                arriving.params()
            elif client.chief:
                with pytest.raises(RuntimeError, match="copies of the first layer's parameters "
                                   "differ at step 1 .*replicate_first_bucket=false"):
                    client.finish()
            else:
                assert client.finish() is None

    run_threads(rank_loop, 3)


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


def test_gather_gives_every_rank_every_ranks_values_in_rank_order():
    cfg = make_cfg(workers=3, ps=1, max_steps=STEPS)
    plan = ShardPlan(N, 3)

    def rank_loop(transport) -> np.ndarray:
        client = rank_client(transport, plan, cfg)
        rank = client.group.rank
        return client.gather(np.array([rank + 0.5, -rank]))

    for got in run_threads(rank_loop, 3):
        np.testing.assert_array_equal(got, [[0.5, 0.0], [1.5, -1.0], [2.5, -2.0]])


def test_busy_is_set_while_requests_are_in_flight_and_cleared_once_none_is():
    # what wakes the overlapped step's progress thread: it sleeps when nothing is in flight
    cfg = make_cfg(workers=2, ps=1, max_steps=STEPS)
    plan = ShardPlan(N, 2, (0, N // 2))

    def rank_loop(transport) -> list[bool]:
        client = rank_client(transport, plan, cfg)
        seen = [client.busy.is_set()]  # nothing posted yet
        params = client.pull()  # its allgathers, waited for
        seen.append(client.busy.is_set())  # until a progress call finds them done
        client.progress()
        seen.append(client.busy.is_set())
        grad = grad_of(client.group.rank, params.version)
        client.offer(params.version, 1, grad[N // 2:])
        seen.append(client.busy.is_set())
        client.offer(params.version, 0, grad[:N // 2])
        arriving = client.finish()  # the allgathers of the next version, posted
        assert arriving is not None
        seen.append(client.busy.is_set())
        wait_until(arriving.arrived)
        client.progress()
        seen.append(client.busy.is_set())
        return seen

    for seen in run_threads(rank_loop, 2):
        assert seen == [False, True, False, True, True, False]
