"""A deliberately tiny raw V2 client for tests: sockets and frames, no client library."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

from nsqpy.protocol.frames import Frame, FrameDecoder, Message, decode_message


class RawV2:
    """Send exact bytes, read exact frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, port: int, magic: bytes = b"  V2") -> RawV2:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        if magic:
            writer.write(magic)
        return conn

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def cmd(self, line: str, body: bytes | None = None) -> None:
        data = line.encode() + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.writer.write(data)

    async def frame(self, timeout: float = 5.0) -> Frame:
        async with asyncio.timeout(timeout):
            while (frame := self.decoder.next()) is None:
                chunk = await self.reader.read(65536)
                if not chunk:
                    raise ConnectionError("closed by server")
                self.decoder.feed(chunk)
        return frame

    async def response(self, *, skip_heartbeats: bool = True) -> bytes:
        while True:
            frame = await self.frame()
            if skip_heartbeats and frame.data == b"_heartbeat_":
                continue
            assert frame.frame_type == 0, frame
            return frame.data

    async def error(self) -> bytes:
        frame = await self.frame()
        assert frame.frame_type == 1, frame
        return frame.data

    async def message(self) -> Message:
        while True:
            frame = await self.frame()
            if frame.frame_type == 0 and frame.data == b"_heartbeat_":
                continue
            assert frame.frame_type == 2, frame
            return decode_message(frame.data)

    async def identify(self, **fields: Any) -> bytes:
        self.cmd("IDENTIFY", json.dumps(fields).encode())
        return await self.response()

    async def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.cmd(f"SUB {topic} {channel}")
        assert await self.response() == b"OK"
        if rdy is not None:
            self.cmd(f"RDY {rdy}")

    async def pub(self, topic: str, body: bytes) -> None:
        self.cmd(f"PUB {topic}", body)
        assert await self.response() == b"OK"

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the server has closed the connection (after any pending frames)."""
        async with asyncio.timeout(timeout):
            while await self.reader.read(65536):
                pass
        return True

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass
