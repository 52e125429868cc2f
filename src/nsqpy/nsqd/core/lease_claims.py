"""Durable leases after a restart: the disk records that belong to a restored lease.

In ``--durable`` mode a sealed lease is written to the lease journal (its messages in full),
and its messages' records stay unfinished in the channel's disk queue until the lease is
closed. After a crash (or a clean stop, which writes them back to the queue) the queue gives
those records again, and the journal gives the lease again: the lease is served at once from
the journal's copies, and the records must not reach consumers as well. ``Claims`` screens
every batch the channel reads from disk, by message id:

``CLAIM``
    the lease is open: the record's token goes to the lease's message (its FIN finishes the
    record, its REQ puts the message back as a delivered one), and the record is not queued.
    Until then the message is counted in the channel's depth (it is an unread record), not
    in flight; from then on in flight, as a leased message is.
``DROP``
    the lease was finished: the record is finished at once and not queued. Also any second
    copy of a record already claimed or released (a replay may bring one twice).
``RELEASE``
    the lease was requeued or expired before the record came back: the record is queued as
    an ordinary message, with the attempts the lease had given it, once.

A record that no claim names passes untouched. Nothing here does I/O: finishing a record is
the channel's backend call, as a FIN's is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.message import Message

CLAIM: Final = 0
RELEASE: Final = 1
DROP: Final = 2


class Holder(Protocol):
    """What a claim needs of its lease (``nsqpy.nsqd.core.lease.Lease``)."""

    name: str
    unclaimed: int


class _Claim:
    __slots__ = ("holder", "mode", "msg")

    def __init__(self, mode: int, msg: Message | None, holder: Holder) -> None:
        self.mode = mode
        self.msg = msg
        self.holder = holder


class Claims:
    """The claims of one channel's restored leases, by message id."""

    __slots__ = ("channel", "entries")

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.entries: dict[bytes, _Claim] = {}

    def expect(self, holder: Holder, msgs: list[Message]) -> None:
        """An open lease restored with ``msgs``, none of their records read back yet."""
        for msg in msgs:
            self.entries[msg.id] = _Claim(CLAIM, msg, holder)

    def drop(self, holder: Holder, msg_id: bytes) -> None:
        """The lease is finished: the record of ``msg_id``, if it comes back, goes."""
        self.entries[msg_id] = _Claim(DROP, None, holder)

    def release(self, holder: Holder, msg: Message) -> None:
        """The lease is requeued: the record of ``msg`` is delivered when it comes back."""
        self.entries[msg.id] = _Claim(RELEASE, msg, holder)

    def forget(self, holder: Holder) -> None:
        """The book forgets the closed lease: its records, if any still come, pass as they are
        (the lease journal forgets it at the same time)."""
        entries = self.entries
        for msg_id in [k for k, claim in entries.items() if claim.holder is holder]:
            del entries[msg_id]

    def screen(self, datas: list[bytes], tokens: Sequence[int]) -> tuple[list[bytes], list[int]]:
        """The records of a disk batch that are to be queued, with their tokens, in order;
        the others are claimed or finished on the way."""
        entries = self.entries
        kept: list[bytes] = []
        kept_tokens: list[int] = []
        for data, token in zip(datas, tokens, strict=True):
            claim = entries.get(_record_id(data))
            if claim is None:
                kept.append(data)
                kept_tokens.append(token)
                continue
            msg = claim.msg
            if msg is not None and claim.mode == CLAIM and msg.token < 0:
                msg.token = token
                claim.holder.unclaimed -= 1
                self.channel.in_flight_count += 1
            elif msg is not None and claim.mode == RELEASE:
                claim.mode = DROP  # delivered once; a replayed second copy goes
                kept.append(
                    records.encode(msg.timestamp, msg.attempts, msg.id, msg.body, 0, msg.origin)
                )
                kept_tokens.append(token)
            else:
                self._finish(token)
        return kept, kept_tokens

    def _finish(self, token: int) -> None:
        backend = self.channel.backend
        if backend is not None:
            backend.finish(token)
            self.channel.hooks.touched(backend)


def _record_id(data: bytes) -> bytes:
    """The message id of a channel's disk record (b"" for one too short to be a message)."""
    if data[:1] != b"\xff":
        return data[10:26]
    try:
        return records.decode(data).id
    except ValueError:
        return b""
