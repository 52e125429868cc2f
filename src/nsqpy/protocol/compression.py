"""Stream codecs for the V2 transport's compression upgrade (IDENTIFY ``snappy`` / ``deflate``).

Once IDENTIFY negotiates compression, every byte after the upgrade ``OK`` (that one included)
goes through one of these, in both directions:

* deflate: raw DEFLATE (no zlib header or trailer), as Go's ``compress/flate``. nsqd flushes
  its flate writer on every buffer flush, so each :meth:`DeflateEncoder.compress` call ends
  with a sync flush: the peer can decode everything sent so far without waiting for more.
* snappy: the framed stream format (google/snappy ``framing_format.txt``), as golang/snappy's
  ``Writer``/``Reader``: a stream identifier chunk first, then chunks of at most 64 KiB of
  uncompressed data, each carrying the masked CRC-32C of its uncompressed bytes.

Decompression bombs: a few KiB of deflate can expand to many MiB, so decoders never have to
return more than the caller can take. ``decompress(data, max_length=n)`` returns at most ``n``
bytes and keeps whatever input (and, for snappy, decoded output) it did not hand out yet;
while :attr:`StreamDecoder.needs_input` is false the caller must call ``decompress(b"", n)``
again before waiting for more input, exactly like the standard library's ``bz2`` / ``lzma``
decompressors. Memory held inside a decoder is then bounded by the input the caller chose to
feed plus, for snappy, one decoded chunk (64 KiB). ``max_length=None`` means no bound; it is
only safe on trusted input.

Errors in the compressed stream raise :class:`CompressionError`; a decoder that raised stays
broken (every later call raises the same error), since the stream cannot be resynchronised.
"""

from __future__ import annotations

import zlib
from typing import Final, Protocol

# cramjam and crc32c are imported where snappy is used, not here: a daemon imports this module
# at start-up and most never negotiate snappy (crc32c alone costs ~5 ms to import).


class CompressionError(ValueError):
    """The compressed stream is corrupt or uses something the format forbids."""


class StreamEncoder(Protocol):
    """Compresses one direction of a connection; each call's output is decodable on its own."""

    def compress(self, data: bytes) -> bytes: ...


class StreamDecoder(Protocol):
    """Decompresses one direction of a connection from arbitrarily split input."""

    @property
    def needs_input(self) -> bool:
        """False when ``decompress(b"", max_length)`` would still return data."""
        ...

    def decompress(self, data: bytes, max_length: int | None = None) -> bytes: ...


def _output_limit(max_length: int | None) -> int:
    """``max_length`` as a positive bound, or 0 for "no bound" (zlib's own convention)."""
    if max_length is None:
        return 0
    if max_length <= 0:
        raise ValueError(f"max_length must be positive or None, got {max_length}")
    return max_length


# --------------------------------------------------------------------------------------------
# Deflate


class DeflateEncoder:
    """Raw DEFLATE writer; every :meth:`compress` ends with a sync flush (``00 00 ff ff``)."""

    __slots__ = ("_z",)

    def __init__(self, level: int = 6) -> None:
        # Go's flate also has HuffmanOnly (-2) and DefaultCompression (-1), but nsqd only ever
        # uses a negotiated level in 1..--max-deflate-level; 0 (stored) is harmless to allow.
        if not 0 <= level <= 9:
            raise ValueError(f"deflate level must be in 0..9, got {level}")
        self._z = zlib.compressobj(level, zlib.DEFLATED, -15)

    def compress(self, data: bytes) -> bytes:
        # Z_SYNC_FLUSH is what Go's flate.Writer.Flush emits: the pending block plus an empty
        # stored block, byte-aligned, without ending the stream.
        return self._z.compress(data) + self._z.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    """Raw DEFLATE reader that accepts any chunking and bounds its output per call."""

    __slots__ = ("_error", "_more", "_tail", "_z")

    def __init__(self) -> None:
        self._z = zlib.decompressobj(-15)
        self._tail = b""  # input zlib did not consume because max_length was reached
        self._more = False
        self._error: CompressionError | None = None

    @property
    def needs_input(self) -> bool:
        return not self._more

    @property
    def eof(self) -> bool:
        """The peer ended the deflate stream (a final block); no more data may follow."""
        return self._z.eof

    def decompress(self, data: bytes, max_length: int | None = None) -> bytes:
        if self._error is not None:
            raise self._error
        limit = _output_limit(max_length)
        src = self._tail + data if self._tail else data
        try:
            out = self._z.decompress(src, limit)
        except zlib.error as exc:
            self._error = CompressionError(f"deflate: {exc}")
            raise self._error from None
        if self._z.unused_data:
            self._error = CompressionError("deflate: data after the end of the stream")
            raise self._error
        self._tail = self._z.unconsumed_tail
        # A full output buffer may hide more pending output inside zlib even when all input was
        # consumed (the tail of a long match); only a short read proves it is drained.
        self._more = bool(self._tail) or (limit > 0 and len(out) == limit)
        return out


# --------------------------------------------------------------------------------------------
# Snappy framed stream

_CHUNK_COMPRESSED: Final = 0x00
_CHUNK_UNCOMPRESSED: Final = 0x01
_CHUNK_PADDING: Final = 0xFE
_CHUNK_STREAM_IDENTIFIER: Final = 0xFF
_LAST_UNSKIPPABLE: Final = 0x7F
_STREAM_MAGIC: Final = b"sNaPpY"
#: The chunk every stream starts with: type 0xff, length 6 (24-bit little-endian), "sNaPpY".
STREAM_IDENTIFIER: Final = b"\xff\x06\x00\x00" + _STREAM_MAGIC
_HEADER_LEN: Final = 4  # chunk type + 24-bit little-endian length
_CRC_LEN: Final = 4
#: The format's limit on the uncompressed data of one chunk.
MAX_BLOCK_SIZE: Final = 65536
#: Longest chunk body of each data type: a 64 KiB block plus its CRC, compressed at snappy's
#: worst case (32 + n + n/6) for type 0x00; golang/snappy refuses anything longer too.
_MAX_CHUNK_LEN: Final = {
    0x00: _CRC_LEN + 32 + MAX_BLOCK_SIZE + MAX_BLOCK_SIZE // 6,
    0x01: _CRC_LEN + MAX_BLOCK_SIZE,
}
_CRC_MASK_DELTA: Final = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """The framing format's checksum: CRC-32C rotated right 15 bits plus a constant.

    The format masks the CRC so that checksumming data that itself holds CRCs stays robust.
    """
    import crc32c

    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def _chunk_header(chunk_type: int, length: int) -> bytes:
    return (chunk_type | (length << 8)).to_bytes(_HEADER_LEN, "little")


def _encode_block(block: bytes) -> bytes:
    import cramjam

    crc = masked_crc32c(block).to_bytes(_CRC_LEN, "little")
    compressed = bytes(cramjam.snappy.compress_raw(block))
    # Like golang/snappy's Writer: keep the compressed form only if it saves at least 12.5%;
    # otherwise the peer would pay for decoding with nothing to show for it.
    if len(compressed) >= len(block) - len(block) // 8:
        return _chunk_header(_CHUNK_UNCOMPRESSED, _CRC_LEN + len(block)) + crc + block
    return _chunk_header(_CHUNK_COMPRESSED, _CRC_LEN + len(compressed)) + crc + compressed


class SnappyEncoder:
    """Snappy framed-stream writer: stream identifier first, then one chunk per 64 KiB."""

    __slots__ = ("_started",)

    def __init__(self) -> None:
        self._started = False

    def compress(self, data: bytes) -> bytes:
        # Empty input writes nothing, not even the identifier, as golang/snappy's Writer.
        if not data:
            return b""
        parts = [] if self._started else [STREAM_IDENTIFIER]
        self._started = True
        parts.extend(
            _encode_block(data[start : start + MAX_BLOCK_SIZE])
            for start in range(0, len(data), MAX_BLOCK_SIZE)
        )
        return b"".join(parts)


class SnappyDecoder:
    """Snappy framed-stream reader that accepts any chunking and bounds its output per call.

    Checks every chunk's CRC, skips padding and reserved skippable chunks (of any length,
    without buffering them), and rejects reserved unskippable chunks, data before the stream
    identifier and data chunks longer than golang/snappy accepts.
    """

    __slots__ = ("_buf", "_error", "_more", "_pending", "_pos", "_skip", "_started")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # start of the unparsed input in _buf; compacted once per call
        self._skip = 0  # bytes of a skippable chunk still to drop
        self._started = False  # the stream identifier was seen
        self._pending = b""  # decoded output held back by max_length
        self._more = False
        self._error: CompressionError | None = None

    @property
    def needs_input(self) -> bool:
        return not self._more

    def decompress(self, data: bytes, max_length: int | None = None) -> bytes:
        if self._error is not None:
            raise self._error
        limit = _output_limit(max_length)
        self._buf += data
        pieces = [self._pending]
        size = len(self._pending)
        try:
            while limit == 0 or size < limit:
                piece = self._next_chunk()
                if piece is None:
                    break
                pieces.append(piece)
                size += len(piece)
        except CompressionError as exc:
            self._error = exc
            raise
        finally:
            del self._buf[: self._pos]
            self._pos = 0
        out = b"".join(pieces)
        if limit and len(out) > limit:
            out, self._pending = out[:limit], out[limit:]
        else:
            self._pending = b""
        # Stopping at the limit may leave whole chunks in _buf, so ask to be called again.
        self._more = bool(self._pending) or (limit > 0 and size >= limit)
        return out

    def _next_chunk(self) -> bytes | None:
        """Consume one chunk from the buffer and return its data, or None if input ran out."""
        if self._skip:
            return self._skip_bytes()
        available = len(self._buf) - self._pos
        if available < _HEADER_LEN:
            return None
        header = int.from_bytes(self._buf[self._pos : self._pos + _HEADER_LEN], "little")
        chunk_type, length = header & 0xFF, header >> 8
        # Validate from the header alone so a bogus length is refused before it is buffered.
        self._check_header(chunk_type, length)
        if chunk_type > _LAST_UNSKIPPABLE and chunk_type != _CHUNK_STREAM_IDENTIFIER:
            self._pos += _HEADER_LEN
            self._skip = length
            return self._skip_bytes()
        if available < _HEADER_LEN + length:
            return None
        start = self._pos + _HEADER_LEN
        self._pos = start + length
        body = bytes(self._buf[start : self._pos])
        if chunk_type == _CHUNK_STREAM_IDENTIFIER:
            if body != _STREAM_MAGIC:
                raise CompressionError("snappy: bad stream identifier")
            self._started = True
            return b""
        return _decode_data_chunk(chunk_type, body)

    def _check_header(self, chunk_type: int, length: int) -> None:
        if not self._started and chunk_type != _CHUNK_STREAM_IDENTIFIER:
            raise CompressionError("snappy: stream does not start with the stream identifier")
        if chunk_type == _CHUNK_STREAM_IDENTIFIER:
            if length != len(_STREAM_MAGIC):
                raise CompressionError(f"snappy: stream identifier of length {length}")
        elif chunk_type in (_CHUNK_COMPRESSED, _CHUNK_UNCOMPRESSED):
            if length < _CRC_LEN:
                raise CompressionError(f"snappy: chunk of length {length} has no checksum")
            if length > _MAX_CHUNK_LEN[chunk_type]:
                raise CompressionError(f"snappy: chunk too long ({length} bytes)")
        elif chunk_type <= _LAST_UNSKIPPABLE:
            raise CompressionError(f"snappy: reserved unskippable chunk type 0x{chunk_type:02x}")

    def _skip_bytes(self) -> bytes | None:
        dropped = min(self._skip, len(self._buf) - self._pos)
        self._pos += dropped
        self._skip -= dropped
        return None if self._skip else b""


def _decode_data_chunk(chunk_type: int, body: bytes) -> bytes:
    expected_crc = int.from_bytes(body[:_CRC_LEN], "little")
    payload = body[_CRC_LEN:]
    if chunk_type == _CHUNK_COMPRESSED:
        payload = _decompress_block(payload)
    if masked_crc32c(payload) != expected_crc:
        raise CompressionError("snappy: checksum mismatch")
    return payload


def _decompress_block(block: bytes) -> bytes:
    import cramjam

    try:
        # The declared length is checked first so a hostile header cannot make cramjam
        # allocate more than one chunk's worth.
        if cramjam.snappy.decompress_raw_len(block) > MAX_BLOCK_SIZE:
            raise CompressionError("snappy: compressed chunk decodes to more than 64 KiB")
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"snappy: corrupt compressed chunk: {exc}") from None
