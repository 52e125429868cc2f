"""Durable leases (``--durable``): the journal that brings sealed leases back after a restart.

Theory of operation
-------------------
The journal is one disk queue of the daemon's, ``nsqpy@leases`` (``@`` is in no topic name,
so rebuilding nsqd.dat from the queue files passes it by), opened with acks as a durable
channel's queue is, and synced by the same group-commit rounds (``DiskHooks.wrote``). A seal
appends a SEAL record followed by the lease's messages in full; a FIN, REQ or expiry appends
a CLOSE; ``/channel/empty`` and a channel's deletion append a DROP (``lease_records``). Each
record counts as read as it is written (``put_taking``) and is finished once nothing needs
it: a lease's SEAL, messages and CLOSE when its book forgets it (its ttl after the close), a
DROP at once. The queue's read position is its oldest unfinished record, where the next start
reads from, so the journal compacts itself as leases are forgotten: the queue's own syncs
delete the segments passed. Finishing a DROP at once is safe because a restart reads back a
*suffix* of the journal: a SEAL that comes back brings the DROP after it.

Nothing here waits. The adapters answer a seal, FIN or REQ once the group commit after it is
done (``Daemon.committed``, ``V2Connection._reply_after_commit``), and the journal's records
are in that commit, so no answer promises what a crash could take back.

At start (``open_journal``), before any client, the journal is read back and replayed in
order. For every channel that still exists, its open leases are restored into its book,
deadlines kept as wall-clock times so that a ttl runs on across the restart, and its closed
ones are remembered until their ttl passes (a finished one's records, if the channel's queue
gives them again, are dropped: see ``nsqpy.nsqd.core.lease_claims``). Whatever no longer
matters is finished. From then on every durable channel's book has the journal (``attach``,
and a broker listener for channels created later, which also records a deletion's DROP).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import DiskHooks
from nsqpy.nsqd.core.broker import Broker
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.core.lease import FINISHED, Lease, LeaseBook
from nsqpy.nsqd.core.message import Message, from_record
from nsqpy.nsqd.storage import lease_records
from nsqpy.nsqd.storage.diskqueue import DiskQueue
from nsqpy.nsqd.storage.lease_records import Close, Drop, Seal

log = logging.getLogger("nsqpy.nsqd")

QUEUE_NAME: Final = "nsqpy@leases"
_READ_BATCH: Final = 1024
#: A lease in the journal: ("topic:channel", lease name).
Key = tuple[str, str]


def open_journal(
    open_queue: Callable[[str], DiskQueue],
    hooks: DiskHooks,
    broker: Broker,
    now: float,
    wall_ns: Callable[[], int] = time.time_ns,
) -> LeaseJournal:
    """The daemon's journal, read back into ``broker``'s channels and attached to them."""
    journal = LeaseJournal(open_queue(QUEUE_NAME), hooks, wall_ns)
    restored = journal.recover(broker, now)
    if restored:
        log.info("LEASES: %d sealed lease(s) restored from the journal", restored)
    journal.attach(broker)
    return journal


class LeaseJournal:
    """Every durable channel's ``LeaseLog``: one disk queue of seal, close and drop records."""

    def __init__(
        self, queue: DiskQueue, hooks: DiskHooks, wall_ns: Callable[[], int] = time.time_ns
    ) -> None:
        self.queue = queue
        self.hooks = hooks
        self.wall_ns = wall_ns
        #: The tokens of each lease's records still needed (SEAL, messages, CLOSE).
        self._tokens: dict[Key, list[int]] = {}

    # -- LeaseLog ----------------------------------------------------------------------------
    def sealed(self, book: LeaseBook, lease: Lease, now: float) -> bool:
        key = (_channel_key(book.channel), lease.name)
        seal = Seal(
            key[0],
            lease.name,
            self._wall(lease.deadline, now),
            _ns(lease.ttl),
            lease.count,
            lease.max_bytes,
            len(lease.messages),
        )
        batch = [lease_records.encode_seal(seal)]
        batch.extend(_message_record(m) for m in lease.messages)
        self._release(self._tokens.pop(key, []))  # a name the book forgot: nothing left of it
        self._tokens[key] = tokens = self._append(batch)
        return bool(tokens)

    def closed(self, book: LeaseBook, lease: Lease, now: float) -> bool:
        key = (_channel_key(book.channel), lease.name)
        close = Close(
            key[0], lease.name, lease.state, self._wall(lease.closed_until, now), _ns(lease.ttl)
        )
        tokens = self._append([lease_records.encode_close(close)])
        self._tokens.setdefault(key, []).extend(tokens)
        return bool(tokens)

    def forgotten(self, book: LeaseBook, lease: Lease) -> None:
        self._release(self._tokens.pop((_channel_key(book.channel), lease.name), []))

    def dropped(self, book: LeaseBook) -> None:
        self.drop(_channel_key(book.channel))

    def drop(self, channel: str) -> None:
        """The channel's leases are gone (emptied, or the channel deleted)."""
        keys = [key for key in self._tokens if key[0] == channel]
        if not keys:
            return
        self._release(self._append([lease_records.encode_drop(Drop(channel))]))
        for key in keys:
            self._release(self._tokens.pop(key))

    # -- the daemon's side -------------------------------------------------------------------
    def attach(self, broker: Broker) -> None:
        """Give every durable channel's book the journal, now and as channels come and go."""
        for channel in broker.channels():
            _attach(channel, self)

        def changed(event: str, topic: str, channel: str) -> None:
            if event == "channel_created":
                _book(broker, f"{topic}:{channel}", self)
            elif event == "channel_deleted":
                self.drop(f"{topic}:{channel}")

        broker.listeners.append(changed)

    def recover(self, broker: Broker, now: float) -> int:
        """Read the journal back into ``broker``'s channels; returns the leases restored."""
        replay = _Replay()
        while True:
            datas, tokens = self.queue.read_many(_READ_BATCH)
            if not datas:
                break
            for data, token in zip(datas, tokens, strict=True):
                replay.add(data, token)
        replay.end()
        wall = self.wall_ns()
        restored = 0
        for key, entry in replay.open.items():
            book = _book(broker, key[0], self)
            if book is None:
                replay.dead.extend(entry.tokens)
                continue
            book.restore(entry.lease(now + (entry.seal.deadline_ns - wall) / 1e9))
            self._tokens[key] = entry.tokens
            restored += 1
        for key, entry in replay.closed.items():
            book = _book(broker, key[0], self)
            assert entry.close is not None
            until = now + (entry.close.closed_until_ns - wall) / 1e9
            if book is None or until <= now:
                replay.dead.extend(entry.tokens)
                continue
            finished = entry.close.state == FINISHED
            book.remember(entry.closed_lease(until), [m.id for m in entry.messages if finished])
            self._tokens[key] = entry.tokens
        self._release(replay.dead)
        return restored

    # -- the queue ---------------------------------------------------------------------------
    def _append(self, batch: list[bytes]) -> list[int]:
        """Write ``batch`` and report it for the next commit; its tokens ([] if it failed:
        the lease goes on, but would not survive a crash)."""
        try:
            tokens = self.queue.put_taking(batch, len(batch))
        except BrokerError as err:
            log.error("LEASES: failed to write the lease journal - %s", err)
            self.hooks.write_failed(err)
            return []
        self.hooks.wrote(self.queue)
        return list(tokens)

    def _release(self, tokens: list[int]) -> None:
        for token in tokens:
            self.queue.finish(token)
        if tokens:
            self.hooks.touched(self.queue)

    def _wall(self, monotonic: float, now: float) -> int:
        """Unix ns of ``monotonic`` (the loop's clock), as of ``now``."""
        return self.wall_ns() + _ns(monotonic - now)


class _Entry:
    """One lease as the journal's records tell it."""

    __slots__ = ("close", "messages", "seal", "tokens")

    def __init__(self, seal: Seal, token: int) -> None:
        self.seal = seal
        self.messages: list[Message] = []
        self.tokens = [token]
        self.close: Close | None = None

    def lease(self, deadline: float) -> Lease:
        seal = self.seal
        ttl = seal.ttl_ns / 1e9
        return Lease.restored(
            seal.name, seal.max_count, seal.max_bytes, ttl, deadline, self.messages
        )

    def closed_lease(self, closed_until: float) -> Lease:
        assert self.close is not None
        lease = self.lease(closed_until)
        lease.messages = []  # a closed lease is never served again
        lease.state = self.close.state
        lease.closed_until = closed_until
        return lease


class _Replay:
    """The journal's records applied in order: open leases, closed ones, and the tokens of
    records nothing needs any more."""

    def __init__(self) -> None:
        self.open: dict[Key, _Entry] = {}
        self.closed: dict[Key, _Entry] = {}
        self.dead: list[int] = []
        self._filling: _Entry | None = None  # a SEAL whose message records are still coming

    def add(self, data: bytes, token: int) -> None:
        entry = self._filling
        if entry is not None and not lease_records.is_header(data):
            self._add_message(entry, data, token)
            return
        if entry is not None:  # a header where a message was due: that seal was cut short
            self._cut_short(entry)
        try:
            record = lease_records.decode(data)
        except ValueError as err:
            log.error("LEASES: skipping a bad lease journal record - %s", err)
            self.dead.append(token)
            return
        if isinstance(record, Seal):
            entry = _Entry(record, token)
            if record.messages:
                self._filling = entry
            else:
                self._open(entry)
        elif isinstance(record, Close):
            self._close(record, token)
        else:
            self._drop(record.channel)
            self.dead.append(token)

    def end(self) -> None:
        if self._filling is not None:
            self._cut_short(self._filling)

    def _add_message(self, entry: _Entry, data: bytes, token: int) -> None:
        entry.tokens.append(token)
        try:
            entry.messages.append(from_record(records.decode(data)))
        except ValueError as err:
            log.error("LEASES: lease %s cannot be restored - %s", entry.seal.name, err)
            self._filling = None
            self.dead.extend(entry.tokens)
            return
        if len(entry.messages) == entry.seal.messages:
            self._filling = None
            self._open(entry)

    def _cut_short(self, entry: _Entry) -> None:
        """A SEAL without all its messages was never answered (a crash while writing it)."""
        self._filling = None
        self.dead.extend(entry.tokens)

    def _open(self, entry: _Entry) -> None:
        key = (entry.seal.channel, entry.seal.name)
        for older in (self.open.pop(key, None), self.closed.pop(key, None)):
            if older is not None:  # the name was forgotten and taken again
                self.dead.extend(older.tokens)
        self.open[key] = entry

    def _close(self, close: Close, token: int) -> None:
        entry = self.open.pop((close.channel, close.name), None)
        if entry is None:  # its SEAL was finished: nothing to close
            self.dead.append(token)
            return
        entry.close = close
        entry.tokens.append(token)
        self.closed[(close.channel, close.name)] = entry

    def _drop(self, channel: str) -> None:
        for entries in (self.open, self.closed):
            for key in [key for key in entries if key[0] == channel]:
                self.dead.extend(entries.pop(key).tokens)


def _channel_key(channel: Channel) -> str:
    return f"{channel.topic_name}:{channel.name}"


def _attach(channel: Channel, journal: LeaseJournal) -> LeaseBook | None:
    if not channel.durable:
        return None
    book = LeaseBook.of(channel)
    book.journal = journal
    return book


def _book(broker: Broker, channel_key: str, journal: LeaseJournal) -> LeaseBook | None:
    """The book (with the journal) of the channel ``"topic:channel"``, if it exists."""
    topic_name, _, name = channel_key.partition(":")
    topic = broker.topics.get(topic_name)
    channel = topic.channels.get(name) if topic is not None else None
    return _attach(channel, journal) if channel is not None else None


def _message_record(msg: Message) -> bytes:
    return records.encode(msg.timestamp, msg.attempts, msg.id, msg.body, 0, msg.origin)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
