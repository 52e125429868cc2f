"""What topics and channels need from a disk queue, and how they report writes.

``Backend`` is the part of :class:`nsqpy.nsqd.storage.diskqueue.DiskQueue` the domain uses, so the
domain can be tested with any stand-in. ``DiskHooks`` is how a domain object tells the daemon
that a backend has new data to sync, and asks to run something once everything written so far
is on stable storage (durable mode's group commit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from nsqpy._internal.compiled import load
from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.errors import BrokerError

if TYPE_CHECKING:
    from nsqpy.nsqd.core.message import Queued


class Backend(Protocol):
    @property
    def depth(self) -> int: ...

    def put(self, records: list[bytes]) -> None: ...

    def put_taking(self, records: list[bytes], take: int) -> range:
        """``put``; the first ``take`` records also count as read at once when nothing else
        is unread (else none do). Returns the tokens of those taken, in order."""
        ...

    def read(self) -> tuple[bytes, int] | None: ...

    def read_many(self, limit: int) -> tuple[list[bytes], range]:
        """Up to ``limit`` next records, in order, with their tokens (one each, in order)."""
        ...

    def finish(self, token: int) -> None: ...

    def finish_many(self, tokens: list[int]) -> None:
        """``finish`` for each of ``tokens`` (a run of FINs), in one call."""
        ...

    def empty(self) -> None: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...


@runtime_checkable
class Peekable(Backend, Protocol):
    """A backend that can show the head of its next record without reading it (the disk
    queue can; the backlog-age alert uses it when it is there)."""

    def peek(self, size: int) -> bytes | None: ...


class DiskHooks:
    """No disk at all: nothing to sync, commits complete at once (tests, ephemeral)."""

    durable = False

    def wrote(self, backend: Backend) -> None:
        return None

    def touched(self, backend: Backend) -> None:
        """Records were read or finished: the positions need syncing, nothing waits on it."""
        return None

    def after_commit(self, callback: Callable[[bool], None], topic: str | None = None) -> None:
        """Run ``callback(ok)`` once all written so far is on stable storage (and, for a
        ``topic``, its entry in nsqd.dat too)."""
        callback(True)

    def poll_commits(self) -> None:
        """Take the commits completed since the last look (a disk store's fsync answers)."""
        return None

    def publisher_answered(self, key: int, now: float) -> None:
        """Publisher ``key`` got its commit's reply at ``now`` and may publish again soon (a
        durable store's commits may wait a moment for it: ``storage.linger``)."""
        return None

    def publisher_heard(self, key: int, now: float) -> None:
        """Publisher ``key`` sent its next command at ``now``."""
        return None

    def publisher_gone(self, key: int) -> None:
        """Publisher ``key`` disconnected."""
        return None

    def write_failed(self, error: Exception) -> None:
        return None

    def holding(self) -> bool:
        """Whether the commit of what was just written waits for more writes (a durable
        store's linger): a channel may hold the messages back until it starts."""
        return False

    def after_hold(self, callback: Callable[[float], None]) -> None:
        """Run ``callback(now)`` once the held commit starts, or the hold ends without one
        (asked only while ``holding``)."""
        raise AssertionError("nothing is held without a commit linger")


def write_messages(backend: Backend, hooks: DiskHooks, msgs: list[Queued], take: int = 0) -> range:
    """Append ``msgs`` to ``backend`` as one batch and report the write (or its failure).

    With ``take``, the first ``take`` count as read at once when nothing older is unread
    (``Backend.put_taking``); returns the tokens of those taken."""
    batch = _encode(msgs)
    try:
        if take:
            tokens = backend.put_taking(batch, take)
        else:
            backend.put(batch)
            tokens = _NOTHING
    except BrokerError as err:
        hooks.write_failed(err)
        raise
    hooks.wrote(backend)
    return tokens


_NOTHING = range(0)


def py_encode(msgs: list[Queued]) -> list[bytes]:
    """A disk record per queued message (plain for a fresh entry)."""
    encode = records.encode
    plain = records.encode_plain
    return [
        plain(m[2], m[0], m[1])
        if isinstance(m, tuple)
        else encode(m.timestamp, m.attempts, m.id, m.body, m.due_ns(), m.origin)
        for m in msgs
    ]


_c = load("nsqpy.nsqd.core._cdelivery")
_encode: Callable[[list[Queued]], list[bytes]] = py_encode if _c is None else _c.plain_records
