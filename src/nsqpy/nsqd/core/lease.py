"""Leases (an nsqpy extension): a channel's messages taken under a name, as a whole.

A consumer asks a channel for a *lease*: a name, at most ``count`` messages and (optionally)
at most ``max_bytes`` of bodies, and how long it may wait for them. The lease takes what the
channel has queued (memory, then disk, screened by the channel's dead-letter/TTL policy like
any delivery), goes on taking on every queue scan while it waits, and is *sealed* once it is
full or its wait is over. From then on the same name gives back exactly the same messages
(the same objects: ids, bodies, timestamps, attempts), to any connection, and nothing else.

A sealed lease is finished (FIN) or requeued (REQ) as a whole; both are idempotent. One not
finished within its ``ttl`` (counted from the seal) is requeued as a timed-out message is:
counted in ``timeout_count``, back through the channel's ``_put``, so ``max_attempts`` and
``message_ttl`` apply to it. Taking a message counts as a delivery (its attempts go up by
one), and leased messages count in the channel's ``in_flight_count``.

The byte limit never stops a lease from taking its first message, so a message larger than
``max_bytes`` cannot block the channel's leases; after that a message that would pass the
limit stays at the head of the queue and the lease is full. A lease may also be bounded by a
publish time (``before``, unix ns): the first message published later stays at the head and
the lease is full (a reader that drains "what was published before it started").

A closed lease (finished, requeued or expired) is remembered for its ``ttl`` more, so that a
late retry of a FIN or REQ is answered as the first was, and asking for it again is refused
(``LEASE_FINISHED`` / ``LEASE_REQUEUED``) instead of handing out new messages under an old
name. Only the time given to each call (``now``: monotonic seconds, the channel's clock) moves
a lease along; no I/O here.

The channel holds its book in its ``leases`` slot (created on first use by ``LeaseBook.of``)
and calls three hooks: ``process`` on every queue scan, ``drain`` at a clean stop (leased
messages are written back to the queue, as in-flight ones are) and ``clear`` on
``/channel/empty``. This module is the channel's friend: it uses the channel's own queue and
requeue steps, so a leased message moves exactly as a delivered one does.

In ``--durable`` mode the daemon gives every channel's book a ``journal`` (``LeaseLog``; the
storage side is ``nsqpy.nsqd.storage.lease_journal``) and the book tells it of every seal,
close and forgetting. After a restart the journal hands sealed leases back (``restore``) and
closed ones (``remember``); their messages' disk records, read again by the channel, are
screened by ``Claims`` (``nsqpy.nsqd.core.lease_claims``) so that they do not reach consumers
as well. A restored message whose record has not come back yet is *unclaimed*: it counts in
the channel's depth, not in flight, and its FIN or REQ is settled when the record comes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.core.lease_claims import Claims
from nsqpy.nsqd.core.message import Message

FILLING: Final = "filling"
SEALED: Final = "sealed"
FINISHED: Final = "finished"
REQUEUED: Final = "requeued"
EXPIRED: Final = "expired"

#: A lease name: what NSQ allows in a topic or channel name, without ``#ephemeral``.
_NAME: Final = re.compile(r"[.a-zA-Z0-9_-]{1,64}")


def is_valid_lease_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


class LeaseError(BrokerError):
    """A lease request that cannot be served; ``code`` is the HTTP API's error code."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class LeaseLog(Protocol):
    """Where a durable channel's book records its leases (the daemon's lease journal).
    ``sealed`` and ``closed`` return False when the record could not be written."""

    def sealed(self, book: LeaseBook, lease: Lease, now: float) -> bool: ...

    def closed(self, book: LeaseBook, lease: Lease, now: float) -> bool: ...

    def forgotten(self, book: LeaseBook, lease: Lease) -> None: ...

    def dropped(self, book: LeaseBook) -> None: ...


class Lease:
    """One named lease of one channel."""

    __slots__ = (
        "before",
        "closed_until",
        "count",
        "deadline",
        "fill_until",
        "full",
        "max_bytes",
        "messages",
        "name",
        "recorded",
        "size",
        "state",
        "ttl",
        "unclaimed",
        "waiters",
    )

    def __init__(
        self, name: str, count: int, max_bytes: int, ttl: float, fill_until: float, before: int = 0
    ):
        self.name = name
        self.count = count
        self.max_bytes = max_bytes  # 0: no limit
        self.before = before  # unix ns; 0: no limit
        self.ttl = ttl
        self.fill_until = fill_until
        self.messages: list[Message] = []
        self.size = 0  # bytes of bodies
        self.full = False
        self.state: str = FILLING
        self.deadline = 0.0  # set at the seal: seal time + ttl
        self.closed_until = 0.0
        #: Called once, with the lease, when it is sealed.
        self.waiters: list[Callable[[Lease], None]] = []
        #: Restored messages whose disk record has not been read back (see lease_claims).
        self.unclaimed = 0
        #: False when --durable's journal failed to write the lease's last seal or close: an
        #: answer must not promise that it survives a crash.
        self.recorded = True

    @classmethod
    def restored(
        cls, name: str, count: int, max_bytes: int, ttl: float, deadline: float,
        messages: list[Message],
    ) -> Lease:  # fmt: skip
        """A sealed lease as the durable journal kept it, due at ``deadline``."""
        lease = cls(name, count, max_bytes, ttl, deadline - ttl)
        lease.messages = messages
        lease.size = sum(len(m.body) for m in messages)
        lease.full = True
        lease.state = SEALED
        lease.deadline = deadline
        return lease

    @property
    def held(self) -> int:
        """Messages the lease counts in the channel's in-flight (all but unclaimed ones)."""
        return len(self.messages) - self.unclaimed

    @property
    def sealed(self) -> bool:
        return self.state != FILLING


class LeaseBook:
    """The leases of one channel, open ones by name and recently closed ones by name."""

    __slots__ = ("channel", "claims", "closed", "created", "journal", "open")

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.open: dict[str, Lease] = {}
        self.closed: dict[str, Lease] = {}
        self.created = 0  # leases ever taken: /stats shows lease_count once this is not 0
        #: --durable: where seals and closes are recorded (set by the daemon).
        self.journal: LeaseLog | None = None
        #: After a restart: the disk records of restored leases (None: none restored).
        self.claims: Claims | None = None

    @classmethod
    def of(cls, channel: Channel) -> LeaseBook:
        """The channel's book, created (and attached to the channel) on first use."""
        book = channel.leases
        if book is None:
            book = cls(channel)
            channel.leases = book
        assert isinstance(book, LeaseBook)
        return book

    @property
    def lease_count(self) -> int:
        return len(self.open)

    def get(self, name: str) -> Lease | None:
        return self.open.get(name)

    # -- taking -------------------------------------------------------------------------------
    def lease(
        self,
        name: str,
        count: int | None,
        max_bytes: int | None,
        *,
        ttl: float,
        wait: float,
        now: float,
        before: int = 0,
    ) -> Lease:
        """The lease called ``name``: the open one (``count`` and ``max_bytes``, when given,
        must be its own), or a new one filled from the queue now and sealed at once when it is
        full or ``wait`` is 0; else it keeps filling until ``now + wait`` (see ``process``).
        A new lease takes no message published after ``before`` (unix ns, 0: any)."""
        if self.channel.ephemeral:
            raise LeaseError("EPHEMERAL_CHANNEL")
        lease = self.open.get(name)
        if lease is not None:
            if (count is not None and count != lease.count) or (
                max_bytes is not None and max_bytes != lease.max_bytes
            ):
                raise LeaseError("LEASE_MISMATCH")
            return lease
        closed = self.closed.get(name)
        if closed is not None:
            raise LeaseError("LEASE_FINISHED" if closed.state == FINISHED else "LEASE_REQUEUED")
        if count is None:
            raise LeaseError("MISSING_ARG_COUNT")
        if count < 1:
            raise LeaseError("INVALID_COUNT")
        lease = Lease(name, count, max_bytes or 0, ttl, now + wait, before)
        self.open[name] = lease
        self.created += 1
        self._fill(lease, now)
        if lease.full or wait <= 0:
            self._seal(lease, now)
        return lease

    def _fill(self, lease: Lease, now: float) -> None:
        """Take queued messages into ``lease`` up to its limits (nothing while paused)."""
        channel = self.channel
        if channel.paused or lease.full:
            return
        take = channel._next_queued if channel.policed else channel._pop_queued
        messages = lease.messages
        taken = 0
        while len(messages) < lease.count:
            msg = take(now)
            if msg is None:
                break
            size = len(msg.body)
            if (lease.max_bytes and messages and lease.size + size > lease.max_bytes) or (
                lease.before and msg.timestamp > lease.before
            ):
                channel.queue.appendleft(msg)  # the next to deliver anyway: order is kept
                lease.full = True
                break
            msg.attempts += 1
            msg.delivery_ts = now
            messages.append(msg)
            lease.size += size
            taken += 1
        channel.in_flight_count += taken
        if len(messages) >= lease.count or (lease.max_bytes and lease.size >= lease.max_bytes):
            lease.full = True

    def seal(self, lease: Lease, now: float) -> None:
        """Seal ``lease`` now with what it holds after one more look at the queue (its wait is
        over); nothing when it is sealed already."""
        if lease.state == FILLING and self.open.get(lease.name) is lease:
            self._fill(lease, now)
            self._seal(lease, now)

    def _seal(self, lease: Lease, now: float) -> None:
        lease.state = SEALED
        lease.deadline = now + lease.ttl
        if self.journal is not None:
            lease.recorded = self.journal.sealed(self, lease, now)  # answered once durable
        waiters, lease.waiters = lease.waiters, []
        for waiter in waiters:
            waiter(lease)

    # -- FIN and REQ --------------------------------------------------------------------------
    def _settle(self, name: str, now: float) -> Lease | None:
        """The open lease ``name``, taken out of the book and sealed (a FIN or REQ of a lease
        still filling settles what it took); None if it is closed already (LeaseError if it
        is unknown)."""
        lease = self.open.pop(name, None)
        if lease is None:
            if name not in self.closed:
                raise LeaseError("LEASE_NOT_FOUND")
            return None
        if lease.state == FILLING:
            self._seal(lease, now)
        self.channel.in_flight_count -= lease.held
        return lease

    def _close(self, lease: Lease, state: str, now: float) -> None:
        lease.state = state
        lease.closed_until = now + lease.ttl
        self.closed[lease.name] = lease
        if self.journal is not None:
            lease.recorded = self.journal.closed(self, lease, now)

    def _forget(self, lease: Lease) -> None:
        """A closed lease is no longer remembered: its name is free again."""
        del self.closed[lease.name]
        if self.journal is not None:
            self.journal.forgotten(self, lease)
        if self.claims is not None:
            self.claims.forget(lease)

    def _unclaimed(self, lease: Lease) -> Sequence[Message]:
        """A restored lease's messages whose record has not been read back yet."""
        if not lease.unclaimed:
            return ()
        return [msg for msg in lease.messages if msg.token < 0]

    def finish(self, name: str, now: float) -> Lease:
        """FIN every message of the lease; again is a no-op (LEASE_REQUEUED once requeued)."""
        lease = self._settle(name, now)
        if lease is None:
            closed = self.closed[name]
            if closed.state != FINISHED:
                raise LeaseError("LEASE_REQUEUED")
            return closed
        channel = self.channel
        e2e = channel.e2e
        wall = channel.wall_ns() if e2e is not None else 0
        for msg in lease.messages:
            channel._forget(msg)  # durable mode: the disk record goes now
            if e2e is not None:
                e2e.insert(wall - msg.timestamp, wall)
        for msg in self._unclaimed(lease):  # its record goes when it is read back
            assert self.claims is not None
            self.claims.drop(lease, msg.id)
        self._close(lease, FINISHED, now)
        return lease

    def release_empty(self, name: str, now: float) -> bool:
        """Settle the open lease ``name`` if it is sealed with no message, and forget it at once
        (True), so that the name can be asked again: a planner polls an idle channel under the
        name of its next batch. It is finished as any lease (durable mode records that)."""
        lease = self.open.get(name)
        if lease is None or lease.state != SEALED or lease.messages:
            return False
        self._forget(self.finish(name, now))
        return True

    def requeue(self, name: str, delay: float, now: float) -> Lease:
        """REQ every message of the lease (after ``delay`` seconds, as a REQ with a timeout);
        again, or after it expired, is a no-op (LEASE_FINISHED once finished)."""
        lease = self._settle(name, now)
        if lease is None:
            closed = self.closed[name]
            if closed.state == FINISHED:
                raise LeaseError("LEASE_FINISHED")
            return closed
        channel = self.channel
        channel.requeue_count += len(lease.messages)
        limit = channel.max_attempts
        for msg in self._held_messages(lease):
            # out of attempts: _put dead-letters it now rather than after the delay
            if delay > 0 and not (limit and msg.attempts >= limit):
                channel.retry_later(msg, delay, now)
            else:
                channel._put(msg, now)
        self._close(lease, REQUEUED, now)
        return lease

    def _held_messages(self, lease: Lease) -> Sequence[Message]:
        """The messages to put back when ``lease`` is requeued: those it holds. An unclaimed
        one stays where it is, on disk, and is delivered when read (its delay is not kept)."""
        if not lease.unclaimed:
            return lease.messages
        claims = self.claims
        assert claims is not None
        for msg in self._unclaimed(lease):
            claims.release(lease, msg)
        return [msg for msg in lease.messages if msg.token >= 0]

    # -- the channel's hooks ------------------------------------------------------------------
    def process(self, now: float) -> bool:
        """The queue scan: fill and seal leases that wait, expire those past their ttl, forget
        closed ones past theirs. True if anything changed."""
        if not self.open and not self.closed:
            return False  # durable mode gives every channel a book: keep the idle ones cheap
        dirty = False
        for lease in list(self.open.values()):
            if lease.state == FILLING:
                before = len(lease.messages)
                self._fill(lease, now)
                if lease.full or now >= lease.fill_until:
                    self._seal(lease, now)
                    dirty = True
                dirty = dirty or len(lease.messages) != before
            elif now >= lease.deadline:
                self._expire(lease, now)
                dirty = True
        for lease in list(self.closed.values()):
            if now >= lease.closed_until:
                self._forget(lease)
        return dirty

    def _expire(self, lease: Lease, now: float) -> None:
        """Requeue a lease its ttl ran out on, as in-flight messages that timed out."""
        del self.open[lease.name]
        channel = self.channel
        channel.in_flight_count -= lease.held
        channel.timeout_count += len(lease.messages)
        for msg in self._held_messages(lease):
            channel._put(msg, now)
        self._close(lease, EXPIRED, now)

    def drain(self) -> list[Message]:
        """A clean stop: every leased message, to be written back with the queue; the book
        is left empty. Leases do not survive a restart outside ``--durable`` mode; in it the
        journal keeps the sealed ones, and their records, written back, are claimed again
        after the restart (an unclaimed message's record is still on disk: not written)."""
        held = [msg for lease in self.open.values() for msg in self._held_messages(lease)]
        self.channel.in_flight_count -= len(held)
        self.open.clear()
        self.closed.clear()
        self.claims = None
        return held

    def clear(self) -> None:
        """``/channel/empty``: the leases' messages are dropped with the rest."""
        journal, self.journal = self.journal, None  # the seals below are not worth a record
        for lease in self.open.values():
            if lease.state == FILLING:  # its waiters get an empty lease
                lease.messages.clear()
                lease.size = 0
                self._seal(lease, 0.0)
        self.journal = journal
        if journal is not None and (self.open or self.closed):
            journal.dropped(self)
        self.open.clear()
        self.closed.clear()
        self.claims = None

    # -- after a restart (--durable) ----------------------------------------------------------
    def restore(self, lease: Lease) -> None:
        """A sealed lease the journal kept: open again, its messages served from the journal's
        copies while their disk records are claimed as the channel reads them back."""
        lease.unclaimed = len(lease.messages)
        self._claims().expect(lease, lease.messages)
        self.open[lease.name] = lease
        self.created += 1

    def remember(self, lease: Lease, finished_ids: Sequence[bytes]) -> None:
        """A closed lease the journal kept (state and ``closed_until`` set): remembered as
        before the restart; a finished one's records, if they come back, go."""
        self.closed[lease.name] = lease
        self.created += 1  # the channel has had leases: /stats goes on showing lease_count
        if finished_ids:
            claims = self._claims()
            for msg_id in finished_ids:
                claims.drop(lease, msg_id)

    def _claims(self) -> Claims:
        if self.claims is None:
            self.claims = Claims(self.channel)
        return self.claims

    def screen(
        self, datas: list[bytes], tokens: Sequence[int]
    ) -> tuple[list[bytes], Sequence[int]]:
        """The channel's disk batch without the records of restored leases (see Claims)."""
        if self.claims is None:
            return datas, tokens
        return self.claims.screen(datas, tokens)
