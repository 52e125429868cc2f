"""A channel: a copy of every message of its topic, spread over its subscribed clients.

Theory of operation
-------------------
Delivery is push. ``put`` hands a message straight to a ready client (RDY window open,
transport writable) or, if none is, appends it to the memory queue. When a client's window
opens (RDY, FIN, REQ, a timeout, its transport draining) ``client_ready`` first pours the
queue into it and then lists it in ``_ready``, a deque rotated per delivery so that
messages spread round-robin. Entries in ``_ready`` are checked lazily: a client whose window
closed is dropped when it reaches the front.

In-flight messages live in their client's ordered dict; deferred ones in a heap by due time.
``process(now)`` expires both; the daemon calls it on a short tick with the loop's clock,
tests call it with any clock they like.

Disk
----
With a backend (every channel but ``#ephemeral`` ones, when nsqd has a data path), messages
that do not fit in ``mem_queue_size`` go to disk, and once anything is on disk new messages go
there too until it drains, so the channel stays first-in first-out. Delivery takes the memory
queue first, then reads the disk. In durable mode every message goes to disk and a record is
only finished on the backend when its message is FINished (``msg.token``), so whatever was
queued, in flight or deferred at a crash is read again on restart.

Dead letters and TTL
--------------------
With a policy (``apply_policy``; see ``nsqpy.nsqd.core.policy``) every message is screened where it
leaves storage for a client: one that would go out for the (max_attempts+1)th time, or is
older than message_ttl, is handed to ``dead_letters`` (the broker, which publishes it to the
dead-letter topic) or, expired with no dead-letter topic, dropped. ``process`` also sweeps
expired messages off the head of the queue, so they go even while nobody consumes. Without a
policy the delivery loops pay one test of a local.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count
from typing import Final, Protocol

from nsqpy._internal.compiled import load
from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import Backend, DiskHooks, write_messages
from nsqpy.nsqd.core.client import STATE_CLOSING, ClientState
from nsqpy.nsqd.core.errors import Exiting, InFlightError, TooManyConsumers
from nsqpy.nsqd.core.message import (
    Message,
    Queued,
    delivered,
    from_record,
    materialize,
    plain_message,
    with_tokens,
)
from nsqpy.nsqd.core.policy import OFF, Effective, Settings
from nsqpy.nsqd.core.quantile import NOT_TRACKED, LatencySummary, WindowedQuantile
from nsqpy.protocol.names import is_ephemeral

log = logging.getLogger("nsqpy.nsqd")
_NO_DISK = DiskHooks()
#: Receives a channel's messages bound for its dead-letter topic.
DeadLetterSink = Callable[["Channel", Message], None]
#: Expired messages a TTL sweep takes off a queue's head per ``process`` call.
SWEEP_LIMIT = 1000
#: At most this many disk records are read into the memory queue at once, for a client's open
#: window (one disk-queue call and one ``touched`` per batch instead of per message).
READ_BATCH = 2048


class LeaseHooks(Protocol):
    """A channel's named leases as the channel calls them (``nsqpy.nsqd.core.lease``)."""

    def process(self, now: float) -> bool: ...

    def drain(self) -> list[Message]: ...

    def clear(self) -> None: ...

    def screen(
        self, datas: list[bytes], tokens: Sequence[int]
    ) -> tuple[list[bytes], Sequence[int]]: ...


class Channel:
    """Queue, in-flight and deferred bookkeeping for one channel of one topic."""

    # Slots: the delivery loops read many attributes per message, and CPython 3.11 stops
    # specialising instance-dict attribute reads past 30 keys (measured: 3% of `sub`).
    __slots__ = (
        "_deferred",
        "_held",
        "_ready",
        "_seq",
        "backend",
        "clients",
        "dead_letter_count",
        "dead_letter_topic",
        "dead_letters",
        "disk_deferred",
        "durable",
        "e2e",
        "effective",
        "ephemeral",
        "exiting",
        "expired_count",
        "hooks",
        "in_flight_count",
        "leases",
        "max_attempts",
        "max_consumers",
        "max_msg_timeout",
        "mem_queue_size",
        "message_count",
        "message_ttl",
        "name",
        "paused",
        "policed",
        "queue",
        "requeue_count",
        "settings",
        "timeout_count",
        "topic_name",
        "wall_ns",
    )

    def __init__(
        self,
        topic_name: str,
        name: str,
        *,
        mem_queue_size: int,
        max_msg_timeout: float,
        max_consumers: int = 0,
        backend: Backend | None = None,
        hooks: DiskHooks = _NO_DISK,
        wall_ns: Callable[[], int] = time.time_ns,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = mem_queue_size
        self.max_msg_timeout = max_msg_timeout
        self.max_consumers = max_consumers
        self.queue: deque[Queued] = deque()
        self.clients: dict[int, ClientState] = {}
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.in_flight_count = 0
        self.backend = backend
        self.hooks = hooks
        self.durable = hooks.durable and backend is not None
        self.wall_ns = wall_ns
        self._ready: deque[ClientState] = deque()
        #: Durable mode: the queue holds taken messages until a held commit starts.
        self._held = False
        self._deferred: list[tuple[float, int, Message]] = []
        #: Deferred records in the backend not read back yet: they count as deferred, not as
        #: depth. Known exactly for what this process wrote; after a clean restart the daemon
        #: sets it from nsqd.dat (after a crash it is 0 and they count in depth until read).
        self.disk_deferred = 0
        self._seq = count()
        #: End-to-end latencies (publish to FIN, ns) when percentiles are configured.
        self.e2e: WindowedQuantile | None = None
        #: The channel's own dead-letter/TTL settings; what applies is set by apply_policy.
        self.settings = Settings()
        self.effective = OFF
        self.max_attempts = 0
        self.message_ttl = 0  # ns
        self.dead_letter_topic = ""
        self.policed = False
        self.dead_letters = dead_letters
        self.dead_letter_count = 0  # messages handed to the dead-letter topic
        self.expired_count = 0  # messages not delivered because of message_ttl
        #: Named leases (nsqpy.nsqd.core.lease), from the first one asked for.
        self.leases: LeaseHooks | None = None

    # -- stats -------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.queue) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        """Records on disk waiting to be delivered (deferred ones count in deferred_count)."""
        if self.backend is None:
            return 0
        return max(self.backend.depth - self.disk_deferred, 0)

    @property
    def deferred_count(self) -> int:
        return len(self._deferred) + self.disk_deferred

    def track_e2e(self, window_ns: int, percentiles: Sequence[float]) -> None:
        """Start recording publish-to-FIN latencies (``--e2e-processing-latency-*``)."""
        self.e2e = WindowedQuantile(window_ns, percentiles, self.wall_ns())

    def e2e_summary(self, now_ns: int | None = None) -> LatencySummary:
        """Count and ``[(quantile, value_ns)]`` over the window; NOT_TRACKED when off."""
        if self.e2e is None:
            return NOT_TRACKED
        return self.e2e.summary(self.wall_ns() if now_ns is None else now_ns)

    # -- dead letters and TTL ------------------------------------------------------------
    def apply_policy(self, effective: Effective) -> None:
        """Start applying ``effective`` (the broker resolves it from all the settings)."""
        self.effective = effective
        self.max_attempts = effective.max_attempts
        self.message_ttl = effective.message_ttl
        self.dead_letter_topic = effective.dead_letter_topic
        self.policed = bool(effective.max_attempts or effective.message_ttl)

    @property
    def shows_policy(self) -> bool:
        """/stats shows the policy fields: something applies or once did, or is set here."""
        return (
            self.policed
            or bool(self.dead_letter_count or self.expired_count)
            or not self.settings.empty
        )

    def _admit(self, item: Queued, wall: int) -> bool:
        """False when ``item`` must not be delivered (it has been dead-lettered or dropped).
        A fresh entry has never been delivered: only its age can keep it back."""
        ttl = self.message_ttl
        if isinstance(item, tuple):
            if ttl and wall - item[2] > ttl:
                self._divert(materialize(item), expired=True)
                return False
            return True
        if ttl and wall - item.timestamp > ttl:
            self._divert(item, expired=True)
            return False
        limit = self.max_attempts
        if limit and item.attempts >= limit:
            self._divert(item, expired=False)
            return False
        return True

    def _admit_all(self, msgs: list[Queued]) -> list[Queued]:
        """``_admit`` for a batch being put, its test for fresh entries inlined (a call per
        message costs a publish half as much again)."""
        wall = self.wall_ns()
        cutoff = wall - self.message_ttl if self.message_ttl else -(1 << 63)
        admit = self._admit
        return [
            item
            for item in msgs
            if (isinstance(item, tuple) and item[2] >= cutoff) or admit(item, wall)
        ]

    def _divert(self, msg: Message, *, expired: bool) -> None:
        if expired:
            self.expired_count += 1
        sink = self.dead_letters
        if self.dead_letter_topic and sink is not None:
            self.dead_letter_count += 1
            sink(self, msg)  # the sink releases its disk record once the copy is safe
        else:
            self._forget(msg)

    def _sweep(self, now: float) -> bool:
        """Take expired messages off the head of the queue (memory, then disk), even while
        nobody consumes; a bounded number per call. True if any went."""
        ttl = self.message_ttl
        wall = self.wall_ns()
        queue = self.queue
        swept = 0
        while swept < SWEEP_LIMIT:
            if queue:
                head = queue[0]
                if wall - (head[2] if isinstance(head, tuple) else head.timestamp) <= ttl:
                    break
                queue.popleft()
                self._divert(materialize(head), expired=True)
            else:
                msg = self._pop_queued(now)
                if msg is None:
                    break
                if wall - msg.timestamp <= ttl:
                    queue.append(msg)  # the next to deliver anyway: order is kept
                    break
                self._divert(msg, expired=True)
            swept += 1
        return swept > 0

    def release(self, msg: Message) -> None:
        """A diverted message is safely elsewhere: let its disk record go."""
        if not self.exiting:
            self._forget(msg)

    def retry_later(self, msg: Message, delay: float, now: float) -> None:
        """Hold ``msg`` back for ``delay`` seconds (its dead-letter topic refused it)."""
        heapq.heappush(self._deferred, (now + delay, next(self._seq), msg))

    # -- putting messages in -----------------------------------------------------------
    def room(self) -> int:
        """How many more messages the channel can take now without dropping any."""
        if self.backend is not None:
            return 1 << 62  # overflow goes to disk
        room = self.mem_queue_size - len(self.queue)
        if not self.queue and not self.paused:
            room += sum(max(c.rdy - len(c.in_flight), 0) for c in self.clients.values())
        return room

    def put(self, msg: Queued, now: float) -> None:
        self.put_many([msg], now)

    def put_many(self, msgs: list[Queued], now: float) -> None:
        """``put`` for a batch: the publish hot path, with delivery inlined."""
        self.message_count += len(msgs)
        if self.durable:
            self._put_durable(msgs, now)
            return
        if self.policed:
            msgs = self._admit_all(msgs)
        count = len(msgs)
        i = _deliver(self, msgs, now)
        if i < count:
            self._store(msgs[i:] if i else msgs, now)

    def _store(self, msgs: list[Queued], now: float) -> None:
        """Queue messages no client can take now: memory while it has room, else disk."""
        if self.ephemeral:
            for msg in msgs:
                self._put(msg, now)  # keeps the ephemeral memory bound
            return
        backend = self.backend
        if backend is None:
            self.queue.extend(msgs)
            return
        room = self.mem_queue_size - len(self.queue) if not backend.depth else 0
        if room >= len(msgs):
            self.queue.extend(msgs)
            return
        if room > 0:
            self.queue.extend(msgs[:room])
            msgs = msgs[room:]
        self._write(msgs)

    def _write(self, msgs: list[Queued]) -> None:
        assert self.backend is not None
        write_messages(self.backend, self.hooks, msgs)

    def _put_durable(self, msgs: list[Queued], now: float) -> None:
        """Durable mode: every message goes to disk. When nothing older is queued (or only
        messages held for a commit), as many as the ready clients can take go to them straight
        away, their records counted as read as they are written (each keeps its token, to
        finish on FIN) instead of read back.

        Unless the write's commit is held (``DiskHooks.holding``: the linger waits for another
        publisher): then the taken messages wait in the queue until it starts, so that the
        loop reads and writes the other publisher's batch first and its commit starts sooner.
        The consumers get them while the disk flushes (durable PUB+SUB under NSQ's bench
        tools +4 and +9 % in two A/B runs: docs/performance.md, twentieth pass)."""
        assert self.backend is not None
        take = 0
        queued = len(self.queue)
        if (not queued or self._held) and not self.policed and not self.paused:
            for client in self._ready:
                if client.writable and client.rdy > len(client.in_flight):
                    take += client.rdy - len(client.in_flight)
            take -= queued  # the held messages go first
        tokens = write_messages(self.backend, self.hooks, msgs, max(min(take, len(msgs)), 0))
        if not tokens:
            if not self._held:
                self._pour_all(now)
            return
        taken = _with_tokens(msgs, tokens)
        if self.hooks.holding():
            self.queue.extend(taken)  # counted in depth meanwhile, and in order
            if not self._held:
                self._held = True
                self.hooks.after_hold(self._hold_ended)
            return
        if self.queue:  # what an earlier hold left (the clients' windows filled)
            self.queue.extend(taken)
        else:
            sent = _deliver(self, list[Queued](taken), now)
            self.queue.extend(taken[sent:])  # ahead of the rest, on disk: order is kept
        self._pour_all(now)

    def _hold_ended(self, now: float) -> None:
        """The commit the held messages waited for started (or the linger ran out): hand them
        out, as ``_put_durable`` would have, and then the rest of the queue."""
        self._held = False
        if self.exiting or not self.queue:
            return
        if not self.policed:
            held = list(self.queue)
            self.queue.clear()
            sent = _deliver(self, held, now)
            self.queue.extend(held[sent:])
        self._pour_all(now)

    def put_deferred(self, msg: Message, due: float, now: float) -> None:
        self.message_count += 1
        if self.durable:
            self._write([msg])  # read back into the deferred heap, keeping its disk record
            self.disk_deferred += 1
            self._pour_all(now)
            return
        heapq.heappush(self._deferred, (due, next(self._seq), msg))

    def _put(self, msg: Queued, now: float) -> None:
        if self.policed and not self._admit(msg, self.wall_ns()):
            return
        ready = self._ready
        while ready and not self.paused:
            client = ready[0]
            if client.rdy > len(client.in_flight) and client.writable:
                self._send(client, materialize(msg), now)
                ready.rotate(-1)
                return
            ready.popleft()
            client.in_ready = False
        if self.ephemeral and len(self.queue) >= self.mem_queue_size:
            return  # nsqd drops what does not fit in an ephemeral channel's memory
        self.queue.append(msg)

    def _send(self, client: ClientState, msg: Message, now: float) -> None:
        # put_many and _fill inline this body for runs of messages: change all three.
        if client.sample_rate and random.randrange(100) > client.sample_rate:
            self._forget(msg)  # sampled out: taken off the queue and dropped, as nsqd does
            return
        msg.attempts += 1
        msg.delivery_ts = now
        msg.deadline = now + client.msg_timeout
        client.in_flight[msg.id] = msg
        client.message_count += 1
        self.in_flight_count += 1
        client.write_message(msg)

    def _forget(self, msg: Message) -> None:
        """The message is done with (FIN, sampled out): release its disk record."""
        if msg.token >= 0 and self.backend is not None:
            self.backend.finish(msg.token)
            self.hooks.touched(self.backend)

    def _forget_tokens(self, tokens: list[int]) -> None:
        """``_forget`` for a run of FINs by their tokens: one backend call and one
        ``touched`` for the run (durable mode paid three Python calls per message)."""
        if self.backend is not None:
            self.backend.finish_many(tokens)
            self.hooks.touched(self.backend)

    def _next_queued(self, now: float, want: int = 1) -> Message | None:
        """The oldest queued message that may be delivered under the channel's policy (see
        ``_pop_queued``); those that may not are diverted on the way."""
        msg = self._pop_queued(now, want)
        wall = self.wall_ns()
        while msg is not None and not self._admit(msg, wall):
            msg = self._pop_queued(now, want)
        return msg

    def _pop_queued(self, now: float, want: int = 1) -> Message | None:
        """The oldest queued message: memory first, then disk (deferred records are parked).

        With the memory queue empty, up to ``want`` (at most ``READ_BATCH``) disk records are
        read into it in one batch, in order: the caller means to deliver that many now."""
        queue = self.queue
        if queue:
            return materialize(queue.popleft())
        backend = self.backend
        while backend is not None and backend.depth:
            datas, tokens = backend.read_many(min(want, READ_BATCH) if want > 1 else 1)
            if not datas:
                return None
            self.hooks.touched(backend)
            # --durable: after a restart some records belong to leases the journal restored
            batch = (datas, tokens) if self.leases is None else self.leases.screen(datas, tokens)
            self._queue_records(backend, *batch, now)
            if queue:
                return materialize(queue.popleft())
        return None

    def _queue_records(
        self, backend: Backend, datas: list[bytes], tokens: Sequence[int], now: float
    ) -> None:
        """Append records read from disk to the memory queue as messages (durable: with their
        tokens); bad ones are skipped and finished, deferred ones not yet due are parked."""
        queue = self.queue
        durable = self.durable
        wall = 0
        for data, token in zip(datas, tokens, strict=True):
            try:
                msg = _plain_message(data)  # None for an extended record: decoded below
                if msg is not None:
                    if durable:
                        msg.token = token
                    queue.append(msg)
                    continue
                rec = records.decode(data)
            except ValueError as err:
                log.error("channel %s:%s skipping bad record - %s", self.topic_name, self.name, err)
                backend.finish(token)
                continue
            msg = from_record(rec)
            if durable:
                msg.token = token
            if rec.due_ns:
                if self.disk_deferred:
                    self.disk_deferred -= 1  # in the heap now, or due and delivered
                if not wall:
                    wall = self.wall_ns()
                remaining = (rec.due_ns - wall) / 1e9
                if remaining > 0:
                    heapq.heappush(self._deferred, (now + remaining, next(self._seq), msg))
                    continue
            queue.append(msg)

    def _pour_all(self, now: float) -> None:
        """Hand queued messages to ready clients, round-robin (after writes to disk)."""
        ready = self._ready
        next_queued = self._next_queued if self.policed else self._pop_queued
        backend = self.backend
        want = sum(max(c.rdy - len(c.in_flight), 0) for c in ready)  # a disk batch's size
        while ready and not self.paused and (self.queue or (backend is not None and backend.depth)):
            client = ready[0]
            if client.rdy <= len(client.in_flight) or not client.writable:
                ready.popleft()
                client.in_ready = False
                continue
            msg = next_queued(now, want)
            if msg is None:
                return
            self._send(client, msg, now)
            ready.rotate(-1)

    # -- clients -----------------------------------------------------------------------
    def add_client(self, client: ClientState) -> None:
        if self.exiting:
            raise Exiting()
        if self.max_consumers and len(self.clients) >= self.max_consumers:
            raise TooManyConsumers(
                f"consumers for {self.topic_name}:{self.name} exceeds limit of {self.max_consumers}"
            )
        self.clients[client.id] = client
        client.channel = self

    def remove_client(self, client: ClientState, now: float) -> bool:
        """Drop a client, requeueing its in-flight messages at once.

        nsqd leaves them to time out (up to --msg-timeout later); nsqpy puts them back now and
        counts them as timeouts. Returns True when an ephemeral channel lost its last client.
        """
        if self.clients.pop(client.id, None) is None:
            return False
        client.rdy = 0
        stranded = list(client.in_flight.values())
        client.in_flight.clear()
        client.capped.clear()
        self.in_flight_count -= len(stranded)
        self.timeout_count += len(stranded)
        for msg in stranded:
            self._put(msg, now)
        return self.ephemeral and not self.clients

    def client_ready(self, client: ClientState, now: float) -> None:
        """The client's window may have opened: pour queued messages in, then list it."""
        if self.paused or not client.writable or client.id not in self.clients:
            return
        if self.policed:
            self._fill_screened(client, now)
        else:
            self._fill(client, now)
        if not client.in_ready and client.rdy > len(client.in_flight):
            client.in_ready = True
            self._ready.append(client)

    def _fill(self, client: ClientState, now: float) -> None:
        """Deliver queued messages while the client's window is open (no policy to apply)."""
        _fill_window(self, client, now)

    def _fill_screened(self, client: ClientState, now: float) -> None:
        """``_fill`` for a channel with a policy: every message is screened before it goes.

        A copy of ``_fill``'s loop rather than a test inside it, so that channels without a
        policy pay nothing per message for the feature.
        """
        queue = self.queue
        in_flight = client.in_flight
        timeout = client.msg_timeout
        write = client.write_message
        backend = self.backend
        ttl = self.message_ttl
        wall = self.wall_ns()
        while client.rdy > len(in_flight) and client.writable:
            if queue:
                item = queue.popleft()
                if isinstance(item, tuple):
                    if ttl and wall - item[2] > ttl:  # a fresh entry can only have expired
                        self._divert(materialize(item), expired=True)
                        continue
                    if not client.sample_rate:
                        msg = delivered(item, now, timeout)
                        in_flight[msg.id] = msg
                        client.message_count += 1
                        self.in_flight_count += 1
                        write(msg)
                        continue
                    msg = materialize(item)
                elif self._admit(item, wall):
                    msg = item
                else:
                    continue
            elif backend is not None and backend.depth:
                next_msg = self._next_queued(now, client.rdy - len(in_flight))
                if next_msg is None:
                    break
                msg = next_msg
            else:
                break
            self._send(client, msg, now)

    def set_rdy(self, client: ClientState, count: int, now: float) -> None:
        if client.state == STATE_CLOSING:
            return
        client.rdy = count
        self.client_ready(client, now)

    # -- FIN / REQ / TOUCH --------------------------------------------------------------
    def _take(self, client: ClientState, msg_id: bytes) -> Message:
        msg = client.in_flight.pop(msg_id, None)
        if msg is None:
            raise InFlightError(self._why_not_in_flight(msg_id))
        self.in_flight_count -= 1
        return msg

    def _why_not_in_flight(self, msg_id: bytes) -> str:
        for other in self.clients.values():
            if msg_id in other.in_flight:
                return "client does not own message"
        return "ID not in flight"

    def _backlog(self) -> bool:
        return bool(self.queue) or (self.backend is not None and self.backend.depth > 0)

    # A client can sit in _ready with a full window: it was listed when a write filled its
    # transport, and resume_writing then filled the window without unlisting it. Only puts
    # drain _ready, so with a backlog and no new publishes an answer must pour directly.
    def finish(self, client: ClientState, msg_id: bytes, now: float) -> None:
        msg = self._take(client, msg_id)
        self._forget(msg)
        if self.e2e is not None:  # nsqd records the latency on FIN: now - publish time
            wall = self.wall_ns()
            self.e2e.insert(wall - msg.timestamp, wall)
        client.finish_count += 1
        if not client.in_ready or self._backlog():
            self.client_ready(client, now)

    def finish_many(
        self, client: ClientState, ids: list[bytes], now: float
    ) -> list[tuple[bytes, str]]:
        """FIN a batch of ids; returns ``(id, reason)`` for each that failed, in order."""
        return _finish_batch(self, client, ids, now)

    def requeue(self, client: ClientState, msg_id: bytes, delay: float, now: float) -> None:
        msg = self._take(client, msg_id)
        self.requeue_count += 1
        client.requeue_count += 1
        # out of attempts: _put dead-letters it now rather than after the delay
        if delay > 0 and not (self.max_attempts and msg.attempts >= self.max_attempts):
            heapq.heappush(self._deferred, (now + delay, next(self._seq), msg))
        else:
            self._put(msg, now)
        if not client.in_ready or self._backlog():
            self.client_ready(client, now)

    def touch(self, client: ClientState, msg_id: bytes, now: float) -> None:
        msg = client.in_flight.pop(msg_id, None)
        if msg is None:
            raise InFlightError(self._why_not_in_flight(msg_id))
        deadline = now + client.msg_timeout
        cap = msg.delivery_ts + self.max_msg_timeout
        if deadline > cap:
            deadline = cap
            client.capped.add(msg_id)
        msg.deadline = deadline
        client.in_flight[msg_id] = msg  # re-inserted last: keeps the dict in deadline order

    # -- timeouts -----------------------------------------------------------------------
    def process(self, now: float) -> bool:
        """Expire in-flight messages and release due deferred ones; True if any work."""
        dirty = False
        for client in list(self.clients.values()):
            if client.in_flight and self._expire(client, now):
                dirty = True
        deferred = self._deferred
        while deferred and deferred[0][0] <= now:
            self._put(heapq.heappop(deferred)[2], now)
            dirty = True
        if self.message_ttl and self._sweep(now):
            dirty = True
        if self.leases is not None and self.leases.process(now):
            dirty = True
        return dirty

    def _expire(self, client: ClientState, now: float) -> bool:
        in_flight = client.in_flight
        expired = []
        for msg in in_flight.values():
            if msg.deadline > now:
                break
            expired.append(msg)
        for msg in expired:
            del in_flight[msg.id]
        for msg_id in list(client.capped):
            capped = in_flight.get(msg_id)
            if capped is None or capped.deadline <= now:
                client.capped.discard(msg_id)
            if capped is not None and capped.deadline <= now:
                del in_flight[msg_id]
                expired.append(capped)
        if not expired:
            return False
        self.in_flight_count -= len(expired)
        self.timeout_count += len(expired)
        for msg in expired:
            self._put(msg, now)
        self.client_ready(client, now)
        return True

    # -- admin ---------------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        for client in list(self.clients.values()):
            self.client_ready(client, now)

    def empty(self, now: float) -> None:
        """Drop queued, in-flight and deferred messages (nsqd's /channel/empty)."""
        self.queue.clear()
        self._deferred.clear()
        self.disk_deferred = 0
        for client in self.clients.values():
            client.in_flight.clear()
            client.capped.clear()
        if self.leases is not None:
            self.leases.clear()
        self.in_flight_count = 0
        if self.backend is not None:
            self.backend.empty()
        for client in list(self.clients.values()):
            self.client_ready(client, now)

    def flush(self, now: float) -> int:
        """Clean shutdown: write queued, in-flight and deferred messages to disk.

        They are written with their attempts and, for deferred ones, their due time (nsqd loses
        it). In durable mode they are on disk already, but as the records first written; new
        records carry what changed since (attempts, a REQ delay) and the old ones are finished.
        The queue's sync writes the data before the metadata, so a crash in between replays the
        old records instead of losing anything. Returns how many messages were written.
        """
        backend = self.backend
        if backend is None:
            return 0
        held = [materialize(item) for item in self.queue]
        for client in self.clients.values():
            held.extend(client.in_flight.values())
        if self.leases is not None:
            held.extend(self.leases.drain())
        wall = self.wall_ns()
        encode = records.encode
        batch = [encode(m.timestamp, m.attempts, m.id, m.body, 0, m.origin) for m in held]
        deferred = [(wall + int((due - now) * 1e9), m) for due, _, m in self._deferred]
        batch.extend(
            encode(m.timestamp, m.attempts, m.id, m.body, due_ns, m.origin)
            for due_ns, m in deferred
        )
        if batch:
            backend.put(batch)
            self.disk_deferred += len(deferred)
        for msg in held + [m for _, m in deferred]:
            self._forget(msg)
        self.queue.clear()
        self._deferred.clear()
        return len(batch)


# -- the per-message loops, and their compiled twins ------------------------------------------
# Each ``py_*`` function is a loop of Channel's, kept apart so that nsqpy.nsqd.core._cdelivery
# can replace it statement for statement; the tests run both (NSQPY_PURE_PYTHON=1 picks these).


#: The most messages one turn of ``put_many``'s delivery gives a client before the next ready
#: client's turn: a run of messages is framed with one write call, and a client whose
#: transport fills up mid-run takes at most this many more.
TURN: Final = 256


def py_deliver(channel: Channel, msgs: list[Queued], now: float) -> int:
    """``put_many``'s loop: hand ``msgs`` to the ready clients in turns; returns how many went.

    A turn gives a client a run of messages: as many as its window has room for, at most an
    equal share of the batch among the clients ready at the start, and at most ``TURN``.
    """
    ready = channel._ready
    count = len(msgs)
    share = min(-(-count // len(ready)) if ready else 1, TURN)
    i = 0
    while i < count and ready and not channel.paused:
        client = ready[0]
        in_flight = client.in_flight
        room = client.rdy - len(in_flight)
        if room <= 0 or not client.writable:
            ready.popleft()
            client.in_ready = False
            continue
        if client.sample_rate:
            channel._send(client, materialize(msgs[i]), now)
            i += 1
            ready.rotate(-1)
            continue
        take = min(room, share, count - i)
        timeout = client.msg_timeout
        deadline = now + timeout
        run: list[Message] = []
        for item in msgs[i : i + take]:  # _send inlined: this runs once per published message
            if isinstance(item, tuple):
                msg = delivered(item, now, timeout)
            else:
                msg = item
                msg.attempts += 1
                msg.delivery_ts = now
                msg.deadline = deadline
            in_flight[msg.id] = msg
            run.append(msg)
        client.message_count += take
        channel.in_flight_count += take
        client.write_messages(run)
        i += take
        ready.rotate(-1)
    return i


def py_fill(channel: Channel, client: ClientState, now: float) -> None:
    """``_fill``'s loop: deliver queued messages while the client's window is open.

    What the memory queue holds goes out in runs (at most ``TURN``, one ``write_messages``
    each); the window and ``writable`` are checked between runs, so a client whose transport
    fills up mid-run takes at most the rest of that run. A message from disk, or one for a
    sampling client, goes alone.
    """
    queue = channel.queue
    in_flight = client.in_flight
    timeout = client.msg_timeout
    backend = channel.backend
    while client.writable:
        room = client.rdy - len(in_flight)
        if room <= 0:
            break
        if not queue:
            if backend is None or not backend.depth:
                break
            next_msg = channel._pop_queued(now, room)  # reads a batch into the queue
            if next_msg is None:
                break
            channel._send(client, next_msg, now)
            continue
        if client.sample_rate:
            channel._send(client, materialize(queue.popleft()), now)
            continue
        run: list[Message] = []
        for _ in range(min(room, len(queue), TURN)):
            item = queue.popleft()
            if isinstance(item, tuple):
                msg = delivered(item, now, timeout)  # the common case, in one step
            else:
                msg = item
                msg.attempts += 1
                msg.delivery_ts = now
                msg.deadline = now + timeout
            in_flight[msg.id] = msg
            run.append(msg)
        client.message_count += len(run)
        channel.in_flight_count += len(run)
        client.write_messages(run)


def py_finish_many(
    channel: Channel, client: ClientState, ids: list[bytes], now: float
) -> list[tuple[bytes, str]]:
    """``finish_many``: FIN a batch of ids; ``(id, reason)`` for each that failed."""
    in_flight = client.in_flight
    errors: list[tuple[bytes, str]] = []
    tokens: list[int] = []  # durable mode: the disk records to finish, in one call
    done = 0
    e2e = channel.e2e
    wall = channel.wall_ns() if e2e is not None else 0  # one clock read for the batch
    for msg_id in ids:
        msg = in_flight.pop(msg_id, None)
        if msg is None:
            errors.append((msg_id, channel._why_not_in_flight(msg_id)))
            continue
        done += 1
        if msg.token >= 0:
            tokens.append(msg.token)
        if e2e is not None:
            e2e.insert(wall - msg.timestamp, wall)
    if tokens:
        channel._forget_tokens(tokens)
    channel.in_flight_count -= done
    client.finish_count += done
    if done and (not client.in_ready or channel._backlog()):
        channel.client_ready(client, now)
    return errors


_c = load("nsqpy.nsqd.core._cdelivery")
_deliver: Callable[[Channel, list[Queued], float], int] = py_deliver if _c is None else _c.deliver
_fill_window: Callable[[Channel, ClientState, float], None] = py_fill if _c is None else _c.fill
_finish_batch: Callable[[Channel, ClientState, list[bytes], float], list[tuple[bytes, str]]] = (
    py_finish_many if _c is None else _c.finish_many
)
_plain_message: Callable[[bytes], Message | None] = (
    plain_message if _c is None else _c.plain_message
)
_with_tokens: Callable[[list[Queued], range], list[Message]] = (
    with_tokens if _c is None else _c.with_tokens
)
