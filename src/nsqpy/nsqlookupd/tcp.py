"""nsqlookupd's TCP server: protocol "V1" (NSQ v1.3.0 ``nsqlookupd/tcp.go``,
``lookup_protocol_v1.go``).

One ``LookupConnection`` (an ``asyncio.Protocol``) per nsqd. After the ``"  V1"`` magic it
reads text commands (IDENTIFY, REGISTER, UNREGISTER, PING) through the sans-IO
``CommandReader`` and answers each with an untyped ``[size][data]`` response. Every error is
fatal: the ``E_CODE description`` response is written, then the connection is closed. On
disconnect the peer is removed from every registration (the keys stay).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from typing import Final, cast

from nsqpy._internal import gojson
from nsqpy._internal.duration import format_go_duration
from nsqpy.nsqlookupd.context import LookupdContext
from nsqpy.nsqlookupd.registry import PeerInfo, Registration
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.errors import ClientError, SilentClose
from nsqpy.protocol.lookup import MAGIC_V1, CommandReader, encode_response
from nsqpy.protocol.names import is_valid_name

log = logging.getLogger("nsqpy.nsqlookupd")

OK: Final = b"OK"
BAD_PROTOCOL: Final = b"E_BAD_PROTOCOL"
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_STRING_FIELDS: Final = ("hostname", "broadcast_address", "version", "remote_address")
_INT_FIELDS: Final = ("tcp_port", "http_port")


def format_peer(peer: object) -> str:
    """``ip:port`` (``[v6]:port``) as Go's ``RemoteAddr().String()``."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer)


def _fatal(code: str, desc: str) -> ClientError:
    return ClientError(code, desc, fatal=True)


def _reject_constant(name: str) -> object:
    raise ValueError(f"invalid JSON constant {name}")


def decode_peer_info(body: bytes, peer_id: str) -> PeerInfo:
    """IDENTIFY's JSON into a PeerInfo as Go's ``json.Unmarshal`` fills the struct: keys
    match case-insensitively, unknown keys and nulls are ignored, a wrongly typed value fails.
    Missing required fields are the caller's check."""
    fail = _fatal("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    try:
        raw = json.loads(body.decode("utf-8", "replace"), parse_constant=_reject_constant)
    except ValueError:
        raise fail from None
    info = PeerInfo(id=peer_id)
    if raw is None:
        return info
    if not isinstance(raw, dict):
        raise fail
    for key, value in raw.items():
        name = key.lower()
        if value is None or name not in _STRING_FIELDS + _INT_FIELDS:
            continue
        if name in _STRING_FIELDS:
            ok = isinstance(value, str)
        else:
            ok = type(value) is int and _INT64[0] <= value <= _INT64[1]
        if not ok:
            raise fail
        setattr(info, name, value)
    return info


def _topic_channel(command: str, params: list[bytes]) -> tuple[str, str]:
    """nsqlookupd's getTopicChan: the names after the command, validated."""
    if not params:
        raise _fatal("E_INVALID", f"{command} insufficient number of params")
    topic = params[0].decode("utf-8", "surrogateescape")
    channel = params[1].decode("utf-8", "surrogateescape") if len(params) >= 2 else ""
    if not is_valid_name(params[0]):
        raise _fatal("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_name(params[1]):
        raise _fatal("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    return topic, channel


class LookupConnection(asyncio.Protocol):
    """One nsqd's V1 connection."""

    def __init__(self, lookupd: LookupdContext) -> None:
        self.lookupd = lookupd
        self.db = lookupd.registry
        self.reader = CommandReader()
        self.transport: asyncio.Transport | None = None
        self.remote = ""
        self.peer: PeerInfo | None = None
        self._magic = bytearray()
        self._protocol_ok = False
        self._closed = False
        self._handlers: dict[bytes, Callable[[list[bytes], bytes | None], bytes]] = {
            b"PING": self._ping,
            b"IDENTIFY": self._identify,
            b"REGISTER": self._register,
            b"UNREGISTER": self._unregister,
        }

    def __str__(self) -> str:
        return self.remote

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.remote = format_peer(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.lookupd.connection_opened(self)
        log.info("TCP: new client(%s)", self.remote)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        if not self._protocol_ok:
            data = self._read_magic(data)
            if not data:
                return
        self.reader.feed(data)
        self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.lookupd.connection_closed(self)
        if not self._protocol_ok:
            if len(self._magic) < len(MAGIC_V1):
                log.error("failed to read protocol version - EOF")
            return
        log.info("PROTOCOL(V1): [%s] exiting ioloop", self.remote)
        if self.peer is not None:
            for reg in self.db.remove_peer(self.peer.id):
                self._log_db("UNREGISTER", reg)

    # -- input --------------------------------------------------------------------------------
    def _read_magic(self, data: bytes) -> bytes:
        """Collect the 4-byte magic; returns the bytes after it (empty while incomplete)."""
        need = len(MAGIC_V1) - len(self._magic)
        self._magic += data[:need]
        if len(self._magic) < len(MAGIC_V1):
            return b""
        magic = bytes(self._magic).decode("utf-8", "surrogateescape")
        log.info("CLIENT(%s): desired protocol magic '%s'", self.remote, magic)
        if self._magic != MAGIC_V1:
            self._send(BAD_PROTOCOL)
            self.close()
            log.error("client(%s) bad protocol magic '%s'", self.remote, magic)
            return b""
        self._protocol_ok = True
        return data[need:]

    def _process(self) -> None:
        while not self._closed:
            try:
                command = self.reader.next()
                if command is None:
                    return
                self._send(self._exec(*command))
            except ClientError as err:
                self._fail(err)
            except ValueError as err:  # the reader's body-size error
                code, _, desc = str(err).partition(" ")
                self._fail(_fatal(code, desc))
            except SilentClose:
                self.close()

    def _exec(self, params: list[bytes], body: bytes | None) -> bytes:
        handler = self._handlers.get(params[0])
        if handler is None:
            name = params[0].decode("utf-8", "surrogateescape")
            raise _fatal("E_INVALID", f"invalid command {name}")
        return handler(params, body)

    # -- output -------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(encode_response(data))

    def _fail(self, err: ClientError) -> None:
        log.error("[%s] - %s", self.remote, err)
        self._send(err.wire)
        self.close()

    def close(self) -> None:
        """Close after what is already written has been sent."""
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _log_db(self, action: str, reg: Registration, level: int = logging.INFO) -> None:
        log.log(
            level,
            "DB: client(%s) %s category:%s key:%s subkey:%s",
            self.remote,
            action,
            *reg,
        )

    # -- commands -----------------------------------------------------------------------------
    def _ping(self, params: list[bytes], body: bytes | None) -> bytes:
        if self.peer is not None:
            since = self.db.ping(self.peer)
            log.info("CLIENT(%s): pinged (last ping %s)", self.peer.id, format_go_duration(since))
        return OK

    def _identify(self, params: list[bytes], body: bytes | None) -> bytes:
        if self.peer is not None or body is None:
            raise _fatal("E_INVALID", "cannot IDENTIFY again")
        peer = decode_peer_info(body, self.remote)
        peer.remote_address = self.remote
        if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
            raise _fatal("E_BAD_BODY", "IDENTIFY missing fields")
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            self.remote,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        self.peer = peer
        self.reader.identify_has_body = False
        if self.db.identify(peer):
            self._log_db("REGISTER", Registration("client", "", ""))
        return self._identify_reply()

    def _identify_reply(self) -> bytes:
        # A Go map: json.Marshal sorts its keys.
        reply = {
            "broadcast_address": self.lookupd.opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": self.lookupd.http_port,
            "tcp_port": self.lookupd.tcp_port,
            "version": NSQ_VERSION,
        }
        return gojson.dumps(reply)

    def _identified(self) -> PeerInfo:
        if self.peer is None:
            raise _fatal("E_INVALID", "client must IDENTIFY")
        return self.peer

    def _register(self, params: list[bytes], body: bytes | None) -> bytes:
        peer = self._identified()
        topic, channel = _topic_channel("REGISTER", params[1:])
        for reg in self.db.register(peer, topic, channel):
            self._log_db("REGISTER", reg)
        return OK

    def _unregister(self, params: list[bytes], body: bytes | None) -> bytes:
        peer = self._identified()
        topic, channel = _topic_channel("UNREGISTER", params[1:])
        removed, unexpected = self.db.unregister(peer, topic, channel)
        for reg in unexpected:
            log.warning(
                "client(%s) unexpected UNREGISTER category:%s key:%s subkey:%s",
                self.remote,
                *reg,
            )
        for reg in removed:
            self._log_db("UNREGISTER", reg)
        return OK
