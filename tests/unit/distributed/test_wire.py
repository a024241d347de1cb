"""The wire format (dba3c.distributed.wire): a gradient in bfloat16 (``dist.wire_dtype``)
takes half the payload and arrives as the gradient rounded to bfloat16, against a rounding
written here from the format; an evaluation's message carries its scores and active units
in the slots its size gives."""

from __future__ import annotations

import numpy as np
import pytest

from dba3c.distributed.wire import END, HEADER, EvalMsg, GradMsg
from tests.support.world import round_to_bfloat16


@pytest.mark.parametrize("n", [7, 8])  # odd: the last float32 slot holds one bfloat16
def test_a_bfloat16_gradient_takes_half_the_payload_and_arrives_rounded(n):
    rng = np.random.default_rng(n)
    g = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32)
    buf = GradMsg(3, 5, g, "bfloat16").encode()
    assert buf.dtype == np.float32 and buf.size == HEADER + (n + 1) // 2
    msg = GradMsg.decode(np.concatenate([buf, np.full(4, 9.0, np.float32)]))  # a longer buffer
    assert (msg.version, msg.rank, msg.wire) == (3, 5, "bfloat16")
    assert msg.grad_shard.dtype == np.float32
    assert np.array_equal(msg.grad_shard, round_to_bfloat16(g))
    assert np.all(np.abs(msg.grad_shard - g) <= 2.0 ** -8 * np.abs(g))  # 8 significant bits
    assert not np.array_equal(msg.grad_shard, g)


def test_ties_round_to_even_and_non_finite_elements_stay_non_finite():
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one, 1; 1 + 3 x 2^-8 to
    # 1 + 2^-6. A non-finite element makes the PS skip the step, so it must stay so.
    g = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, np.nan, np.inf, -np.inf], np.float32)
    got = GradMsg.decode(GradMsg(0, 1, g, "bfloat16").encode()).grad_shard
    assert got[:2].tolist() == [1.0, 1 + 2.0 ** -6]
    assert np.isnan(got[2]) and got[3] == np.inf and got[4] == -np.inf


def test_a_float32_gradient_and_a_bye_travel_as_they_are():
    g = np.random.default_rng(0).standard_normal(5).astype(np.float32)
    buf = GradMsg(2, 4, g).encode()
    assert buf.size == HEADER + 5
    msg = GradMsg.decode(buf)
    assert msg.wire == "float32" and np.array_equal(msg.grad_shard.view(np.uint32),
                                                    g.view(np.uint32))
    bye = GradMsg.decode(GradMsg(END, 4, wire="bfloat16").encode())
    assert bye.is_bye and bye.rank == 4 and bye.grad_shard.size == 0


@pytest.mark.parametrize("msg", [EvalMsg(7, (-21.0, 3.5), (2, 0, 45)), EvalMsg(7, (1.0,)),
                                 EvalMsg(9), EvalMsg(END)])
def test_an_evaluation_travels_with_its_active_units_in_the_slots_of_its_size(msg):
    buf = msg.encode()
    assert buf.tolist() == [msg.step, len(msg.scores), *msg.scores, len(msg.active_units),
                            *msg.active_units]
    assert buf.size <= EvalMsg.size(len(msg.scores), len(msg.active_units))
    padded = np.zeros(EvalMsg.size(2, 3))  # what the chief's inbox receives into
    padded[:buf.size] = buf
    assert EvalMsg.decode(padded) == msg
