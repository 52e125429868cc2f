"""pynsq (0.9.1, tornado 6.0) as a real NSQ peer: ``pynsq_peer.py SCENARIO 'JSON'``.

Prints one JSON line (``ok`` plus what was observed) and exits 0, or non-zero when the
scenario could not complete. Scenarios use only pynsq's public API plus the documented
subclass hooks (``heartbeat``, ``giving_up``) and the connection event callbacks.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from typing import Any

from _peerlib import b64, channel_entry, emit, parse_argv, stats_clients, topic_depth, unb64

asyncio.set_event_loop(asyncio.new_event_loop())

import nsq  # noqa: E402  (after the loop exists: tornado binds IOLoop.current() to it)
import tornado.ioloop  # noqa: E402

LOOP = asyncio.get_event_loop()
#: Interval of the deadline-bounded polls below (pynsq exposes no events for these states).
POLL = 0.05
#: pynsq offers no hook for "FIN written": give it a moment before closing the reader.
FIN_SETTLE = 0.2
T0 = time.monotonic()
STATE: dict[str, Any] = {"errors": [], "closes": 0}


def now() -> float:
    return round(time.monotonic() - T0, 3)


def err_text(error: Any) -> str:
    if isinstance(error, nsq.Error) and error.args and isinstance(error.args[0], bytes):
        return error.args[0].decode("utf-8", "replace")
    return repr(error)


def record_error(client: Any, error: Any) -> None:
    """Errors after our own close (the read loop failing on a closed socket) are teardown."""
    key = "teardown_errors" if client.closing else "errors"
    STATE.setdefault(key, []).append(err_text(error))


def msg_record(message: nsq.Message) -> dict[str, Any]:
    return {
        "id": message.id.decode("ascii", "replace"),
        "attempts": message.attempts,
        "body": b64(message.body),
        "timestamp": message.timestamp,
        "t": now(),
        "recv_ms": time.time() * 1000,
    }


class PeerWriter(nsq.Writer):
    """A Writer that exposes 'connected' and 'closed' as futures."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready_fut: asyncio.Future[Any] = LOOP.create_future()
        self.closed_fut: asyncio.Future[Any] = LOOP.create_future()
        self.identify_response: Any = None
        self.closing = False
        super().__init__(*args, **kwargs)

    def _on_connection_ready(self, conn: Any, **kwargs: Any) -> None:
        super()._on_connection_ready(conn, **kwargs)
        if not self.ready_fut.done():
            self.ready_fut.set_result(conn)

    def _on_connection_identify_response(self, conn: Any, data: Any, **kwargs: Any) -> None:
        self.identify_response = data
        super()._on_connection_identify_response(conn, data, **kwargs)

    def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
        record_error(self, error)
        super()._on_connection_error(conn, error, **kwargs)

    def _on_connection_close(self, conn: Any, **kwargs: Any) -> None:
        if not self.closing:
            STATE["closes"] += 1
        if not self.closed_fut.done():
            self.closed_fut.set_result(now())
        if not self.ready_fut.done():
            self.ready_fut.set_exception(RuntimeError("closed before ready"))
        super()._on_connection_close(conn, **kwargs)

    def shutdown(self) -> None:
        self.closing = True
        for conn in list(self.conns.values()):
            conn.close()
        self.reconnect_interval = 3600


class PeerReader(nsq.Reader):
    """A Reader recording heartbeats, give-ups, errors, closes and IDENTIFY responses."""

    def __init__(self, **kwargs: Any) -> None:
        self.heartbeats = 0
        self.gave_up: list[dict[str, Any]] = []
        self.identify_response: Any = None
        self.identify_fut: asyncio.Future[Any] = LOOP.create_future()
        self.ready_fut: asyncio.Future[Any] = LOOP.create_future()
        self.closing = False
        kwargs.setdefault("max_backoff_duration", 0.5)
        kwargs.setdefault("requeue_delay", 0)
        super().__init__(**kwargs)

    def heartbeat(self, conn: Any) -> None:
        self.heartbeats += 1
        STATE.setdefault("heartbeat_times", []).append(now())

    def giving_up(self, message: nsq.Message) -> None:
        self.gave_up.append(msg_record(message))

    def _on_connection_identify_response(self, conn: Any, data: Any, **kwargs: Any) -> None:
        self.identify_response = data
        if not self.identify_fut.done():
            self.identify_fut.set_result(data)
        super()._on_connection_identify_response(conn, data, **kwargs)

    def _on_connection_ready(self, conn: Any, **kwargs: Any) -> None:
        super()._on_connection_ready(conn, **kwargs)
        if not self.ready_fut.done():
            self.ready_fut.set_result(conn)

    def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
        record_error(self, error)
        super()._on_connection_error(conn, error, **kwargs)

    def _on_connection_close(self, conn: Any, **kwargs: Any) -> None:
        if not self.closing:
            STATE["closes"] += 1
        super()._on_connection_close(conn, **kwargs)


def conn_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "heartbeat_interval",
        "msg_timeout",
        "user_agent",
        "output_buffer_size",
        "output_buffer_timeout",
        "sample_rate",
        "hostname",
        "deflate",
        "deflate_level",
        "requeue_delay",
    )
    return {k: params[k] for k in keys if k in params}


def publish(writer: PeerWriter, cmd: str, topic: str, payload: Any, defer_ms: int = 0) -> Any:
    fut: asyncio.Future[Any] = LOOP.create_future()

    def callback(conn: Any, data: Any) -> None:
        if not fut.done():
            fut.set_result(data)

    if cmd == "pub":
        writer.pub(topic, payload, callback=callback)
    elif cmd == "mpub":
        writer.mpub(topic, payload, callback=callback)
    elif cmd == "dpub":
        writer.dpub(topic, defer_ms, payload, callback=callback)
    else:
        raise ValueError(cmd)
    return fut


def response_text(data: Any) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return "ERROR " + err_text(data)


async def new_writer(params: dict[str, Any], **extra: Any) -> PeerWriter:
    writer = PeerWriter([params["tcp"]], **{**conn_kwargs(params), **extra})
    await asyncio.wait_for(writer.ready_fut, 5)
    return writer


# -- scenarios --------------------------------------------------------------------------------
async def sc_publish(params: dict[str, Any]) -> dict[str, Any]:
    """PUB each body, or MPUB them all, or DPUB each with ``defer_ms``."""
    writer = await new_writer(params)
    bodies = [unb64(b) for b in params["bodies"]]
    mode = params.get("mode", "pub")
    responses = []
    if mode == "mpub":
        responses.append(response_text(await publish(writer, "mpub", params["topic"], bodies)))
    else:
        for body in bodies:
            data = await publish(writer, mode, params["topic"], body, params.get("defer_ms", 0))
            responses.append(response_text(data))
    STATE["identify_response"] = writer.identify_response
    writer.shutdown()
    return {"responses": responses, "published_at": now()}


async def sc_publish_errors(params: dict[str, Any]) -> dict[str, Any]:
    """Each bad publish on its own connection: the error text and whether nsqd closed it."""
    topic = params["topic"]
    cases: dict[str, tuple[str, str, Any, int]] = {
        "pub_bad_topic": ("pub", "bad!topic", b"x", 0),
        "mpub_bad_topic": ("mpub", "bad!topic", [b"x"], 0),
        "dpub_bad_defer": ("dpub", topic, b"x", 3_600_001),
        "mpub_zero_messages": ("mpub", topic, [], 0),
        "pub_too_big": ("pub", topic, b"x" * (1024 * 1024 + 1), 0),
    }

    async def one(name: str) -> tuple[str, dict[str, Any]]:
        cmd, t, payload, defer = cases[name]
        writer = await new_writer(params)
        data = await asyncio.wait_for(publish(writer, cmd, t, payload, defer), 5)
        try:
            closed = await asyncio.wait_for(asyncio.shield(writer.closed_fut), 2)
        except TimeoutError:
            closed = None
        writer.shutdown()
        return name, {"response": response_text(data), "closed": closed is not None}

    results = dict(await asyncio.gather(*(one(name) for name in cases)))
    return {"cases": results}


def make_reader(params: dict[str, Any], handler: Any, **extra: Any) -> PeerReader:
    kwargs = {
        "topic": params["topic"],
        "channel": params["channel"],
        "nsqd_tcp_addresses": [params["tcp"]],
        "message_handler": handler,
        "max_in_flight": params.get("max_in_flight", 1),
        "max_tries": params.get("max_tries", 0),
        **conn_kwargs(params),
        **extra,
    }
    return PeerReader(**kwargs)


def close_reader(reader: PeerReader) -> None:
    reader.closing = True
    reader.close()


async def sc_consume(params: dict[str, Any]) -> dict[str, Any]:
    """Consume until ``count`` messages were FINished; ``mode`` picks the first response."""
    mode = params.get("mode", "fin")
    count = params["count"]
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    finished = asyncio.Event()
    done = {"n": 0}

    def handler(message: nsq.Message) -> Any:
        deliveries.append(msg_record(message))
        if message.attempts == 1 and mode == "requeue_false":
            return False  # pynsq sends REQ <id> requeue_delay*attempts*1000 (0 here)
        if message.attempts == 1 and mode == "requeue_explicit":
            message.requeue(time_ms=params.get("requeue_ms", 0), backoff=False)
            return None
        done["n"] += 1
        if done["n"] >= count:
            LOOP.call_later(params.get("linger", 0.2), finished.set)
        return True

    reader = make_reader(params, handler)
    await finished.wait()
    close_reader(reader)
    return {"deliveries": deliveries, "heartbeats": reader.heartbeats}


async def sc_max_tries(params: dict[str, Any]) -> dict[str, Any]:
    """A handler that always fails; the Reader gives up after ``max_tries`` attempts."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    gave_up = asyncio.Event()

    def handler(message: nsq.Message) -> bool:
        deliveries.append(msg_record(message))
        return False

    reader = make_reader(params, handler)

    def check() -> None:
        if len(reader.gave_up) >= params["count"]:
            gave_up.set()
        else:
            LOOP.call_later(0.02, check)

    check()
    await gave_up.wait()
    await asyncio.sleep(params.get("linger", 0.5))  # nothing more may arrive after FIN
    close_reader(reader)
    return {"deliveries": deliveries, "gave_up": reader.gave_up}


async def sc_touch(params: dict[str, Any]) -> dict[str, Any]:
    """Hold each message ``hold`` seconds (> msg_timeout) while TOUCHing it, then FIN."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    finished = asyncio.Event()
    touches = {"n": 0}

    def handler(message: nsq.Message) -> None:
        deliveries.append(msg_record(message))
        message.enable_async()
        ticker = tornado.ioloop.PeriodicCallback(
            lambda: (message.touch(), touches.__setitem__("n", touches["n"] + 1)),
            params.get("touch_every", 0.3) * 1000,
        )
        ticker.start()

        def finish() -> None:
            ticker.stop()
            message.finish()
            LOOP.call_later(0.3, finished.set)

        LOOP.call_later(params["hold"], finish)

    reader = make_reader(params, handler)
    await finished.wait()
    close_reader(reader)
    return {"deliveries": deliveries, "touches": touches["n"]}


async def sc_timeout(params: dict[str, Any]) -> dict[str, Any]:
    """Ignore the first delivery; nsqd must redeliver it after msg_timeout with attempts=2."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    finished = asyncio.Event()

    def handler(message: nsq.Message) -> Any:
        deliveries.append(msg_record(message))
        if message.attempts == 1:
            message.enable_async()  # never respond: let it time out
            return None
        LOOP.call_later(0.2, finished.set)
        return True

    reader = make_reader(params, handler)
    await finished.wait()
    close_reader(reader)
    return {"deliveries": deliveries}


async def sc_rdy_window(params: dict[str, Any]) -> dict[str, Any]:
    """Hold messages until max_in_flight are outstanding, then FIN them all; repeat."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    held: list[nsq.Message] = []
    stats = {"max_held": 0, "finished": 0, "batches": []}
    finished = asyncio.Event()
    window = params["max_in_flight"]
    flush_timer: list[Any] = [None]

    def flush() -> None:
        flush_timer[0] = None
        stats["batches"].append(len(held))
        for m in held:
            m.finish()
        stats["finished"] += len(held)
        held.clear()
        if stats["finished"] >= params["count"]:
            LOOP.call_later(0.2, finished.set)

    def handler(message: nsq.Message) -> None:
        deliveries.append(msg_record(message))
        message.enable_async()
        held.append(message)
        stats["max_held"] = max(stats["max_held"], len(held))
        if flush_timer[0] is not None:
            flush_timer[0].cancel()
        if len(held) >= window:
            flush()
        else:
            flush_timer[0] = LOOP.call_later(params.get("quiet", 0.4), flush)

    reader = make_reader(params, handler)
    await finished.wait()
    close_reader(reader)
    return {"deliveries": deliveries, **stats}


async def sc_heartbeat(params: dict[str, Any]) -> dict[str, Any]:
    """Negotiate 1s heartbeats, answer them (pynsq sends NOP), stay connected, then consume."""
    deliveries: list[dict[str, Any]] = []
    got = asyncio.Event()

    def handler(message: nsq.Message) -> bool:
        deliveries.append(msg_record(message))
        got.set()
        return True

    reader = make_reader(params, handler)
    await asyncio.wait_for(reader.ready_fut, 5)
    while reader.heartbeats < params.get("heartbeats", 2):
        await asyncio.sleep(POLL)
    # Past 2x the interval (nsqd's read deadline): the connection must still be usable.
    closes_before_publish = STATE["closes"]
    writer = await new_writer({"tcp": params["tcp"]})
    await publish(writer, "pub", params["topic"], b"after-heartbeats")
    await asyncio.wait_for(got.wait(), 5)
    writer.shutdown()
    close_reader(reader)
    return {
        "heartbeats": reader.heartbeats,
        "closes_before_publish": closes_before_publish,
        "deliveries": deliveries,
        "identify_response": reader.identify_response,
    }


async def sc_close_inflight(params: dict[str, Any]) -> dict[str, Any]:
    """Reader A takes a message and closes without answering; reader B gets it again."""
    first: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
    got_first = asyncio.Event()
    got_second = asyncio.Event()

    def handler_a(message: nsq.Message) -> None:
        first.append(msg_record(message))
        message.enable_async()
        got_first.set()

    def handler_b(message: nsq.Message) -> bool:
        second.append(msg_record(message))
        got_second.set()
        return True

    reader_a = make_reader(params, handler_a)
    await got_first.wait()
    closed_at = now()
    close_reader(reader_a)
    reader_b = make_reader(params, handler_b)
    await got_second.wait()
    await asyncio.sleep(FIN_SETTLE)
    close_reader(reader_b)
    return {"first": first, "second": second, "closed_at": closed_at}


async def sc_identify(params: dict[str, Any]) -> dict[str, Any]:
    """IDENTIFY with custom options; report nsqd's reply and how /stats shows the client."""
    reader = make_reader(params, lambda m: True)
    data = await asyncio.wait_for(reader.identify_fut, 5)
    await asyncio.wait_for(reader.ready_fut, 5)
    result: dict[str, Any] = {"identify_response": data, "identify_keys": list(data)}
    if params.get("http"):
        # SUB is sent right after IDENTIFY: poll /stats until the client shows up.
        deadline = time.monotonic() + 3
        while True:
            found = await LOOP.run_in_executor(
                None, stats_clients, params["http"], params["topic"], params["channel"]
            )
            if found.get("stats_clients") or time.monotonic() > deadline:
                break
            await asyncio.sleep(POLL)
        result.update(found)
    close_reader(reader)
    return result


async def sc_deflate(params: dict[str, Any]) -> dict[str, Any]:
    """Negotiate deflate (on by default in Go nsqd) and move a message through it."""
    deliveries: list[dict[str, Any]] = []
    got = asyncio.Event()

    def handler(message: nsq.Message) -> bool:
        deliveries.append(msg_record(message))
        got.set()
        return True

    reader = make_reader(params, handler)
    data = await asyncio.wait_for(reader.identify_fut, 5)
    writer = await new_writer(params)
    response = response_text(await publish(writer, "pub", params["topic"], b"deflated" * 100))
    await asyncio.wait_for(got.wait(), 5)
    writer.shutdown()
    close_reader(reader)
    return {"identify_response": data, "response": response, "deliveries": deliveries}


def transport_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """TLS, compression and AUTH options as pynsq takes them."""
    t = params.get("transport", {})
    out: dict[str, Any] = {k: t[k] for k in ("snappy", "deflate", "auth_secret") if k in t}
    if t.get("tls_v1"):
        out["tls_v1"] = True
        tls: dict[str, Any] = {"ca_certs": t["ca"]}
        if t.get("cert"):
            tls.update(certfile=t["cert"], keyfile=t["key"])
        out["tls_options"] = tls
    return out


async def sc_secure(params: dict[str, Any]) -> dict[str, Any]:
    """PUB then MPUB over the negotiated transport, then consume them all."""
    extra = transport_kwargs(params)
    bodies = [unb64(b) for b in params["bodies"]]
    writer = await new_writer(params, **extra)
    responses = [response_text(await publish(writer, "pub", params["topic"], bodies[0]))]
    responses.append(response_text(await publish(writer, "mpub", params["topic"], bodies[1:])))
    identify = writer.identify_response
    writer.shutdown()
    if params.get("publish_only"):
        return {"responses": responses, "identify_response": identify}
    deliveries: list[dict[str, Any]] = []
    got = asyncio.Event()

    def handler(message: nsq.Message) -> bool:
        deliveries.append(msg_record(message))
        if len(deliveries) >= len(bodies):
            got.set()
        return True

    reader = make_reader(params, handler, max_in_flight=100, **extra)
    await asyncio.wait_for(got.wait(), 10)
    await asyncio.sleep(FIN_SETTLE)
    close_reader(reader)
    return {"responses": responses, "identify_response": identify, "deliveries": deliveries}


async def sc_secure_refused(params: dict[str, Any]) -> dict[str, Any]:
    """A connection nsqd refuses (AUTH, SUB): report the errors pynsq saw and the close."""
    extra = transport_kwargs(params)
    if params.get("role") == "reader":
        reader = make_reader(params, lambda m: True, **extra)
        deadline = time.monotonic() + 5
        while not STATE["errors"] and time.monotonic() < deadline:
            await asyncio.sleep(POLL)
        close_reader(reader)
        return {}
    writer = PeerWriter([params["tcp"]], **{**conn_kwargs(params), **extra})
    await asyncio.wait([writer.ready_fut, writer.closed_fut], timeout=5)
    result: dict[str, Any] = {"closed": writer.closed_fut.done()}
    if writer.ready_fut.done() and not writer.ready_fut.exception():
        data = await publish(writer, "pub", params["topic"], b"refused?")
        result["response"] = response_text(data)
    writer.shutdown()
    return result


async def sc_lookupd_consume(params: dict[str, Any]) -> dict[str, Any]:
    """A Reader that finds its nsqd through ``lookupd`` (HTTP addresses) only.

    FINs every message; once ``count`` arrived it PUBs ``late_bodies`` over HTTP to
    ``late_http`` (an nsqd that did not have the topic) and waits for those as well, which
    the Reader can only get by finding that nsqd on a later lookupd poll.
    """
    import urllib.request

    late = [unb64(b) for b in params.get("late_bodies", [])]
    total = params["count"] + len(late)
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    finished = asyncio.Event()

    def publish_late() -> None:
        for body in late:
            url = f"http://{params['late_http']}/pub?topic={params['topic']}"
            with urllib.request.urlopen(urllib.request.Request(url, body), timeout=3) as resp:
                assert resp.read() == b"OK"
        STATE["late_published_at"] = now()

    def handler(message: nsq.Message) -> Any:
        deliveries.append(msg_record(message))
        if len(deliveries) == params["count"] and late:
            LOOP.call_soon(publish_late)
        if len(deliveries) >= total:
            LOOP.call_later(params.get("linger", 0.2), finished.set)
        return True

    reader = PeerReader(
        topic=params["topic"],
        channel=params["channel"],
        lookupd_http_addresses=list(params["lookupd"]),
        lookupd_poll_interval=params.get("poll_interval", 1),
        message_handler=handler,
        max_in_flight=params.get("max_in_flight", 10),
    )
    await finished.wait()
    connections = sorted(reader.conns)
    close_reader(reader)
    return {"deliveries": deliveries, "connections": connections}


async def sc_requeue_until_dead(params: dict[str, Any]) -> dict[str, Any]:
    """REQ every delivery (no delay, no backoff, no max_tries) until nsqd has moved ``count``
    messages to ``dead_topic``; nsqd, not the Reader, decides when to stop."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries

    def handler(message: nsq.Message) -> None:
        deliveries.append(msg_record(message))
        message.requeue(time_ms=0, backoff=False)

    reader = make_reader(params, handler)
    while topic_depth(params["http"], params["dead_topic"]) < params["count"]:
        await asyncio.sleep(POLL)
    close_reader(reader)
    return {"deliveries": deliveries, "gave_up": reader.gave_up}


async def sc_hold_until_expired(params: dict[str, Any]) -> dict[str, Any]:
    """Keep the first delivery in flight (max_in_flight 1: nothing more can come) until /stats
    counts ``expired`` messages on the channel, FIN it, then FIN until the body ``last``."""
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    held: list[nsq.Message] = []
    got_last = asyncio.Event()
    last = unb64(params["last"])

    def handler(message: nsq.Message) -> bool | None:
        deliveries.append(msg_record(message))
        if not held:
            message.enable_async()
            held.append(message)
            return None
        if message.body == last:
            got_last.set()
        return True

    reader = make_reader(params, handler, max_in_flight=1)
    while not held:
        await asyncio.sleep(POLL)
    topic, channel = params["topic"], params["channel"]
    while channel_entry(params["http"], topic, channel).get("expired_count", 0) < params["expired"]:
        await asyncio.sleep(POLL)
    held[0].finish()
    await got_last.wait()
    await asyncio.sleep(FIN_SETTLE)
    close_reader(reader)
    return {"deliveries": deliveries}


SCENARIOS = {
    "publish": sc_publish,
    "publish_errors": sc_publish_errors,
    "consume": sc_consume,
    "max_tries": sc_max_tries,
    "touch": sc_touch,
    "timeout": sc_timeout,
    "rdy_window": sc_rdy_window,
    "heartbeat": sc_heartbeat,
    "close_inflight": sc_close_inflight,
    "identify": sc_identify,
    "deflate": sc_deflate,
    "secure": sc_secure,
    "secure_refused": sc_secure_refused,
    "lookupd_consume": sc_lookupd_consume,
    "requeue_until_dead": sc_requeue_until_dead,
    "hold_until_expired": sc_hold_until_expired,
}


async def main(scenario: str, params: dict[str, Any]) -> int:
    try:
        result = await asyncio.wait_for(SCENARIOS[scenario](params), params.get("timeout", 20))
    except TimeoutError:
        emit({"ok": False, "error": "scenario timed out", **STATE})
        return 3
    except Exception as err:  # noqa: BLE001  (any failure becomes the JSON report)
        emit({"ok": False, "error": repr(err), "traceback": traceback.format_exc(), **STATE})
        return 4
    emit({"ok": True, **STATE, **result})
    return 0


if __name__ == "__main__":
    name, args = parse_argv()
    rc = LOOP.run_until_complete(main(name, args))
    sys.stdout.flush()
    # Skip interpreter teardown: pending tornado callbacks (reconnect timers) are irrelevant.
    import os

    os._exit(rc)
