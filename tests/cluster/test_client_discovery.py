"""nsqpy.client.Consumer discovering nsqd through nsqlookupd (joins new, drops gone)."""

from __future__ import annotations

from conftest import wait_for

from nsqpy.client import Config, Consumer, Producer

from .helpers import Cluster


async def test_consumer_follows_lookupd(cluster: Cluster) -> None:
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    first = await cluster.start_nsqd(*lookupds)
    async with Producer(f"127.0.0.1:{first.tcp_port}") as p:
        await p.publish("disc", b"from first")
    await cluster.eventually(lambda: cluster.producer_ports(lookupds[0], "disc"),
                             {first.tcp_port})
    got: list[bytes] = []
    # max_in_flight >= the number of nsqd: with fewer slots than connections the newcomer
    # would wait for low-RDY redistribution (low_rdy_idle_timeout, 10 s)
    cfg = Config(lookupd_poll_interval=0.2, lookupd_poll_jitter=0.1, max_in_flight=10)
    c = Consumer("disc", "ch", handler=lambda m: got.append(m.body), config=cfg,
                 lookupd_http_addresses=[f"127.0.0.1:{ld.http_port}" for ld in lookupds])
    await c.start()
    await wait_for(lambda: got == [b"from first"])

    # a second nsqd gets the topic later: the consumer joins it on a later poll
    second = await cluster.start_nsqd(*lookupds)
    async with Producer(f"127.0.0.1:{second.tcp_port}") as p:
        await p.publish("disc", b"from second")
    await wait_for(lambda: b"from second" in got, timeout=10)
    assert len(c.connections) == 2

    # one leaves lookupd (killed): its connection goes and is not redialled forever
    await first.kill()
    await wait_for(lambda: set(c.connections) == {f"127.0.0.1:{second.tcp_port}"}, timeout=10)
    await c.close()
    assert sorted(got) == [b"from first", b"from second"]


async def test_consumer_retires_a_producer_lookupd_no_longer_lists(cluster: Cluster) -> None:
    lookupd = await cluster.start_lookupd()
    nsqd = await cluster.start_nsqd(lookupd)
    async with Producer(f"127.0.0.1:{nsqd.tcp_port}") as p:
        await p.publish("gone", b"x")
    cfg = Config(lookupd_poll_interval=0.2, lookupd_poll_jitter=0.1)
    c = Consumer("gone", "ch", handler=lambda m: None, config=cfg,
                 lookupd_http_addresses=f"127.0.0.1:{lookupd.http_port}")
    await c.start()
    await wait_for(lambda: len(c.connections) == 1)
    # tombstoning removes the producer from /lookup while nsqd keeps running
    await cluster.post(f"http://127.0.0.1:{lookupd.http_port}/topic/tombstone", topic="gone",
                       node=f"127.0.0.1:{nsqd.ports['HTTP']}")
    await wait_for(lambda: len(c.connections) == 0, timeout=10)
    await c.close()
