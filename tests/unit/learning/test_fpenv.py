"""Subnormals flushed to zero in a block (dba3c.learning.fpenv): results and inputs inside,
IEEE arithmetic before, after and in other threads."""

import threading

import numpy as np
import pytest

from dba3c.learning.fpenv import FLUSHES, subnormals_flushed

TINY = np.finfo(np.float32).tiny  # the smallest normal float32, 1.18e-38
pytestmark = pytest.mark.skipif(not FLUSHES, reason="no known fenv_t layout on this platform")


def products() -> np.ndarray:
    """4 * TINY * 0.1 (a subnormal result) and TINY / 4 + 0 (a subnormal input)."""
    x = np.array([4 * TINY, TINY / 4], np.float32)
    return np.array([x[0] * np.float32(0.1), x[1] + np.float32(0.0)], np.float32)


def test_ieee_arithmetic_keeps_subnormals():
    assert np.all(products() > 0) and np.all(products() < TINY)


def test_subnormal_results_and_inputs_are_zero_inside_and_subnormal_after():
    with subnormals_flushed():
        assert np.array_equal(products(), [0.0, 0.0])
        assert np.float32(3 * TINY) * np.float32(0.5) == 1.5 * np.float32(TINY)  # normal stays
    assert np.all(products() > 0)


def test_nested_blocks_restore_the_outer_setting():
    with subnormals_flushed():
        with subnormals_flushed():
            pass
        assert np.array_equal(products(), [0.0, 0.0])
    assert np.all(products() > 0)


def test_a_thread_started_before_keeps_ieee_arithmetic_during_the_block():
    inside, done = threading.Event(), threading.Event()
    seen: list[np.ndarray] = []

    def compute() -> None:
        inside.wait()
        seen.append(products())
        done.set()

    thread = threading.Thread(target=compute)
    thread.start()
    with subnormals_flushed():
        inside.set()
        done.wait()
    thread.join()
    assert np.all(seen[0] > 0)


def test_the_flags_come_back_after_an_exception():
    with pytest.raises(KeyError), subnormals_flushed():
        raise KeyError("x")
    assert np.all(products() > 0)
