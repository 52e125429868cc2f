"""One V2 connection to nsqd: handshake, upgrades, ordered responses, message delivery.

nsqd answers commands in order and has no correlation ids, so pending commands are a FIFO of
futures resolved by each response or error frame. FIN, REQ, TOUCH, RDY and NOP get no answer
on success; their failures (E_FIN_FAILED, ...) arrive as non-fatal error frames that must not
consume a pending future. Output is coalesced: commands written in one loop iteration leave in
one ``transport.write``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol, Self, cast

from nsqpy.client.config import Config
from nsqpy.client.errors import (
    AuthError,
    ConnectionClosedError,
    NSQError,
    ProtocolError,
    ServerError,
)
from nsqpy.client.message import Message
from nsqpy.protocol import commands
from nsqpy.protocol.compression import (
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from nsqpy.protocol.constants import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    OK,
)
from nsqpy.protocol.errors import NON_FATAL_CODES

log = logging.getLogger("nsqpy.client")

_HEADER: Final = struct.Struct(">ii")
_MSG_HEAD: Final = struct.Struct(">qH")
#: A frame bigger than this is a protocol error rather than a reason to buffer forever.
MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
_INFLATE_STEP: Final = 1 << 20


class Delegate(Protocol):
    """Who a connection reports to (the Consumer; a Producer needs none)."""

    def on_message(self, conn: NsqdConnection, msg: Message) -> None: ...
    def on_response(
        self, conn: NsqdConnection, msg: Message, finished: bool, backoff: bool
    ) -> None: ...
    def on_close(self, conn: NsqdConnection, exc: BaseException | None) -> None: ...


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What nsqd said in its IDENTIFY reply (defaults when it did not negotiate)."""

    max_rdy_count: int = 2500
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    tls_v1: bool = False
    deflate: bool = False
    snappy: bool = False
    auth_required: bool = False
    version: str = ""
    #: nsqpy's lease commands were negotiated (Go nsqd never says so)
    leases: bool = False

    @classmethod
    def parse(cls, data: bytes) -> ServerSettings:
        if not data.startswith(b"{"):
            return cls()  # an old nsqd answers a bare OK: no features
        try:
            raw: dict[str, Any] = json.loads(data)
        except ValueError as exc:
            raise ProtocolError(f"bad IDENTIFY response: {exc}") from None
        return cls(
            max_rdy_count=int(raw.get("max_rdy_count", 2500)),
            msg_timeout=int(raw.get("msg_timeout", 60000)) / 1000,
            max_msg_timeout=int(raw.get("max_msg_timeout", 900000)) / 1000,
            tls_v1=bool(raw.get("tls_v1")),
            deflate=bool(raw.get("deflate")),
            snappy=bool(raw.get("snappy")),
            auth_required=bool(raw.get("auth_required")),
            version=str(raw.get("version", "")),
            leases=raw.get("leases") is True,
        )


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid nsqd address {address!r} (want host:port)")
    return host.strip("[]") or "127.0.0.1", int(port)


class NsqdConnection(asyncio.Protocol):
    """Use ``await NsqdConnection.open(address, config)``; then ``command``/``send``."""

    def __init__(self, address: str, config: Config, delegate: Delegate | None = None) -> None:
        self.address = address
        self.config = config
        self.delegate = delegate
        self.topic = ""
        self.channel = ""
        self.settings = ServerSettings()
        self.auth: dict[str, Any] | None = None
        self.rdy = 0  # last RDY sent
        self.in_flight = 0
        self.last_message_at = 0.0
        self.last_rdy_at = 0.0
        self.closed = False
        self.close_exc: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        # Stop parsing after the next response frame: what follows the IDENTIFY reply (and the
        # OK after TLS) may be compressed and must wait for the codec.
        self._stop_after_response = False
        self._pending: deque[asyncio.Future[bytes]] = deque()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._encoder: DeflateEncoder | SnappyEncoder | None = None
        self._decoder: DeflateDecoder | SnappyDecoder | None = None
        self._last_read = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed_event = asyncio.Event()
        self._drained: asyncio.Future[None] | None = None

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(cls, address: str, config: Config, delegate: Delegate | None = None) -> Self:
        """Connect, IDENTIFY, upgrade (TLS, then deflate or snappy) and AUTH."""
        conn = cls(address, config, delegate)
        host, port = split_address(address)
        try:
            async with asyncio.timeout(config.dial_timeout):
                await conn._loop.create_connection(lambda: conn, host, port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosedError(f"cannot connect to nsqd {address}: {exc}") from exc
        try:
            async with asyncio.timeout(max(config.dial_timeout, config.read_timeout)):
                await conn._handshake()
        except BaseException:
            conn.close()
            raise
        return conn

    async def _handshake(self) -> None:
        self._write_now(MAGIC_V2)
        self._stop_after_response = True
        reply = await self.command(commands.identify(self._identify_fields()))
        self._stop_after_response = False
        self.settings = ServerSettings.parse(reply)
        if self.settings.tls_v1:
            await self._upgrade_tls()
        # the OK that follows an upgrade may already be buffered: expect it before installing
        if self.settings.deflate:
            ok = self._expect_frame()
            self._install_codec(DeflateEncoder(self.config.deflate_level), DeflateDecoder())
            await self._check_ok(ok, "deflate")
        elif self.settings.snappy:
            ok = self._expect_frame()
            self._install_codec(SnappyEncoder(), SnappyDecoder())
            await self._check_ok(ok, "snappy")
        else:
            self._process()  # nothing compressed: parse whatever followed
        if self.settings.auth_required:
            await self._authenticate()
        self._start_read_timer()

    def _identify_fields(self) -> dict[str, object]:
        return self.config.identify_body()

    async def _upgrade_tls(self) -> None:
        assert self._transport is not None
        ok = self._expect_frame()
        self._stop_after_response = True
        host = self.config.tls_server_name or split_address(self.address)[0]
        transport = await self._loop.start_tls(
            self._transport, self, self.config.ssl_context(), server_hostname=host
        )
        if transport is None:
            raise ConnectionClosedError(f"TLS upgrade with {self.address} failed")
        self._transport = transport
        await self._check_ok(ok, "TLS")
        self._stop_after_response = False

    def _install_codec(
        self, encoder: DeflateEncoder | SnappyEncoder, decoder: DeflateDecoder | SnappyDecoder
    ) -> None:
        # nsqd switches right after its IDENTIFY reply, so anything already buffered after
        # that frame is compressed.
        leftover = bytes(self._buf)
        self._buf.clear()
        self._encoder = encoder
        self._decoder = decoder
        if leftover:
            self._inflate(leftover)

    async def _check_ok(self, fut: asyncio.Future[bytes], what: str) -> None:
        self._process()
        data = await fut
        if data != OK:
            raise ProtocolError(f"{self.address}: expected OK after {what} upgrade, got {data!r}")

    async def _authenticate(self) -> None:
        if not self.config.auth_secret:
            raise AuthError("E_AUTH_REQUIRED", f"nsqd {self.address} requires auth_secret")
        reply = await self.command(commands.auth(self.config.auth_secret))
        try:
            self.auth = json.loads(reply)
        except ValueError:
            raise ProtocolError(f"bad AUTH response {reply!r}") from None
        log.info("%s: authenticated %s", self.address, reply.decode("utf-8", "replace"))

    def _expect_frame(self) -> asyncio.Future[bytes]:
        fut: asyncio.Future[bytes] = self._loop.create_future()
        self._pending.append(fut)
        return fut

    # --- commands --------------------------------------------------------------------------

    def command(self, data: bytes) -> asyncio.Future[bytes]:
        """Send a command that nsqd answers; the future gets the response (or error)."""
        fut = self._expect_frame()
        if self.closed:
            fut.set_exception(self._closed_error())
            self._pending.pop()
            return fut
        self.send(data)
        return fut

    def send(self, data: bytes) -> None:
        """Queue bytes for this loop iteration's write (no answer expected)."""
        if self.closed:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    @property
    def writable(self) -> bool:
        """False while the transport's buffer is over its high-water mark."""
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        """Return once the transport's buffer is below its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()
        if self.closed:
            raise self._closed_error()

    async def subscribe(self, topic: str, channel: str) -> None:
        self.topic, self.channel = topic, channel
        await self.command(commands.sub(topic, channel))

    def set_rdy(self, count: int) -> None:
        count = max(0, min(count, self.settings.max_rdy_count))
        if count != self.rdy or count == 0:
            self.rdy = count
            self.last_rdy_at = self._loop.time()
            self.send(commands.rdy(count))

    def start_close(self) -> asyncio.Future[bytes]:
        """CLS: nsqd stops sending and answers CLOSE_WAIT; in-flight messages stay answerable."""
        return self.command(commands.CLS)

    async def wait_drained(self) -> None:
        """Return once every message received here has been answered (or the link died)."""
        while self.in_flight > 0 and not self.closed:
            if self._drained is None:
                self._drained = self._loop.create_future()
            await self._drained

    def _answered(self) -> None:
        self.in_flight -= 1
        if self._drained is not None and self.in_flight <= 0:
            self._wake_drained()

    def _wake_drained(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def finish(self, msg: Message) -> None:
        self._answered()
        self.send(commands.fin(msg.id))
        if self.delegate is not None:
            self.delegate.on_response(self, msg, True, False)

    def requeue(self, msg: Message, delay: float | None, *, backoff: bool) -> None:
        if delay is None or delay < 0:
            delay = min(
                self.config.default_requeue_delay * msg.attempts, self.config.max_requeue_delay
            )
        self._answered()
        self.send(commands.req(msg.id, round(delay * 1000)))
        if self.delegate is not None:
            self.delegate.on_response(self, msg, False, backoff)

    def touch(self, msg: Message) -> None:
        self.send(commands.touch(msg.id))

    def close(self) -> None:
        """Close now: pending commands fail at once, the transport closes after its buffer."""
        if self._out and not self.closed:
            self._flush()  # answers queued this iteration (FIN before a clean close) still go
        if self._transport is not None:
            self._transport.close()
        self._lost(None)

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast
        self._transport = cast(asyncio.Transport, transport)
        self._last_read = self._loop.time()

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        if self._decoder is not None:
            self._inflate(data)
            return
        self._buf += data
        self._process()

    def _inflate(self, data: bytes) -> None:
        # Decompress in bounded steps, parsing frames between them, so a small compressed
        # input cannot balloon into one huge buffer.
        decoder = self._decoder
        assert decoder is not None
        try:
            self._buf += decoder.decompress(data, _INFLATE_STEP)
            self._process()
            while not decoder.needs_input and not self.closed:
                self._buf += decoder.decompress(b"", _INFLATE_STEP)
                self._process()
        except CompressionError as exc:
            self._fail(ProtocolError(f"{self.address}: bad compressed stream: {exc}"))

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- internals -----------------------------------------------------------------------------

    def _process(self) -> None:
        buf = self._buf
        pos = 0
        end = len(buf)
        unpack = _HEADER.unpack_from
        while end - pos >= 8 and not self.closed:
            size, frame_type = unpack(buf, pos)
            if size < 4 or size > MAX_FRAME_SIZE:
                self._fail(ProtocolError(f"{self.address}: invalid frame size {size}"))
                return
            stop = pos + 4 + size
            if stop > end:
                break
            if frame_type == FRAME_TYPE_MESSAGE:
                self._on_message(buf, pos + 8, stop)
            elif frame_type == FRAME_TYPE_RESPONSE:
                self._on_response(bytes(buf[pos + 8 : stop]))
                if self._stop_after_response:
                    self._stop_after_response = False
                    pos = stop
                    break
            elif frame_type == FRAME_TYPE_ERROR:
                self._on_error(bytes(buf[pos + 8 : stop]))
            else:
                self._fail(ProtocolError(f"{self.address}: unknown frame type {frame_type}"))
                return
            pos = stop
        if pos:
            del buf[:pos]

    def _on_message(self, buf: bytearray, start: int, stop: int) -> None:
        if stop - start < 26:
            self._fail(ProtocolError(f"{self.address}: short message frame"))
            return
        timestamp, attempts = _MSG_HEAD.unpack_from(buf, start)
        msg_id = bytes(buf[start + 10 : start + 26])
        msg = Message(self, msg_id, bytes(buf[start + 26 : stop]), timestamp, attempts)
        self.in_flight += 1
        self.last_message_at = self._last_read
        if self.delegate is None:
            log.warning("%s: message without a consumer; requeueing", self.address)
            msg.requeue(0, backoff=False)
            return
        self.delegate.on_message(self, msg)

    def _on_response(self, data: bytes) -> None:
        if data == HEARTBEAT:
            self.send(commands.NOP)
            return
        if not self._pending:
            if data != CLOSE_WAIT:
                log.warning("%s: unexpected response %r", self.address, data)
            return
        fut = self._pending.popleft()
        if not fut.done():
            fut.set_result(data)

    def _on_error(self, data: bytes) -> None:
        err = ServerError.from_frame(data)
        if err.code in NON_FATAL_CODES:
            # an answer to FIN/REQ/TOUCH, which have no pending future
            log.warning("%s: %s", self.address, err)
            return
        if self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)
        else:
            log.error("%s: %s", self.address, err)
        # nsqd closes the connection after any other error; stop using it right away
        self.close_exc = err
        self.close()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed or not self._out:
            self._out.clear()
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        self._write_now(data)

    def _write_now(self, data: bytes) -> None:
        if self._encoder is not None:
            data = self._encoder.compress(data)
        assert self._transport is not None
        self._transport.write(data)

    def _start_read_timer(self) -> None:
        interval = self.config.read_timeout
        if interval > 0 and not self.closed:
            self._read_timer = self._loop.call_later(interval / 4, self._check_read)

    def _check_read(self) -> None:
        idle = self._loop.time() - self._last_read
        if idle > self.config.read_timeout:
            self._fail(ConnectionClosedError(f"{self.address}: nothing read for {idle:.1f}s"))
            return
        self._start_read_timer()

    def _fail(self, exc: NSQError) -> None:
        log.error("%s", exc)
        self.close_exc = exc
        self.close()

    def _closed_error(self) -> NSQError:
        if isinstance(self.close_exc, NSQError):
            return ConnectionClosedError(f"{self.address}: closed ({self.close_exc})")
        return ConnectionClosedError(f"{self.address}: connection closed")

    def _lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if exc is not None and self.close_exc is None:
            self.close_exc = exc
        if self._read_timer is not None:
            self._read_timer.cancel()
        self._writable.set()
        error = self._closed_error()
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(error)
        self._wake_drained()
        self._closed_event.set()
        if self.delegate is not None:
            self.delegate.on_close(self, self.close_exc)
