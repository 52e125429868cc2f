"""gnsq (1.0.2, gevent) as a real NSQ peer: ``gnsq_peer.py SCENARIO 'JSON'``.

Prints one JSON line (``ok`` plus what was observed). Uses gnsq's public API:
``Producer``, ``Consumer``, ``NsqdTCPClient`` and ``NsqdHTTPClient``.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import gnsq  # noqa: E402
from _peerlib import b64, emit, host_port, parse_argv, topic_depth, unb64  # noqa: E402
from gnsq import errors as gerrors  # noqa: E402
from gnsq import protocol as gproto  # noqa: E402

T0 = time.monotonic()
#: Interval of the deadline-bounded polls below (the whole scenario runs under gevent.Timeout).
POLL = 0.05
STATE: dict[str, Any] = {"errors": []}


def now() -> float:
    return round(time.monotonic() - T0, 3)


def msg_record(message: gnsq.Message) -> dict[str, Any]:
    return {
        "id": message.id.decode("ascii", "replace"),
        "attempts": message.attempts,
        "body": b64(message.body),
        "timestamp": message.timestamp,
        "t": now(),
        "recv_ms": time.time() * 1000,
    }


def exc_record(err: BaseException) -> dict[str, Any]:
    text = err.args[0] if len(err.args) == 1 else str(err)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return {"class": type(err).__name__, "text": str(text)}


def value_record(value: Any) -> Any:
    """JSON-able view of what a gnsq call returned (bytes stay distinguishable)."""
    if isinstance(value, bytes):
        return {"bytes": value.decode("utf-8", "replace")}
    return {"json": value}


def tcp_client(params: dict[str, Any], **kwargs: Any) -> gnsq.NsqdTCPClient:
    host, port = host_port(params["tcp"])
    return gnsq.NsqdTCPClient(host, port, timeout=5.0, **kwargs)


def read_frame(conn: gnsq.NsqdTCPClient, timeout: float = 3.0) -> tuple[int, Any]:
    with gevent.Timeout(timeout):
        return conn.read_response()


def frame_record(frame: int, data: Any) -> dict[str, Any]:
    if frame == gproto.FRAME_TYPE_MESSAGE:
        return {"frame": "message", **msg_record(data)}
    if frame == gproto.FRAME_TYPE_ERROR:
        return {"frame": "error", **exc_record(data)}
    return {"frame": "response", "data": data.decode("utf-8", "replace")}


# -- scenarios --------------------------------------------------------------------------------
def sc_publish(params: dict[str, Any]) -> dict[str, Any]:
    producer = gnsq.Producer([params["tcp"]])
    producer.start()
    bodies = [unb64(b) for b in params["bodies"]]
    mode = params.get("mode", "pub")
    responses = []
    if mode == "mpub":
        responses.append(producer.multipublish(params["topic"], bodies, timeout=5))
    else:
        defer = params.get("defer_ms") if mode == "dpub" else None
        responses.extend(
            producer.publish(params["topic"], body, defer=defer, timeout=5) for body in bodies
        )
    producer.close()
    return {"responses": [r.decode() for r in responses], "published_at": now()}


def sc_errors(params: dict[str, Any]) -> dict[str, Any]:
    """nsqd's error frames as gnsq's exception classes; fatal ones close the connection."""
    topic = params["topic"]
    out: dict[str, Any] = {}

    def fresh(**kwargs: Any) -> gnsq.NsqdTCPClient:
        conn = tcp_client(params, **kwargs)
        conn.connect()
        conn.identify()
        return conn

    def closed_after(conn: gnsq.NsqdTCPClient) -> bool:
        """True when nsqd closed the connection (EOF) after the error frame."""
        try:
            read_frame(conn, 2)
        except gevent.Timeout:
            return False
        except (gerrors.NSQException, OSError):
            return True
        return False

    def raw(name: str, command: bytes, **kwargs: Any) -> None:
        conn = fresh(**kwargs)
        conn.send(command)
        frame, data = read_frame(conn)
        out[name] = {**frame_record(frame, data), "closed": closed_after(conn)}

    # gnsq validates names client-side, so the bad names go through its own command encoder.
    raw("pub_bad_topic", gproto._command(gproto.PUB, b"x", "bad!topic"))
    raw("mpub_bad_topic", gproto._command(gproto.MPUB, gproto.multipublish_body([b"x"]), "b!"))
    raw("sub_bad_channel", gproto._command(gproto.SUB, None, topic, "bad!channel"))
    raw("pub_empty_body", gproto.publish(topic, b""))
    raw("dpub_bad_defer", gproto._command(gproto.DPUB, b"x", topic, "-1"))
    raw("rdy_before_sub", gproto.ready(1))
    raw("fin_before_sub", gproto.finish(b"0123456789abcdef"))
    raw("bad_command", b"WHAT\n")

    # The Producer surfaces a fatal publish error as the exception itself.
    producer = gnsq.Producer([params["tcp"]])
    producer.start()
    try:
        producer.publish(topic, b"", timeout=5)
        out["producer_empty_body"] = {"class": None}
    except gerrors.NSQException as err:
        out["producer_empty_body"] = exc_record(err)
    producer.close()

    # IDENTIFY with heartbeats above --max-heartbeat-interval (60s), and with a float
    # (gnsq sends 1000*0.5 = 500.0, which Go's json refuses for an int field).
    for name, interval in (("identify_bad_heartbeat", 61), ("identify_float_heartbeat", 0.5)):
        conn = tcp_client(params, heartbeat_interval=interval)
        conn.connect()
        try:
            conn.identify()
            out[name] = {"class": None}
        except gerrors.NSQException as err:
            out[name] = exc_record(err)

    # AUTH when nsqd has no --auth-http-address.
    conn = fresh()
    try:
        conn.auth_secret = b"secret"
        conn.auth()
        out["auth_disabled"] = {"class": None}
    except gerrors.NSQException as err:
        out["auth_disabled"] = exc_record(err)

    # RDY above max-rdy-count after SUB.
    conn = fresh()
    conn.subscribe(topic, "errors")
    read_frame(conn)  # OK
    conn.ready(params.get("rdy", 2501))
    frame, data = read_frame(conn)
    out["rdy_too_big"] = {**frame_record(frame, data), "closed": closed_after(conn)}

    # Non-fatal errors: FIN/REQ/TOUCH of unknown IDs leave the connection usable.
    conn = fresh()
    conn.subscribe(topic, "errors")
    read_frame(conn)
    non_fatal = []
    for send in (
        lambda: conn.finish(b"0000000000000000"),
        lambda: conn.requeue(b"0000000000000000", 0),
        lambda: conn.touch(b"0000000000000000"),
    ):
        send()
        non_fatal.append(frame_record(*read_frame(conn)))
    conn.publish(topic, b"still-open")
    non_fatal.append(frame_record(*read_frame(conn)))
    out["non_fatal"] = non_fatal
    conn.close_stream()
    return {"cases": out}


def sc_identify(params: dict[str, Any]) -> dict[str, Any]:
    """NsqdTCPClient.identify() with the options gnsq exposes; returns nsqd's reply."""
    keys = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout", "sample_rate")
    options = {k: params[k] for k in keys if k in params}
    conn = tcp_client(params, client_id="gnsq-id", user_agent="gnsq-peer/1.0", **options)
    conn.connect()
    response = conn.identify()
    conn.close_stream()
    return {"identify_response": response, "max_ready_count": conn.max_ready_count}


def sc_tcp(params: dict[str, Any]) -> dict[str, Any]:
    """NsqdTCPClient by hand: IDENTIFY, SUB, RDY, FIN, REQ, TOUCH, NOP, CLS."""
    topic, channel = params["topic"], params["channel"]
    steps: dict[str, Any] = {}
    STATE["steps"] = steps

    pub = tcp_client(params)
    pub.connect()
    steps["pub_identify"] = pub.identify()
    for i in range(3):
        pub.publish(topic, f"m{i}".encode())
        steps[f"pub{i}"] = frame_record(*read_frame(pub))

    sub = tcp_client(params, client_id="gnsq-lowlevel", user_agent="gnsq-peer/1.0")
    sub.connect()
    steps["identify"] = sub.identify()
    sub.subscribe(topic, channel)
    steps["sub"] = frame_record(*read_frame(sub))
    sub.ready(3)
    msgs = []
    for _ in range(3):
        frame, data = read_frame(sub)
        msgs.append(data)
        steps.setdefault("delivered", []).append(frame_record(frame, data))
    msgs.sort(key=lambda m: m.body)
    sub.finish(msgs[0].id)
    sub.requeue(msgs[1].id, 0)
    frame, again = read_frame(sub)
    steps["redelivered"] = frame_record(frame, again)
    sub.touch(msgs[2].id)
    sub.nop()
    sub.finish(again.id)
    sub.finish(msgs[0].id)  # already finished: non-fatal E_FIN_FAILED
    steps["fin_twice"] = frame_record(*read_frame(sub))
    sub.close()  # CLS while m2 is still in flight
    steps["cls"] = frame_record(*read_frame(sub))
    sub.finish(msgs[2].id)  # FIN is still valid while closing: no reply
    sub.ready(5)  # ignored in the closing state
    sub.publish(topic, b"after-cls")  # PUB works in any state; its OK comes first
    steps["pub_after_cls"] = frame_record(*read_frame(sub))
    try:
        steps["after_cls"] = frame_record(*read_frame(sub, 0.7))
    except gevent.Timeout:
        steps["after_cls"] = None
    sub.close_stream()
    pub.close_stream()
    return {}


def sc_consume(params: dict[str, Any]) -> dict[str, Any]:
    """gnsq.Consumer until ``count`` messages are finished; ``mode`` picks first responses."""
    mode = params.get("mode", "fin")
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    gave_up: list[dict[str, Any]] = []
    done = gevent.event.Event()
    counters = {"finished": 0, "max_held": 0, "heartbeats": 0}
    held: list[gnsq.Message] = []
    flusher: list[Any] = [None]

    consumer = gnsq.Consumer(
        params["topic"],
        params["channel"],
        nsqd_tcp_addresses=[params["tcp"]],
        max_in_flight=params.get("max_in_flight", 1),
        max_tries=params.get("max_tries", 0),
        requeue_delay=params.get("requeue_ms", 0),
        max_backoff_duration=params.get("max_backoff", 1),  # 0 would pin RDY at 1
        heartbeat_interval=params.get("heartbeat_interval", 30),
    )

    def finished_one() -> None:
        counters["finished"] += 1
        if counters["finished"] >= params["count"] and not done.is_set():
            gevent.spawn_later(params.get("linger", 0.2), done.set)

    def flush() -> None:
        flusher[0] = None
        batch = list(held)
        held.clear()
        STATE.setdefault("batches", []).append(len(batch))
        for m in batch:
            m.finish()
            finished_one()

    @consumer.on_message.connect
    def handler(consumer: Any, message: gnsq.Message) -> None:
        deliveries.append(msg_record(message))
        if mode == "requeue" and message.attempts == 1:
            raise gerrors.NSQRequeueMessage(backoff=False)
        if mode == "requeue_explicit" and message.attempts == 1:
            message.requeue(params.get("requeue_ms", 0), backoff=False)
            return
        if mode == "always_requeue":
            raise gerrors.NSQRequeueMessage(backoff=False)
        if mode == "timeout" and message.attempts == 1:
            message.enable_async()
            return
        if mode == "touch":
            message.enable_async()

            def hold_and_touch() -> None:
                end = time.monotonic() + params["hold"]
                while time.monotonic() < end:
                    gevent.sleep(params.get("touch_every", 0.3))
                    message.touch()
                message.finish()
                finished_one()

            gevent.spawn(hold_and_touch)
            return
        if mode == "window":
            message.enable_async()
            held.append(message)
            counters["max_held"] = max(counters["max_held"], len(held))
            if flusher[0] is not None:
                flusher[0].kill(block=False)
                flusher[0] = None
            if len(held) >= params["max_in_flight"]:
                flush()
            else:
                flusher[0] = gevent.spawn_later(params.get("quiet", 0.4), flush)
            return
        message.finish()
        finished_one()

    @consumer.on_giving_up.connect
    def giving_up(consumer: Any, message: gnsq.Message) -> None:
        gave_up.append(msg_record(message))
        if len(gave_up) >= params["count"] and not done.is_set():
            gevent.spawn_later(params.get("linger", 0.5), done.set)

    @consumer.on_error.connect
    def on_error(consumer: Any, error: Any) -> None:
        STATE["errors"].append(exc_record(error))

    @consumer.on_response.connect
    def on_response(consumer: Any, response: bytes) -> None:
        if response == b"_heartbeat_":
            counters["heartbeats"] += 1
            STATE.setdefault("heartbeat_times", []).append(now())

    consumer.start(block=False)
    if "dead_topic" in params:  # nsqd, not the Consumer, ends an always_requeue run
        gevent.spawn(stop_at_depth, params, done)
    if mode == "heartbeat":
        while counters["heartbeats"] < params.get("heartbeats", 2):
            gevent.sleep(POLL)
        STATE["connections_before_publish"] = len(consumer._connections)
        producer = gnsq.Producer([params["tcp"]])
        producer.start()
        producer.publish(params["topic"], b"after-heartbeats", timeout=5)
        producer.close()
    done.wait()
    consumer.close()
    return {"deliveries": deliveries, "gave_up": gave_up, **counters}


def stop_at_depth(params: dict[str, Any], done: gevent.event.Event) -> None:
    """Set ``done`` once nsqd holds ``count`` messages in ``dead_topic``."""
    while topic_depth(params["http"], params["dead_topic"]) < params["count"]:
        gevent.sleep(POLL)
    done.set()


def sc_http(params: dict[str, Any]) -> dict[str, Any]:
    """Every nsqd HTTP call gnsq.NsqdHTTPClient offers, in a meaningful order."""
    host, port = host_port(params["http"])
    client = gnsq.NsqdHTTPClient(host, port)
    topic, channel = params["topic"], params["channel"]
    calls: dict[str, Any] = {}
    STATE["calls"] = calls

    def call(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            value = fn(*args, **kwargs)
        except gerrors.NSQException as err:
            calls[name] = {"raised": exc_record(err)}
            return None
        calls[name] = value_record(value)
        return value

    def channel_stats(name: str) -> None:
        stats = call(name, client.stats, topic=topic)
        if not isinstance(stats, dict):
            return
        topics = stats.get("topics") or []
        calls[name] = {"json": topics[0] if topics else None}

    bodies = [unb64(b) for b in params["bodies"]]
    text_bodies = [b.replace(b"\n", b" ") for b in bodies]
    call("ping", client.ping)
    call("info", client.info)
    call("create_topic", client.create_topic, topic)
    call("create_channel", client.create_channel, topic, channel)
    call("publish", client.publish, topic, bodies[0])
    call("publish_defer", client.publish, topic, b"deferred", defer=60000)
    call("multipublish_text", client.multipublish, topic, text_bodies)
    call("multipublish_binary", client.multipublish, topic, bodies, binary=True)
    channel_stats("stats_after_publish")
    call("pause_topic", client.pause_topic, topic)
    call("pause_channel", client.pause_channel, topic, channel)
    channel_stats("stats_paused")
    call("unpause_topic", client.unpause_topic, topic)
    call("unpause_channel", client.unpause_channel, topic, channel)
    channel_stats("stats_unpaused")
    call("empty_channel", client.empty_channel, topic, channel)
    call("empty_topic", client.empty_topic, topic)
    channel_stats("stats_emptied")
    call("stats_text", client.stats, text=True)
    call("stats_all", client.stats)
    call("stats_channel_filter", client.stats, topic=topic, channel=channel)
    call("delete_channel", client.delete_channel, topic, channel)
    call("delete_channel_again", client.delete_channel, topic, channel)
    call("delete_topic", client.delete_topic, topic)
    call("delete_topic_again", client.delete_topic, topic)
    call("stats_deleted", client.stats, topic=topic)
    call("publish_bad_defer", client.publish, topic, b"x", defer=3_600_001)
    call("create_channel_no_topic", client.create_channel, topic + "-missing", channel)
    call("empty_topic_missing", client.empty_topic, topic + "-missing")
    call("pause_topic_missing", client.pause_topic, topic + "-missing")
    call("publish_too_big", client.publish, topic, b"x" * (1024 * 1024 + 1))
    return {}


def sc_http_publish(params: dict[str, Any]) -> dict[str, Any]:
    """/pub each body, then /mpub?binary=true all of them (text mode cannot carry newlines)."""
    host, port = host_port(params["http"])
    client = gnsq.NsqdHTTPClient(host, port)
    bodies = [unb64(b) for b in params["bodies"]]
    responses = [client.publish(params["topic"], body) for body in bodies]
    responses.append(client.multipublish(params["topic"], bodies, binary=True))
    return {"responses": [r.decode() for r in responses]}


def sc_lookupd_consume(params: dict[str, Any]) -> dict[str, Any]:
    """A Consumer that finds its nsqd through ``lookupd`` (HTTP addresses) only.

    Like pynsq's ``lookupd_consume``: FINs everything, then PUBs ``late_bodies`` to
    ``late_http`` once ``count`` arrived and waits for those too (found on a later poll).
    """
    import urllib.request

    late = [unb64(b) for b in params.get("late_bodies", [])]
    total = params["count"] + len(late)
    deliveries: list[dict[str, Any]] = []
    STATE["deliveries"] = deliveries
    done = gevent.event.Event()

    def publish_late() -> None:
        for body in late:
            url = f"http://{params['late_http']}/pub?topic={params['topic']}"
            with urllib.request.urlopen(urllib.request.Request(url, body), timeout=3) as resp:
                assert resp.read() == b"OK"
        STATE["late_published_at"] = now()

    consumer = gnsq.Consumer(
        params["topic"],
        params["channel"],
        lookupd_http_addresses=list(params["lookupd"]),
        lookupd_poll_interval=params.get("poll_interval", 1),
        max_in_flight=params.get("max_in_flight", 10),
    )

    @consumer.on_message.connect
    def handler(consumer: Any, message: gnsq.Message) -> None:
        deliveries.append(msg_record(message))
        message.finish()
        if len(deliveries) == params["count"] and late:
            gevent.spawn(publish_late)
        if len(deliveries) >= total and not done.is_set():
            gevent.spawn_later(params.get("linger", 0.2), done.set)

    @consumer.on_error.connect
    def on_error(consumer: Any, error: Any) -> None:
        STATE["errors"].append(exc_record(error))

    consumer.start(block=False)
    done.wait()
    connections = sorted(f"{c.address}:{c.port}" for c in consumer._connections)
    consumer.close()
    return {"deliveries": deliveries, "connections": connections}


def transport_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """TLS, compression and AUTH options as gnsq takes them."""
    import ssl

    t = params.get("transport", {})
    out: dict[str, Any] = {k: t[k] for k in ("snappy", "deflate") if k in t}
    if "auth_secret" in t:
        out["auth_secret"] = t["auth_secret"].encode()  # gnsq wants bytes
    if t.get("tls_v1"):
        out["tls_v1"] = True
        tls: dict[str, Any] = {"ca_certs": t["ca"], "cert_reqs": ssl.CERT_REQUIRED}
        if t.get("cert"):
            tls.update(certfile=t["cert"], keyfile=t["key"])
        out["tls_options"] = tls
    return out


def sc_secure(params: dict[str, Any]) -> dict[str, Any]:
    """Producer PUB + MPUB over the negotiated transport, then a Consumer takes them all."""
    extra = transport_kwargs(params)
    bodies = [unb64(b) for b in params["bodies"]]
    # gnsq 1.0.2's Producer mistakes the OK after an upgrade for a publish reply (KeyError in
    # Producer.handle_response), so publish with its NsqdTCPClient.
    conn = tcp_client(params, **extra)
    conn.connect()
    identify = conn.identify()
    conn.publish(params["topic"], bodies[0])
    responses = [frame_record(*read_frame(conn)).get("data")]
    conn.multipublish(params["topic"], bodies[1:])
    responses.append(frame_record(*read_frame(conn)).get("data"))
    conn.close_stream()
    if params.get("publish_only"):
        return {"responses": responses, "identify_response": identify}
    deliveries: list[dict[str, Any]] = []
    done = gevent.event.Event()
    consumer = gnsq.Consumer(
        params["topic"],
        params["channel"],
        nsqd_tcp_addresses=[params["tcp"]],
        max_in_flight=100,
        **extra,
    )

    @consumer.on_message.connect
    def handler(consumer: Any, message: gnsq.Message) -> None:
        deliveries.append(msg_record(message))
        if len(deliveries) >= len(bodies):
            done.set()

    @consumer.on_error.connect
    def on_error(consumer: Any, error: Any) -> None:
        STATE["errors"].append(exc_record(error))

    consumer.start(block=False)
    done.wait(10)
    gevent.sleep(0.2)  # let the last FINs go out before closing
    consumer.close()
    return {"responses": responses, "identify_response": identify, "deliveries": deliveries}


def sc_secure_refused(params: dict[str, Any]) -> dict[str, Any]:
    """Low-level: IDENTIFY (+ upgrades, AUTH), then PUB or SUB; the error nsqd answers."""
    extra = transport_kwargs(params)
    conn = tcp_client(params, **extra)
    conn.connect()
    out: dict[str, Any] = {}
    try:
        out["identify"] = conn.identify()
        if params.get("role") == "reader":
            conn.subscribe(params["topic"], params["channel"])
        else:
            conn.publish(params["topic"], b"refused?")
        out["reply"] = frame_record(*read_frame(conn))
    except Exception as err:  # noqa: BLE001  (the refusal is the result)
        out["error"] = exc_record(err)
    conn.close_stream()
    return out


SCENARIOS = {
    "publish": sc_publish,
    "errors": sc_errors,
    "tcp": sc_tcp,
    "identify": sc_identify,
    "consume": sc_consume,
    "http": sc_http,
    "http_publish": sc_http_publish,
    "lookupd_consume": sc_lookupd_consume,
    "secure": sc_secure,
    "secure_refused": sc_secure_refused,
}


def main() -> int:
    scenario, params = parse_argv()
    try:
        with gevent.Timeout(params.get("timeout", 20)):
            result = SCENARIOS[scenario](params)
    except gevent.Timeout:
        emit({"ok": False, "error": "scenario timed out", **STATE})
        return 3
    except Exception as err:  # noqa: BLE001  (any failure becomes the JSON report)
        emit({"ok": False, "error": repr(err), "traceback": traceback.format_exc(), **STATE})
        return 4
    emit({"ok": True, **STATE, **result})
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
