"""When a waiter looks again: paced, a few tight polls when its turn is due, else backoff."""

from __future__ import annotations

from collections import deque
from typing import Final

#: Polls a first-in-line waiter sends back to back once its holder is due, before backing
#: off: a handoff then waits about half a round trip, a slow holder costs this many polls.
TIGHT_POLLS: Final = 3


class Pace:
    """How fast grants follow each other on one lock, as one client has seen a counter move:
    the slope over the last ``_WINDOW`` moves; a pause of ``_IDLE`` cycles restarts."""

    _WINDOW = 16
    _IDLE = 20

    def __init__(self) -> None:
        self._seen: deque[tuple[int, float]] = deque(maxlen=self._WINDOW)
        self.cycle: float | None = None
        #: Others were waiting in line when this client last got the lock.
        self.crowded = False

    def observe(self, counter: int, now: float) -> None:
        last = self._seen[-1] if self._seen else None
        if last is None or counter < last[0]:
            self._seen.clear()
            self._seen.append((counter, now))
            self.cycle = None
            return
        if counter == last[0]:
            return
        if self.cycle is not None and now - last[1] > self._IDLE * self.cycle:
            self._seen.clear()
            self._seen.append(last)
        self._seen.append((counter, now))
        first = self._seen[0]
        self.cycle = (now - first[1]) / (counter - first[0])

    def pause(self, ahead: int, now: float) -> float | None:
        """Seconds to sleep with ``ahead`` grants before ours (``None``: unknown or passed)."""
        if self.cycle is None:
            return None
        turn = self._seen[-1][1] + ahead * self.cycle  # when our grant is expected
        if ahead <= 1:
            left = turn - now
            return left / 2 if left > 0 else None
        first = turn - self.cycle - now
        return first if first > 0 else None


class Polls:
    """One waiter's delays: paced, tight when due, else doubling from ``low`` to ``high``."""

    def __init__(self, pace: Pace, low: float, high: float) -> None:
        self._pace = pace
        self._low = low
        self._high = high
        self.progress()

    def progress(self) -> None:
        """The lock changed hands (or the line ahead changed): start over."""
        self._backoff = self._low
        self._tight = TIGHT_POLLS

    def next(self, ahead: int, now: float) -> float:
        guess = self._pace.pause(ahead, now)
        if guess is not None and guess >= self._low:  # shorter: the moment has come
            return min(self._high, guess)
        if ahead <= 1 and self._tight > 0 and self._pace.cycle is not None:
            self._tight -= 1
            return 0.0
        delay = self._backoff
        self._backoff = min(self._high, delay * 2)
        return delay
