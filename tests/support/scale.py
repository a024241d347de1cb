"""Points of ``dba3c bench scale`` and the network they model."""

from __future__ import annotations

from dba3c.benchmarks.scale.cluster import PointPlan
from dba3c.benchmarks.scale.grid import ScalePoint
from dba3c.learning.models import NetSpec

PAPER_NET = NetSpec("ba3c", 128, (4, 84, 84), 6)  # FC 128, 84x84x4, 6 actions


def collective(workers: int, **kw) -> ScalePoint:
    """A point of ``--aggregation collective``."""
    return ScalePoint(workers, 0, aggregation="collective", **kw)


def plan(workers: int, ps: int, link: int = 10, **kw) -> PointPlan:
    """A point at s = 5 (T_c 20 ms -> 100 ms a step), 12 steps, 4 of them warm-up."""
    aggregation = "collective" if ps == 0 else "ps"
    return PointPlan(ScalePoint(workers, ps, link_gbit=link, aggregation=aggregation, **kw),
                     5.0, 12, 4)
