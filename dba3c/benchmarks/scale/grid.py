"""The points ``dba3c bench scale`` measures: :class:`ScalePoint`, the ``ps`` and
``collective`` grids, the options that select points of them, each point's steps and the
time scale s it runs at (:func:`grid_time_scales`, which asks the analytic model of
:mod:`dba3c.benchmarks.scale.model` how fast each point steps)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dba3c.benchmarks.scale.model import Bucket, model_step_seconds, step_bytes
from dba3c.errors import UserError

# Each link rate runs at its own multiple of the time scale: 100 Gb/s at s = 10 would push
# 10 Gbit/s through veth links on this machine's cores, so it runs 5x slower (2 Gbit/s)
LINK_TIME_SCALE = {10: 1.0, 100: 5.0}
# Bytes per second of the steps' traffic the emulating host moves without saturating its
# cores (docs/benchmarks.md, "Emulated-cluster figures: how they are measured", time scale)
HOST_BUDGET = 150e6


@dataclass(frozen=True)
class ScalePoint:
    """One run of the grid: W workers, P parameter servers, FC ``hidden``; ``replicas``
    gradients per step (0 = all); the last ``slow_workers`` take ``slow_factor`` x T_c;
    links of ``link_gbit`` Gb/s; ``aggregation`` ps, or collective (then P = 0); ``overlap``:
    the collectives move the vector bucket by bucket while the workers compute
    (``dist.collective_overlap``; the model is then
    :func:`~dba3c.benchmarks.scale.model.overlapped_step_seconds`); ``wire_dtype``: the
    type on the wire of the gradients and of a collective's parameter changes
    (``dist.wire_dtype``: float32, or bfloat16, half the bytes; a parameter server's
    parameters travel in float32 either way)."""

    workers: int
    ps: int
    hidden: int = 128
    replicas: int = 0
    slow_workers: int = 0
    slow_factor: float = 2.0
    link_gbit: int = 10
    aggregation: str = "ps"
    overlap: bool = False
    wire_dtype: str = "float32"

    def overrides(self) -> list[str]:
        """The config overrides of this point."""
        return [f"model.hidden={self.hidden}", f"dist.replicas_to_aggregate={self.replicas}",
                f"synthetic.slow_workers={self.slow_workers}",
                f"synthetic.slow_factor={self.slow_factor}",
                f"dist.aggregation={self.aggregation}", f"dist.ps={self.ps}",
                f"dist.wire_dtype={self.wire_dtype}",
                *([f"dist.collective_overlap={str(self.overlap).lower()}"]
                  if self.aggregation == "collective" else [])]


def collective_grid(quick: bool) -> list[ScalePoint]:
    """The points of ``--aggregation collective``: over 10 Gb/s links W at FC 128 up to 128
    workers, FC sizes and stragglers at the paper's largest W, 64; over 100 Gb/s links W at
    FC 128 (``quick``: up to 16 workers, the FC sizes at 16). No W = 1: one collective rank
    is a world of one, which trains in one process and cannot run synthetic compute (and
    has nothing to communicate: E = 1)."""
    sizes, top, fcs = ((4, 16), 16, (32, 512)) if quick else (
        (2, 4, 8, 16, 32, 64, 128), 64, (32, 256, 512))
    points = [ScalePoint(w, 0, aggregation="collective") for w in sizes]
    points += [ScalePoint(top, 0, hidden=h, aggregation="collective") for h in fcs]
    points.append(ScalePoint(top, 0, slow_workers=top // 16, aggregation="collective"))
    points += [ScalePoint(w, 0, link_gbit=100, aggregation="collective") for w in sizes]
    return points


def scale_grid(quick: bool) -> list[ScalePoint]:
    """The points measured, grouped by link rate (each group is one MPI job of as many ranks
    as its largest point, :func:`~dba3c.benchmarks.scale.cluster.job_groups`): over 10 Gb/s
    links W x P at FC 128, FC sizes and P at the largest W, W = 128 at P = 4, and backup
    workers (R = W - W/16) with and without stragglers; over 100 Gb/s links W at P = 1 and 4,
    FC 128, and W = 128 at P = 4. Started one ``dba3c launch`` each, a 64-worker point spent
    40-190 s starting 68 ranks on 2 loaded cores; in one job they start once per link rate.
    ``quick`` is a 16-worker version with two 100 Gb/s points."""
    sizes: tuple[int, ...]
    servers: tuple[int, ...]
    fcs: tuple[int, ...]
    if quick:
        sizes, servers, top, fcs = (1, 4, 16), (1, 4), 16, (32, 512)
        fast = [ScalePoint(w, 4, link_gbit=100) for w in (4, 16)]
    else:
        sizes, servers, top, fcs = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8), 64, (32, 256, 512)
        fast = [ScalePoint(w, p, link_gbit=100) for w in sizes for p in (1, 4)]
        fast.append(ScalePoint(2 * top, 4, link_gbit=100))
    points = [ScalePoint(w, p) for w in sizes for p in servers]
    points += [ScalePoint(top, 4, hidden=h) for h in fcs]
    if not quick:
        points += [ScalePoint(top, p) for p in (3, 5, 6, 7)]
        points.append(ScalePoint(2 * top, 4))  # beyond the paper's 64 nodes, one point
    backups = top - top // 16
    points += [ScalePoint(top, 4, replicas=backups),
               ScalePoint(top, 4, replicas=backups, slow_workers=top // 16),
               ScalePoint(top, 4, slow_workers=top // 16)]
    return list(dict.fromkeys(points + fast))


@dataclass(frozen=True)
class Selection:
    """Which points of a grid to measure: those with one of these worker counts
    (``--workers``), parameter-server counts (``--ps``), link rates in Gb/s (``--links``) and
    FC sizes (``--hidden``); an empty one: any."""

    workers: tuple[int, ...] = ()
    servers: tuple[int, ...] = ()
    links: tuple[int, ...] = ()
    hidden: tuple[int, ...] = ()

    def filters(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(option, values, the ScalePoint field it selects by) of each option."""
        return [("--workers", self.workers, "workers"), ("--ps", self.servers, "ps"),
                ("--links", self.links, "link_gbit"), ("--hidden", self.hidden, "hidden")]

    def options(self) -> str:
        """The command-line options that make this selection (" --workers 64 ...")."""
        return "".join(f" {option} {','.join(map(str, values))}"
                       for option, values, _ in self.filters() if values)


EVERY_POINT = Selection()


def select_points(grid: list[ScalePoint], chosen: Selection = EVERY_POINT) -> list[ScalePoint]:
    """The points of ``grid`` that ``chosen`` selects, in grid order. A value no point of
    the grid has is a :class:`UserError` naming the option and the values it has."""
    options = chosen.filters()
    for option, wanted, field in options:
        have = {getattr(p, field) for p in grid}
        missing = [n for n in wanted if n not in have]
        if missing:
            raise UserError(f"{option} {','.join(map(str, missing))}: the grid has no such "
                            f"point (its values: {','.join(map(str, sorted(have)))})")
    return [p for p in grid
            if all(not wanted or getattr(p, field) in wanted for _, wanted, field in options)]


def point_label(point: ScalePoint) -> str:
    """W, P, FC, backups, stragglers, bfloat16 on the wire and link of a point, for
    progress lines."""
    extra = (f" R={point.replicas}" if point.replicas else "") + (
        f" {point.slow_workers} slow x{point.slow_factor:g}" if point.slow_workers else "") + (
        f" {point.wire_dtype} on the wire" if point.wire_dtype != "float32" else "")
    servers = ("collective" + (" overlapped" if point.overlap else "")
               if point.aggregation == "collective" else f"P={point.ps}")
    return (f"W={point.workers} {servers} FC={point.hidden}{extra} "
            f"link {point.link_gbit} Gb/s")


def steps_for(point: ScalePoint, quick: bool) -> tuple[int, int]:
    """(steps, warm-up steps) of a point: fewer at 32 workers and more (chosen when each
    point was a launch of its own, which took a minute or more there on a small machine)."""
    if quick:
        return 10, 3
    return (10, 3) if point.workers >= 32 else (12, 4)


def point_time_scale(point: ScalePoint, time_scale: float) -> float:
    """The time scale s of a point: ``time_scale`` x its link rate's factor
    (``LINK_TIME_SCALE``)."""
    return time_scale * LINK_TIME_SCALE[point.link_gbit]


def grid_time_scales(grid: list[ScalePoint], time_scale: float,
                     num_params: Callable[[ScalePoint], int], compute_s: float,
                     buckets: Callable[[ScalePoint], tuple[Bucket, ...]] = lambda point: ()
                     ) -> list[float]:
    """The time scale s of every point of ``grid``: :func:`point_time_scale`, multiplied by
    the smallest whole k for which no point with the same W and link rate moves more than
    ``HOST_BUDGET`` bytes per second through the emulating host at the analytic model's
    step time (its steps' bytes / (model step x s)). One s per W and link rate, so that
    such points share the links' shape; the large points get the slower clock they need
    (at s = 10, 64 workers x 8 PS saturated two cores and stepped 85% over the model)."""
    def needed(point: ScalePoint) -> int:
        s, n = point_time_scale(point, time_scale), num_params(point)
        step_s = model_step_seconds(point, n, compute_s, s, buckets=buckets(point))
        return max(1, math.ceil(step_bytes(point, n) / (HOST_BUDGET * step_s * s)))

    k: dict[tuple[int, int], int] = {}
    for point in grid:
        key = (point.link_gbit, point.workers)
        k[key] = max(k.get(key, 1), needed(point))
    return [point_time_scale(p, time_scale) * k[(p.link_gbit, p.workers)] for p in grid]
