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
    base, extra = divmod(num_params, num_shards)
    sizes = [base + (1 if p < extra else 0) for p in range(num_shards)]
    starts = np.cumsum([0] + sizes[:-1])
    return [(int(s), int(s + n)) for s, n in zip(starts, sizes)]
