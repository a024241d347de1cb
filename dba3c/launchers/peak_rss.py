"""The peak memory of a launched job: :class:`RssSampler` reads, from /proc, the peak RSS
(VmHWM) of every process of a tree that announces an MPI rank (``PMI_RANK`` in its
environment), or of the tree's first process alone."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class RssSampler(threading.Thread):
    """Peak RSS (VmHWM) of every descendant of a process that announces an MPI rank (or of
    the process itself), sampled every ``interval`` seconds from /proc."""

    def __init__(self, pid: int, interval: float = 1.0):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_mb: dict[str, float] = {}
        self.series: list[tuple[float, dict[str, float]]] = []  # (seconds, peak so far)
        self._finished = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        start = time.monotonic()
        while not self._finished.wait(self.interval):
            self.sample()
            self.series.append((time.monotonic() - start, dict(self.peak_mb)))

    def sample(self) -> None:
        """Read every process's peak now."""
        with self._lock:
            for pid in [self.pid, *_descendants(self.pid)]:
                hwm, rank = _vm_hwm_mb(pid), _rank_of(pid)
                if hwm is not None and (rank is not None or pid == self.pid):
                    key = f"rank{rank}" if rank is not None else "process"
                    self.peak_mb[key] = max(self.peak_mb.get(key, 0.0), hwm)

    def restart(self) -> dict[str, float]:
        """The peaks until now (MB by rank, sampled once more); then start again from every
        rank's current RSS (the kernel's VmHWM reset through /proc/PID/clear_refs), e.g.
        when the ranks of a job go on to another run."""
        self.sample()
        with self._lock:
            peaks, self.peak_mb = dict(sorted(self.peak_mb.items())), {}
            for pid in _descendants(self.pid):
                if _rank_of(pid) is not None:
                    try:
                        Path(f"/proc/{pid}/clear_refs").write_text("5")
                    except OSError:
                        continue
        return peaks

    def stop(self) -> dict[str, float]:
        """Stop sampling; peak RSS in MB by rank."""
        self._finished.set()
        self.join()
        return dict(sorted(self.peak_mb.items()))


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"PMI_RANK="):
            return int(item.split(b"=", 1)[1])
    return None
