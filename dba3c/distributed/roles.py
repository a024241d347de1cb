"""Which rank plays which role.

Rank 0 is the chief; ranks 1..P are parameter servers; then the evaluator rank if
``eval.rank``; the remaining ranks are workers. When ``dist.chief_trains`` the chief computes
gradients too and counts as a worker. World size = W + P (+1 if the chief does not train)
(+1 for an evaluator). World size 1 is the single-node trainer.

With ``dist.aggregation: collective`` there are no parameter-server ranks (P = 0): every
worker (the chief included) holds one shard of the model and its Adam state, so the shards'
owners are the workers (:attr:`Roles.shard_owners`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dba3c.errors import UserError
from dba3c.learning.params import ParamLayout, ShardPlan, layer_buckets

if TYPE_CHECKING:
    from dba3c.config import Config


@dataclass(frozen=True)
class Roles:
    """The rank layout of a world of ``world_size`` processes."""

    world_size: int
    ps: tuple[int, ...]
    workers: tuple[int, ...]
    evaluator: int | None
    replicas: int  # gradients aggregated per synchronous step
    aggregation: str = "ps"  # dist.aggregation: ps or collective

    @property
    def num_workers(self) -> int:
        """Ranks computing gradients."""
        return len(self.workers)

    @property
    def shard_owners(self) -> tuple[int, ...]:
        """The ranks holding the model's shards, in shard order: the parameter servers, or
        with collective aggregation the workers."""
        return self.workers if self.aggregation == "collective" else self.ps

    def role(self, rank: int) -> str:
        """``chief``, ``chief+worker``, ``ps``, ``evaluator`` or ``worker``."""
        if rank == 0:
            return "chief+worker" if 0 in self.workers else "chief"
        if rank in self.ps:
            return "ps"
        return "evaluator" if rank == self.evaluator else "worker"

    def describe(self) -> list[str]:
        """One line per role group, for ``dba3c describe``."""
        if self.world_size == 1:
            return ["rank 0: single process (simulators, predictor, trainer, Adam)"]
        def span(ranks: Sequence[int]) -> str:
            return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
        lines = [f"rank 0: {self.role(0)}"]
        if self.ps:
            lines.append(f"ranks {span(self.ps)}: parameter servers ({len(self.ps)} shards)")
        if self.evaluator is not None:
            lines.append(f"rank {self.evaluator}: evaluator")
        others = [r for r in self.workers if r != 0]
        if others:
            lines.append(f"ranks {span(others)}: workers")
        lines.append(f"workers: {self.num_workers}, gradients per step: {self.replicas}")
        if self.aggregation == "collective":
            lines.append(f"collective aggregation: each worker holds one of {self.num_workers} "
                         f"shards and its Adam state (reduce-scatter, Adam, allgather)")
        return lines


def required_world_size(cfg: Config, num_workers: int) -> int:
    """World size for ``num_workers`` gradient ranks with this config's layout."""
    return (num_workers + cfg.dist.ps + (0 if cfg.dist.chief_trains else 1)
            + (1 if cfg.eval.rank else 0))


def make_roles(world_size: int, cfg: Config) -> Roles:
    """The layout for ``world_size`` ranks; UserError if it cannot hold one worker."""
    if world_size == 1:
        return Roles(1, (), (0,), None, 1)
    if cfg.dist.emulate_workers:
        raise UserError(f"dist.emulate_workers={cfg.dist.emulate_workers} emulates workers in "
                        f"one process (`dba3c train` alone); a world of {world_size} ranks "
                        f"runs real ones: set dist.emulate_workers=0")
    extra = (0 if cfg.dist.chief_trains else 1) + (1 if cfg.eval.rank else 0)
    num_workers = world_size - cfg.dist.ps - extra
    if num_workers < 1:
        raise UserError(
            f"world size {world_size} is too small for dist.ps={cfg.dist.ps}"
            f"{' + a non-training chief' if not cfg.dist.chief_trains else ''}"
            f"{' + an evaluator rank' if cfg.eval.rank else ''} + at least 1 worker: "
            f"need at least {required_world_size(cfg, 1)} ranks")
    if cfg.dist.workers and cfg.dist.workers != num_workers:
        raise UserError(f"dist.workers={cfg.dist.workers} but world size {world_size} gives "
                        f"{num_workers} workers; need {required_world_size(cfg, cfg.dist.workers)}"
                        f" ranks")
    replicas = cfg.dist.replicas_to_aggregate or num_workers
    if cfg.dist.aggregation == "collective" and replicas != num_workers:
        raise UserError(f"dist.replicas_to_aggregate={replicas} (backup workers) needs "
                        f"dist.aggregation: ps (collective aggregation averages all "
                        f"{num_workers} workers' gradients; use 0)")
    if cfg.dist.mode == "async":
        replicas = 1
    if replicas > num_workers:
        raise UserError(f"dist.replicas_to_aggregate={replicas} must be <= the number of "
                        f"workers ({num_workers})")
    ps = tuple(range(1, 1 + cfg.dist.ps))
    evaluator = 1 + cfg.dist.ps if cfg.eval.rank else None
    first_worker = 1 + cfg.dist.ps + (1 if cfg.eval.rank else 0)
    workers = ((0,) if cfg.dist.chief_trains else ()) + tuple(range(first_worker, world_size))
    return Roles(world_size, ps, workers, evaluator, replicas, cfg.dist.aggregation)


def emulated_roles(cfg: Config) -> Roles:
    """The layout of the real synchronous run whose W workers one process emulates
    (``dist.emulate_workers`` = W > 1): its worker ranks key the emulated workers' synthetic
    mini-batches (``debug.synthetic_data``), so the emulation trains on the data of ``dba3c
    launch CONFIG --workers W``. Without emulation (0 or 1): the single process's."""
    workers = cfg.dist.emulate_workers
    if workers <= 1:
        return make_roles(1, cfg)
    real = replace(cfg, dist=replace(cfg.dist, workers=workers, emulate_workers=0))
    return make_roles(required_world_size(real, workers), real)


def overlaps(cfg: Config) -> bool:
    """Whether collective aggregation overlaps communication with compute
    (``dist.collective_overlap``): not when the gradient is clipped by its global norm, which
    needs every bucket before any can leave."""
    global_clip = cfg.train.grad_clip > 0 and cfg.train.grad_clip_mode == "global_norm"
    return cfg.dist.collective_overlap and not global_clip


def staged_steps(cfg: Config) -> bool:
    """Whether workers take staged steps (:meth:`dba3c.training.worker.Worker.train_staged`):
    collective aggregation that :func:`overlaps`."""
    return cfg.dist.aggregation == "collective" and overlaps(cfg)


def make_shard_plan(cfg: Config, layout: ParamLayout, num_shards: int) -> ShardPlan:
    """How the shards' owners cut the vector: with overlapping collective aggregation, one
    bucket per layer (:func:`~dba3c.learning.params.layer_buckets`, each shard an equal share of
    each); otherwise contiguous shards."""
    if staged_steps(cfg):
        return ShardPlan(layout.num_params, num_shards, layer_buckets(layout),
                         replicated_first=cfg.dist.replicate_first_bucket)
    return ShardPlan(layout.num_params, num_shards)
