"""A durable queue's unfinished tokens (``storage.unfinished``): the pure-Python twin (a set)
and the compiled one (``_cunfinished``, a byte per token) behave alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twins import compiled, in_use

from nsqpy.nsqd.storage import unfinished
from nsqpy.nsqd.storage.unfinished import Unfinished

UNFINISHED = "nsqpy.nsqd.storage._cunfinished"


def _twins() -> list[Callable[[], Unfinished]]:
    return [unfinished.PyUnfinished, compiled(UNFINISHED).Unfinished]


def test_runs_come_in_and_finish_in_any_order() -> None:
    for make in _twins():
        tokens = make()
        tokens.add_range(1, 201)  # an MPUB of 200 taken at once
        tokens.add_range(201, 202)  # one record read back
        assert (len(tokens), tokens.oldest()) == (201, 1)
        assert tokens.discard_many([5, 1, 2, 999, -1, 0]) is True  # unknown ones are ignored
        assert tokens.discard_many([1, 2, 1000]) is False  # already gone: nothing moved
        assert (len(tokens), tokens.oldest()) == (198, 3)
        assert tokens.discard(3) is True
        assert tokens.discard(3) is False
        assert tokens.oldest() == 4
        assert tokens.discard_many(list(range(4, 202))) is True
        assert len(tokens) == 0


def test_finishing_in_order_moves_the_oldest_one_token_at_a_time() -> None:
    for make in _twins():
        tokens = make()
        tokens.add_range(1, 101)
        for token in range(1, 100):
            assert tokens.discard(token) is True
            assert (len(tokens), tokens.oldest()) == (100 - token, token + 1)
        tokens.add_range(101, 151)
        assert tokens.discard_many(list(range(100, 140))) is True
        assert (len(tokens), tokens.oldest()) == (11, 140)


def test_empty_and_cleared_sets_have_no_oldest_and_keep_growing() -> None:
    for make in _twins():
        tokens = make()
        with pytest.raises(ValueError, match="no unfinished token"):
            tokens.oldest()
        tokens.add_range(1, 11)
        tokens.clear()  # the queue emptied: the tokens given out no longer count
        assert len(tokens) == 0
        assert tokens.discard(5) is False
        with pytest.raises(ValueError, match="no unfinished token"):
            tokens.oldest()
        with pytest.raises(ValueError, match="not above every token added"):
            tokens.add_range(10, 12)  # tokens only grow, across a clear too
        tokens.add_range(11, 11)  # an empty run changes nothing
        tokens.add_range(20, 22)  # a gap: 11..19 were never handed out
        assert (len(tokens), tokens.oldest()) == (2, 20)
        assert tokens.discard(15) is False


def test_an_old_token_held_while_many_runs_pass_is_still_the_oldest() -> None:
    # the compiled twin moves its bytes and regrows its buffer past 64 KiB
    for make in _twins():
        tokens = make()
        next_token = 1
        for _ in range(1000):
            tokens.add_range(next_token, next_token + 200)
            tokens.discard_many(list(range(next_token + (next_token == 1), next_token + 200)))
            next_token += 200
        assert (len(tokens), tokens.oldest()) == (1, 1)
        tokens.discard(1)
        tokens.add_range(next_token, next_token + 3)
        assert (len(tokens), tokens.oldest()) == (3, next_token)


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 40), st.integers(0, 300)),
        st.tuples(st.just("discard"), st.integers(-5, 2000)),
        st.tuples(st.just("many"), st.lists(st.integers(-5, 2000), max_size=50)),
        st.tuples(st.just("oldest")),
        st.tuples(st.just("clear")),
    ),
    max_size=80,
)


@given(_ops)
def test_both_twins_agree(ops: list[tuple[object, ...]]) -> None:
    pure, comp = (make() for make in _twins())
    end = 1
    for op in ops:
        results = []
        for tokens in (pure, comp):
            if op[0] == "add":
                gap, size = op[1], op[2]
                assert isinstance(gap, int) and isinstance(size, int)
                tokens.add_range(end + gap, end + gap + size)
                results.append(None)
            elif op[0] == "discard":
                assert isinstance(op[1], int)
                results.append(tokens.discard(op[1]))
            elif op[0] == "many":
                assert isinstance(op[1], list)
                results.append(tokens.discard_many(op[1]))
            elif op[0] == "oldest":
                results.append(tokens.oldest() if len(tokens) else None)
            else:
                tokens.clear()
                results.append(None)
            results.append(len(tokens))
        assert results[:2] == results[2:], op
        if op[0] == "add" and op[2]:
            end += op[1] + op[2]  # type: ignore[operator]


def test_the_selected_twin_is_the_compiled_one_unless_pure_python() -> None:
    c = in_use(UNFINISHED)
    want = unfinished.PyUnfinished if c is None else c.Unfinished
    assert unfinished.unfinished_tokens is want
