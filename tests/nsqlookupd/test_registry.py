"""The registration DB on an injected clock: registrations, ephemeral rules, wildcards,
inactivity expiry and tombstones (NSQ v1.3.0 ``registration_db.go`` semantics)."""

from __future__ import annotations

import pytest

from nsqpy.nsqlookupd.registry import (
    GO_ZERO_TIME_UNIX_NANO,
    PeerInfo,
    Producer,
    Registration,
    RegistrationDB,
    filter_by_active,
)

from .conftest import SECOND, FakeClock

INACTIVE = 300 * SECOND
TOMBSTONE = 45 * SECOND


def make_peer(db: RegistrationDB, n: int = 1) -> PeerInfo:
    peer = PeerInfo(
        id=f"10.0.0.{n}:5000{n}",
        remote_address=f"10.0.0.{n}:5000{n}",
        hostname=f"host{n}",
        broadcast_address=f"nsqd{n}",
        tcp_port=4150,
        http_port=4151,
        version="1.3.0",
    )
    db.identify(peer)
    return peer


@pytest.fixture
def db(clock: FakeClock) -> RegistrationDB:
    return RegistrationDB(clock)


def lookup(db: RegistrationDB, topic: str) -> list[str]:
    return [p.broadcast_address for p in db.active_producers(topic, INACTIVE, TOMBSTONE)]


def test_identify_registers_the_client(db: RegistrationDB, clock: FakeClock) -> None:
    peer = make_peer(db)
    assert peer.last_update == clock.now
    assert db.lookup_registrations(peer.id) == [Registration("client", "", "")]
    assert not db.identify(peer)  # already there


def test_register_channel_adds_channel_and_topic(db: RegistrationDB) -> None:
    peer = make_peer(db)
    added = db.register(peer, "t", "c")
    assert added == [Registration("channel", "t", "c"), Registration("topic", "t", "")]
    assert db.register(peer, "t", "c") == []
    assert db.register(peer, "t2") == [Registration("topic", "t2", "")]
    assert db.topics() == ["t", "t2"]
    assert db.channels("t") == ["c"]
    assert db.channels("t2") == []


def test_unregister_channel_keeps_key_unless_ephemeral(db: RegistrationDB) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    db.register(a, "t", "c")
    db.register(a, "t", "e#ephemeral")
    db.register(b, "t", "e#ephemeral")
    assert db.unregister(a, "t", "c") == ([Registration("channel", "t", "c")], [])
    assert db.unregister(a, "t", "c") == ([], [])
    assert db.channels("t") == ["c", "e#ephemeral"]  # an emptied normal channel stays listed
    db.unregister(a, "t", "e#ephemeral")
    assert db.channels("t") == ["c", "e#ephemeral"]  # b still has it
    db.unregister(b, "t", "e#ephemeral")
    assert db.channels("t") == ["c"]
    assert lookup(db, "t") == ["nsqd1", "nsqd2"]  # the topic registrations are untouched


def test_unregister_topic_removes_channels_too(db: RegistrationDB) -> None:
    peer = make_peer(db)
    db.register(peer, "t", "c1")
    db.register(peer, "t", "c2")
    removed, unexpected = db.unregister(peer, "t")
    assert removed == [Registration("topic", "t", "")]
    assert unexpected == [Registration("channel", "t", "c1"), Registration("channel", "t", "c2")]
    assert db.topics() == ["t"]
    assert db.channels("t") == ["c1", "c2"]
    assert db.find_producers("channel", "t", "*") == []
    assert lookup(db, "t") == []


def test_ephemeral_topic_deleted_when_its_last_producer_leaves(db: RegistrationDB) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    db.register(a, "t#ephemeral")
    db.register(b, "t#ephemeral")
    db.unregister(a, "t#ephemeral")
    assert db.topics() == ["t#ephemeral"]
    db.unregister(b, "t#ephemeral")
    assert db.topics() == []
    # Unregistering from nothing is harmless.
    assert db.unregister(b, "t#ephemeral") == ([], [])


def test_remove_peer_everywhere_keeps_keys(db: RegistrationDB) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    db.register(a, "t", "c")
    db.register(b, "t", "c")
    db.register(a, "x#ephemeral", "y#ephemeral")
    removed = db.remove_peer(a.id)
    assert set(removed) == {
        Registration("client", "", ""),
        Registration("channel", "t", "c"),
        Registration("topic", "t", ""),
        Registration("channel", "x#ephemeral", "y#ephemeral"),
        Registration("topic", "x#ephemeral", ""),
    }
    assert db.lookup_registrations(a.id) == []
    assert db.topics() == ["t", "x#ephemeral"]  # even ephemeral keys stay on disconnect
    assert db.channels("x#ephemeral") == ["y#ephemeral"]
    assert lookup(db, "t") == ["nsqd2"]


def test_wildcards(db: RegistrationDB) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    db.register(a, "t1", "c1")
    db.register(b, "t1", "c2")
    db.register(b, "t2", "c1")
    assert db.find_registrations("channel", "*", "c1") == [
        Registration("channel", "t1", "c1"),
        Registration("channel", "t2", "c1"),
    ]
    assert db.find_registrations("channel", "t1", "*") == [
        Registration("channel", "t1", "c1"),
        Registration("channel", "t1", "c2"),
    ]
    assert db.find_registrations("topic", "*", "") == [
        Registration("topic", "t1", ""),
        Registration("topic", "t2", ""),
    ]
    assert db.find_registrations("topic", "nope", "") == []
    # Producers under a wildcard come once per peer.
    assert [p.peer for p in db.find_producers("channel", "*", "*")] == [a, b]
    assert [p.peer for p in db.find_producers("topic", "t1", "")] == [a, b]
    assert db.find_producers("topic", "nope", "") == []
    assert Registration("channel", "t", "c").is_match("channel", "*", "*")
    assert not Registration("channel", "t", "c").is_match("topic", "*", "*")
    assert not Registration("channel", "t", "c").is_match("channel", "t", "d")


def test_inactive_producers_expire_and_ping_revives(db: RegistrationDB, clock: FakeClock) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    db.register(a, "t")
    db.register(b, "t")
    clock.advance(300)
    assert db.ping(b) == 300 * SECOND
    assert lookup(db, "t") == ["nsqd1", "nsqd2"]  # exactly the timeout is still active
    clock.advance(0.000000001)
    assert lookup(db, "t") == ["nsqd2"]
    assert [peer.id for peer, _, _ in db.nodes(INACTIVE, TOMBSTONE)] == [b.id]
    db.ping(a)
    assert lookup(db, "t") == ["nsqd1", "nsqd2"]


def test_register_does_not_refresh_last_update(db: RegistrationDB, clock: FakeClock) -> None:
    # As in Go v1.3.0, only IDENTIFY and PING stamp last_update.
    peer = make_peer(db)
    clock.advance(400)
    db.register(peer, "t")
    assert lookup(db, "t") == []


def test_tombstone_hides_producer_for_its_lifetime(db: RegistrationDB, clock: FakeClock) -> None:
    a, b = make_peer(db, 1), make_peer(db, 2)
    for peer in (a, b):
        db.register(peer, "t")
        db.register(peer, "other")
    assert db.tombstone("t", "nsqd1:4151") == 1
    assert db.tombstone("t", "nsqd1:4150") == 0  # the node is broadcast_address:http_port
    assert db.tombstone("nope", "nsqd1:4151") == 0
    assert lookup(db, "t") == ["nsqd2"]
    assert lookup(db, "other") == ["nsqd1", "nsqd2"]  # per (topic, producer)
    nodes = {peer.id: (topics, flags) for peer, topics, flags in db.nodes(INACTIVE, TOMBSTONE)}
    assert nodes[a.id] == (["t", "other"], [True, False])  # not hidden from /nodes
    assert nodes[b.id] == (["t", "other"], [False, False])
    clock.advance(44.999)
    assert lookup(db, "t") == ["nsqd2"]
    clock.advance(0.001)
    assert lookup(db, "t") == ["nsqd1", "nsqd2"]
    (producer,) = [p for p in db.find_producers("topic", "t", "") if p.peer is a]
    assert producer.tombstoned  # the flag stays; it just stops counting
    assert db.nodes(INACTIVE, TOMBSTONE)[0][2] == [False, False]


def test_reregistration_after_tombstone(db: RegistrationDB, clock: FakeClock) -> None:
    peer = make_peer(db)
    db.register(peer, "t")
    db.tombstone("t", "nsqd1:4151")
    # The same connection registering again keeps its (tombstoned) producer.
    assert db.register(peer, "t") == []
    assert lookup(db, "t") == []
    # Deleting the topic on that nsqd (UNREGISTER) and recreating it starts afresh.
    db.unregister(peer, "t")
    db.register(peer, "t")
    assert lookup(db, "t") == ["nsqd1"]
    # So does reconnecting, which gives a new peer id.
    db.tombstone("t", "nsqd1:4151")
    db.remove_peer(peer.id)
    again = PeerInfo(id="10.0.0.1:60000", broadcast_address="nsqd1", http_port=4151)
    db.identify(again)
    db.register(again, "t")
    assert lookup(db, "t") == ["nsqd1"]


def test_filter_by_active_directly(clock: FakeClock) -> None:
    peer = PeerInfo(id="p", last_update=clock.now)
    fresh, tombstoned = Producer(peer), Producer(peer)
    tombstoned.tombstone(clock.now)
    assert filter_by_active([fresh, tombstoned], INACTIVE, TOMBSTONE, clock.now) == [fresh]
    assert filter_by_active([fresh, tombstoned], INACTIVE, 0, clock.now) == [fresh, tombstoned]
    assert Producer(peer).tombstoned_at_ns == GO_ZERO_TIME_UNIX_NANO
    assert tombstoned.tombstoned_at_ns == clock.now


def test_admin_create_and_delete(db: RegistrationDB) -> None:
    db.create_topic("t")
    db.create_topic("t")
    assert db.topics() == ["t"]
    assert db.has_topic("t")
    db.create_channel("u", "c")
    assert db.topics() == ["t", "u"]
    assert db.channels("u") == ["c"]
    assert db.delete_channel("u", "c")
    assert not db.delete_channel("u", "c")
    db.create_channel("u", "c1")
    db.create_channel("u", "c2")
    removed = db.delete_topic("u")
    assert removed == [
        Registration("channel", "u", "c1"),
        Registration("channel", "u", "c2"),
        Registration("topic", "u", ""),
    ]
    assert db.topics() == ["t"]
    assert db.delete_topic("u") == []


def test_items_snapshot(db: RegistrationDB) -> None:
    peer = make_peer(db)
    db.register(peer, "t")
    db.create_topic("empty")
    items = dict(db.items())
    assert [p.peer for p in items[Registration("topic", "t", "")]] == [peer]
    assert items[Registration("topic", "empty", "")] == []
