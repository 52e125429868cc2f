"""to_nsq's input handling: split a byte stream on a one-byte delimiter, and pace sends.

Pure (no I/O, the clock is passed in), so both are unit-tested directly.
"""

from __future__ import annotations


class RecordSplitter:
    """Bytes in, delimited records out; empty records are skipped as to_nsq skips them.

    The last record does not need a trailing delimiter. (NSQ's to_nsq drops the final byte of
    such a record: it trims one byte from every record it reads, delimiter or not. We keep it.)
    """

    def __init__(self, delimiter: bytes) -> None:
        if len(delimiter) != 1:
            raise ValueError("--delimiter must be a single byte")
        self._delimiter = delimiter
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The records completed by ``chunk`` (the rest is kept for the next call)."""
        pieces = (self._pending + chunk).split(self._delimiter)
        self._pending = pieces.pop()
        return [p for p in pieces if p]

    def finish(self) -> list[bytes]:
        """At end of input: the unterminated last record, if any."""
        last, self._pending = self._pending, b""
        return [last] if last else []


class RateLimiter:
    """At most ``rate`` sends per second, with up to one second of unused capacity saved.

    NSQ's to_nsq keeps a balance that starts at 1, gains one every 1/rate s up to ``rate``, and
    costs one per message; this token bucket has the same average and burst, computed from
    the clock instead of a ticker.
    """

    def __init__(self, rate: int, now: float) -> None:
        if rate < 1:
            raise ValueError("rate must be at least 1")
        self.rate = rate
        self._tokens = 1.0
        self._last = now

    def reserve(self, now: float) -> float:
        """Take one send's token; return how long to wait before sending (0 if none)."""
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.rate), self._tokens + elapsed * self.rate) - 1.0
        # A negative balance is a reservation of capacity that arrives later.
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
