"""LoopThread.finish_many / requeue_many / touch_many: many answers in one hop to the loop."""

from __future__ import annotations

from nsqpy.client.consumer import Consumer
from nsqpy.client.message import Message
from nsqpy.client.sync import LoopThread

from .conftest import NsqdFactory, numbered, publish
from .daemons import wait_until


def test_answer_many_counts_what_reached_a_live_connection(nsqd_proc: NsqdFactory) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "m", numbered(30))
    held: list[Message] = []
    thread = LoopThread()

    def hold(msg: Message) -> None:
        msg.disable_auto_response()
        held.append(msg)

    async def make() -> Consumer:
        consumer = Consumer("m", "c", nsqd_tcp_addresses=nsqd.tcp_address, handler=hold,
                            max_in_flight=100)
        await consumer.start()
        return consumer

    consumer = thread.run(make())
    try:
        wait_until(lambda: len(held) == 30, 10, "30 held messages")
        assert thread.touch_many(held[:10]).result(5) == 10
        assert thread.finish_many(held[:10]).result(5) == 10
        assert thread.finish_many(held[:10]).result(5) == 0  # answered already: nothing sent
        assert thread.touch_many(held[:10]).result(5) == 0
        assert thread.requeue_many(held[10:20]).result(5) == 10
        wait_until(lambda: nsqd.channel("m", "c").get("requeue_count") == 10, 10, "10 REQs")
        for conn in consumer.connections.values():
            thread.run(_close(conn))
        assert thread.finish_many(held[20:]).result(5) == 0  # the connection is gone
    finally:
        thread.run(consumer.close(1.0))
        thread.stop()
    # the 10 never answered and the 10 REQ'd ones (delivered again) were still in flight when
    # the connection dropped; nsqpy's nsqd puts those back at once, counted as timeouts
    assert nsqd.channel("m", "c")["timeout_count"] == 20


async def _close(conn: object) -> None:
    conn.close()  # type: ignore[attr-defined]
