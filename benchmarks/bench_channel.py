"""The channel's hot path in process, without sockets: ns per message to queue, deliver and FIN.

The socket benchmarks (``run.py``) share two cores between the broker and its load generators,
so a few per cent of broker cost drowns in their noise. This drives ``Channel`` directly, the
way the TCP adapter does (``put_many`` from a topic's fan-out, ``client_ready`` on RDY,
``finish_many`` for a read's FINs), and reports the best of ``--repeat`` runs. It uses only
API that predates dead letters, so the same file measures an older tree:

    PYTHONPATH=/path/to/other/src python -m benchmarks.bench_channel

``--policy`` gives the channel max_attempts 5 and a 1h message TTL (the on-path cost).
``--frames`` frames every delivery into a buffer with the TCP adapter's ``MessageSink`` (its
``write_many`` for a run where the tree has it), as a connection does, instead of only
collecting ids.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import time
from collections.abc import Callable

from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.client import ClientState
from nsqpy.nsqd.core.message import Message
from nsqpy.protocol.frames import MessageSink

BATCH = 100  # messages per MPUB / per read's FINs
RDY = 2500  # bench_reader's window
NOW = 0.0


def entries(count: int) -> list[tuple[bytes, bytes, int]]:
    ts = time.time_ns()
    body = b"x" * 200
    return [(b"%016x" % n, body, ts) for n in range(count)]


def make_channel(count: int, policy: bool) -> Channel:
    channel = Channel("t", "c", mem_queue_size=count + 1, max_msg_timeout=900.0)
    if policy:
        from nsqpy.nsqd.core.policy import Effective  # absent from trees without dead letters

        channel.apply_policy(Effective(5, 3600 * 10**9, "t.dead"))
    return channel


class Reader:
    """One subscribed client that collects deliveries and FINs them in batches."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.got: list[bytes] = []
        if FRAMES:
            self.state = _framing_client()
        else:
            self.state = ClientState(1, self._write, msg_timeout=60.0)
        channel.add_client(self.state)

    def _write(self, msg: Message) -> None:
        self.got.append(msg.id)

    def drain(self, count: int) -> None:
        channel, state, done = self.channel, self.state, 0
        while done < count:
            ids, self.got = (list(state.in_flight), []) if FRAMES else (self.got, [])
            for i in range(0, len(ids), BATCH):
                channel.finish_many(state, ids[i : i + BATCH], NOW)
            done += len(ids)

    def pending(self) -> int:
        return len(self.state.in_flight) if FRAMES else len(self.got)


class _Buffer:
    """A connection's output side, as MessageSink fills it; a flush drops the bytes."""

    def __init__(self) -> None:
        self._out = bytearray()
        self.flush_pending = False

    def flush(self) -> None:
        self.flush_pending = False
        self._out = bytearray()

    def request_flush(self) -> None:
        self.flush_pending = True


def _framing_client() -> ClientState:
    sink = MessageSink(_Buffer(), 65536)
    if "write_messages" in inspect.signature(ClientState).parameters:
        return ClientState(1, sink.write, sink.write_many, msg_timeout=60.0)  # type: ignore[call-arg]
    return ClientState(1, sink.write, msg_timeout=60.0)


#: --frames (set by main)
FRAMES = False


def timed(run: Callable[[], int]) -> float:
    gc.collect()
    start = time.perf_counter_ns()
    count = run()
    return (time.perf_counter_ns() - start) / count


def pub(count: int, policy: bool) -> float:
    """MPUB batches into a channel nobody reads: they queue."""
    msgs = entries(count)
    channel = make_channel(count, policy)

    def run() -> int:
        for i in range(0, count, BATCH):
            channel.put_many(msgs[i : i + BATCH], NOW)
        return count

    return timed(run)


def sub(count: int, policy: bool) -> float:
    """A queued backlog delivered under RDY and FINed in batches."""
    channel = make_channel(count, policy)
    msgs = entries(count)
    for i in range(0, count, BATCH):
        channel.put_many(msgs[i : i + BATCH], NOW)
    reader = Reader(channel)

    def run() -> int:
        channel.set_rdy(reader.state, RDY, NOW)
        reader.drain(count)
        return count

    return timed(run)


def pubsub(count: int, policy: bool) -> float:
    """Batches published to a ready reader: delivered straight away, then FINed."""
    channel = make_channel(count, policy)
    msgs = entries(count)
    reader = Reader(channel)
    channel.set_rdy(reader.state, RDY, NOW)

    def run() -> int:
        for i in range(0, count, BATCH):
            channel.put_many(msgs[i : i + BATCH], NOW)
            reader.drain(reader.pending())
        return count

    return timed(run)


SCENARIOS = {"pub": pub, "sub": sub, "pubsub": pubsub}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=7, help="runs per scenario; best kept")
    parser.add_argument("--policy", action="store_true", help="max_attempts 5, message_ttl 1h")
    parser.add_argument("--label", default="", help="printed before each line")
    parser.add_argument("--frames", action="store_true", help="frame deliveries (MessageSink)")
    args = parser.parse_args()
    global FRAMES
    FRAMES = args.frames
    for name, scenario in SCENARIOS.items():
        best = min(scenario(args.count, args.policy) for _ in range(args.repeat))
        print(f"{args.label}{name:7} {best:7.1f} ns/msg {1e9 / best:>12,.0f} msg/s")


if __name__ == "__main__":
    main()
