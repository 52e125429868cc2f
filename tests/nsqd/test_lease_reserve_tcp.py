"""LEASE_RESERVE and LEASE_COLUMNS (nsqpy extensions) on a real nsqd: the Spark source's forms.

LEASE_RESERVE answers ``LEASED`` alone, lets a lease that sealed empty go (so a planner can poll
an idle channel under one name), and bounds a new lease by publish time (``before_ns``).
LEASE_COLUMNS answers a lease's messages column by column in one frame.
"""

from __future__ import annotations

import time
from array import array

import aiohttp
from test_dead_letter_api import channel_stats, http
from test_lease_api import setup
from test_lease_tcp import leasing, read_lease
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.protocol import lease_columns


async def test_reserve_answers_leased_alone_and_executors_fetch_the_same_lease(
    nsqd: NSQD,
) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"aaaa", b"bbbb", b"cccc")
        planner = await leasing(nsqd.tcp_port)
        planner.cmd("LEASE_RESERVE t c b1 10 8 0")
        # the very next frame is the response: no message frames before it
        frame = await planner.frame()
        assert (frame.frame_type, frame.data) == (0, b"LEASED b1 2 8")
        planner.cmd("LEASE_RESERVE t c b1")  # the short form finds it
        assert await planner.response() == b"LEASED b1 2 8"
        planner.cmd("LEASE_RESERVE t c b1 10 8 0 60000")  # asked again in full: the same
        assert await planner.response() == b"LEASED b1 2 8"
        planner.cmd("LEASE_RESERVE t c b1 11 8 0")
        assert await planner.error() == (
            b"E_LEASE_MISMATCH LEASE_RESERVE b1 failed LEASE_MISMATCH"
        )

        executor = await leasing(nsqd.tcp_port)
        executor.cmd("LEASE t c b1")
        messages, done = await read_lease(executor)
        assert ([m.body for m in messages], done) == ([b"aaaa", b"bbbb"], b"LEASED b1 2 8")
        assert [m.attempts for m in messages] == [1, 1]  # reserving was the one delivery
        stats = await channel_stats(api, "t", "c")
        assert (stats["depth"], stats["in_flight_count"], stats["lease_count"]) == (1, 2, 1)
        executor.cmd("LEASE_FIN t c b1")
        assert await executor.response() == b"OK"
        planner.cmd("LEASE_RESERVE t c b1")
        assert await planner.error() == b"E_LEASE_FINISHED LEASE_RESERVE b1 failed LEASE_FINISHED"
        await planner.close()
        await executor.close()


async def test_a_reserve_that_took_nothing_keeps_no_lease(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api)
        planner = await leasing(nsqd.tcp_port)
        planner.cmd("LEASE_RESERVE t c next 5 0 0")
        assert await planner.response() == b"LEASED next 0 0"
        planner.cmd("LEASE_RESERVE t c next 5 0 50")  # a wait that ends empty: the same
        assert await planner.response() == b"LEASED next 0 0"
        stats = await channel_stats(api, "t", "c")
        assert (stats["lease_count"], stats["in_flight_count"]) == (0, 0)
        planner.cmd("LEASE_FIN t c next")
        assert await planner.error() == b"E_LEASE_NOT_FOUND LEASE_FIN next failed LEASE_NOT_FOUND"

        # the name is free: once a message comes, the same name takes it
        assert (await api.post("/pub?topic=t", b"late")).status == 200
        planner.cmd("LEASE_RESERVE t c next 5 0 0")
        assert await planner.response() == b"LEASED next 1 4"
        # a plain LEASE that took nothing keeps its (empty) lease, as before
        planner.cmd("LEASE t c plain 5 0 0")
        assert await read_lease(planner) == ([], b"LEASED plain 0 0")
        planner.cmd("LEASE_FIN t c plain")
        assert await planner.response() == b"OK"
        await planner.close()


async def test_a_waiting_reserve_is_answered_at_its_seal(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api)
        planner = await leasing(nsqd.tcp_port)
        planner.cmd("LEASE_RESERVE t c w 2 0 10000")
        planner.cmd("NOP")
        assert (await api.post("/mpub?topic=t", b"x\ny")).status == 200
        assert await planner.response() == b"LEASED w 2 2"  # full before its wait was over
        await planner.close()


async def test_before_bounds_what_a_new_lease_takes_by_publish_time(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"early")
        cut = time.time_ns()
        while time.time_ns() == cut:  # the next publish gets a later timestamp
            pass
        assert (await api.post("/pub?topic=t", b"later")).status == 200
        assert (await api.post("/pub?topic=t", b"last")).status == 200
        planner = await leasing(nsqd.tcp_port)
        planner.cmd(f"LEASE_RESERVE t c a 10 0 0 60000 {cut}")
        assert await planner.response() == b"LEASED a 1 5"
        planner.cmd(f"LEASE_RESERVE t c b 10 0 0 60000 {cut}")
        assert await planner.response() == b"LEASED b 0 0"  # "later" heads the queue
        planner.cmd("LEASE_RESERVE t c c 10 0 0 60000 0")  # 0: no bound
        assert await planner.response() == b"LEASED c 2 9"
        planner.cmd("LEASE t c c")
        taken, _ = await read_lease(planner)
        assert [m.body for m in taken] == [b"later", b"last"]  # the order is kept
        await planner.close()


async def test_reserve_errors_are_not_fatal_and_it_needs_negotiation(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        await setup(http(session, nsqd), b"x")
        planner = await leasing(nsqd.tcp_port)
        cases = [
            ("LEASE_RESERVE t c r 1 0", b"E_INVALID LEASE_RESERVE invalid number of parameters"),
            ("LEASE_RESERVE t c r 1 0 0 1 2 3",
             b"E_INVALID LEASE_RESERVE invalid number of parameters"),
            ("LEASE_RESERVE t c r 1 0 0 1 x", b"E_INVALID LEASE_RESERVE could not parse before x"),
            ("LEASE_RESERVE t c r 0 0 0", b"E_INVALID LEASE_RESERVE count 0 out of range 1-2500"),
            ("LEASE_RESERVE t c r", b"E_LEASE_NOT_FOUND LEASE_RESERVE r failed LEASE_NOT_FOUND"),
            ("LEASE_RESERVE t d r 1 0 0",
             b"E_CHANNEL_NOT_FOUND LEASE_RESERVE r failed CHANNEL_NOT_FOUND"),
        ]  # fmt: skip
        for line, expected in cases:
            planner.cmd(line)
            assert await planner.error() == expected, line
        planner.cmd("LEASE_RESERVE t c r 1 0 0")  # the connection still serves
        assert await planner.response() == b"LEASED r 1 1"
        await planner.close()

        plain = await RawV2.connect(nsqd.tcp_port)
        await plain.identify(feature_negotiation=True)
        plain.cmd("LEASE_RESERVE t c r 1 0 0")
        assert await plain.error() == b"E_INVALID invalid command LEASE_RESERVE"
        assert await plain.closed()


def numbers(code: str, column: memoryview) -> list[int]:
    """A little-endian column (this machine's order, as the tests run on x86)."""
    out = array(code)
    out.frombytes(column)
    return out.tolist()


async def test_lease_columns_gives_the_same_messages_in_one_frame(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        await setup(http(session, nsqd), b"one", b"2", b"three" * 100)
        conn = await leasing(nsqd.tcp_port)
        conn.cmd("LEASE t c l 10 0 0")
        frames, done = await read_lease(conn)
        conn.cmd("LEASE_COLUMNS t c l")
        frame = await conn.frame()
        assert frame.frame_type == 0  # one response frame, no message frames
        columns = lease_columns.decode(frame.data)
        assert (columns.name, columns.count) == ("l", 3)
        assert frame.data.startswith(b"LEASED_COLUMNS l 3 504\n") and done == b"LEASED l 3 504"
        ends = numbers("q", columns.ends)
        bodies = bytes(columns.bodies)
        assert [bodies[a:b] for a, b in zip([0, *ends], ends, strict=False)] == [
            m.body for m in frames
        ]
        ids = bytes(columns.ids)
        assert [ids[i : i + 16] for i in range(0, 48, 16)] == [m.id for m in frames]
        assert numbers("q", columns.timestamps) == [m.timestamp for m in frames]
        assert numbers("H", columns.attempts) == [m.attempts for m in frames] == [1, 1, 1]

        for line, expected in [
            ("LEASE_COLUMNS t c l 10 0 0",
             b"E_INVALID LEASE_COLUMNS invalid number of parameters"),
            ("LEASE_COLUMNS t c nope",
             b"E_LEASE_NOT_FOUND LEASE_COLUMNS nope failed LEASE_NOT_FOUND"),
        ]:  # fmt: skip
            conn.cmd(line)
            assert await conn.error() == expected
        conn.cmd("LEASE t c empty 10 0 0")  # a plain lease that took nothing
        assert await read_lease(conn) == ([], b"LEASED empty 0 0")
        conn.cmd("LEASE_COLUMNS t c empty")
        empty = lease_columns.decode((await conn.frame()).data)
        assert (empty.count, bytes(empty.bodies)) == (0, b"")
        await conn.close()
