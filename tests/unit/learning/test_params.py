"""The flat parameter vector (dba3c.learning.params): layout arithmetic, flatten/unflatten, shards.

Expected values are worked out by hand in comments or recomputed with plain NumPy.
"""

import json

import numpy as np
import pytest

from dba3c.learning.params import (
    ParamLayout,
    ShardPlan,
    flatten,
    layer_buckets,
    shard_bounds,
    unflatten,
)

# Shapes chosen so that every tensor has a different size: 2*3*4 = 24, 5, 1 (scalar), 7*1 = 7
LAYOUT = ParamLayout(("conv/kernel", "conv/bias", "scalar", "fc/kernel"),
                     ((2, 3, 4), (5,), (), (7, 1)))


def _tensors(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in LAYOUT.shapes]


# --------------------------------------------------------------------------- ParamLayout

def test_layout_sizes_offsets_and_total_by_hand():
    # sizes 24, 5, 1, 7 -> offsets are the running sums 0, 24, 29, 30; total 37
    assert LAYOUT.sizes == (24, 5, 1, 7)
    assert LAYOUT.offsets == (0, 24, 29, 30)
    assert LAYOUT.num_params == 37
    assert all(type(x) is int for x in LAYOUT.sizes + LAYOUT.offsets)


def test_layout_dict_round_trip_through_json():
    d = json.loads(json.dumps(LAYOUT.to_dict()))  # what a checkpoint stores
    assert d == {"names": ["conv/kernel", "conv/bias", "scalar", "fc/kernel"],
                 "shapes": [[2, 3, 4], [5], [], [7, 1]]}
    back = ParamLayout.from_dict(d)
    assert back == LAYOUT
    assert back.shapes == ((2, 3, 4), (5,), (), (7, 1))  # tuples again, not lists


def test_layout_is_frozen():
    with pytest.raises(AttributeError):
        LAYOUT.names = ("x",)  # type: ignore[misc]  # frozen: the assignment must raise


# --------------------------------------------------------------------------- flatten / unflatten

def test_flatten_order_and_values_match_numpy_concatenation():
    tensors = _tensors()
    flat = flatten(LAYOUT, tensors)
    assert flat.dtype == np.float32 and flat.shape == (37,)
    expected = np.concatenate([t.reshape(-1) for t in tensors])
    np.testing.assert_array_equal(flat, expected)
    # spot checks by position: the bias starts at 24, the scalar is element 29
    np.testing.assert_array_equal(flat[24:29], tensors[1])
    assert flat[29] == tensors[2][()]
    np.testing.assert_array_equal(flat[30:], tensors[3][:, 0])


def test_flatten_unflatten_round_trip_is_exact():
    tensors = _tensors(seed=3)
    back = unflatten(LAYOUT, flatten(LAYOUT, tensors))
    assert len(back) == len(tensors)
    for t, b, shape in zip(tensors, back, LAYOUT.shapes):
        assert b.shape == shape and b.dtype == np.float32
        assert np.array_equal(t, b)  # bit-exact, no tolerance


def test_unflatten_flatten_round_trip_is_exact():
    flat = np.random.default_rng(4).standard_normal(37).astype(np.float32)
    assert np.array_equal(flatten(LAYOUT, unflatten(LAYOUT, flat)), flat)


def test_flatten_casts_float64_to_float32():
    tensors = [t.astype(np.float64) for t in _tensors(seed=5)]
    flat = flatten(LAYOUT, tensors)
    assert flat.dtype == np.float32
    np.testing.assert_array_equal(flat, np.concatenate([t.ravel() for t in tensors])
                                  .astype(np.float32))


def test_unflatten_returns_views_into_the_flat_vector():
    # documented as "views, no copy": writing through a view changes the flat vector
    flat = np.zeros(37, np.float32)
    views = unflatten(LAYOUT, flat)
    views[1][2] = 7.0  # bias element 2 -> flat index 24 + 2
    views[3][6, 0] = -1.0  # last kernel element -> flat index 36
    assert flat[26] == 7.0 and flat[36] == -1.0
    assert np.count_nonzero(flat) == 2


def test_flatten_rejects_wrong_shape_naming_the_tensor():
    tensors = _tensors()
    tensors[1] = np.zeros(6, np.float32)  # bias should be (5,)
    with pytest.raises(ValueError, match="conv/bias"):
        flatten(LAYOUT, tensors)


def test_flatten_rejects_transposed_tensor_of_the_same_size():
    tensors = _tensors()
    tensors[3] = tensors[3].T  # (1, 7) has 7 elements too, but the wrong shape
    with pytest.raises(ValueError, match="fc/kernel"):
        flatten(LAYOUT, tensors)


@pytest.mark.parametrize("bad", [np.zeros(36, np.float32), np.zeros(38, np.float32),
                                 np.zeros((37, 1), np.float32)], ids=["short", "long", "2d"])
def test_unflatten_rejects_wrong_length(bad):
    with pytest.raises(ValueError, match="37"):
        unflatten(LAYOUT, bad)


# --------------------------------------------------------------------------- shard_bounds

def test_shard_bounds_hand_example_10_into_3():
    # 10 = 3 * 3 + 1: the first shard takes the extra element -> sizes 4, 3, 3
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]


def test_shard_bounds_hand_example_11_into_4():
    # 11 = 4 * 2 + 3: the first three shards get 3, the last 2
    assert shard_bounds(11, 4) == [(0, 3), (3, 6), (6, 9), (9, 11)]


def test_shard_bounds_edge_cases():
    assert shard_bounds(5, 1) == [(0, 5)]
    assert shard_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]  # one element each
    assert shard_bounds(1, 1) == [(0, 1)]


@pytest.mark.parametrize("n,k", [(10, 3), (37, 5), (100, 7), (322695, 4), (64, 64),
                                 (1000, 1), (9, 2)])
def test_shard_bounds_contiguous_cover_and_balanced(n, k):
    bounds = shard_bounds(n, k)
    assert len(bounds) == k
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (_, b), (c, _) in zip(bounds, bounds[1:]):
        assert b == c  # contiguous, no gap, no overlap
    sizes = [b - a for a, b in bounds]
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the larger shards come first
    assert all(type(x) is int for ab in bounds for x in ab)
    # every index in exactly one shard
    owner = np.zeros(n, np.int64)
    for a, b in bounds:
        owner[a:b] += 1
    assert np.all(owner == 1)


@pytest.mark.parametrize("n,k", [(5, 0), (5, -1), (3, 4), (0, 1)])
def test_shard_bounds_rejects_impossible_splits(n, k):
    with pytest.raises(ValueError, match="shards"):
        shard_bounds(n, k)


def test_layer_buckets_one_per_layer_with_the_heads_in_the_last():
    layout = ParamLayout(("conv0/kernel", "conv2/kernel", "fc4/kernel", "fc4/bias",
                          "policy/kernel", "policy/bias", "value/kernel", "value/bias"),
                         ((2, 3), (4,), (5, 2), (2,), (2, 3), (3,), (2, 1), (1,)))
    # offsets by hand: 0, 6, 10, 20, 22, 28, 31, 33
    assert layer_buckets(layout) == (0, 6, 10)


def test_shard_plan_pieces_by_hand():
    # buckets [0, 5) and [5, 12) over 3 shards: 5 -> 2, 2, 1; 7 -> 3, 2, 2
    plan = ShardPlan(12, 3, (0, 5))
    assert plan.counts(0) == [2, 2, 1] and plan.counts(1) == [3, 2, 2]
    assert plan.pieces(0) == [(0, 2), (5, 8)]
    assert plan.pieces(1) == [(2, 4), (8, 10)]
    assert plan.pieces(2) == [(4, 5), (10, 12)]
    assert plan.sizes == [5, 4, 3]
    assert plan.piece_offsets(1) == [0, 2]
    flat = np.arange(12, dtype=np.float32)
    assert plan.shard_of(flat, 1).tolist() == [2, 3, 8, 9]


def test_shard_plan_with_bucket_0_replicated_by_hand():
    # bucket [0, 5) whole in every shard; [5, 12) over 3 shards: 3, 2, 2
    plan = ShardPlan(12, 3, (0, 5), replicated_first=True)
    assert plan.counts(0) == [5, 5, 5] and plan.counts(1) == [3, 2, 2]
    assert plan.pieces(0) == [(0, 5), (5, 8)]
    assert plan.pieces(2) == [(0, 5), (10, 12)]
    assert plan.sizes == [8, 7, 7]
    flat = np.arange(12, dtype=np.float32)
    assert plan.shard_of(flat, 1).tolist() == [0, 1, 2, 3, 4, 8, 9]


@pytest.mark.parametrize("replicated_first", [False, True])
def test_shard_plan_flat_chunks_put_the_shards_back_together(replicated_first):
    rng = np.random.default_rng(0)
    flat = rng.normal(size=101).astype(np.float32)
    # one bucket shorter than the shard count
    plan = ShardPlan(101, 7, (0, 3, 40, 41), replicated_first=replicated_first)
    shards = [plan.shard_of(flat, w) for w in range(7)]
    assert sum(s.size for s in shards) == 101 + 6 * 3 * replicated_first
    np.testing.assert_array_equal(np.concatenate(plan.flat_chunks(shards)), flat)


def test_shard_plan_with_one_bucket_is_shard_bounds():
    plan = ShardPlan(10, 4)
    assert [plan.pieces(w)[0] for w in range(4)] == shard_bounds(10, 4)


def test_shard_plan_rejects_bad_bucket_starts():
    for starts in ((1, 4), (0, 4, 4), (0, 12), ()):
        with pytest.raises(ValueError, match="bucket starts"):
            ShardPlan(12, 3, starts)
