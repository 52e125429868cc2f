"""A topic: fans every message out to all of its channels.

With no channel (or while paused) a topic holds its messages itself, so the first channel
created gets everything published before it (nsqd does the same; see NSQ issue #1520).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from nsqpy.nsqd.channel import Channel
from nsqpy.nsqd.errors import Exiting, QueueFull
from nsqpy.nsqd.message import Message
from nsqpy.protocol.names import is_ephemeral


class Topic:
    """Channels of one topic, plus the messages held while there are none."""

    def __init__(
        self,
        name: str,
        *,
        mem_queue_size: int,
        max_msg_timeout: float,
        max_channel_consumers: int = 0,
    ) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = mem_queue_size
        self.max_msg_timeout = max_msg_timeout
        self.max_channel_consumers = max_channel_consumers
        self.channels: dict[str, Channel] = {}
        self.queue: deque[Message] = deque()
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.message_bytes = 0

    @property
    def depth(self) -> int:
        return len(self.queue)

    def get_channel(self, name: str, now: float) -> tuple[Channel, bool]:
        """The channel called ``name``, created if absent; True when it was created."""
        channel = self.channels.get(name)
        if channel is not None:
            return channel, False
        channel = Channel(
            self.name,
            name,
            mem_queue_size=self.mem_queue_size,
            max_msg_timeout=self.max_msg_timeout,
            max_consumers=self.max_channel_consumers,
        )
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
        """Publish messages; all are accepted, or none (QueueFull, Exiting)."""
        self.accept(len(bodies))
        self.put_accepted(bodies, ids, ts, now, defer)

    def put_accepted(
        self, bodies: Sequence[bytes], ids: Sequence[bytes], ts: int, now: float, defer: float = 0.0
    ) -> None:
        """Publish messages that ``accept`` has just cleared."""
        self.message_count += len(bodies)
        self.message_bytes += sum(map(len, bodies))
        if not self.channels or self.paused:
            self.queue.extend(Message(i, b, ts, defer) for i, b in zip(ids, bodies, strict=True))
            if self.ephemeral:
                while len(self.queue) > self.mem_queue_size:
                    self.queue.pop()  # nsqd drops ephemeral overflow
            return
        msgs = [Message(i, b, ts, defer) for i, b in zip(ids, bodies, strict=True)]
        self._fan_out_many(msgs, now)

    def _fan_out_many(self, msgs: list[Message], now: float) -> None:
        """Give every channel its own copy of ``msgs`` (the first channel gets the originals)."""
        first = True
        for channel in list(self.channels.values()):
            copies = msgs if first else [m.copy() for m in msgs]
            first = False
            immediate = copies
            if any(m.deferred for m in copies):
                immediate = [m for m in copies if not m.deferred]
                for msg in copies:
                    if msg.deferred:
                        channel.put_deferred(msg, now + msg.deferred)
            if immediate:
                channel.put_many(immediate, now)

    def _check_room(self, count: int) -> None:
        if self.ephemeral:
            return
        if not self.channels or self.paused:
            if len(self.queue) + count > self.mem_queue_size:
                raise QueueFull(
                    f"topic {self.name} holds {len(self.queue)} messages: memory queue is full "
                    "(--mem-queue-size) and disk overflow is not available"
                )
            return
        for channel in self.channels.values():
            if not channel.ephemeral and channel.room() < count:
                raise QueueFull(
                    f"channel {self.name}:{channel.name} memory queue is full "
                    "(--mem-queue-size) and disk overflow is not available"
                )

    def _release(self, now: float) -> None:
        """Hand held messages to the channels (first channel created, or unpause)."""
        if self.paused or not self.channels:
            return
        held, self.queue = list(self.queue), deque()
        if held:
            self._fan_out_many(held, now)

    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        self._release(now)

    def empty(self) -> None:
        self.queue.clear()
