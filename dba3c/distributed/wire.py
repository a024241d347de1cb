"""The wire format: one frozen dataclass per message kind with its ``encode``/``decode`` pair.

This is the only module that knows where a field sits in a buffer. The float32 messages
(gradients, parameters, shard state) start with an int64 [4] header in their first
``HEADER`` float32 slots, its fields named by each kind; the payload follows. The small ones
are float64 or int64 vectors. ``END`` as a version or step means "nothing more from me".

A gradient may travel in bfloat16 (``dist.wire_dtype``): each element rounded to the nearest
bfloat16 (8 significant bits, float32's exponent range; a non-finite element stays
non-finite), two to a float32 slot, so half the bytes; it is float32 again once decoded
(:func:`to_wire`, :func:`from_wire`).

  kind          tag                direction             header / vector
  GradMsg       GRAD               worker -> PS p        (version, rank, wire dtype, n);
                                                         g[shard p] in float32 or bfloat16;
                                                         BYE
  ParamsMsg     PARAMS, SNAPSHOT   PS p -> worker/eval.  (version, nonfinite streak, final);
                                                         theta[shard p]; DONE
  StateMsg      STATE              chief <-> PS p        (version, update count, final);
                                                         theta, m, v of the shard
  InfoMsg       PSINFO             PS -> chief           float64 [version, dropped, nonfinite,
                                                         staleness sum, count, max]
  ReportMsg     STATS              worker -> chief       float64 [WorkerReport..., final, rank]
  ControlMsg    CONTROL            chief <-> PS,         int64 [command, argument]
                                   chief <-> evaluator
  EvalMsg       EVAL               evaluator -> chief    float64 [step, n, scores..., k,
                                                         active units...]; no scores: dropped
  StatusMsg     STATUS             PS -> chief           int64 [version, n, ranks...]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

import ml_dtypes
import numpy as np

from dba3c.config import WIRE_DTYPES  # a GradMsg's header names one by its index
from dba3c.learning.params import ShardPlan
from dba3c.training.report import VECTOR_SIZE, WorkerReport

if TYPE_CHECKING:
    from dba3c.learning.rules import OptimizerState

HEADER = 8  # float32 slots = 4 int64
END = -1  # the version (or step) of BYE, DONE and the evaluator's last message


class Tag(IntEnum):
    """One MPI tag per message kind (PARAMS and SNAPSHOT share the format)."""

    GRAD = 1
    PARAMS = 2
    SNAPSHOT = 3
    STATE = 4
    PSINFO = 5
    STATS = 6
    CONTROL = 7
    EVAL = 8
    STATUS = 9


class Command(IntEnum):
    """CONTROL commands: chief -> PS STOP, STOP_AT step, QUERY; PS -> chief FROZEN version;
    chief -> evaluator STOP; evaluator -> chief PLAYED games and FRAMES emulator frames (of
    an evaluation after the run ended)."""

    STOP = 1
    STOP_AT = 2
    FROZEN = 3
    QUERY = 4
    PLAYED = 5
    FRAMES = 6


class Message(Protocol):
    """What every message kind provides."""

    TAG: ClassVar[Tag]
    DTYPE: ClassVar[type[np.generic]]

    def encode(self) -> np.ndarray:
        """The buffer to send."""

    @classmethod
    def decode(cls, buf: np.ndarray) -> Self:
        """The message in ``buf`` (a received buffer, possibly longer than the message)."""


def _frame(header: Sequence[int], *parts: np.ndarray) -> np.ndarray:
    """A float32 message: the int64 header fields, then ``parts`` one after the other."""
    buf = np.zeros(HEADER + sum(p.size for p in parts), np.float32)
    buf[:HEADER].view(np.int64)[:len(header)] = header
    if parts:
        np.concatenate(parts, out=buf[HEADER:])
    return buf


def _unframe(buf: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(header fields, payload view) of a float32 message."""
    return buf[:HEADER].view(np.int64).tolist(), buf[HEADER:]


def _counted(first: int, items: Sequence[float], dtype: type[np.generic]) -> np.ndarray:
    """A vector [first, n, items...] (EVAL and STATUS)."""
    return np.array([first, len(items), *items], dtype)


def _read_counted(buf: np.ndarray) -> tuple[int, list]:
    """(first, items) of a vector written by :func:`_counted`."""
    return int(buf[0]), buf[2:2 + int(buf[1])].tolist()


BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def to_wire(x: np.ndarray, wire: str) -> np.ndarray:
    """float32 ``x`` as it travels: itself (float32), or rounded to the nearest bfloat16 (ties
    to even; NaN and infinities stay non-finite)."""
    return x if wire == "float32" else x.astype(BFLOAT16)


def from_wire(x: np.ndarray) -> np.ndarray:
    """What :func:`to_wire` sent, as float32 (exact: every bfloat16 is a float32)."""
    return x if x.dtype == np.float32 else x.astype(np.float32)


def _packed(x: np.ndarray, wire: str) -> np.ndarray:
    """float32 ``x`` as float32 slots of a message: itself, or its bfloat16 bits two to a
    slot (the last slot half empty for an odd length)."""
    if wire == "float32":
        return x
    bits = np.zeros(2 * ((x.size + 1) // 2), np.uint16)
    bits[:x.size] = to_wire(x, wire).view(np.uint16)
    return bits.view(np.float32)


def _unpacked(body: np.ndarray, n: int, wire: str) -> np.ndarray:
    """The ``n`` float32 values :func:`_packed` put at the start of ``body``."""
    if wire == "float32":
        return body[:n]
    return from_wire(body.view(np.uint16)[:n].view(BFLOAT16))


def framed_size(n: int) -> int:
    """float32 slots of a header + ``n`` payload values (a receive buffer's size)."""
    return HEADER + n


def assemble(plan: ShardPlan, shards: Sequence[np.ndarray]) -> np.ndarray:
    """The whole vector from its shards in shard order (theta, or Adam's m or v)."""
    return np.concatenate(plan.flat_chunks(list(shards)))


@dataclass(frozen=True)
class GradMsg:
    """A worker's gradient slice for one PS, computed at ``version``; BYE when version is
    END (the worker sends nothing more). ``wire``: how the slice travels, float32 or
    bfloat16 (half the bytes; decoded, it is the slice rounded to bfloat16, in float32)."""

    TAG: ClassVar[Tag] = Tag.GRAD
    DTYPE: ClassVar[type[np.generic]] = np.float32
    version: int
    rank: int
    grad_shard: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    wire: str = "float32"

    @property
    def is_bye(self) -> bool:
        """The worker's last message."""
        return self.version == END

    @staticmethod
    def size(n: int, wire: str) -> int:
        """float32 slots of a slice of ``n`` in ``wire`` (bfloat16: two to a slot)."""
        return framed_size(n if wire == "float32" else (n + 1) // 2)

    def encode(self) -> np.ndarray:
        """Header (version, rank, wire dtype, slice length), payload the slice as it
        travels."""
        return _frame((self.version, self.rank, WIRE_DTYPES.index(self.wire),
                       self.grad_shard.size), _packed(self.grad_shard, self.wire))

    @classmethod
    def decode(cls, buf: np.ndarray) -> GradMsg:
        """Inverse of :meth:`encode` (the slice in float32)."""
        (version, rank, dtype, n), body = _unframe(buf)
        wire = WIRE_DTYPES[dtype]
        return cls(version, rank, _unpacked(body, n, wire), wire)


@dataclass(frozen=True)
class ParamsMsg:
    """One PS's shard of theta at ``version``, to the workers (PARAMS) or the evaluator
    (SNAPSHOT). ``final``: the last version of the run (DONE follows); version END = DONE."""

    TAG: ClassVar[Tag] = Tag.PARAMS
    DTYPE: ClassVar[type[np.generic]] = np.float32
    version: int
    theta_shard: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    nonfinite_streak: int = 0
    final: bool = False

    @property
    def is_done(self) -> bool:
        """The PS's last message: the run is over."""
        return self.version == END

    def encode(self) -> np.ndarray:
        """Header (version, nonfinite streak, final), payload the shard."""
        return _frame((self.version, self.nonfinite_streak, int(self.final)), self.theta_shard)

    @classmethod
    def decode(cls, buf: np.ndarray) -> ParamsMsg:
        """Inverse of :meth:`encode`."""
        (version, streak, final, _), body = _unframe(buf)
        return cls(version, body, streak, bool(final))


@dataclass(frozen=True)
class StateMsg:
    """One shard's full state at ``version``: the chief's INIT to a PS, a PS's checkpoint
    (``final``: its last) to the chief. The one place theta, m and v are packed together."""

    TAG: ClassVar[Tag] = Tag.STATE
    DTYPE: ClassVar[type[np.generic]] = np.float32
    version: int
    opt_count: int
    final: bool
    theta_shard: np.ndarray
    m_shard: np.ndarray
    v_shard: np.ndarray

    @staticmethod
    def size(n: int) -> int:
        """float32 slots of the state of a shard of ``n`` parameters."""
        return framed_size(3 * n)

    def encode(self) -> np.ndarray:
        """Header (version, update count, final), payload theta, m, v."""
        return _frame((self.version, self.opt_count, int(self.final)), self.theta_shard,
                      self.m_shard, self.v_shard)

    @classmethod
    def decode(cls, buf: np.ndarray) -> StateMsg:
        """Inverse of :meth:`encode`."""
        (version, count, final, _), body = _unframe(buf)
        theta, m, v = np.split(body, 3)
        return cls(version, count, bool(final), theta, m, v)

    @classmethod
    def start_shards(cls, step: int, theta: np.ndarray, opt_state: OptimizerState,
                     plan: ShardPlan) -> list[StateMsg]:
        """The start state (theta and the optimizer's whole state) cut into one message per
        shard of ``plan``."""
        return [cls(step, opt_state.count, False, plan.shard_of(theta, w),
                    plan.shard_of(opt_state.m_shard, w), plan.shard_of(opt_state.v_shard, w))
                for w in range(plan.num_shards)]


@dataclass(frozen=True)
class InfoMsg:
    """A PS's counters after each update: its version, gradients dropped as late, updates
    skipped as non-finite, staleness (async) of the last 1000 applied gradients."""

    TAG: ClassVar[Tag] = Tag.PSINFO
    DTYPE: ClassVar[type[np.generic]] = np.float64
    SIZE: ClassVar[int] = 6
    version: int
    dropped_late: int
    nonfinite_skipped: int
    staleness_sum: float
    staleness_count: int
    staleness_max: int

    def encode(self) -> np.ndarray:
        """float64 [6] in field order."""
        return np.array([self.version, self.dropped_late, self.nonfinite_skipped,
                         self.staleness_sum, self.staleness_count, self.staleness_max],
                        np.float64)

    @classmethod
    def decode(cls, buf: np.ndarray) -> InfoMsg:
        """Inverse of :meth:`encode`."""
        version, dropped, nonfinite, total, count, most = buf.tolist()
        return cls(int(version), int(dropped), int(nonfinite), total, int(count), int(most))


@dataclass(frozen=True)
class ReportMsg:
    """A worker's report to the chief; ``final``: its last one."""

    TAG: ClassVar[Tag] = Tag.STATS
    DTYPE: ClassVar[type[np.generic]] = np.float64
    SIZE: ClassVar[int] = VECTOR_SIZE + 2
    report: WorkerReport
    final: bool
    rank: int

    def encode(self) -> np.ndarray:
        """float64 [report vector, final, rank]."""
        return np.append(self.report.to_vector(), [float(self.final), self.rank])

    @classmethod
    def decode(cls, buf: np.ndarray) -> ReportMsg:
        """Inverse of :meth:`encode`."""
        return cls(WorkerReport.from_vector(buf[:VECTOR_SIZE]), bool(buf[VECTOR_SIZE]),
                   int(buf[VECTOR_SIZE + 1]))


@dataclass(frozen=True)
class ControlMsg:
    """A command between the chief and a PS or the evaluator rank."""

    TAG: ClassVar[Tag] = Tag.CONTROL
    DTYPE: ClassVar[type[np.generic]] = np.int64
    SIZE: ClassVar[int] = 2
    command: Command
    argument: int = 0

    def encode(self) -> np.ndarray:
        """int64 [command, argument]."""
        return np.array([self.command, self.argument], np.int64)

    @classmethod
    def decode(cls, buf: np.ndarray) -> ControlMsg:
        """Inverse of :meth:`encode`."""
        return cls(Command(int(buf[0])), int(buf[1]))


@dataclass(frozen=True)
class EvalMsg:
    """The evaluator's scores of the parameters at ``step`` and each trunk layer's active
    units (:class:`~dba3c.core.Evaluation`); no scores: that evaluation was dropped; step END:
    the evaluator has finished."""

    TAG: ClassVar[Tag] = Tag.EVAL
    DTYPE: ClassVar[type[np.generic]] = np.float64
    step: int
    scores: tuple[float, ...] = ()
    active_units: tuple[int, ...] = ()

    @staticmethod
    def size(episodes: int, layers: int) -> int:
        """float64 slots of a message with ``episodes`` scores and ``layers`` counts."""
        return 3 + episodes + layers

    def encode(self) -> np.ndarray:
        """float64 [step, n, scores..., k, active units...]."""
        return np.concatenate([_counted(self.step, self.scores, np.float64),
                               np.array([len(self.active_units), *self.active_units],
                                        np.float64)])

    @classmethod
    def decode(cls, buf: np.ndarray) -> EvalMsg:
        """Inverse of :meth:`encode`."""
        step, scores = _read_counted(buf)
        k = 2 + len(scores)
        return cls(step, tuple(scores),
                   tuple(int(x) for x in buf[k + 1:k + 1 + int(buf[k])]))


@dataclass(frozen=True)
class StatusMsg:
    """A PS's answer to QUERY: its version and the workers whose gradient for it it holds."""

    TAG: ClassVar[Tag] = Tag.STATUS
    DTYPE: ClassVar[type[np.generic]] = np.int64
    version: int
    ranks: tuple[int, ...]

    @staticmethod
    def size(num_workers: int) -> int:
        """int64 slots of an answer naming up to ``num_workers`` ranks."""
        return 2 + num_workers

    def encode(self) -> np.ndarray:
        """int64 [version, n, ranks...]."""
        return _counted(self.version, self.ranks, np.int64)

    @classmethod
    def decode(cls, buf: np.ndarray) -> StatusMsg:
        """Inverse of :meth:`encode`."""
        version, ranks = _read_counted(buf)
        return cls(version, tuple(ranks))
