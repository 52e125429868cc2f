"""LEASE_COLUMNS' answer (nsqpy extension): encoded by nsqd, decoded by the client."""

from __future__ import annotations

from array import array
from typing import NamedTuple

import pytest

from nsqpy.protocol import lease_columns


class Msg(NamedTuple):
    id: bytes
    body: bytes
    timestamp: int
    attempts: int


def test_round_trip_and_layout() -> None:
    msgs = [Msg(b"0" * 16, b"abc", 1, 1), Msg(b"f" * 16, b"", 2**62, 70000),
            Msg(b"1" * 16, b"z", 3, 2)]  # fmt: skip
    data = lease_columns.encode("l.1", msgs)
    assert data.startswith(b"LEASED_COLUMNS l.1 3 4\n")
    assert len(data) == len(b"LEASED_COLUMNS l.1 3 4\n") + 3 * lease_columns.PER_MESSAGE + 4
    got = lease_columns.decode(data)
    assert (got.name, got.count, bytes(got.ids)) == ("l.1", 3, b"0" * 16 + b"f" * 16 + b"1" * 16)
    stamps, attempts, ends = array("q"), array("H"), array("q")
    stamps.frombytes(got.timestamps)
    attempts.frombytes(got.attempts)
    ends.frombytes(got.ends)
    assert (stamps.tolist(), attempts.tolist(), ends.tolist()) == (
        [1, 2**62, 3], [1, 70000 & 0xFFFF, 2], [3, 3, 4])  # fmt: skip
    assert bytes(got.bodies) == b"abcz"
    empty = lease_columns.decode(lease_columns.encode("e", []))
    assert (empty.count, bytes(empty.bodies)) == (0, b"")


@pytest.mark.parametrize(
    "data",
    [b"LEASED e 0 0", b"LEASED_COLUMNS e 1 0\n", b"LEASED_COLUMNS e x 0\n",
     b"LEASED_COLUMNS e 0 0\nextra", b"no newline at all"],
)  # fmt: skip
def test_malformed_answers_are_refused(data: bytes) -> None:
    with pytest.raises(lease_columns.ColumnsError):
        lease_columns.decode(data)
