"""nsqlookupd's registration DB (NSQ v1.3.0 ``nsqlookupd/registration_db.go``), pure.

A registration is ``(category, key, subkey)`` with category ``client``, ``topic`` or
``channel``; each holds the producers (nsqd peers) registered under it, keyed by peer id (the
connection's remote ``ip:port``). A producer removed from a registration leaves the key in
place: only explicit deletes and ephemeral emptiness remove keys. ``*`` as key or subkey is a
wildcard. Time is wall-clock int nanoseconds from an injected ``clock`` (Go's ``UnixNano``),
so tests can move it.

Dicts keep insertion order where Go's maps iterate randomly; nothing may rely on either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

from nsqpy.protocol.names import is_ephemeral

#: Go's ``time.Time{}.UnixNano()`` (the year-1 zero time, overflowed): ``tombstoned_at`` of a
#: producer that was never tombstoned, as ``/debug`` shows it.
GO_ZERO_TIME_UNIX_NANO: Final = -6795364578871345152

CLIENT: Final = "client"
TOPIC: Final = "topic"
CHANNEL: Final = "channel"
WILDCARD: Final = "*"

Clock = Callable[[], int]


class Registration(NamedTuple):
    """One DB key."""

    category: str
    key: str
    subkey: str

    def is_match(self, category: str, key: str, subkey: str) -> bool:
        if category != self.category:
            return False
        if key != WILDCARD and key != self.key:
            return False
        return subkey == WILDCARD or subkey == self.subkey


@dataclass(slots=True, eq=False)
class PeerInfo:
    """An identified nsqd; shared by every registration of its connection."""

    id: str
    remote_address: str = ""
    hostname: str = ""
    broadcast_address: str = ""
    tcp_port: int = 0
    http_port: int = 0
    version: str = ""
    #: Wall-clock ns of the IDENTIFY or the latest PING.
    last_update: int = 0

    def to_json(self) -> dict[str, object]:
        """The exported fields, in Go's struct order (``/lookup`` producers)."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclass(slots=True, eq=False)
class Producer:
    """A peer's entry in one registration; tombstones are per (registration, peer)."""

    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: int | None = None

    def tombstone(self, now: int) -> None:
        self.tombstoned = True
        self.tombstoned_at = now

    def is_tombstoned(self, lifetime: int, now: int) -> bool:
        """Tombstoned less than ``lifetime`` ns ago (the flag itself never clears)."""
        return (
            self.tombstoned
            and self.tombstoned_at is not None
            and now - self.tombstoned_at < lifetime
        )

    @property
    def tombstoned_at_ns(self) -> int:
        return GO_ZERO_TIME_UNIX_NANO if self.tombstoned_at is None else self.tombstoned_at


def _needs_filter(key: str, subkey: str) -> bool:
    return key == WILDCARD or subkey == WILDCARD


def filter_registrations(
    registrations: Iterable[Registration], category: str, key: str, subkey: str
) -> list[Registration]:
    return [r for r in registrations if r.is_match(category, key, subkey)]


def keys(registrations: Iterable[Registration]) -> list[str]:
    return [r.key for r in registrations]


def subkeys(registrations: Iterable[Registration]) -> list[str]:
    return [r.subkey for r in registrations]


def filter_by_active(
    producers: Iterable[Producer], inactivity_timeout: int, tombstone_lifetime: int, now: int
) -> list[Producer]:
    """Go's FilterByActive: drop producers silent for longer than ``inactivity_timeout`` ns
    and those tombstoned less than ``tombstone_lifetime`` ns ago."""
    return [
        p
        for p in producers
        if now - p.peer.last_update <= inactivity_timeout
        and not p.is_tombstoned(tombstone_lifetime, now)
    ]


class RegistrationDB:
    """The registrations and their producers."""

    def __init__(self, clock: Clock = time.time_ns) -> None:
        self.clock = clock
        self._map: dict[Registration, dict[str, Producer]] = {}

    # -- Go's RegistrationDB methods -------------------------------------------------------
    def add_registration(self, reg: Registration) -> None:
        self._map.setdefault(reg, {})

    def add_producer(self, reg: Registration, producer: Producer) -> bool:
        """Add ``producer`` under ``reg`` (created if needed); False if its id was there."""
        producers = self._map.setdefault(reg, {})
        if producer.peer.id in producers:
            return False
        producers[producer.peer.id] = producer
        return True

    def remove_producer(self, reg: Registration, peer_id: str) -> tuple[bool, int]:
        """(was it there, producers left); the key itself stays."""
        producers = self._map.get(reg)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, reg: Registration) -> None:
        self._map.pop(reg, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if not _needs_filter(key, subkey):
            reg = Registration(category, key, subkey)
            return [reg] if reg in self._map else []
        return [r for r in self._map if r.is_match(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, one per peer id (the first found)."""
        if not _needs_filter(key, subkey):
            return list(self._map.get(Registration(category, key, subkey), {}).values())
        found: dict[str, Producer] = {}
        for reg, producers in self._map.items():
            if reg.is_match(category, key, subkey):
                for peer_id, producer in producers.items():
                    found.setdefault(peer_id, producer)
        return list(found.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every registration ``peer_id`` is a producer of."""
        return [reg for reg, producers in self._map.items() if peer_id in producers]

    def items(self) -> list[tuple[Registration, list[Producer]]]:
        """A snapshot of every registration and its producers (``/debug``)."""
        return [(reg, list(producers.values())) for reg, producers in self._map.items()]

    # -- what the V1 protocol does with them --------------------------------------------------
    def identify(self, peer: PeerInfo) -> bool:
        """IDENTIFY: stamp ``last_update`` and add the peer to ``("client", "", "")``."""
        peer.last_update = self.clock()
        return self.add_producer(Registration(CLIENT, "", ""), Producer(peer))

    def ping(self, peer: PeerInfo) -> int:
        """PING: refresh ``last_update``; returns ns since the previous update."""
        now = self.clock()
        since, peer.last_update = now - peer.last_update, now
        return since

    def register(self, peer: PeerInfo, topic: str, channel: str = "") -> list[Registration]:
        """REGISTER: the channel (if any) and the topic; returns the newly added keys."""
        wanted = [Registration(CHANNEL, topic, channel)] if channel else []
        wanted.append(Registration(TOPIC, topic, ""))
        return [reg for reg in wanted if self.add_producer(reg, Producer(peer))]

    def unregister(
        self, peer: PeerInfo, topic: str, channel: str = ""
    ) -> tuple[list[Registration], list[Registration]]:
        """UNREGISTER: returns (removed registrations, unexpected channel removals).

        With a channel, only that channel; without, every channel of the topic (which
        nsqlookupd warns about) and then the topic. An emptied ``#ephemeral`` channel or
        topic registration is deleted.
        """
        if channel:
            reg = Registration(CHANNEL, topic, channel)
            return self._remove_ephemeral_aware(reg, peer.id, channel), []
        unexpected = [
            reg
            for reg in self.find_registrations(CHANNEL, topic, WILDCARD)
            if self.remove_producer(reg, peer.id)[0]
        ]
        reg = Registration(TOPIC, topic, "")
        return self._remove_ephemeral_aware(reg, peer.id, topic), unexpected

    def _remove_ephemeral_aware(
        self, reg: Registration, peer_id: str, name: str
    ) -> list[Registration]:
        removed, left = self.remove_producer(reg, peer_id)
        if left == 0 and is_ephemeral(name):
            self.remove_registration(reg)
        return [reg] if removed else []

    def remove_peer(self, peer_id: str) -> list[Registration]:
        """A disconnect: remove the peer from every registration; the keys stay."""
        return [
            reg
            for reg in self.lookup_registrations(peer_id)
            if self.remove_producer(reg, peer_id)[0]
        ]

    def tombstone(self, topic: str, node: str) -> int:
        """Tombstone, for ``topic``, producers whose ``broadcast_address:http_port`` is
        ``node``; returns how many were tombstoned."""
        now = self.clock()
        count = 0
        for producer in self.find_producers(TOPIC, topic, ""):
            peer = producer.peer
            if f"{peer.broadcast_address}:{peer.http_port}" == node:
                producer.tombstone(now)
                count += 1
        return count

    # -- queries of the HTTP API ---------------------------------------------------------------
    def topics(self) -> list[str]:
        return keys(self.find_registrations(TOPIC, WILDCARD, ""))

    def channels(self, topic: str) -> list[str]:
        return subkeys(self.find_registrations(CHANNEL, topic, WILDCARD))

    def has_topic(self, topic: str) -> bool:
        return bool(self.find_registrations(TOPIC, topic, ""))

    def active_producers(
        self, topic: str, inactivity_timeout: int, tombstone_lifetime: int
    ) -> list[PeerInfo]:
        """``/lookup``'s producers: active and not tombstoned."""
        producers = self.find_producers(TOPIC, topic, "")
        now = self.clock()
        return [
            p.peer for p in filter_by_active(producers, inactivity_timeout, tombstone_lifetime, now)
        ]

    def nodes(
        self, inactivity_timeout: int, tombstone_lifetime: int
    ) -> list[tuple[PeerInfo, list[str], list[bool]]]:
        """``/nodes``: each active client peer with its topics and their tombstone flags."""
        now = self.clock()
        clients = filter_by_active(self.find_producers(CLIENT, "", ""), inactivity_timeout, 0, now)
        out: list[tuple[PeerInfo, list[str], list[bool]]] = []
        for client in clients:
            peer = client.peer
            topics = keys(filter_registrations(self.lookup_registrations(peer.id), TOPIC, "*", ""))
            tombstones = [self._topic_tombstoned(t, peer, tombstone_lifetime, now) for t in topics]
            out.append((peer, topics, tombstones))
        return out

    def _topic_tombstoned(self, topic: str, peer: PeerInfo, lifetime: int, now: int) -> bool:
        for producer in self.find_producers(TOPIC, topic, ""):
            if producer.peer is peer:
                return producer.is_tombstoned(lifetime, now)
        return False

    # -- HTTP admin actions --------------------------------------------------------------------
    def create_topic(self, topic: str) -> None:
        self.add_registration(Registration(TOPIC, topic, ""))

    def create_channel(self, topic: str, channel: str) -> None:
        self.add_registration(Registration(CHANNEL, topic, channel))
        self.add_registration(Registration(TOPIC, topic, ""))

    def delete_topic(self, topic: str) -> list[Registration]:
        """Every channel registration of ``topic``, then the topic's; returns the removed."""
        removed = self.find_registrations(CHANNEL, topic, WILDCARD)
        removed += self.find_registrations(TOPIC, topic, "")
        for reg in removed:
            self.remove_registration(reg)
        return removed

    def delete_channel(self, topic: str, channel: str) -> bool:
        """False when there was no such channel registration."""
        found = self.find_registrations(CHANNEL, topic, channel)
        for reg in found:
            self.remove_registration(reg)
        return bool(found)
