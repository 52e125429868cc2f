"""The compiled in-flight table (``_cdelivery.InFlight``) against its twin, the dict: the same
operations give the same answers, errors and order, through rebuilds and out-of-order
removals; what it refuses; and that it lets go of every message it held."""

from __future__ import annotations

import gc
import weakref
from collections.abc import MutableMapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twins import DELIVERY, compiled

# ids of nsqd's shape (a shared prefix) and others; a few, so that operations meet often
IDS = [b"%016x" % n for n in range(3)] + [b"1776d6f3a2e04" + b"%03x" % n for n in range(4)]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["set", "pop", "pop_default", "get", "del", "in", "getitem", "clear"]),
        st.sampled_from(IDS),
        st.integers(0, 1000),
    ),
    max_size=100,
)


def _apply(table: Any, ops: list[tuple[str, bytes, int]]) -> list[Any]:
    """Every operation's outcome, then the final contents in order."""
    out: list[Any] = []
    for op, key, value in ops:
        try:
            if op == "set":
                table[key] = value
                out.append(None)
            elif op == "pop":
                out.append(table.pop(key))
            elif op == "pop_default":
                out.append(table.pop(key, "gone"))
            elif op == "get":
                out.append(table.get(key))
            elif op == "del":
                del table[key]
                out.append(None)
            elif op == "in":
                out.append(key in table)
            elif op == "getitem":
                out.append(table[key])
            else:
                table.clear()
                out.append(None)
        except KeyError as err:
            out.append(("KeyError", err.args))
        out.append(len(table))
    out.append((list(table), list(table.keys()), list(table.values()), list(table.items())))
    return out


@settings(max_examples=300)
@given(OPS)
def test_the_table_answers_as_a_dict_does(ops: list[tuple[str, bytes, int]]) -> None:
    c = compiled(DELIVERY)
    assert _apply(c.InFlight(), ops) == _apply({}, ops)


def test_long_fifo_churn_with_stragglers_keeps_order_and_contents() -> None:
    """A consumer's pattern: deliveries appended, FINs mostly oldest first, some late, some
    TOUCHed (removed and set again, so moved last); many rebuilds on the way."""
    c = compiled(DELIVERY)
    tables: list[Any] = [c.InFlight(), {}]
    for table in tables:
        for n in range(20_000):
            table[b"%016x" % n] = n
            if n >= 300 and n % 7:
                table.pop(b"%016x" % (n - 300), None)
            if n % 97 == 0 and n >= 50:
                key = b"%016x" % (n - 50)
                if key in table:
                    table[key] = table.pop(key)  # TOUCH: re-inserted last
    fast, pure = tables
    assert len(fast) == len(pure) > 2800
    assert list(fast.items()) == list(pure.items())
    assert fast == pure and fast != {}


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (1, 2, 0)])
def test_a_removed_id_is_gone_wherever_it_stood(order: tuple[int, int, int]) -> None:
    """The oldest (removed without a probe), the newest and one in between."""
    table = compiled(DELIVERY).InFlight()
    keys = [b"%016x" % n for n in range(3)]
    for key in keys:
        table[key] = key
    for n, i in enumerate(order):
        assert table.pop(keys[i]) == keys[i]
        assert keys[i] not in table and table.get(keys[i]) is None
        assert table.pop(keys[i], "gone") == "gone" and len(table) == 2 - n
        assert list(table) == [k for k in keys if k in table]
    table[keys[0]] = "back"
    assert list(table.items()) == [(keys[0], "back")]


def test_setting_a_present_id_keeps_its_place() -> None:
    table = compiled(DELIVERY).InFlight()
    for key in (b"a" * 16, b"b" * 16, b"c" * 16):
        table[key] = key
    table[b"a" * 16] = "again"
    assert list(table.items()) == [
        (b"a" * 16, "again"),
        (b"b" * 16, b"b" * 16),
        (b"c" * 16, b"c" * 16),
    ]


@pytest.mark.parametrize("key", [b"short", b"x" * 17, "a" * 16, bytearray(16), 5])
def test_only_16_byte_ids_go_in(key: Any) -> None:
    table = compiled(DELIVERY).InFlight()
    with pytest.raises(TypeError, match="16 bytes"):
        table[key] = 1
    assert key not in table and table.get(key, "no") == "no" and table.pop(key, "no") == "no"
    with pytest.raises(KeyError):
        table[key]
    assert len(table) == 0


def test_none_is_not_a_message() -> None:
    table = compiled(DELIVERY).InFlight()
    with pytest.raises(TypeError, match="None"):
        table[b"a" * 16] = None
    assert len(table) == 0


class _Held:
    """A message stand-in that a weak reference can watch."""


def test_every_value_is_released() -> None:
    c = compiled(DELIVERY)
    table = c.InFlight()
    held = [_Held() for _ in range(1000)]
    watch = [weakref.ref(h) for h in held]
    for n, value in enumerate(held):
        table[b"%016x" % n] = value
    del held, value
    table.pop(b"%016x" % 0)  # the oldest, without a probe
    table.pop(b"%016x" % 500)  # from the middle
    del table[b"%016x" % 999]
    table[b"%016x" % 1] = _Held()  # replaced in place
    assert [w() is None for w in watch[:3]] == [True, True, False]
    assert watch[500]() is None and watch[999]() is None
    table.clear()
    assert all(w() is None for w in watch) and len(table) == 0
    table[b"%016x" % 7] = kept = _Held()
    last = weakref.ref(kept)
    del kept, table
    gc.collect()
    assert last() is None  # released with the table


def test_it_is_a_mutable_mapping() -> None:
    table = compiled(DELIVERY).InFlight()
    table[b"a" * 16] = 1
    assert isinstance(table, MutableMapping)
    assert table == {b"a" * 16: 1} and repr(table) == "InFlight({b'aaaaaaaaaaaaaaaa': 1})"
