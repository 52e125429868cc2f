"""A message as a channel holds it: the shared body plus per-channel delivery state."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import TypeAlias

from nsqpy.nsqd.core import records


class Message:
    """One message on one channel (each channel gets its own copy; the body is shared).

    ``timestamp`` is wall-clock ns at publish (it goes on the wire); ``deadline`` and
    ``delivery_ts`` are monotonic seconds from the injected clock; ``deferred`` is the
    publisher's requested delay in seconds (DPUB), kept so a copy made later honours it.
    """

    __slots__ = (
        "attempts",
        "body",
        "deadline",
        "deferred",
        "delivery_ts",
        "id",
        "timestamp",
        "token",
    )

    #: A dead letter's source channel, ``"topic:channel"`` (a slot of DeadLetter); "" here.
    origin = ""

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, deferred: float = 0.0) -> None:
        self.id = msg_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = 0
        self.deferred = deferred
        self.deadline = 0.0
        self.delivery_ts = 0.0
        self.token = -1  # durable mode: the disk record to finish on FIN

    def due_ns(self) -> int:
        """Wall-clock unix ns when a deferred message is due (publish time + delay); else 0."""
        return self.timestamp + int(self.deferred * 1e9) if self.deferred else 0

    def copy(self) -> Message:
        """A fresh copy for another channel: same id, body, timestamp and deferral."""
        return Message(self.id, self.body, self.timestamp, self.deferred)


class DeadLetter(Message):
    """A message in a dead-letter topic: remembers the channel it came from, so a redrive can
    send it back there. Kept through fan-out (``copy``) and on disk (``records``)."""

    __slots__ = ("origin",)

    def __init__(self, msg_id: bytes, body: bytes, timestamp: int, origin: str) -> None:
        super().__init__(msg_id, body, timestamp)
        self.origin = origin

    def copy(self) -> Message:
        letter = DeadLetter(self.id, self.body, self.timestamp, self.origin)
        letter.deferred = self.deferred
        return letter


def from_record(rec: records.Record) -> Message:
    """The message a disk record holds (attempts and origin kept; deferral left to the
    caller, which knows whether it is still due)."""
    msg = (
        Message(rec.id, rec.body, rec.timestamp)
        if not rec.origin
        else DeadLetter(rec.id, rec.body, rec.timestamp, rec.origin)
    )
    msg.attempts = rec.attempts
    return msg


def plain_message(data: bytes) -> Message | None:
    """The Message of a plain (NSQ-format) disk record, as ``from_record(records.decode(data))``
    makes it; None for a record that may be extended (first byte 0xff), left to those two.
    Raises ValueError for one too short to be a message."""
    if data[:1] == b"\xff":
        return None
    return from_record(records.decode(data))


#: A message that no client has seen yet, as queues hold it: ``(id, body, timestamp)``.
#: Immutable, so every channel shares the same one, and the cyclic GC does not track it.
Entry: TypeAlias = tuple[bytes, bytes, int]
#: What a queue holds: fresh entries, and messages already delivered once (requeued, timed out).
Queued: TypeAlias = "Message | Entry"


def fresh_entries(
    ids: Sequence[bytes], bodies: Sequence[bytes], ts: int
) -> tuple[list[Queued], int]:
    """The entries for a publish of ``bodies`` with ``ids`` at ``ts``, and their body bytes
    (the topic's ``message_bytes``): what every published message pays, in one pass."""
    return list(zip(ids, bodies, repeat(ts, len(ids)), strict=True)), sum(map(len, bodies))


def materialize(item: Queued) -> Message:
    """The message for a queue item, created when it is about to be delivered."""
    if isinstance(item, tuple):
        return Message(item[0], item[1], item[2])
    return item


def with_tokens(items: list[Queued], tokens: range) -> list[Message]:
    """Durable mode: the messages for the first ``len(tokens)`` items, each holding its disk
    record's token (to finish on FIN)."""
    taken = list(map(materialize, items[: len(tokens)]))
    for msg, token in zip(taken, tokens, strict=True):
        msg.token = token
    return taken


_new = object.__new__


def delivered(item: Entry, now: float, timeout: float) -> Message:
    """The Message for an entry being delivered for the first time, in one step.

    The delivery hot path: skipping ``__init__`` and setting each slot once, already in its
    in-flight state, costs about 190 ns less than ``Message(...)`` plus the delivery updates.
    """
    msg: Message = _new(Message)
    msg.id, msg.body, msg.timestamp = item
    msg.attempts = 1
    msg.deferred = 0.0
    msg.delivery_ts = now
    msg.deadline = now + timeout
    msg.token = -1
    return msg
