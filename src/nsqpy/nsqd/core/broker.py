"""The broker's state: topics by name, the id generator and the knobs they share.

No I/O and no clock of its own: callers pass ``now`` (monotonic seconds) and ``now_ns``
(wall-clock ns for message timestamps). ``listeners`` hear about topics and channels
coming and going (metadata persistence and nsqlookupd registration hang off it).

Dead letters (``nsqpy.nsqd.core.policy``): the broker resolves every channel's policy from the
settings of the channel, its topic and the node, and is the sink channels divert messages to.
Diverted messages wait in ``pending`` until the daemon calls ``flush_dead_letters`` (told by
``on_dead_letters``, at the end of the loop iteration): publishing into another topic from
inside a channel's delivery loop could re-enter that channel. A durable source record is
released only once its copy in the dead-letter topic is committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from nsqpy.nsqd.core.backend import Backend, DiskHooks
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.client import ClientState
from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.core.guid import GuidFactory
from nsqpy.nsqd.core.message import DeadLetter, Message
from nsqpy.nsqd.core.meta import ChannelMeta, TopicMeta
from nsqpy.nsqd.core.policy import Effective, NodeDefaults, Settings, SettingsError, resolve
from nsqpy.nsqd.core.policy import has_dead_letter_suffix as _has_suffix
from nsqpy.nsqd.core.topic import Topic
from nsqpy.protocol.names import is_ephemeral

log = logging.getLogger("nsqpy.nsqd")

#: event name, topic name, channel name ("" for topic events)
Listener = Callable[[str, str, str], None]
#: Opens the disk queue for a topic (``name``) or channel (``topic:channel``).
BackendFactory = Callable[[str], Backend]
#: Seconds before a dead letter its dead-letter topic refused (a disk error) is tried again.
DEAD_LETTER_RETRY = 1.0


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int = 0
    mem_queue_size: int = 10000
    max_msg_timeout: float = 900.0
    max_channel_consumers: int = 0
    policy: NodeDefaults = field(default_factory=NodeDefaults)


class Broker:
    """Topics, channels and their lifecycle."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        backends: BackendFactory | None = None,
        hooks: DiskHooks | None = None,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config
        self.wall_ns = wall_ns
        self.backends = backends
        self.hooks = hooks or DiskHooks()
        self.topics: dict[str, Topic] = {}
        self.guid = GuidFactory(config.node_id)
        self.listeners: list[Listener] = []
        #: (dead-letter topic, source channel, message) waiting for flush_dead_letters.
        self.pending: list[tuple[str, Channel, Message]] = []
        #: Called when pending goes from empty to not empty (the daemon schedules a flush).
        self.on_dead_letters: Callable[[], None] | None = None
        self._targets: frozenset[str] = frozenset()  # dead-letter topics named in settings

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
                wall_ns=self.wall_ns,
                setup_channel=self._setup_channel,
            )
            self.topics[name] = topic
            self._notify("topic_created", name)
        return topic

    def get_channel(
        self, topic: Topic, name: str, now: float, settings: Settings | None = None
    ) -> Channel:
        channel, created = topic.get_channel(name, now, settings)
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
            topic, name = self.topics.get(channel.topic_name), channel.name
            if topic is not None and topic.channels.get(name) is channel:
                self.delete_channel(topic, name)

    # -- dead letters and TTL ---------------------------------------------------------------
    def _setup_channel(self, channel: Channel) -> None:
        channel.dead_letters = self._divert
        self._apply(channel)

    def _is_dead_letter_topic(self, name: str) -> bool:
        return name in self._targets or _has_suffix(name, self.config.policy.dead_letter_suffix)

    def effective(
        self, topic: Topic, channel_settings: Settings, topic_settings: Settings | None = None
    ) -> Effective:
        """What applies to a channel of ``topic`` with ``channel_settings`` (and, to try a
        change, ``topic_settings`` instead of the topic's own)."""
        return resolve(
            self.config.policy,
            topic.name,
            topic.settings if topic_settings is None else topic_settings,
            channel_settings,
            exempt=self._is_dead_letter_topic(topic.name),
        )

    def _apply(self, channel: Channel) -> None:
        topic = self.topics.get(channel.topic_name)
        if topic is None:
            return
        effective = self.effective(topic, channel.settings)
        if effective.problem and effective.problem != channel.effective.problem:
            log.warning(
                "channel %s:%s: max_attempts is off - %s",
                topic.name,
                channel.name,
                effective.problem,
            )
        channel.apply_policy(effective)

    def apply_policies(self) -> None:
        """Settings changed somewhere: resolve every channel again."""
        self._targets = _named_targets(
            (t.settings, *(c.settings for c in t.channels.values())) for t in self.topics.values()
        )
        for channel in self.channels():
            self._apply(channel)

    def set_topic_settings(self, topic: Topic, changes: dict[str, object]) -> None:
        """Apply a validated update to ``topic``'s settings. SettingsError, and nothing
        changes, when it would leave a channel of the topic (or a new one) dead-lettering
        with no valid dead-letter topic."""
        new = topic.settings.updated(changes)
        owns = [Settings(), *(c.settings for c in topic.channels.values())]
        for own in owns:
            _check_problem(self.effective(topic, own), self.effective(topic, own, new), changes)
        topic.settings = new
        self.apply_policies()

    def set_channel_settings(self, channel: Channel, changes: dict[str, object]) -> None:
        """Apply a validated update to ``channel``'s own settings (SettingsError: unchanged)."""
        topic = self.topics[channel.topic_name]
        new = channel.settings.updated(changes)
        _check_problem(self.effective(topic, channel.settings), self.effective(topic, new), changes)
        channel.settings = new
        self.apply_policies()

    def _divert(self, channel: Channel, msg: Message) -> None:
        first = not self.pending
        self.pending.append((channel.dead_letter_topic, channel, msg))
        if first and self.on_dead_letters is not None:
            self.on_dead_letters()

    def flush_dead_letters(self, now: float, now_ns: int) -> int:
        """Publish what channels diverted to their dead-letter topics; returns how many.

        Each goes in with a new id (ids are unique per topic, and two channels may divert the
        same message), attempts 0, the time of the move as its timestamp and its origin. A
        topic that refuses (a disk error) gets them again after ``DEAD_LETTER_RETRY``.
        """
        pending, self.pending = self.pending, []
        by_target: dict[str, list[tuple[Channel, Message]]] = {}
        for target, channel, msg in pending:
            by_target.setdefault(target, []).append((channel, msg))
        moved = 0
        for target, items in by_target.items():
            ids = self.guid.new_ids(len(items), now_ns)
            letters: list[Message] = [
                DeadLetter(msg_id, msg.body, now_ns, f"{channel.topic_name}:{channel.name}")
                for msg_id, (channel, msg) in zip(ids, items, strict=True)
            ]
            try:
                self.get_topic(target).put_messages(letters, now)
            except BrokerError as err:
                log.error("failed to put %d dead letters to %s - %s", len(items), target, err)
                for channel, msg in items:
                    channel.retry_later(msg, DEAD_LETTER_RETRY, now)
                continue
            moved += len(items)
            self._release_after_commit(items)
        return moved

    def _release_after_commit(self, items: list[tuple[Channel, Message]]) -> None:
        durable = [(channel, msg) for channel, msg in items if msg.token >= 0]
        if not durable:
            return  # nothing on disk to let go (a commit round would only cost an fsync)

        def committed(ok: bool) -> None:
            if ok:  # else the records stay and come back after a restart: a duplicate
                for channel, msg in durable:
                    channel.release(msg)

        self.hooks.after_commit(committed)

    def channels(self) -> Iterator[Channel]:
        for topic in self.topics.values():
            yield from topic.channels.values()

    def process_timeouts(self, now: float) -> None:
        for channel in list(self.channels()):
            channel.process(now)

    def metadata(self, *, deferred: bool = False) -> list[TopicMeta]:
        """What nsqd.dat records: every topic and channel with its paused flag and settings
        (and, with ``deferred``, at a clean stop, the channel's deferred records on disk)."""
        return [
            TopicMeta(
                t.name,
                t.paused,
                [
                    ChannelMeta(c.name, c.paused, c.settings, c.disk_deferred if deferred else 0)
                    for c in sorted(t.channels.values(), key=_name)
                ],
                t.settings,
            )
            for t in sorted(self.topics.values(), key=_name)
        ]

    def restore(self, topics: list[TopicMeta], now: float) -> None:
        """Recreate topics and channels (paused flags, settings) from nsqd.dat."""
        # which topics are dead-letter topics is known before any channel resolves its policy
        self._targets = _named_targets(
            (meta.settings, *(c.settings for c in meta.channels)) for meta in topics
        )
        for meta in topics:
            topic = self.get_topic(meta.name)
            topic.settings = meta.settings
            if meta.paused:
                topic.pause()
            for chan in meta.channels:
                channel = self.get_channel(topic, chan.name, now, chan.settings)
                if chan.paused:
                    channel.pause()
                if chan.deferred and channel.backend is not None:
                    channel.disk_deferred = min(chan.deferred, channel.backend.depth)
        self.apply_policies()

    def backends_in_use(self) -> list[Backend]:
        found: list[Backend] = []
        for topic in self.topics.values():
            if topic.backend is not None:
                found.append(topic.backend)
            found.extend(c.backend for c in topic.channels.values() if c.backend is not None)
        return found


def _name(obj: Topic | Channel) -> str:
    return obj.name


def _named_targets(groups: Iterable[Iterable[Settings]]) -> frozenset[str]:
    """Every dead-letter topic named explicitly in these settings."""
    return frozenset(s.dead_letter_topic for group in groups for s in group if s.dead_letter_topic)


def _check_problem(before: Effective, after: Effective, changes: dict[str, object]) -> None:
    """Refuse an update that leaves max_attempts without a valid dead-letter topic, unless the
    problem was there already (from the node's flags) and the update does not touch it."""
    if not after.problem:
        return
    touches = "max_attempts" in changes or "dead_letter_topic" in changes
    if touches or after.problem != before.problem:
        raise SettingsError("INVALID_DEAD_LETTER_TOPIC", after.problem)
