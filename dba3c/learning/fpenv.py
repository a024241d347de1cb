"""The calling thread's floating-point environment: subnormal numbers flushed to zero.

Float32 numbers below 1.18e-38 in magnitude (subnormals) cost x86 and Arm cores a microcode
assist per operation, tens to a hundred times a normal one, unless the thread's control
register tells the core to flush them to zero (x86 MXCSR: FTZ for results, DAZ for inputs;
Arm FPCR: FZ). TensorFlow sets these in the threads that run its kernels (eager ones
included); NumPy runs in the caller's thread, which Python leaves with IEEE subnormals.

Adam's moments reach them in training: a parameter whose gradient is zero (a ReLU unit that
never fires) has ``m`` shrink by beta1 and ``v`` by beta2 each step, into the subnormal range
after a few hundred steps (the paper's beta2 0.75 gets there fastest). A third of the
paper network's moments did on Breakout, and the NumPy update of its 322,437 parameters took
6 ms of CPU instead of 1 (docs/log/2026-11-29-subnormal-moments.md).
:func:`subnormals_flushed` runs a block with the flags set, as TensorFlow computes, and
restores the thread's previous flags after it.

Supported where the C library is glibc on x86-64 or AArch64 (its ``fenv_t`` layout is known);
elsewhere the block runs unchanged, with IEEE subnormals, and :data:`FLUSHES` is False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from collections.abc import Iterator
from contextlib import contextmanager

# (index of the control word in glibc's fenv_t read as 32-bit words, the bits that flush)
_CONTROL = {"x86_64": (7, 0x8040),      # MXCSR: FTZ (bit 15) | DAZ (bit 6)
            "aarch64": (0, 1 << 24)}    # FPCR: FZ (bit 24)
_FENV_WORDS = 8  # 32 bytes: x86-64's fenv_t (28 bytes of x87 state, then MXCSR); AArch64's is 8


def _libm() -> ctypes.CDLL | None:
    """glibc's libm, whose fegetenv / fesetenv read and write the thread's flags; None on
    another C library or system."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("m")
    return ctypes.CDLL(name) if name else None


_FLAGS = _CONTROL.get(platform.machine())  # this machine's (word, bits), None: unknown
_LIBM = _libm() if _FLAGS is not None else None
FLUSHES = _LIBM is not None


@contextmanager
def subnormals_flushed() -> Iterator[None]:
    """Run the block with subnormal inputs read as zero and subnormal results written as
    zero, in this thread (and threads it starts meanwhile: Linux copies the flags to a new
    thread); the thread's previous flags come back after it."""
    if _LIBM is None or _FLAGS is None:
        yield
        return
    word, bits = _FLAGS
    env = (ctypes.c_uint32 * _FENV_WORDS)()
    _LIBM.fegetenv(env)
    before = env[word]
    env[word] = before | bits
    _LIBM.fesetenv(env)
    try:
        yield
    finally:
        env[word] = before
        _LIBM.fesetenv(env)
