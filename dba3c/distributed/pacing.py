"""How long a polling rank sleeps before it looks for its next message.

MPI moves messages only inside MPI calls, and a blocking wait keeps a core at 100%, so ranks
poll with short sleeps. A parameter server that polls blindly every 0.2 ms wakes about 1,600
times during one 320 ms worker step, and on a small node every wake-up takes a core from the
worker's training threads. It needs not: a worker answers parameters with a gradient no
sooner than one gradient computation later. :class:`ReplyPacer` sleeps through most of that
time and polls finely only once a reply is due, so gradients are picked up as promptly as
before with far fewer wake-ups (docs/decisions.md, "reply pacing").

Pure timing logic, no I/O: callers pass ``now`` (``time.monotonic()``), tests pass numbers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

FINE_MIN_S = 5e-5   # first sleep of a fine poll, doubling up to FINE_MAX_S
FINE_MAX_S = 5e-4
COARSE_MAX_S = 0.02  # longest single sleep: control messages are still seen within 20 ms


class ReplyPacer:
    """Sleep lengths for a rank that sends requests and awaits one reply per request.

    A reply from ``peer`` to the request sent at ``t_sent`` is due at
        t_due = t_sent + margin * min(the peer's last ``history`` reply times),
    where a reply time is the time from a request to its reply. Before ``t_due`` the rank
    sleeps (at most ``coarse_max_s`` at a time); from then on, or when a peer has no reply
    time yet, or nothing is awaited, it polls finely: ``FINE_MIN_S`` doubling to
    ``fine_max_s`` (``FINE_MAX_S`` unless ``dist.poll_max_ms`` says otherwise), restarted by
    every message.

    Requests and replies carry a version, so a late reply to an older request (a backup
    worker's stale gradient) is not mistaken for a fast reply to the newest one.
    """

    def __init__(self, margin: float = 0.8, history: int = 8,
                 coarse_max_s: float = COARSE_MAX_S, fine_max_s: float = FINE_MAX_S):
        if not 0.0 < margin <= 1.0:
            raise ValueError(f"margin {margin} must be in (0, 1]")
        self.margin, self.history, self.coarse_max_s = margin, history, coarse_max_s
        self.fine_max_s = max(fine_max_s, FINE_MIN_S)
        self._awaited: dict[int, tuple[int, float]] = {}  # peer -> (version, t_sent)
        self._reply_s: dict[int, deque] = {}  # peer -> recent reply times, seconds
        self._fine_s = FINE_MIN_S

    def sent(self, peers: Iterable[int], version: int, now: float) -> None:
        """Requests at ``version`` went to ``peers`` at ``now``; their replies are awaited."""
        for peer in peers:
            self._awaited[peer] = (version, now)

    def received(self, peer: int, version: int, now: float) -> None:
        """A message came from ``peer``; it answers the awaited request if it carries that
        request's version (then its reply time is recorded)."""
        self._fine_s = FINE_MIN_S
        awaited = self._awaited.get(peer)
        if awaited is not None and awaited[0] == version:
            del self._awaited[peer]
            self._reply_s.setdefault(peer, deque(maxlen=self.history)).append(now - awaited[1])

    def due(self, peer: int) -> float | None:
        """When the awaited reply of ``peer`` is due (None: nothing awaited or no history)."""
        if peer not in self._awaited or not self._reply_s.get(peer):
            return None
        return self._awaited[peer][1] + self.margin * min(self._reply_s[peer])

    def pause(self, now: float, sending: bool = False) -> float:
        """Seconds to sleep before the next poll; ``sending``: a send is still in flight."""
        dues = [self.due(peer) for peer in self._awaited]
        known = [due for due in dues if due is not None]
        if dues and len(known) == len(dues) and not sending:
            wait = min(known) - now
            if wait > 0:
                return min(wait, self.coarse_max_s)
        fine, self._fine_s = self._fine_s, min(2 * self._fine_s, self.fine_max_s)
        return fine
