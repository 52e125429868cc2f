"""The broker's state: topics by name, the id generator and the knobs they share.

No I/O and no clock of its own: callers pass ``now`` (monotonic seconds) and ``now_ns``
(wall-clock ns for message timestamps). ``listeners`` hear about topics and channels
coming and going (metadata persistence and nsqlookupd registration hang off it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nsqpy.nsqd.backend import Backend, DiskHooks
from nsqpy.nsqd.channel import Channel
from nsqpy.nsqd.client import ClientState
from nsqpy.nsqd.guid import GuidFactory
from nsqpy.nsqd.metadata import ChannelMeta, TopicMeta
from nsqpy.nsqd.topic import Topic
from nsqpy.protocol.names import is_ephemeral

#: event name, topic name, channel name ("" for topic events)
Listener = Callable[[str, str, str], None]
#: Opens the disk queue for a topic (``name``) or channel (``topic:channel``).
BackendFactory = Callable[[str], Backend]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int = 0
    mem_queue_size: int = 10000
    max_msg_timeout: float = 900.0
    max_channel_consumers: int = 0


class Broker:
    """Topics, channels and their lifecycle."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        backends: BackendFactory | None = None,
        hooks: DiskHooks | None = None,
    ) -> None:
        self.config = config
        self.backends = backends
        self.hooks = hooks or DiskHooks()
        self.topics: dict[str, Topic] = {}
        self.guid = GuidFactory(config.node_id)
        self.listeners: list[Listener] = []

    def _notify(self, event: str, topic: str, channel: str = "") -> None:
        for listener in self.listeners:
            listener(event, topic, channel)

    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            cfg = self.config
            disk = self.backends if not is_ephemeral(name) else None
            topic = Topic(
                name,
                mem_queue_size=cfg.mem_queue_size,
                max_msg_timeout=cfg.max_msg_timeout,
                max_channel_consumers=cfg.max_channel_consumers,
                backend=disk(name) if disk is not None else None,
                channel_backend=disk,
                hooks=self.hooks,
            )
            self.topics[name] = topic
            self._notify("topic_created", name)
        return topic

    def get_channel(self, topic: Topic, name: str, now: float) -> Channel:
        channel, created = topic.get_channel(name, now)
        if created:
            self._notify("channel_created", topic.name, name)
        return channel

    def delete_topic(self, name: str) -> list[ClientState]:
        """Remove a topic and its channels; returns the clients to disconnect."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return []
        topic.exiting = True
        clients: list[ClientState] = []
        for channel_name in list(topic.channels):
            clients.extend(self._drop_channel(topic, channel_name))
        topic.empty()
        if topic.backend is not None:
            topic.backend.delete()
        self._notify("topic_deleted", name)
        return clients

    def delete_channel(self, topic: Topic, name: str) -> list[ClientState]:
        clients = self._drop_channel(topic, name)
        if topic.ephemeral and not topic.channels:
            self.delete_topic(topic.name)
        return clients

    def _drop_channel(self, topic: Topic, name: str) -> list[ClientState]:
        channel = topic.delete_channel(name)
        if channel is None:
            return []
        clients = list(channel.clients.values())
        if channel.backend is not None:
            channel.backend.delete()
        self._notify("channel_deleted", topic.name, name)
        return clients

    def remove_client(self, client: ClientState, now: float) -> None:
        """A subscribed connection went away: requeue its messages, reap ephemerals."""
        channel = client.channel
        if channel is None:
            return
        client.channel = None
        if channel.remove_client(client, now):
            topic = self.topics.get(channel.topic_name)
            if topic is not None and topic.channels.get(channel.name) is channel:
                self.delete_channel(topic, channel.name)

    def channels(self) -> Iterator[Channel]:
        for topic in self.topics.values():
            yield from topic.channels.values()

    def process_timeouts(self, now: float) -> None:
        for channel in list(self.channels()):
            channel.process(now)

    def metadata(self) -> list[TopicMeta]:
        """What nsqd.dat records: every topic and channel with its paused flag."""
        return [
            TopicMeta(
                t.name,
                t.paused,
                [ChannelMeta(c.name, c.paused) for c in sorted(t.channels.values(), key=_name)],
            )
            for t in sorted(self.topics.values(), key=_name)
        ]

    def restore(self, topics: list[TopicMeta], now: float) -> None:
        """Recreate topics and channels (with their paused flags) from nsqd.dat."""
        for meta in topics:
            topic = self.get_topic(meta.name)
            if meta.paused:
                topic.pause()
            for chan in meta.channels:
                channel = self.get_channel(topic, chan.name, now)
                if chan.paused:
                    channel.pause()

    def backends_in_use(self) -> list[Backend]:
        found: list[Backend] = []
        for topic in self.topics.values():
            if topic.backend is not None:
                found.append(topic.backend)
            found.extend(c.backend for c in topic.channels.values() if c.backend is not None)
        return found


def _name(obj: Topic | Channel) -> str:
    return obj.name
