"""The compiled delivery loops (_cdelivery) against their pure-Python twins: the same
scenario on a channel gives the same deliveries, the same in-flight state and counters."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twins import DELIVERY, compiled, in_use

from nsqpy.nsqd.core import backend, guid, message, records
from nsqpy.nsqd.core import channel as channel_mod
from nsqpy.nsqd.core import client as client_mod
from nsqpy.nsqd.core import topic as topic_mod
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.client import ClientState
from nsqpy.nsqd.core.message import Message

SLOTS = Message.__slots__


def _slots(msg: Message) -> dict[str, Any]:
    return {name: getattr(msg, name) for name in SLOTS} | {"type": type(msg)}


@given(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(0, 0xFFFF),
    st.binary(min_size=16, max_size=16),
    st.binary(max_size=50),
)
def test_plain_message_twins_agree(ts: int, attempts: int, msg_id: bytes, body: bytes) -> None:
    c = compiled(DELIVERY)
    data = records.encode(ts, attempts, msg_id, body)
    py = message.plain_message(data)
    cm = c.plain_message(data)
    if data[:1] == b"\xff":  # a negative timestamp looks like an extension: both decline
        assert py is None and cm is None
        return
    assert py is not None and cm is not None
    assert _slots(cm) == _slots(py)
    assert (cm.id, cm.body, cm.timestamp, cm.attempts) == (msg_id, body, ts, attempts)


@pytest.mark.parametrize("data", [b"", b"\x00" * 25, records.encode(5, 0, b"i" * 16, b"x", 99)])
def test_plain_message_twins_agree_on_short_and_extended_records(data: bytes) -> None:
    c = compiled(DELIVERY)
    outcomes = []
    for fn in (message.plain_message, c.plain_message):
        try:
            outcomes.append(("ok", fn(data)))
        except ValueError as err:
            outcomes.append(("error", str(err)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == ("ok", None) if data[:1] == b"\xff" else outcomes[0][0] == "error"


def test_delivered_twins_make_the_same_message() -> None:
    c = compiled(DELIVERY)
    entry = (b"a" * 16, b"body", 123)
    assert _slots(c.delivered(entry, 10.0, 60.0)) == _slots(message.delivered(entry, 10.0, 60.0))


def test_with_tokens_twins_make_the_same_messages() -> None:
    c = compiled(DELIVERY)

    def items() -> list[message.Queued]:
        again = Message(b"b" * 16, b"requeued", 7)
        again.attempts = 2
        letter = message.DeadLetter(b"c" * 16, b"dead", 8, "t:ch")
        return [(b"a" * 16, b"fresh", 6), again, letter, (b"d" * 16, b"left out", 9)]

    pure = message.with_tokens(items(), range(11, 14))
    fast = c.with_tokens(items(), range(11, 14))
    assert [_slots(m) for m in fast] == [_slots(m) for m in pure]
    assert [m.token for m in fast] == [11, 12, 13]
    assert [type(m) for m in fast] == [Message, Message, message.DeadLetter]
    for fn in (message.with_tokens, c.with_tokens):
        with pytest.raises(ValueError):
            fn(items()[:1], range(2))


def test_compiled_messages_are_left_out_of_the_cycle_collector() -> None:
    """The compiled twin untracks the messages it makes: safe only while every slot of
    Message holds atoms (bytes, int, float, str), which this pins down."""
    import gc

    c = compiled(DELIVERY)
    made = c.delivered((b"a" * 16, b"body", 123), 10.0, 60.0)
    assert type(made) is Message
    assert not gc.is_tracked(made)
    assert set(Message.__slots__) == {
        "attempts", "body", "deadline", "deferred", "delivery_ts", "id", "timestamp", "token"
    }
    atoms = (bytes, int, float, str)
    assert all(isinstance(getattr(made, name), atoms) for name in Message.__slots__)


@given(st.integers(0, (1 << 40)), st.integers(0, 4095), st.integers(0, 200))
def test_render_ids_twins_agree(prefix: int, first: int, take: int) -> None:
    c = compiled(DELIVERY)
    take = min(take, 4096 - first)
    a: list[bytes] = [b"x"]
    b: list[bytes] = [b"x"]
    guid.py_render_ids(a, prefix, first, take)
    c.render_ids(b, prefix, first, take)
    assert a == b and all(len(i) == 16 for i in a[1:])


class _Client:
    def __init__(self, cid: int, log: list[tuple[Any, ...]], timeout: float) -> None:
        self.log = log
        self.state = ClientState(cid, self.write, msg_timeout=timeout)

    def write(self, m: Message) -> None:
        self.log.append(("write", self.state.id, m.id, m.attempts, m.deadline, m.delivery_ts))


def _scenario() -> list[tuple[Any, ...]]:
    """Publishing, filling, FIN (good, unknown, not owned), REQ, timeouts on one channel."""
    log: list[tuple[Any, ...]] = []
    ch = Channel("t", "c", mem_queue_size=1000, max_msg_timeout=900.0)
    a, b = _Client(1, log, 30.0), _Client(2, log, 45.0)
    for client in (a, b):
        ch.add_client(client.state)
    ids = [b"%016x" % n for n in range(40)]
    entries: list[message.Queued] = [(i, b"body-" + i, 1000 + n) for n, i in enumerate(ids)]
    ch.put_many(entries[:10], 1.0)  # nobody ready: queued
    ch.set_rdy(a.state, 4, 2.0)  # fill from the queue
    ch.set_rdy(b.state, 3, 2.5)
    ch.put_many(entries[10:20], 3.0)
    log.append(("fin", ch.finish_many(a.state, [ids[0], ids[4], b"nope" * 4, ids[1]], 4.0)))
    ch.requeue(b.state, ids[4] if ids[4] in b.state.in_flight else ids[5], 0.0, 5.0)
    ch.put_many(entries[20:], 6.0)
    ch.set_rdy(a.state, 10, 7.0)
    ch.process(100.0)  # every deadline passed: all in flight time out and go again
    log.append(("fin", ch.finish_many(b.state, list(b.state.in_flight)[:2], 101.0)))
    log.extend(
        (
            "state",
            client.state.id,
            [(k, _slots(m)) for k, m in client.state.in_flight.items()],
            client.state.message_count,
            client.state.finish_count,
            client.state.in_ready,
        )
        for client in (a, b)
    )
    queued = [m if isinstance(m, tuple) else _slots(m) for m in ch.queue]
    log.append(("channel", ch.in_flight_count, ch.timeout_count, ch.requeue_count, queued))
    return log


def test_channel_loops_twins_do_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    c = compiled(DELIVERY)
    for name, fn in (
        ("_deliver", channel_mod.py_deliver),
        ("_fill_window", channel_mod.py_fill),
        ("_finish_batch", channel_mod.py_finish_many),
        ("_plain_message", message.plain_message),
    ):
        monkeypatch.setattr(channel_mod, name, fn)
    monkeypatch.setattr(client_mod, "_new_in_flight", dict)
    pure = _scenario()
    for name, fn in (
        ("_deliver", c.deliver),
        ("_fill_window", c.fill),
        ("_finish_batch", c.finish_many),
        ("_plain_message", c.plain_message),
    ):
        monkeypatch.setattr(channel_mod, name, fn)
    monkeypatch.setattr(client_mod, "_new_in_flight", c.InFlight)
    fast = _scenario()
    monkeypatch.setattr(client_mod, "_new_in_flight", dict)  # the loops take any mapping
    fast_on_dicts = _scenario()
    assert sum(1 for e in pure if e[0] == "write") > 25  # the scenario did deliver
    assert fast == pure
    assert fast_on_dicts == pure


def _redelivery(deliver: Any) -> list[Any]:
    """Message objects (durable mode's, with tokens; requeued ones; a dead letter) handed
    to ``deliver``: what each client got and holds in flight."""
    log: list[tuple[Any, ...]] = []
    ch = Channel("t", "c", mem_queue_size=1000, max_msg_timeout=900.0)
    a, b = _Client(1, log, 30.0), _Client(2, log, 45.0)
    for client, rdy in ((a, 3), (b, 2)):
        ch.add_client(client.state)
        ch.set_rdy(client.state, rdy, 1.0)
    msgs: list[message.Queued] = [Message(b"%016x" % n, b"b", 1000 + n) for n in range(4)]
    msgs[1].attempts = 7
    msgs[2].token = 12
    msgs.append(message.DeadLetter(b"d" * 16, b"x", 5, "t:c"))
    msgs.append(Message(b"q" * 16, b"y", 6))
    sent = deliver(ch, msgs, 2.5)
    states = [[(k, _slots(m)) for k, m in client.state.in_flight.items()] for client in (a, b)]
    return [sent, log, states, ch.in_flight_count]


def test_deliver_twins_redeliver_message_objects_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    c = compiled(DELIVERY)
    monkeypatch.setattr(client_mod, "_new_in_flight", dict)
    pure = _redelivery(channel_mod.py_deliver)
    monkeypatch.setattr(client_mod, "_new_in_flight", c.InFlight)
    assert pure == _redelivery(c.deliver)
    sent, log, states, _ = pure
    assert sent == 5  # the windows' room: 3 + 2
    assert [e[3] for e in log] == [1, 8, 1, 1, 1]  # attempts, one more each
    assert all(m["deadline"] in (32.5, 47.5) for s in states for _, m in s)
    assert any(m["token"] == 12 for s in states for _, m in s)


def test_the_selected_twins_are_the_compiled_ones_unless_pure_python() -> None:
    c = in_use(DELIVERY)
    if c is None:
        assert type(ClientState(1, print).in_flight) is dict
        assert channel_mod._deliver is channel_mod.py_deliver
        assert guid._render_ids is guid.py_render_ids
        assert topic_mod._fresh_entries is message.fresh_entries
        return
    assert type(ClientState(1, print).in_flight) is c.InFlight
    assert channel_mod._deliver is c.deliver
    assert channel_mod._fill_window is c.fill
    assert channel_mod._finish_batch is c.finish_many
    assert guid._render_ids is c.render_ids
    assert topic_mod._fresh_entries is c.fresh_entries


def test_record_layout_the_twins_read() -> None:
    data = records.encode(7, 3, b"i" * 16, b"body")
    assert data == struct.pack(">qH", 7, 3) + b"i" * 16 + b"body"


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=16, max_size=16), st.binary(max_size=40), st.integers(0, 1 << 62)
        ),
        max_size=10,
    ),
    st.integers(0, 3),
)
def test_plain_records_twins_agree(entries: list[tuple[bytes, bytes, int]], attempts: int) -> None:
    c = compiled(DELIVERY)
    msgs: list[message.Queued] = list(entries)
    for msg_id, body, ts in entries[:2]:  # messages already delivered: full records
        m = Message(msg_id, body, ts, deferred=1.5 if attempts % 2 else 0.0)
        m.attempts = attempts
        msgs.append(m)
    assert c.plain_records(msgs) == backend.py_encode(msgs)
    assert backend.py_encode(list(entries)) == [records.encode(ts, 0, i, b) for i, b, ts in entries]


@given(
    st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.binary(max_size=40)), max_size=20)
)
def test_fresh_entries_twins_agree(pairs: list[tuple[bytes, bytes]]) -> None:
    c = compiled(DELIVERY)
    ids = [i for i, _ in pairs]
    bodies = [b for _, b in pairs]
    pure = message.fresh_entries(ids, bodies, 1234)
    assert c.fresh_entries(ids, bodies, 1234) == pure
    assert c.fresh_entries(tuple(ids), tuple(bodies), 1234) == pure
    assert pure == ([(i, b, 1234) for i, b in pairs], sum(len(b) for b in bodies))


def test_fresh_entries_twins_refuse_unequal_lists_alike() -> None:
    c = compiled(DELIVERY)
    for ids, bodies in (([b"a" * 16], []), ([], [b"x"])):
        errors = []
        for fn in (message.fresh_entries, c.fresh_entries):
            with pytest.raises(ValueError) as err:
                fn(ids, bodies, 1)
            errors.append(str(err.value))
        assert errors[0] == errors[1]


def test_finished_messages_are_reused_only_when_nothing_else_holds_them() -> None:
    """The compiled FIN keeps a finished message for the next delivery when it alone held
    it; one still referenced elsewhere (here, by the test) is left untouched."""
    c = compiled(DELIVERY)
    ch = Channel("t", "c", mem_queue_size=1000, max_msg_timeout=900.0)
    sent: list[tuple[bytes, int]] = []
    client = ClientState(1, lambda m: sent.append((m.id, m.attempts)), msg_timeout=30.0)
    ch.add_client(client)
    ch.set_rdy(client, 10, 1.0)
    ids = [b"%016x" % n for n in range(10)]
    entries: list[message.Queued] = [(i, b"body-" + i, 100 + n) for n, i in enumerate(ids)]
    assert c.deliver(ch, entries[:5], 2.0) == 5
    held = client.in_flight[ids[0]]
    before = c.spare_count()
    assert c.finish_many(ch, client, ids[:5], 3.0) == []
    assert c.spare_count() == before + 4  # all but the held one
    assert c.deliver(ch, entries[5:], 4.0) == 5
    assert c.spare_count() == max(before + 4 - 5, 0)  # the 5 deliveries take spares first
    assert _slots(held) == _slots(message.delivered(entries[0], 2.0, 30.0))
    expected = [_slots(message.delivered(e, 4.0, 30.0)) for e in entries[5:]]
    assert [_slots(m) for m in client.in_flight.values()] == expected


def test_a_reused_message_is_untracked_even_if_python_made_it() -> None:
    """A message made in Python (``Message(...)``: tracked by the cycle collector) that is
    finished and reused comes back untracked, as every message the compiled core makes."""
    import gc

    c = compiled(DELIVERY)
    ch = Channel("t", "c", mem_queue_size=1000, max_msg_timeout=900.0)
    client = ClientState(1, lambda m: None, msg_timeout=30.0)
    ch.add_client(client)
    ch.set_rdy(client, 10, 1.0)
    made = Message(b"m" * 16, b"python", 7)
    assert gc.is_tracked(made)
    assert c.deliver(ch, [made], 2.0) == 1
    del made  # the in-flight table holds it alone now
    assert c.finish_many(ch, client, [b"m" * 16], 3.0) == []
    assert c.spare_count() >= 1
    taken = c.with_tokens([(b"n" * 16, b"fresh", 8)] * c.spare_count(), range(c.spare_count()))
    assert not any(gc.is_tracked(m) for m in taken)
    assert c.spare_count() == 0
