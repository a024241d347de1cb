"""Parameters as one flat float32 vector with a layout, and its split into shards."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ParamLayout:
    """Where each named tensor lives in the flat vector.

    names[i] has shape shapes[i] and occupies flat[offsets[i] : offsets[i] + sizes[i]].
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of elements of each tensor."""
        return tuple(int(np.prod(s, dtype=np.int64)) for s in self.shapes)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each tensor in the flat vector."""
        return tuple(int(x) for x in np.cumsum((0,) + self.sizes[:-1]))

    @property
    def num_params(self) -> int:
        """Length of the flat vector."""
        return int(sum(self.sizes))

    @property
    def layers(self) -> tuple[str, ...]:
        """The layers in order: each name's part before its ``/`` (``conv0/kernel`` and
        ``conv0/bias`` are layer ``conv0``), once."""
        return tuple(dict.fromkeys(name.split("/")[0] for name in self.names))

    def to_dict(self) -> dict:
        """JSON-friendly form (stored in checkpoints)."""
        return {"names": list(self.names), "shapes": [list(s) for s in self.shapes]}

    @classmethod
    def from_dict(cls, d: dict) -> ParamLayout:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(d["names"]), tuple(tuple(int(x) for x in s) for s in d["shapes"]))


def flatten(layout: ParamLayout, tensors: list[np.ndarray]) -> np.ndarray:
    """Concatenate tensors (in layout order) into one float32 vector [num_params]."""
    for name, shape, t in zip(layout.names, layout.shapes, tensors):
        if tuple(t.shape) != shape:
            raise ValueError(f"tensor {name} has shape {t.shape}, layout says {shape}")
    return np.concatenate([np.asarray(t, np.float32).ravel() for t in tensors])


def unflatten(layout: ParamLayout, flat: np.ndarray) -> list[np.ndarray]:
    """Split a flat vector back into tensors of the layout's shapes (views, no copy)."""
    if flat.shape != (layout.num_params,):
        raise ValueError(f"flat vector has shape {flat.shape}, layout needs "
                         f"({layout.num_params},)")
    return [flat[o:o + n].reshape(s)
            for o, n, s in zip(layout.offsets, layout.sizes, layout.shapes)]


def shard_bounds(num_params: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous near-equal [start, stop) ranges; the first ``num_params % num_shards``
    shards hold one element more."""
    if not 1 <= num_shards <= num_params:
        raise ValueError(f"cannot split {num_params} parameters into {num_shards} shards")
    sizes = near_equal_counts(num_params, num_shards)
    starts = np.cumsum([0] + sizes[:-1])
    return [(int(s), int(s + n)) for s, n in zip(starts, sizes)]


def layer_buckets(layout: ParamLayout) -> tuple[int, ...]:
    """Where each layer's parameters start in the flat vector: one bucket per layer with
    parameters (the tensors sharing a name prefix, ``conv0/kernel``, ``fc7/bias``), the
    ``policy`` and ``value`` heads in the last layer's bucket. Buckets are the units in
    which a staged gradient leaves a worker (:meth:`dba3c.learning.learner.Learner.staged_gradient`)
    and collective aggregation moves the vector (:class:`ShardPlan`)."""
    starts: list[int] = []
    last = None
    for name, offset in zip(layout.names, layout.offsets):
        prefix = name.split("/")[0]
        if prefix != last and prefix not in ("policy", "value"):
            starts.append(offset)
        last = prefix
    return tuple(starts)


def near_equal_counts(n: int, num_parts: int) -> list[int]:
    """``n`` elements cut into ``num_parts`` contiguous parts that differ by at most one (the
    first ``n % num_parts`` one longer); parts may be empty when ``n < num_parts``."""
    base, extra = divmod(n, num_parts)
    return [base + (1 if p < extra else 0) for p in range(num_parts)]


@dataclass(frozen=True)
class ShardPlan:
    """A flat vector of ``num_params`` cut into ``num_shards`` shards bucket by bucket.

    Bucket k is ``[bucket_starts[k], bucket_starts[k + 1])`` (the last ends at
    ``num_params``); each bucket is cut into ``num_shards`` near-equal pieces, and shard w is
    the concatenation of its piece of every bucket, in bucket order. With one bucket (the
    default) shard w is ``shard_bounds(num_params, num_shards)[w]``. Cutting every bucket
    gives each shard an equal share of each bucket, so a collective on one bucket loads
    every rank alike (collective aggregation moves the vector bucket by bucket).

    ``replicated_first``: bucket 0 is not cut; every shard holds the whole of it (its piece of
    bucket 0 is the bucket). Collective aggregation then sums that bucket with one allreduce
    and every rank applies the same update to it, where a cut bucket takes a reduce-scatter
    and an allgather: half the message rounds for the first layer, whose exchange is the one
    a step cannot hide.
    """

    num_params: int
    num_shards: int
    bucket_starts: tuple[int, ...] = (0,)
    replicated_first: bool = False

    def __post_init__(self) -> None:
        starts = self.bucket_starts
        if not starts or starts[0] != 0 or list(starts) != sorted(set(starts)) \
                or starts[-1] >= self.num_params:
            raise ValueError(f"bucket starts {starts} must rise from 0 below {self.num_params}")
        if not 1 <= self.num_shards <= self.num_params:
            raise ValueError(f"cannot split {self.num_params} parameters into "
                             f"{self.num_shards} shards")

    @property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self.bucket_starts)

    def bucket_bounds(self, bucket: int) -> tuple[int, int]:
        """Bucket ``bucket``'s [start, stop) in the flat vector."""
        ends = (*self.bucket_starts[1:], self.num_params)
        return self.bucket_starts[bucket], ends[bucket]

    def replicated(self, bucket: int) -> bool:
        """Whether every shard holds ``bucket`` whole (bucket 0 with ``replicated_first``)."""
        return bucket == 0 and self.replicated_first

    def counts(self, bucket: int) -> list[int]:
        """Every shard's piece length of ``bucket``, in shard order."""
        lo, hi = self.bucket_bounds(bucket)
        if self.replicated(bucket):
            return [hi - lo] * self.num_shards
        return near_equal_counts(hi - lo, self.num_shards)

    def pieces(self, shard: int) -> list[tuple[int, int]]:
        """Shard ``shard``'s pieces as [start, stop) ranges of the flat vector, in bucket
        order (one per bucket; a piece may be empty)."""
        out = []
        for b in range(self.num_buckets):
            counts = self.counts(b)
            lo = self.bucket_bounds(b)[0]
            if not self.replicated(b):
                lo += sum(counts[:shard])
            out.append((lo, lo + counts[shard]))
        return out

    @property
    def sizes(self) -> list[int]:
        """Every shard's length."""
        return [sum(hi - lo for lo, hi in self.pieces(w)) for w in range(self.num_shards)]

    def piece_offsets(self, shard: int) -> list[int]:
        """Where each of shard ``shard``'s pieces starts inside the shard vector."""
        return [int(x) for x in np.cumsum([0] + [hi - lo for lo, hi in self.pieces(shard)])[:-1]]

    def shard_of(self, flat: np.ndarray, shard: int) -> np.ndarray:
        """Shard ``shard`` of a flat vector (a copy)."""
        return np.concatenate([flat[lo:hi] for lo, hi in self.pieces(shard)])

    def flat_chunks(self, shards: list[np.ndarray]) -> list[np.ndarray]:
        """The pieces of every shard (views), in flat-vector order: concatenated they are
        the flat vector whose shards these are (a replicated bucket 0 from shard 0)."""
        cut = [np.split(s, self.piece_offsets(w)[1:]) for w, s in enumerate(shards)]
        return [cut[w][b] for b in range(self.num_buckets) for w in range(self.num_shards)
                if w == 0 or not self.replicated(b)]
