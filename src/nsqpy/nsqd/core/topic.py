"""A topic: fans every message out to all of its channels.

With no channel (or while paused) a topic holds its messages itself, so the first channel
created gets everything published before it (nsqd does the same; see NSQ issue #1520). Held
messages stay in memory up to ``mem_queue_size`` and then go to the topic's own disk queue;
a disk backlog is handed to the channels in bounded batches by ``pump`` (the daemon calls it
until it reports nothing left), so a large backlog never stalls the event loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from nsqpy._internal.compiled import load
from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import Backend, DiskHooks, write_messages
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.errors import Exiting, QueueFull
from nsqpy.nsqd.core.message import Message, Queued, fresh_entries, from_record
from nsqpy.nsqd.core.policy import Settings
from nsqpy.nsqd.core.quantile import LatencySummary, aggregate
from nsqpy.protocol.names import is_ephemeral

_NO_DISK = DiskHooks()
ChannelBackendFactory = Callable[[str], "Backend | None"]
#: Called on a new channel before any message reaches it (the broker sets its policy).
ChannelSetup = Callable[[Channel], None]
#: Messages moved from a topic's disk backlog to its channels per ``pump`` call.
PUMP_BATCH = 2000


class Topic:
    """Channels of one topic, plus the messages held while there are none."""

    def __init__(
        self,
        name: str,
        *,
        mem_queue_size: int,
        max_msg_timeout: float,
        max_channel_consumers: int = 0,
        backend: Backend | None = None,
        channel_backend: ChannelBackendFactory | None = None,
        hooks: DiskHooks = _NO_DISK,
        wall_ns: Callable[[], int] = time.time_ns,
        setup_channel: ChannelSetup | None = None,
    ) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = mem_queue_size
        self.max_msg_timeout = max_msg_timeout
        self.max_channel_consumers = max_channel_consumers
        self.backend = backend
        self.channel_backend = channel_backend
        self.hooks = hooks
        self.durable = hooks.durable and backend is not None
        self.wall_ns = wall_ns
        self.channels: dict[str, Channel] = {}
        self.queue: deque[Queued] = deque()
        self.paused = False
        self.exiting = False
        #: Waiting for nsqlookupd to say which channels exist in the cluster (NSQ #1520).
        self.awaiting_channels = False
        self.message_count = 0
        self.message_bytes = 0
        #: Defaults for its channels' dead-letter/TTL policy (``nsqpy.nsqd.core.policy``).
        self.settings = Settings()
        self.setup_channel = setup_channel

    @property
    def depth(self) -> int:
        return len(self.queue) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def e2e_summary(self, now_ns: int | None = None) -> LatencySummary:
        """The channels' e2e latencies merged (nsqd's topic figure); NOT_TRACKED when none
        of them tracks any (percentiles off, or no channel yet)."""
        now = self.wall_ns() if now_ns is None else now_ns
        return aggregate((channel.e2e for channel in self.channels.values()), now)

    @property
    def holding(self) -> bool:
        """Messages are kept at the topic (no channel yet, paused, or channels being looked up)."""
        return not self.channels or self.paused or self.awaiting_channels

    def get_channel(
        self, name: str, now: float, settings: Settings | None = None
    ) -> tuple[Channel, bool]:
        """The channel called ``name``, created if absent (with its own dead-letter/TTL
        ``settings``, when restored); True when it was created."""
        channel = self.channels.get(name)
        if channel is not None:
            return channel, False
        backend = None
        if self.channel_backend is not None and not is_ephemeral(name):
            backend = self.channel_backend(f"{self.name}:{name}")
        channel = Channel(
            self.name,
            name,
            mem_queue_size=self.mem_queue_size,
            max_msg_timeout=self.max_msg_timeout,
            max_consumers=self.max_channel_consumers,
            backend=backend,
            hooks=self.hooks,
            wall_ns=self.wall_ns,
        )
        if settings is not None:
            channel.settings = settings
        if self.setup_channel is not None:
            self.setup_channel(channel)
        self.channels[name] = channel
        if len(self.channels) == 1:
            self._release(now)
        return channel, True

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is not None:
            channel.exiting = True
            channel.queue.clear()
        return channel

    def accept(self, count: int) -> None:
        """Raise unless ``count`` more messages can be taken now without dropping any."""
        if self.exiting:
            raise Exiting()
        self._check_room(count)

    def put(
        self, bodies: Sequence[bytes], ids: Sequence[bytes], ts: int, now: float, defer: float = 0.0
    ) -> None:
        """Publish messages; all are accepted, or none (QueueFull, Exiting, disk errors)."""
        self.accept(len(bodies))
        self.put_accepted(bodies, ids, ts, now, defer)

    def put_accepted(
        self, bodies: Sequence[bytes], ids: Sequence[bytes], ts: int, now: float, defer: float = 0.0
    ) -> None:
        """Publish messages that ``accept`` has just cleared."""
        self.message_count += len(bodies)
        msgs: list[Queued]
        if defer:
            self.message_bytes += sum(map(len, bodies))
            msgs = [Message(i, b, ts, defer) for i, b in zip(ids, bodies, strict=True)]
        else:  # fresh entries: no per-message object until delivery
            msgs, size = _fresh_entries(ids, bodies, ts)
            self.message_bytes += size
        if self.holding:
            self._hold(msgs)
            return
        self._fan_out_many(msgs, now, fresh=not defer)

    def put_messages(self, msgs: list[Message], now: float) -> None:
        """Publish messages made elsewhere (dead letters, redriven ones): no room check, as
        they come off another queue, not from a client that could be told to wait."""
        if self.exiting:
            raise Exiting()
        self.message_count += len(msgs)
        self.message_bytes += sum(len(m.body) for m in msgs)
        queued: list[Queued] = list(msgs)
        if self.holding:
            self._hold(queued)
        else:
            self._fan_out_many(queued, now)

    def _hold(self, msgs: list[Queued]) -> None:
        queue = self.queue
        if self.ephemeral:
            queue.extend(msgs)
            while len(queue) > self.mem_queue_size:
                queue.pop()  # nsqd drops ephemeral overflow
            return
        backend = self.backend
        if backend is None:
            queue.extend(msgs)
            return
        room = 0 if self.durable or backend.depth else self.mem_queue_size - len(queue)
        if room >= len(msgs):
            queue.extend(msgs)
            return
        if room > 0:
            queue.extend(msgs[:room])
            msgs = msgs[room:]
        write_messages(backend, self.hooks, msgs)

    def _check_room(self, count: int) -> None:
        if self.ephemeral:
            return
        if self.holding:
            if self.backend is None and len(self.queue) + count > self.mem_queue_size:
                raise QueueFull(
                    f"topic {self.name} holds {len(self.queue)} messages: memory queue is full "
                    "(--mem-queue-size) and there is no disk queue"
                )
            return
        for channel in self.channels.values():
            if not channel.ephemeral and channel.room() < count:
                raise QueueFull(
                    f"channel {self.name}:{channel.name} memory queue is full "
                    "(--mem-queue-size) and there is no disk queue"
                )

    def _fan_out_many(self, msgs: list[Queued], now: float, fresh: bool = False) -> None:
        """Give every channel ``msgs``: entries are shared, delivered messages are copied.
        ``fresh``: all of them are entries just published (none deferred, none to copy), so
        the per-message scan for deferred ones is skipped."""
        deferred = [] if fresh else [m for m in msgs if not isinstance(m, tuple) and m.deferred]
        immediate = (
            [m for m in msgs if isinstance(m, tuple) or not m.deferred] if deferred else msgs
        )
        wall = self.wall_ns()
        first = True
        for channel in list(self.channels.values()):
            own = first
            first = False
            if immediate:
                if own:
                    copies = immediate
                else:  # fresh entries are immutable tuples: shared, only the list is new
                    copies = immediate[:] if fresh else [_copy(m) for m in immediate]
                channel.put_many(copies, now)
            for msg in deferred:  # due is absolute: publish time + the requested delay
                copy = msg if own else msg.copy()
                channel.put_deferred(copy, now + (msg.due_ns() - wall) / 1e9, now)

    def _release(self, now: float) -> None:
        """Hand held memory messages to the channels; ``pump`` moves any disk backlog."""
        if self.holding:
            return
        held, self.queue = list(self.queue), deque()
        if held:
            self._fan_out_many(held, now)

    def pump(self, now: float, limit: int = PUMP_BATCH) -> bool:
        """Move up to ``limit`` messages from the disk backlog to the channels.

        Returns True while more remain. In durable mode the topic's records are finished only
        once the channels' copies are committed.
        """
        backend = self.backend
        if self.holding or backend is None or not backend.depth:
            return False
        msgs: list[Queued] = []
        datas, tokens = backend.read_many(limit)
        for data in datas:
            try:
                rec = records.decode(data)
            except ValueError:
                continue
            if not rec.attempts and not rec.due_ns and not rec.origin:
                msgs.append((rec.id, rec.body, rec.timestamp))
                continue
            msg = from_record(rec)
            if rec.due_ns:
                msg.deferred = (rec.due_ns - rec.timestamp) / 1e9  # the publisher's delay
            msgs.append(msg)
        if msgs:
            self._fan_out_many(msgs, now)
        self.hooks.touched(backend)
        if self.durable:
            self.hooks.after_commit(lambda ok: self._finish(tokens) if ok else None)
        return bool(backend.depth)

    def _finish(self, tokens: range) -> None:
        if self.backend is not None:
            for token in tokens:
                self.backend.finish(token)

    def channels_known(self, now: float) -> None:
        """The cluster's channels exist now: release what was held meanwhile."""
        self.awaiting_channels = False
        self._release(now)

    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        self._release(now)

    def empty(self) -> None:
        self.queue.clear()
        if self.backend is not None:
            self.backend.empty()

    def flush(self) -> int:
        """Clean shutdown: write held memory messages to disk; returns how many."""
        if self.backend is None or self.durable or not self.queue:
            return 0
        count = len(self.queue)
        write_messages(self.backend, self.hooks, list(self.queue))
        self.queue.clear()
        return count


def _copy(item: Queued) -> Queued:
    """Another channel's copy: an entry is immutable and shared; a message is copied."""
    return item if isinstance(item, tuple) else item.copy()


_c = load("nsqpy.nsqd.core._cdelivery")
_fresh_entries: Callable[[Sequence[bytes], Sequence[bytes], int], tuple[list[Queued], int]] = (
    fresh_entries if _c is None else _c.fresh_entries
)
