"""The stall watchdog of a distributed run: which ranks a step waits on, and when to give up.

A run in which no global step completes for ``dist.stall_timeout`` seconds (a node or link
that stops answering without dying) must end with an error naming the ranks it waits on,
never hang. The chief keeps the clock (:class:`StallClock`); shortly before the timeout it
asks every parameter server which workers' gradients it holds for its current step, and at
the timeout :func:`stalled_ranks` names the culprits from the answers. Bookkeeping only: the
messages are sent and received by ``dba3c.distributed.ps.chief_link.ChiefLink``. Whatever the
cause, the
symptom is the same: a rank that does not answer or whose gradient never arrives.

Single-process runs have no watchdog: there is no other rank to wait on (a stuck simulator
stops them as a whole; SIGTERM still checkpoints and ends them).
"""

from __future__ import annotations

from dataclasses import dataclass


def query_lead(timeout_s: float) -> float:
    """How long before the timeout the parameter servers are asked what they hold: long
    enough for answers to arrive, at most half the timeout."""
    return min(5.0, timeout_s / 2)


@dataclass
class StallClock:
    """Time since the last progress of a run; ``timeout_s`` 0 never expires."""

    timeout_s: float
    since: float  # monotonic time of the last progress
    queried: bool = False

    def progress(self, now: float) -> None:
        """A step completed (or a rank finished): the clock starts again."""
        self.since, self.queried = now, False

    def query_due(self, now: float) -> bool:
        """True once per stall, ``query_lead`` seconds before the timeout."""
        due = (bool(self.timeout_s) and not self.queried
               and now - self.since >= self.timeout_s - query_lead(self.timeout_s))
        self.queried = self.queried or due
        return due

    def expired(self, now: float) -> bool:
        """Whether no progress happened for the whole timeout."""
        return bool(self.timeout_s) and now - self.since >= self.timeout_s


def stalled_ranks(workers: tuple[int, ...], asked: tuple[int, ...],
                  answers: dict[int, tuple[int, set[int]]],
                  last_versions: dict[int, int]) -> tuple[list[int], str]:
    """The ranks a synchronous step waits on, and why (for the error message).

    Args:
      workers: every worker rank. asked: the parameter servers asked (those not finished).
      answers: parameter server -> (its version, workers whose gradient for that version it
        holds); a server that did not answer is silent.
      last_versions: parameter server -> the last version it reported (before it fell
        silent).
    Returns: sorted ranks: the silent servers, and the workers whose gradient a server at the
    lowest version lacks (that step blocks every later one; a server ahead of a silent one
    waits for workers that wait for the silent one, so its lacks are not named).
    """
    silent = [p for p in asked if p not in answers]
    reasons = [f"parameter servers {silent} do not answer"] if silent else []
    missing: set[int] = set()
    versions = [version for version, _ in answers.values()]
    versions += [last_versions[p] for p in silent if p in last_versions]
    if answers:
        step = min(versions)
        for version, arrived in answers.values():
            if version == step:
                missing |= set(workers) - arrived
        if missing:
            reasons.append(f"workers {sorted(missing)}: no gradient for step {step}")
    return sorted(set(silent) | missing), "; ".join(reasons)
