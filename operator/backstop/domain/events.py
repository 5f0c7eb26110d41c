"""Which Events to post: the same reason and message on one object is posted once per window.

The supervisor runs about once a second, so a condition that persists (a planner that keeps
failing, a node that stays lost) would otherwise post one Event per tick. Repeats inside the
window are counted, not posted; the first one after the window is posted with the count.
Pure: the caller passes the clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

EVENT_WINDOW_SECONDS = 600.0
"""An identical Event is posted at most once per this many seconds per object."""


@dataclass
class EventFilter:
    """Deduplicate Events by ``(object uid, reason, message)`` within :attr:`window`.

    Examples
    --------
    >>> f = EventFilter(window=60)
    >>> key = ("uid-1", "NodeLost", "node n1 lost")
    >>> f.admit(key, now=0), f.admit(key, now=1), f.admit(key, now=2)
    ('node n1 lost', None, None)
    >>> f.admit(key, now=61)
    'node n1 lost (2 more times in 61s)'
    >>> f.admit(("uid-1", "NodeLost", "node n2 lost"), now=62)
    'node n2 lost'
    """

    window: float = EVENT_WINDOW_SECONDS
    _posted: dict[tuple[str, str, str], tuple[float, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, key: tuple[str, str, str], now: float) -> str | None:
        """The message to post for ``key`` now, or ``None`` when it repeats within the window."""
        with self._lock:
            self._forget(now)
            last = self._posted.get(key)
            if last is not None and now - last[0] < self.window:
                self._posted[key] = (last[0], last[1] + 1)
                return None
            self._posted[key] = (now, 0)
        message = key[2]
        if last is not None and last[1]:
            message += f" ({last[1]} more times in {now - last[0]:.0f}s)"
        return message

    def _forget(self, now: float) -> None:
        """Drop keys posted two windows ago or earlier (bounded memory)."""
        stale = [k for k, (t, _) in self._posted.items() if now - t >= 2 * self.window]
        for k in stale:
            del self._posted[k]
