"""Where a thread's loop spends its time: seconds per named section, no I/O.

A loop calls :meth:`Laps.lap` after each of its stages; the time since the previous lap (or
since :meth:`Laps.start`) goes to that stage's name. One ``Laps`` per thread: the actor and
the trainer of a worker each keep theirs (``dba3c bench profile`` reads them; a lap costs
one clock read and one dict update, well under a microsecond).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


class Laps:
    """Cumulative seconds and calls per section of one thread's loop."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._last = time.perf_counter()

    def start(self) -> None:
        """Begin timing from now (before a loop's first stage)."""
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        """Add the time since the previous lap to section ``name``."""
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self.calls[name] = self.calls.get(name, 0) + 1
        self._last = now

    def snapshot(self) -> dict[str, tuple[float, int]]:
        """Section -> (seconds, calls) so far (a copy; safe to read from another thread)."""
        return {name: (s, self.calls.get(name, 0)) for name, s in list(self.seconds.items())}


@dataclass
class WorkerLaps:
    """The sections of one worker's two threads: the actor's and the trainer's."""

    actor: Laps = field(default_factory=Laps)
    trainer: Laps = field(default_factory=Laps)


def section_table(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]],
                  wall_s: float, per: str) -> list[tuple[str, float, float]]:
    """(section, ms per ``per`` section call, share of wall time) between two snapshots.

    ``per`` names the section counted once per loop iteration (e.g. the trainer's gradient):
    each section's seconds are divided by that section's calls in the window. Sections
    keep the loop's order; a last row ``unaccounted`` holds wall time no lap measured.
    """
    spent = {k: (s - before.get(k, (0.0, 0))[0], n - before.get(k, (0.0, 0))[1])
             for k, (s, n) in after.items()}
    steps = max(spent.get(per, (0.0, 0))[1], 1)
    rows = [(k, 1000.0 * s / steps, s / wall_s) for k, (s, _) in spent.items()]
    rest = wall_s - sum(s for s, _ in spent.values())
    return rows + [("unaccounted", 1000.0 * rest / steps, rest / wall_s)]
