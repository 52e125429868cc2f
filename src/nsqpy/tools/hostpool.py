"""Choosing a destination per message, as nsq_to_nsq/nsq_to_http's ``--mode`` does.

``round-robin`` cycles through the addresses (NSQ's counter is incremented before use, so the
first message goes to the second address). ``hostpool`` is bitly/go-hostpool's standard pool:
round robin over the hosts not marked dead; a failed host is skipped for 30 s, then tried
again with the delay doubling up to 15 min; when every host is dead they are all revived.
``epsilon-greedy`` builds on the pool (:mod:`nsqpy.tools.epsilon_greedy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

INITIAL_RETRY_DELAY: Final = 30.0
MAX_RETRY_DELAY: Final = 900.0


class _Host:
    __slots__ = ("address", "dead", "next_retry", "retry_delay")

    def __init__(self, address: str) -> None:
        self.address = address
        self.dead = False
        self.next_retry = 0.0
        self.retry_delay = INITIAL_RETRY_DELAY


class RoundRobin:
    """NSQ's ModeRoundRobin: address ``counter % n`` after incrementing the counter."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self._addresses = list(addresses)
        self._counter = 0

    def get(self) -> str:
        self._counter += 1
        return self._addresses[self._counter % len(self._addresses)]

    def mark(self, address: str, ok: bool) -> None:
        """Round robin ignores outcomes."""


class HostPool:
    """go-hostpool's standard pool (see the module doc); ``clock`` is monotonic seconds."""

    def __init__(
        self, addresses: Sequence[str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._hosts = [_Host(a) for a in addresses]
        self._by_address = {h.address: h for h in self._hosts}
        self._next = 0
        self._clock = clock

    def get(self) -> str:
        now = self._clock()
        count = len(self._hosts)
        for offset in range(count):
            index = (offset + self._next) % count
            host = self._hosts[index]
            if host.dead and host.next_retry >= now:
                continue
            if host.dead:  # due for a retry: try it, and back off further meanwhile
                host.retry_delay = min(host.retry_delay * 2, MAX_RETRY_DELAY)
                host.next_retry = now + host.retry_delay
            self._next = index + 1
            return host.address
        for host in self._hosts:  # all down: revive them all rather than stall
            host.dead = False
        self._next = 0
        return self._hosts[0].address

    def mark(self, address: str, ok: bool) -> None:
        host = self._by_address[address]
        if ok:
            host.dead = False
        elif not host.dead:
            host.dead = True
            host.retry_delay = INITIAL_RETRY_DELAY
            host.next_retry = self._clock() + INITIAL_RETRY_DELAY
