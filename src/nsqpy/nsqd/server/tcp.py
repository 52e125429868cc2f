"""TCP adapter: one ``asyncio.Protocol`` per client connection speaking NSQ's V2.

Bytes go through the sans-IO :class:`CommandReader`; each command is dispatched through
``_HANDLERS`` to a method that validates it exactly as nsqd does and calls the broker.
Replies and delivered messages are appended to an output buffer that the daemon flushes once
per loop iteration (or at once when it passes 64 KiB), so a burst of deliveries costs one
write. While the transport's own buffer is over its high-water mark the client is not
ready for messages, which bounds memory for slow consumers.

IDENTIFY, the TLS/compression upgrades and AUTH are in ``tcp_handshake.py``, a base class of
:class:`V2Connection`, to keep this module (the per-command and per-message path) small.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Final, cast

from nsqpy.nsqd.core.auth import AuthState
from nsqpy.nsqd.core.client import (
    STATE_CLOSING,
    STATE_INIT,
    STATE_SUBSCRIBED,
    ClientState,
)
from nsqpy.nsqd.core.errors import BrokerError, InFlightError
from nsqpy.nsqd.server.context import Daemon
from nsqpy.nsqd.server.read_batching import lowat_for
from nsqpy.nsqd.server.tcp_handshake import Handler, HandshakeMixin
from nsqpy.nsqd.server.tcp_leases import lease_handler
from nsqpy.protocol.command_reader import CommandReader, parse_mpub
from nsqpy.protocol.compression import CompressionError, StreamDecoder, StreamEncoder
from nsqpy.protocol.constants import MAGIC_V2, MSG_ID_LENGTH
from nsqpy.protocol.errors import ClientError, SilentClose
from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    MessageSink,
    encode_error,
)
from nsqpy.protocol.identify import ClientSettings
from nsqpy.protocol.names import is_valid_name
from nsqpy.protocol.text import as_int64, byte_to_base10, go_quote

if TYPE_CHECKING:
    import ssl


log = logging.getLogger("nsqpy.nsqd")
#: read_batching relies on Linux waking a poller when a socket's mark is lowered under what
#: waits in it; elsewhere a FIN could wait for more bytes, so no mark is ever raised.
_LINUX: Final = sys.platform == "linux"

_FLUSH_AT: Final = 65536
_MS: Final = 1_000_000
#: Decompressed bytes handed to the command reader per step (bounds a decompression bomb).
_INFLATE_STEP: Final = 65536


def _invalid(desc: str) -> ClientError:
    return ClientError("E_INVALID", desc)


class _Pending:
    """A durable publish's reply, known once its group commit completes."""

    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None


class V2Connection(HandshakeMixin, asyncio.Protocol):
    """One client connection."""

    def __init__(self, nsqd: Daemon) -> None:
        self.nsqd = nsqd
        self.loop = nsqd.loop
        opts = nsqd.opts
        self.settings = ClientSettings(
            heartbeat_interval=30_000,
            output_buffer_timeout=opts.output_buffer_timeout // _MS,
            msg_timeout=opts.msg_timeout // _MS,
        )
        self.reader = CommandReader(opts.max_msg_size, opts.max_body_size, self._line_check)
        # Delivered messages are framed into _out by the sink (compiled, or its Python twin).
        sink = MessageSink(self, _FLUSH_AT)
        self.state = ClientState(nsqd.next_client_id(), sink.write, sink.write_many)
        self.state.msg_timeout = self.settings.msg_timeout / 1000
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.remote_ip = ""
        self._auth_ip = ""  # nsqd sends remote_ip="" for unix-socket clients
        self.pub_counts: dict[str, int] = {}
        self._out = bytearray()
        # Replies queued behind a durable publish still waiting for its fsync (keeps order).
        self._held: deque[bytes | _Pending] | None = None
        self.flush_pending = False
        self._magic = b""
        self._closing = False
        self._last_read = 0.0
        self._blocked_since = 0.0  # when the transport last stopped taking writes
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        # Upgrades (TLS, compression) and auth-server queries stall command processing:
        # bytes keep being buffered in the reader, commands wait until ``_resume``.
        self._stalled = False
        self._upgrading = False  # TLS handshake under way: nothing may be written
        self._encoder: StreamEncoder | None = None
        self._decoder: StreamDecoder | None = None
        self.tls = False
        self.ssl_object: ssl.SSLObject | None = None
        self._tls_gate = nsqd.opts.tls_required != 0
        self._auth_on = nsqd.auth_enabled
        self.auth_state: AuthState | None = None
        self._auth_secret = ""
        self._task: asyncio.Task[None] | None = None
        self._lost = False
        # Bound once, and only in durable mode: a call per read cost memory mode up to ~7 %
        # of PUB+SUB over 100 topics, where reads are small and many.
        store = nsqd.store
        self._poll_commits = store.poll_commits if store.durable else None
        # Durable mode: answered a publish, and not heard from since (the commit linger).
        self._answered = False
        # read_batching: a busy consumer's commands are read a mark's worth at a time.
        self._batcher = nsqd.read_batcher
        self._sock: socket.socket | None = None  # TCP only; the mark means nothing elsewhere
        self.rx_bytes = 0
        self.lowat = 1
        self.lowat_want = 0
        self.batched = False
        self.rest_until = 0.0
        self._all_handlers: dict[bytes, Handler] = {
            b"FIN": self._fin,
            b"RDY": self._rdy,
            b"REQ": self._req,
            b"PUB": self._pub,
            b"MPUB": self._mpub,
            b"DPUB": self._dpub,
            b"NOP": self._nop,
            b"TOUCH": self._touch,
            b"SUB": self._sub,
            b"CLS": self._cls,
            b"IDENTIFY": self._identify,
            b"AUTH": self._auth,
        }
        # --tls-required: every command but IDENTIFY is refused until the TLS upgrade.
        self._handlers = {b"IDENTIFY": self._identify} if self._tls_gate else self._all_handlers

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if _LINUX and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            self._sock = sock
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            self.remote_ip = self._auth_ip = host
            self.remote_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        else:
            self.remote_ip = self.remote_address = str(peer or "")
        self.settings.client_id = self.settings.hostname = self.remote_ip
        self.state.client_id = self.remote_ip
        self.state.connect_ts = int(time.time())
        self.nsqd.client_arrived(self.state.id, self)
        log.info("TCP: new client(%s)", self.remote_address)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        now = self.loop.time()
        if self._answered:
            self._answered = False
            self.nsqd.store.publisher_heard(self.state.id, now)  # a commit need not wait
        self._last_read = now
        if self.lowat_want:
            if not self.batched and now >= self.rest_until:
                self._batcher.watch(self)  # this read counts toward the first tick
            self.rx_bytes += len(data)
        if len(self._magic) < 4:
            data = self._read_magic(data)
            if not data:
                return
        if self._decoder is not None:
            self._inflate(data, now)
        else:
            self.reader.feed(data)
            if not self._stalled:
                self._run(now)
        if self._poll_commits is not None:
            # Durable mode: commits that completed while this read ran answer their
            # publishers now, not after the rest of the iteration's reads and deliveries (no
            # syscall unless a worker has answered).
            self._poll_commits()
        if self.flush_pending and self.state.channel is None:
            # Not subscribed: its output is replies, and all this input's replies are in.
            # Written now, not in the iteration's flush after every other read and delivery:
            # a publisher waiting for OK is on the clock (+1-3 % PUB+SUB "in" here). Still one
            # write per read, however many commands it held. Subscribers keep the flush, which
            # gathers the messages that later reads release into one write.
            self.flush()

    def _inflate(self, data: bytes, now: float) -> None:
        """Decompress in bounded steps, running the commands of each step before the next."""
        decoder = self._decoder
        assert decoder is not None
        reader = self.reader
        try:
            while not (self._stalled or self._closing):
                chunk = decoder.decompress(data, _INFLATE_STEP)
                data = b""
                if chunk:
                    reader.feed(chunk)
                    self._run(now)
                if decoder.needs_input:
                    return
        except CompressionError as err:
            log.error("PROTOCOL(V2): [%s] failed to read command - %s", self.remote_address, err)
            self.close()

    def _run(self, now: float) -> None:
        """Run every complete command buffered in the reader (until one stalls or closes)."""
        reader = self.reader
        handlers = self._handlers
        try:
            while True:
                if self.state.channel is not None:
                    fins = reader.take_fins()
                    if fins:
                        self._fin_batch(fins, now)
                cmd = reader.next()
                if cmd is None:
                    break
                handler = handlers.get(cmd[0]) or lease_handler(self, cmd[0])
                if handler is None:
                    raise self._unknown(cmd[0])
                try:
                    handler(cmd[1], cmd[2], now)
                except ClientError as err:
                    if err.fatal:
                        raise
                    self._send_frame(encode_error(err.wire))
                if self._closing or self._stalled:
                    return
        except ClientError as err:
            log.error("[%s] - %s", self.remote_address, err)
            self._send_frame(encode_error(err.wire))
            self.close()
        except SilentClose as err:
            log.error("PROTOCOL(V2): [%s] failed to read command - %s", self.remote_address, err)
            self.close()

    def _unknown(self, name: bytes) -> ClientError:
        text = name.decode("utf-8", "replace")
        if self._tls_gate and not self.tls:
            return _invalid(f"cannot {text} in current state (TLS required)")
        return _invalid(f"invalid command {text}")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self.nsqd.store.publisher_gone(self.state.id)  # a no-op unless it published, durably
        if self._task is not None:
            self._task.cancel()
        for timer in (self._heartbeat_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        if self.batched:
            self._batcher.forget(self)
        self.nsqd.client_gone(self.state.id)
        self.nsqd.broker.remove_client(self.state, self.loop.time())
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.remote_address)

    # asyncio.Protocol flow-control callbacks:
    def pause_writing(self) -> None:
        self.state.writable = False
        self._blocked_since = self.loop.time()

    def resume_writing(self) -> None:
        self.state.writable = True
        channel = self.state.channel
        if channel is not None:
            channel.client_ready(self.state, self.loop.time())

    # -- connection start and lifetime ----------------------------------------------------
    def _read_magic(self, data: bytes) -> bytes:
        missing = 4 - len(self._magic)
        self._magic += data[:missing]
        if len(self._magic) < 4:
            return b""
        if self._magic != MAGIC_V2:
            log.error("client(%s) bad protocol magic '%s'", self.remote_address, self._magic)
            self._send_frame(encode_error(b"E_BAD_PROTOCOL"))
            self.close()
            return b""
        self._start_heartbeats()
        return data[missing:]

    def _start_heartbeats(self) -> None:
        for timer in (self._heartbeat_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_timer = self._deadline_timer = None
        interval = self.settings.heartbeat_interval / 1000
        if interval <= 0:
            return
        self._heartbeat_timer = self.loop.call_later(interval, self._heartbeat)
        self._deadline_timer = self.loop.call_at(self._last_read + 2 * interval, self._deadline)

    def _heartbeat(self) -> None:
        interval = self.settings.heartbeat_interval / 1000
        if not self.state.writable and self.loop.time() - self._blocked_since >= interval:
            # nsqd's write deadline is one heartbeat interval: a peer that stopped reading
            # that long is dropped (its in-flight messages go back to the channel).
            log.error("PROTOCOL(V2): [%s] write timeout (peer not reading)", self.remote_address)
            self.abort()  # close() would wait forever for the peer to read
            return
        self._send_frame(HEARTBEAT_FRAME)
        self._heartbeat_timer = self.loop.call_later(interval, self._heartbeat)

    def _deadline(self) -> None:
        due = self._last_read + 2 * self.settings.heartbeat_interval / 1000
        if self.loop.time() >= due:
            log.error("PROTOCOL(V2): [%s] read timeout (no heartbeat reply)", self.remote_address)
            self.close()
        else:
            self._deadline_timer = self.loop.call_at(due, self._deadline)

    def is_closing(self) -> bool:
        return self._closing

    def abort(self) -> None:
        """Cut the connection now, discarding unsent output (its messages get requeued)."""
        self._closing = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._held is not None:
            return  # replies still wait for a commit: _release_held closes after sending them
        self.flush()
        if self.transport is not None:
            self.transport.close()

    # -- output -------------------------------------------------------------------------
    def _send_frame(self, frame: bytes) -> None:
        if self._held is not None:
            self._held.append(frame)
            return
        self._out += frame
        if not self.flush_pending:
            self.nsqd.schedule_flush(self)

    def _reply_after_commit(self, cmd: str, topic: str, frame: bytes = OK_FRAME) -> None:
        """Durable mode: OK (or ``frame``) once the messages (and the topic's and its
        channels' entries in nsqd.dat) are fsynced; later replies wait behind it."""
        pending = _Pending()
        if self._held is None:
            self._held = deque()
        self._held.append(pending)

        def committed(ok: bool) -> None:
            if ok:
                pending.frame = frame
            else:
                pending.frame = encode_error(f"E_{cmd}_FAILED {cmd} failed to sync".encode())
            if not ok:
                self._closing = True  # a failed commit is fatal, after the replies before it
            self._release_held()

        self.nsqd.store.after_commit(committed, topic)

    def _release_held(self) -> None:
        """Move the replies whose commits are answered, in order, to the output. Once none
        is held, write at once: a durable publisher waits for nothing else, and the end of
        the loop iteration was ~50 us away on average under PUB+SUB (a commit round is ~300
        us). While a later one is held, the iteration's flush writes them (more of this
        round's answers may come first: one write for a pipelining publisher's run)."""
        held = self._held
        released = False
        while held:
            head = held[0]
            if isinstance(head, _Pending):
                if head.frame is None:
                    break  # a later publish's commit is still out
                head = head.frame
            held.popleft()
            self._out += head
            released = True
        if held:
            if released and not self.flush_pending:
                self.nsqd.schedule_flush(self)
            return
        self._held = None
        self.flush()
        if self._closing:
            if self.transport is not None:
                self.transport.close()
        elif released and not self._answered:
            # its next publish may be due: a commit that could start now may wait for it
            self._answered = True
            self.nsqd.store.publisher_answered(self.state.id, self.loop.time())

    def request_flush(self) -> None:
        """Flush at the next loop iteration, with every other connection that has output."""
        self.nsqd.schedule_flush(self)

    def flush(self) -> None:
        self.flush_pending = False
        if self._out and self.transport is not None and not self.transport.is_closing():
            if self._upgrading:
                return  # written over TLS once the handshake is done
            data, self._out = self._out, bytearray()
            if self._encoder is not None:
                self.transport.write(self._encoder.compress(bytes(data)))
                return
            self.transport.write(data)

    # -- validation before a body is read -----------------------------------------------
    def _line_check(self, name: bytes, params: list[bytes]) -> None:
        if self._tls_gate and not self.tls and name != b"IDENTIFY":
            raise _invalid(f"cannot {name.decode()} in current state (TLS required)")
        if name == b"PUB" or name == b"MPUB":
            cmd = name.decode()
            if len(params) < 2:
                raise _invalid(f"{cmd} insufficient number of parameters")
            self._check_topic(cmd, params[1])
            if name == b"MPUB":
                self.nsqd.broker.get_topic(params[1].decode())
                if self._auth_on:
                    self._check_auth_cached("MPUB", params[1].decode(), "")
        elif name == b"DPUB":
            self._check_dpub_line(params)
        elif name == b"IDENTIFY":
            if self.state.state != STATE_INIT:
                raise _invalid("cannot IDENTIFY in current state")
        elif name == b"AUTH":
            if self.state.state != STATE_INIT:
                raise _invalid("cannot AUTH in current state")
            if len(params) != 1:
                raise _invalid("AUTH invalid number of parameters")

    @staticmethod
    def _check_topic(cmd: str, raw: bytes) -> None:
        if not is_valid_name(raw):
            code = "E_BAD_TOPIC E_BAD_TOPIC" if cmd == "MPUB" else "E_BAD_TOPIC"
            raise ClientError(code, f"{cmd} topic name {go_quote(raw)} is not valid", fatal=True)

    def _check_dpub_line(self, params: list[bytes]) -> int:
        if len(params) < 3:
            raise _invalid("DPUB insufficient number of parameters")
        self._check_topic("DPUB", params[1])
        raw_ms = byte_to_base10(params[2])
        if raw_ms is None:
            raise _invalid(f"DPUB could not parse timeout {params[2].decode('utf-8', 'replace')}")
        opts = self.nsqd.opts
        if not opts.defer_allowed(as_int64(raw_ms * _MS % (1 << 64))):
            raise _invalid(f"DPUB timeout {raw_ms} out of range 0-{opts.defer_limit // _MS}")
        return raw_ms

    # -- publishing -----------------------------------------------------------------------
    def _publish(self, cmd: str, topic_name: str, bodies: list[bytes], defer: float) -> None:
        nsqd = self.nsqd
        topic = nsqd.broker.get_topic(topic_name)
        try:
            topic.accept(len(bodies))
        except BrokerError as err:
            raise ClientError(f"E_{cmd}_FAILED", f"{cmd} failed {err}") from err
        durable = nsqd.store.durable
        mark = len(self._out)
        if not durable:
            # OK goes out before any delivery this publish causes on this same connection.
            self._send_frame(OK_FRAME)
        now_ns = time.time_ns()
        ids = nsqd.broker.guid.new_ids(len(bodies), now_ns)
        try:
            topic.put_accepted(bodies, ids, now_ns, nsqd.loop.time(), defer)
        except BrokerError as err:  # a disk write failed
            if self._out[mark : mark + len(OK_FRAME)] == OK_FRAME:
                del self._out[mark : mark + len(OK_FRAME)]  # take the OK back
            raise ClientError(f"E_{cmd}_FAILED", f"{cmd} failed {err}") from err
        if durable:
            self._reply_after_commit(cmd, topic_name)
        self.pub_counts[topic_name] = self.pub_counts.get(topic_name, 0) + len(bodies)

    def _pub(self, params: list[bytes], body: bytes | None, now: float) -> None:
        assert body is not None
        topic = params[1].decode()
        if self._auth_on and not self._check_auth(self._pub, params, body, "PUB", topic, ""):
            return
        self._publish("PUB", topic, [body], 0.0)

    def _mpub(self, params: list[bytes], body: bytes | None, now: float) -> None:
        assert body is not None
        opts = self.nsqd.opts
        topic = params[1].decode()
        if self._auth_on and not self._check_auth(self._mpub, params, body, "MPUB", topic, ""):
            return
        bodies = parse_mpub(body, opts.max_msg_size, opts.max_body_size)
        self._publish("MPUB", topic, bodies, 0.0)

    def _dpub(self, params: list[bytes], body: bytes | None, now: float) -> None:
        assert body is not None
        defer_ms = self._check_dpub_line(params)
        topic = params[1].decode()
        if self._auth_on and not self._check_auth(self._dpub, params, body, "DPUB", topic, ""):
            return
        self._publish("DPUB", topic, [body], defer_ms / 1000)

    # -- consuming ----------------------------------------------------------------------
    def _sub(self, params: list[bytes], body: bytes | None, now: float) -> None:
        state = self.state
        if state.state != STATE_INIT:
            raise _invalid("cannot SUB in current state")
        if self.settings.heartbeat_interval <= 0:
            raise _invalid("cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise _invalid("SUB insufficient number of parameters")
        if not is_valid_name(params[1]):
            raise ClientError("E_BAD_TOPIC", f"SUB topic name {go_quote(params[1])} is not valid")
        if not is_valid_name(params[2]):
            raise ClientError(
                "E_BAD_CHANNEL", f"SUB channel name {go_quote(params[2])} is not valid"
            )
        if self._auth_on and not self._check_auth(
            self._sub, params, body, "SUB", params[1].decode(), params[2].decode()
        ):
            return
        broker = self.nsqd.broker
        topic = broker.get_topic(params[1].decode())
        channel = broker.get_channel(topic, params[2].decode(), now)
        try:
            channel.add_client(state)
        except BrokerError as err:
            raise ClientError("E_SUB_FAILED", f"SUB failed {err}") from err
        state.state = STATE_SUBSCRIBED
        nsqd = self.nsqd
        if nsqd.store.durable and nsqd.metadata_pending(topic.name):
            # durable: OK means the channel is in nsqd.dat; this client's next commands
            # wait for the write (on its thread), nobody else does
            self._stall_on(self._ok_once_persisted())
            return
        self._send_frame(OK_FRAME)

    async def _ok_once_persisted(self) -> None:
        await self.nsqd.metadata_written()
        self._send_frame(OK_FRAME)

    def _rdy(self, params: list[bytes], body: bytes | None, now: float) -> None:
        state = self.state
        if state.state == STATE_CLOSING:
            return
        if state.state != STATE_SUBSCRIBED or state.channel is None:
            raise _invalid("cannot RDY in current state")
        count = 1
        if len(params) > 1:
            parsed = byte_to_base10(params[1])
            if parsed is None:
                raise _invalid(f"RDY could not parse count {params[1].decode('utf-8', 'replace')}")
            count = as_int64(parsed)
        max_rdy = self.nsqd.opts.max_rdy_count
        if not 0 <= count <= max_rdy:
            raise _invalid(f"RDY count {count} out of range 0-{max_rdy}")
        state.channel.set_rdy(state, count, now)
        self._window_changed(count)

    def _window_changed(self, rdy: int) -> None:
        """A new RDY count: a new mark, and a lower one at once (a smaller window must not
        wait under the old mark). Plain TCP only: TLS and compression change what a FIN
        costs in bytes."""
        plain = self._sock is not None and self._decoder is None and not self.tls
        want = lowat_for(rdy) if plain else 0
        self.lowat_want = want
        if self.lowat > max(want, 1):
            self.set_lowat(max(want, 1))

    def set_lowat(self, mark: int) -> None:
        """Set the socket's receive low-water mark (``read_batching.Batched``)."""
        sock = self._sock
        if sock is None or self._lost:
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
        except OSError:  # the socket is going away; its reads no longer matter
            return
        self.lowat = mark

    def _message_id(self, cmd: str, params: list[bytes], need: int) -> bytes:
        state = self.state.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            raise _invalid(f"cannot {cmd} in current state")
        if len(params) < need:
            raise _invalid(f"{cmd} insufficient number of params")
        msg_id = params[1]
        if len(msg_id) != MSG_ID_LENGTH:
            raise _invalid("invalid message ID")
        return msg_id

    def _fin(self, params: list[bytes], body: bytes | None, now: float) -> None:
        state = self.state
        channel = state.channel
        if channel is None or len(params) < 2 or len(params[1]) != MSG_ID_LENGTH:
            self._message_id("FIN", params, 2)  # raises nsqd's exact error
            raise _invalid("cannot FIN in current state")
        msg_id = params[1]
        try:
            channel.finish(state, msg_id, now)
        except InFlightError as err:
            raise ClientError(
                "E_FIN_FAILED", f"FIN {msg_id.decode('latin-1')} failed {err}"
            ) from None

    def _fin_batch(self, ids: list[bytes], now: float) -> None:
        """Well-formed FINs taken in one pass: same results as one ``_fin`` each."""
        channel = self.state.channel
        assert channel is not None
        for msg_id, reason in channel.finish_many(self.state, ids, now):
            err = ClientError("E_FIN_FAILED", f"FIN {msg_id.decode('latin-1')} failed {reason}")
            self._send_frame(encode_error(err.wire))

    def _req(self, params: list[bytes], body: bytes | None, now: float) -> None:
        msg_id = self._message_id("REQ", params, 3)
        raw_ms = byte_to_base10(params[2])
        if raw_ms is None:
            raise _invalid(f"REQ could not parse timeout {params[2].decode('utf-8', 'replace')}")
        timeout_ns = self.nsqd.opts.req_delay(as_int64(raw_ms * _MS % (1 << 64)))
        channel = self.state.channel
        assert channel is not None
        try:
            channel.requeue(self.state, msg_id, timeout_ns / 1e9, now)
        except InFlightError as err:
            raise ClientError(
                "E_REQ_FAILED", f"REQ {msg_id.decode('latin-1')} failed {err}"
            ) from None

    def _touch(self, params: list[bytes], body: bytes | None, now: float) -> None:
        msg_id = self._message_id("TOUCH", params, 2)
        channel = self.state.channel
        assert channel is not None
        try:
            channel.touch(self.state, msg_id, now)
        except InFlightError as err:
            raise ClientError(
                "E_TOUCH_FAILED", f"TOUCH {msg_id.decode('latin-1')} failed {err}"
            ) from None

    def _cls(self, params: list[bytes], body: bytes | None, now: float) -> None:
        if self.state.state != STATE_SUBSCRIBED:
            raise _invalid("cannot CLS in current state")
        self.state.rdy = 0
        self.state.state = STATE_CLOSING
        self._send_frame(CLOSE_WAIT_FRAME)

    def _nop(self, params: list[bytes], body: bytes | None, now: float) -> None:
        return None
