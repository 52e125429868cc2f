"""A background publisher: single PUBs evenly spaced, as a live producer sends them."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from nsqpy.client import sync
from nsqpy.client.errors import NSQError


class Trickle:
    """Publish ``trickle000000``, ... to ``topic`` at ``rate`` messages per second.

    The schedule is fixed (message n is due at n / rate), so a late send does not shift the
    rest. Stops after ``count`` messages, or when the ``with`` block ends.
    """

    def __init__(self, address: str, topic: str, rate: float, count: int | None = None) -> None:
        self.address = address
        self.topic = topic
        self.interval = 1.0 / rate
        self.count = count
        self.sent = 0
        self.first_at: float | None = None  # time.time() of the first PUB's answer
        self.error: Exception | None = None
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trickle", daemon=True)

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the publisher did not stop"

    def bodies(self) -> list[bytes]:
        return [body(i) for i in range(self.sent)]

    def _run(self) -> None:
        try:
            with sync.Producer(self.address) as producer:
                began = time.monotonic()
                while not self._stop.is_set() and (self.count is None or self.sent < self.count):
                    producer.publish(self.topic, body(self.sent))
                    if self.first_at is None:
                        self.first_at = time.time()
                    self.sent += 1
                    # pacing, not waiting for a condition: the next PUB is due at sent / rate
                    self._stop.wait(max(0.0, began + self.sent * self.interval - time.monotonic()))
        except (NSQError, OSError) as exc:  # reported by the test through ``error``
            self.error = exc
        finally:
            self.done.set()


def body(i: int) -> bytes:
    return b"trickle%06d" % i
