"""Redrive: dead letters go back to the channels they came from.

A dead-letter topic holds its letters at the topic while it has no channel (the usual case)
and in its channels' queues once it has some. A redrive goes once through each of those
queues, memory then disk, as they stood when it reached them: a letter whose origin matches
(every origin, or the one channel asked for) is put back into that channel as a fresh message
(new id, attempts 0, the time of the move as its timestamp, so a TTL counts from the redrive);
anything else is queued again behind the rest. A message that several channels of the
dead-letter topic hold copies of (same id) moves once. Letters whose channel no longer exists
stay where they are. In-flight and deferred messages of the dead-letter topic's channels are
left alone.

``step`` handles a bounded batch, so a large backlog never stalls the event loop; the daemon
calls it until it returns False. In durable mode the records read are finished only once the
messages put elsewhere are committed, so a crash mid-way duplicates letters but loses none. A
disk write error stops the redrive (BrokerError, from ``step``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import write_messages
from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.core.message import Message, Queued, from_record, materialize

if TYPE_CHECKING:
    from nsqpy.nsqd.core.backend import Backend
    from nsqpy.nsqd.core.broker import Broker
    from nsqpy.nsqd.core.channel import Channel
    from nsqpy.nsqd.core.topic import Topic

#: Messages looked at per ``step``.
BATCH = 2000


@dataclass(slots=True)
class _Cursor:
    """How far the redrive is through one queue: what is left of the memory and disk parts
    as they stood when the redrive reached them (None: not measured yet)."""

    owner: Topic | Channel
    memory_left: int | None = None
    disk_left: int | None = None


class Redrive:
    """Moves the letters of ``topic`` (a dead-letter topic) back to their channels;
    ``origin`` (``"topic:channel"``) limits it to one channel's letters."""

    def __init__(self, broker: Broker, topic: Topic, origin: str | None = None) -> None:
        self.broker = broker
        self.topic = topic
        self.origin = origin
        self.redriven = 0
        self.kept = 0
        owners: list[Topic | Channel] = [topic, *topic.channels.values()]
        self._cursors = deque(_Cursor(owner) for owner in owners)
        #: Ids moved so far, to skip other channels' copies (only needed with several).
        self._moved: set[bytes] | None = set() if len(topic.channels) > 1 else None

    def step(self, now: float, now_ns: int, limit: int = BATCH) -> bool:
        """Handle up to ``limit`` messages; True while some remain."""
        batch = _Batch(self, now_ns)
        while self._cursors and batch.seen < limit:
            cursor = self._cursors[0]
            if cursor.owner.exiting or not self._advance(cursor, batch, limit):
                self._cursors.popleft()
        batch.commit(now)
        return bool(self._cursors)

    def _advance(self, cursor: _Cursor, batch: _Batch, limit: int) -> bool:
        """Work on one queue until the batch is full; False once the queue is done."""
        owner = cursor.owner
        queue, backend = owner.queue, owner.backend
        if cursor.memory_left is None:
            cursor.memory_left = len(queue)
        while cursor.memory_left and queue and batch.seen < limit:
            cursor.memory_left -= 1
            msg = materialize(queue.popleft())
            if not batch.take(msg):
                queue.append(msg)
            elif msg.token >= 0 and backend is not None:
                batch.read(backend, msg.token)  # durable: its record goes once the move commits
        if cursor.memory_left and queue:
            return True
        if backend is None:
            return False
        if cursor.disk_left is None:
            cursor.disk_left = backend.depth
        kept: list[Queued] = []
        while cursor.disk_left and batch.seen < limit and (item := backend.read()) is not None:
            cursor.disk_left -= 1
            data, token = item
            batch.read(backend, token)
            try:
                rec = records.decode(data)
            except ValueError:
                continue  # the queue's own reader would skip it too
            msg = from_record(rec)
            if rec.due_ns:
                msg.deferred = (rec.due_ns - rec.timestamp) / 1e9
            if not batch.take(msg):
                kept.append(msg)
        self.broker.hooks.touched(backend)
        if kept:
            try:
                write_messages(backend, self.broker.hooks, kept)
            except BrokerError:
                queue.extend(kept)  # held in memory rather than lost; the error is reported
                raise
        return bool(cursor.disk_left and backend.depth)

    def destination(self, msg: Message) -> Channel | None:
        """The channel ``msg`` goes back to, or None if it stays."""
        origin = msg.origin
        if not origin or (self.origin is not None and origin != self.origin):
            return None
        topic_name, _, channel_name = origin.partition(":")
        topic = self.broker.topics.get(topic_name)
        return topic.channels.get(channel_name) if topic is not None else None


class _Batch:
    """One step's moves, puts and records to finish."""

    def __init__(self, redrive: Redrive, now_ns: int) -> None:
        self.redrive = redrive
        self.now_ns = now_ns
        self.seen = 0
        self.moves: dict[int, tuple[Channel, list[bytes]]] = {}
        self.finish: list[tuple[Backend, int]] = []

    def read(self, backend: Backend, token: int) -> None:
        if token >= 0 and self.redrive.broker.hooks.durable:
            self.finish.append((backend, token))

    def take(self, msg: Message) -> bool:
        """True if ``msg`` leaves its queue (moved, or a copy of one moved already)."""
        self.seen += 1
        redrive = self.redrive
        moved = redrive._moved
        if moved is not None and msg.id in moved:
            return True
        channel = redrive.destination(msg)
        if channel is None or channel.exiting:
            redrive.kept += 1
            return False
        if moved is not None:
            moved.add(msg.id)
        redrive.redriven += 1
        self.moves.setdefault(id(channel), (channel, []))[1].append(msg.body)
        return True

    def commit(self, now: float) -> None:
        broker = self.redrive.broker
        for channel, bodies in self.moves.values():
            ids = broker.guid.new_ids(len(bodies), self.now_ns)
            fresh: list[Queued] = [(i, b, self.now_ns) for i, b in zip(ids, bodies, strict=True)]
            channel.put_many(fresh, now)
        if not self.finish:
            return
        finish = self.finish

        def committed(ok: bool) -> None:
            if ok:  # else the records stay: read again after a restart (a duplicate, no loss)
                for backend, token in finish:
                    backend.finish(token)
                    broker.hooks.touched(backend)

        broker.hooks.after_commit(committed)
