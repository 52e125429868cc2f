"""nsqpy.client throughput against nsqd: single publish, batched publish, consume with FIN.

    python -m benchmarks.bench_client [--runfor 5s] [--size 200] [--batch-size 200]
    python -m benchmarks.bench_client --nsqd-tcp-address 127.0.0.1:4150   # an nsqd you started

Without an address it starts ``python -m nsqpy.nsqd`` (--mem-queue-size=1000000, a fresh data
path). Phases, each for --runfor, in one uvloop process:

- pub:  ``--concurrency`` tasks, each awaiting ``Producer.publish`` in a loop (pipelined on one
  connection);
- mpub: ``--concurrency`` tasks awaiting ``Producer.multi_publish`` of --batch-size bodies;
- sub:  one ``Consumer`` with a sync handler (every message FINished), max_in_flight --rdy,
  draining what the publish phases left in its channel.

Targets (issue 6, this 2-core machine class): mpub >= 300k msg/s, sub >= 150k msg/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from typing import Any

from benchmarks.common import parse_duration
from benchmarks.run import Broker
from nsqpy.client import Config, Consumer, Message, Producer

TARGETS = {"mpub": 300_000, "sub": 150_000}


async def pub_phase(addr: str, topic: str, body: bytes, runfor: float, tasks: int) -> int:
    count = 0
    async with Producer(addr) as p:
        deadline = time.monotonic() + runfor

        async def loop() -> None:
            nonlocal count
            while time.monotonic() < deadline:
                await p.publish(topic, body)
                count += 1

        await asyncio.gather(*(loop() for _ in range(tasks)))
    return count


async def mpub_phase(
    addr: str, topic: str, body: bytes, runfor: float, tasks: int, batch: int
) -> int:
    count = 0
    bodies = [body] * batch
    async with Producer(addr) as p:
        deadline = time.monotonic() + runfor

        async def loop() -> None:
            nonlocal count
            while time.monotonic() < deadline:
                await p.multi_publish(topic, bodies)
                count += batch

        await asyncio.gather(*(loop() for _ in range(tasks)))
    return count


async def sub_phase(addr: str, topic: str, runfor: float, rdy: int, available: int) -> int:
    count = 0
    done = asyncio.Event()
    limit = available

    def handler(msg: Message) -> None:
        nonlocal count
        count += 1
        if count >= limit:
            done.set()

    c = Consumer(topic, "bench", nsqd_tcp_addresses=addr, handler=handler,
                 config=Config(max_in_flight=rdy))
    await c.start()
    try:
        await asyncio.wait_for(done.wait(), runfor)
    except TimeoutError:
        pass
    await c.close()
    return count


async def prepare(addr: str, topic: str) -> None:
    # create the channel first so that every published message is kept for the sub phase
    c = Consumer(topic, "bench", nsqd_tcp_addresses=addr, handler=lambda m: None,
                 config=Config(max_in_flight=1))
    await c.start()
    await c.close()


async def run(args: argparse.Namespace, addr: str) -> dict[str, Any]:
    body = b"x" * args.size
    topic = f"client_bench_{int(time.time())}"
    await prepare(addr, topic)
    results: dict[str, Any] = {}
    n = await pub_phase(addr, topic, body, args.runfor, args.concurrency)
    results["pub"] = n / args.runfor
    m = await mpub_phase(addr, topic, body, args.runfor, args.concurrency, args.batch_size)
    results["mpub"] = m / args.runfor
    started = time.monotonic()
    s = await sub_phase(addr, topic, args.runfor, args.rdy, n + m)
    results["sub"] = s / (time.monotonic() - started)
    results["sub_messages"] = s
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nsqd-tcp-address", default="")
    p.add_argument("--runfor", default="5s")
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--rdy", type=int, default=2500)
    args = p.parse_args(argv)
    args.runfor = parse_duration(args.runfor)
    broker = None
    data = None
    addr = args.nsqd_tcp_address
    if not addr:
        data = tempfile.mkdtemp(prefix="nsqpy-client-bench-")
        broker = Broker([sys.executable, "-m", "nsqpy.nsqd", "--tcp-address=127.0.0.1:0",
                         "--http-address=127.0.0.1:0", "--mem-queue-size=1000000",
                         f"--data-path={data}"], want_http=True)
        addr, _ = broker.wait_listening(30)
    try:
        try:
            import uvloop
            results = uvloop.run(run(args, addr))
        except ImportError:
            results = asyncio.run(run(args, addr))
    finally:
        if broker is not None:
            broker.stop()
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)
    for name in ("pub", "mpub", "sub"):
        target = TARGETS.get(name)
        mark = ""
        if target is not None:
            verdict = "ok" if results[name] >= target else "BELOW"
            mark = f"  (target {target:,}: {verdict})"
        print(f"{name:5} {results[name]:>12,.0f} msg/s{mark}")
    print(json.dumps({k: round(v) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
