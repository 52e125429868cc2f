"""Compression codecs (§2.9): golden bytes from the specs, independent encoders, corruption."""

from __future__ import annotations

import itertools
import os
import random
import zlib
from collections.abc import Callable, Iterable

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.compression import (
    STREAM_IDENTIFIER,
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
    StreamDecoder,
    StreamEncoder,
    masked_crc32c,
)

# CRC-32C("123456789") = 0xE3069283 (the standard check value). Masked per framing_format.txt:
# rotr15 = (0xE3069283 >> 15) | (0xE3069283 << 17) mod 2^32 = 0x0001C60D | 0x25060000
#        = 0x2507C60D;  + 0xA282EAD8 = 0xC78AB0E5, sent little-endian.
MASKED_CRC_123456789 = b"\xe5\xb0\x8a\xc7"
# CRC-32C of nothing is 0, so the mask leaves just the constant.
MASKED_CRC_EMPTY = b"\xd8\xea\x82\xa2"


def feed(decoder: StreamDecoder, pieces: Iterable[bytes], max_length: int | None = None) -> bytes:
    """Decode ``pieces`` in order, draining the decoder before each new one, as a transport does."""
    out = bytearray()
    for piece in pieces:
        out += decoder.decompress(piece, max_length)
        while not decoder.needs_input:
            out += decoder.decompress(b"", max_length)
    return bytes(out)


def random_splits(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(len(data) + 1), k=min(len(data) + 1, rng.randint(0, 20))))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def snappy_chunk(chunk_type: int, body: bytes) -> bytes:
    return bytes([chunk_type]) + len(body).to_bytes(3, "little") + body


# --------------------------------------------------------------------------------------------
# snappy: golden bytes


def test_stream_identifier_golden() -> None:
    assert STREAM_IDENTIFIER == b"\xff\x06\x00\x00sNaPpY"


def test_masked_crc_test_vector() -> None:
    assert masked_crc32c(b"123456789").to_bytes(4, "little") == MASKED_CRC_123456789
    assert masked_crc32c(b"").to_bytes(4, "little") == MASKED_CRC_EMPTY


def test_short_input_is_an_uncompressed_chunk_after_the_identifier() -> None:
    encoder = SnappyEncoder()
    assert encoder.compress(b"123456789") == (
        b"\xff\x06\x00\x00sNaPpY"
        b"\x01\x0d\x00\x00"  # uncompressed chunk, length 4 (crc) + 9
        + MASKED_CRC_123456789
        + b"123456789"
    )
    # The identifier is written once per stream.
    again = encoder.compress(b"123456789")
    assert again == b"\x01\x0d\x00\x00" + MASKED_CRC_123456789 + b"123456789"


def test_empty_input_writes_nothing() -> None:
    encoder = SnappyEncoder()
    assert encoder.compress(b"") == b""
    assert encoder.compress(b"x").startswith(STREAM_IDENTIFIER)


def test_decode_golden_uncompressed_chunk() -> None:
    stream = STREAM_IDENTIFIER + b"\x01\x0d\x00\x00" + MASKED_CRC_123456789 + b"123456789"
    assert SnappyDecoder().decompress(stream) == b"123456789"


def test_decode_golden_compressed_chunk() -> None:
    # Raw snappy block by hand: varint length 9, then a literal tag (len-1)<<2 = 0x20, 9 bytes.
    block = b"\x09\x20123456789"
    stream = STREAM_IDENTIFIER + snappy_chunk(0x00, MASKED_CRC_123456789 + block)
    assert SnappyDecoder().decompress(stream) == b"123456789"


def test_empty_uncompressed_chunk() -> None:
    stream = STREAM_IDENTIFIER + snappy_chunk(0x01, MASKED_CRC_EMPTY)
    decoder = SnappyDecoder()
    assert decoder.decompress(stream) == b""
    assert decoder.needs_input


def test_compressible_data_uses_compressed_chunks_of_at_most_64k() -> None:
    data = b"abcdefgh" * 20000  # 160000 bytes: chunks of 65536, 65536, 28928
    stream = SnappyEncoder().compress(data)
    pos = len(STREAM_IDENTIFIER)
    sizes = []
    while pos < len(stream):
        chunk_type, length = stream[pos], int.from_bytes(stream[pos + 1 : pos + 4], "little")
        assert chunk_type == 0x00
        block = stream[pos + 8 : pos + 4 + length]
        sizes.append(cramjam.snappy.decompress_raw_len(block))
        pos += 4 + length
    assert sizes == [65536, 65536, 28928]


def test_incompressible_data_uses_uncompressed_chunks() -> None:
    data = os.urandom(70000)
    stream = SnappyEncoder().compress(data)
    first = len(STREAM_IDENTIFIER)
    assert stream[first : first + 4] == b"\x01\x04\x00\x01"  # type 1, length 4 + 65536
    second = first + 4 + 4 + 65536
    assert stream[second : second + 4] == b"\x01" + (4 + 4464).to_bytes(3, "little")
    assert SnappyDecoder().decompress(stream) == data


# --------------------------------------------------------------------------------------------
# snappy: an independent implementation (cramjam's framed codec, the Rust snap crate)


@pytest.mark.parametrize(
    "data",
    [b"hello", b"123456789" * 1000, os.urandom(100_000), b"\x00" * 300_000, b""],
    ids=["short", "repetitive", "random", "zeros", "empty"],
)
def test_decode_cramjam_framed_stream(data: bytes) -> None:
    stream = bytes(cramjam.snappy.compress(data))
    assert SnappyDecoder().decompress(stream) == data
    assert feed(SnappyDecoder(), random_splits(stream, random.Random(7)), 1000) == data


@pytest.mark.parametrize(
    "data", [b"hello", b"123456789" * 1000, os.urandom(100_000), b"\x00" * 300_000]
)
def test_cramjam_decodes_our_stream(data: bytes) -> None:
    encoder = SnappyEncoder()
    stream = encoder.compress(data[: len(data) // 2]) + encoder.compress(data[len(data) // 2 :])
    assert bytes(cramjam.snappy.decompress(stream)) == data


# --------------------------------------------------------------------------------------------
# snappy: skipping, and everything the decoder must refuse


def test_padding_and_skippable_chunks_are_skipped() -> None:
    data_chunk = b"\x01\x0d\x00\x00" + MASKED_CRC_123456789 + b"123456789"
    stream = (
        STREAM_IDENTIFIER
        + snappy_chunk(0xFE, b"\x00" * 10)
        + data_chunk
        + snappy_chunk(0x80, b"ignored")
        + snappy_chunk(0xFD, b"")
        + snappy_chunk(0xFE, b"\x00" * 200_000)  # longer than any data chunk: skipped anyway
        + STREAM_IDENTIFIER  # concatenated streams repeat it
        + data_chunk
    )
    assert SnappyDecoder().decompress(stream) == b"123456789" * 2
    assert feed(SnappyDecoder(), [bytes([b]) for b in stream]) == b"123456789" * 2


def corrupt_cases() -> dict[str, bytes]:
    good = b"\x01\x0d\x00\x00" + MASKED_CRC_123456789 + b"123456789"
    return {
        "no identifier": good,
        "padding before identifier": snappy_chunk(0xFE, b"") + STREAM_IDENTIFIER,
        "bad identifier body": b"\xff\x06\x00\x00sNaPpX",
        "identifier length": snappy_chunk(0xFF, b"sNaPpY!"),
        "bad crc": STREAM_IDENTIFIER + good[:-1] + b"8",
        "bad crc compressed": STREAM_IDENTIFIER
        + snappy_chunk(0x00, MASKED_CRC_EMPTY + b"\x09\x20123456789"),
        "unskippable 0x02": STREAM_IDENTIFIER + snappy_chunk(0x02, b""),
        "unskippable 0x7f": STREAM_IDENTIFIER + snappy_chunk(0x7F, b"abc"),
        "no room for crc": STREAM_IDENTIFIER + snappy_chunk(0x01, b"abc"),
        "uncompressed over 64k": STREAM_IDENTIFIER
        + snappy_chunk(0x01, masked_crc32c(b"a" * 65537).to_bytes(4, "little") + b"a" * 65537),
        "compressed decodes over 64k": STREAM_IDENTIFIER
        + snappy_chunk(
            0x00,
            masked_crc32c(b"a" * 65537).to_bytes(4, "little")
            + bytes(cramjam.snappy.compress_raw(b"a" * 65537)),
        ),
        "corrupt block": STREAM_IDENTIFIER + snappy_chunk(0x00, MASKED_CRC_EMPTY + b"\x05\x00"),
    }


@pytest.mark.parametrize("name", list(corrupt_cases()))
def test_corrupt_snappy_raises_and_stays_broken(name: str) -> None:
    decoder = SnappyDecoder()
    with pytest.raises(CompressionError):
        decoder.decompress(corrupt_cases()[name])
    with pytest.raises(CompressionError):
        decoder.decompress(STREAM_IDENTIFIER)


@pytest.mark.parametrize(
    ("chunk_type", "longest"),
    # crc + 64 KiB; crc + 76490, snappy's worst case for 64 KiB (golang/snappy's limit too).
    [(0x01, 4 + 65536), (0x00, 4 + 76490)],
)
def test_chunk_too_long_is_refused_from_its_header_alone(chunk_type: int, longest: int) -> None:
    decoder = SnappyDecoder()
    decoder.decompress(STREAM_IDENTIFIER)
    assert decoder.decompress(bytes([chunk_type]) + longest.to_bytes(3, "little")) == b""
    decoder = SnappyDecoder()
    decoder.decompress(STREAM_IDENTIFIER)
    with pytest.raises(CompressionError, match="too long"):
        decoder.decompress(bytes([chunk_type]) + (longest + 1).to_bytes(3, "little"))


def test_corruption_error_is_a_value_error() -> None:
    assert issubclass(CompressionError, ValueError)


# --------------------------------------------------------------------------------------------
# deflate


def test_deflate_golden_stored_blocks() -> None:
    # Hand-written raw DEFLATE: header bits BFINAL + BTYPE=00 (stored), LEN, ~LEN, the bytes.
    not_final = b"\x00\x05\x00\xfa\xffhello"
    final = b"\x01\x05\x00\xfa\xffworld"
    decoder = DeflateDecoder()
    assert decoder.decompress(not_final) == b"hello"
    assert not decoder.eof
    assert decoder.decompress(final) == b"world"
    assert decoder.eof


def test_deflate_each_call_ends_with_a_sync_flush() -> None:
    encoder = DeflateEncoder(6)
    first = encoder.compress(b"hello hello hello")
    assert first.endswith(b"\x00\x00\xff\xff")  # empty stored block: the sync flush marker
    # Decodable at once, without anything that follows.
    assert zlib.decompressobj(-15).decompress(first) == b"hello hello hello"


def test_decode_zlib_sync_flushed_stream() -> None:
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    messages = [b"PUB test\n", os.urandom(5000), b"a" * 100_000, b"NOP\n"]
    decoder = DeflateDecoder()
    for message in messages:
        assert decoder.decompress(z.compress(message) + z.flush(zlib.Z_SYNC_FLUSH)) == message


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_deflate_levels_round_trip(level: int) -> None:
    data = b"The quick brown fox " * 500
    assert DeflateDecoder().decompress(DeflateEncoder(level).compress(data)) == data


@pytest.mark.parametrize("level", [-2, -1, 10])
def test_deflate_level_out_of_range(level: int) -> None:
    with pytest.raises(ValueError, match="level"):
        DeflateEncoder(level)


def test_corrupt_deflate_raises_and_stays_broken() -> None:
    decoder = DeflateDecoder()
    with pytest.raises(CompressionError):
        decoder.decompress(b"\x07garbage")  # BTYPE=11 is reserved
    with pytest.raises(CompressionError):
        decoder.decompress(b"")


def test_data_after_the_final_deflate_block_is_refused() -> None:
    with pytest.raises(CompressionError, match="after the end"):
        DeflateDecoder().decompress(b"\x01\x01\x00\xfe\xffxmore")


# --------------------------------------------------------------------------------------------
# round trips and the decompression-bomb guard, for both codecs

CODECS: list[tuple[str, Callable[[], StreamEncoder], Callable[[], StreamDecoder]]] = [
    ("snappy", SnappyEncoder, SnappyDecoder),
    ("deflate", lambda: DeflateEncoder(6), DeflateDecoder),
]
CODEC_IDS = [name for name, _, _ in CODECS]


@pytest.mark.parametrize(("name", "make_encoder", "make_decoder"), CODECS, ids=CODEC_IDS)
def test_round_trip_byte_by_byte(
    name: str, make_encoder: Callable[[], StreamEncoder], make_decoder: Callable[[], StreamDecoder]
) -> None:
    encoder = make_encoder()
    data = b"SUB topic channel\n" * 50 + os.urandom(300)
    stream = encoder.compress(data[:400]) + encoder.compress(data[400:])
    assert feed(make_decoder(), [bytes([b]) for b in stream]) == data


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(
        st.one_of(st.binary(max_size=3000), st.builds(lambda n: b"z" * n, st.integers(0, 200_000))),
        max_size=6,
    ),
    seed=st.integers(0, 2**32 - 1),
    max_length=st.one_of(st.none(), st.integers(1, 70_000)),
)
@pytest.mark.parametrize(("name", "make_encoder", "make_decoder"), CODECS, ids=CODEC_IDS)
def test_round_trip_random_splits(
    name: str,
    make_encoder: Callable[[], StreamEncoder],
    make_decoder: Callable[[], StreamDecoder],
    messages: list[bytes],
    seed: int,
    max_length: int | None,
) -> None:
    encoder = make_encoder()
    stream = b"".join(encoder.compress(m) for m in messages)
    pieces = random_splits(stream, random.Random(seed))
    assert feed(make_decoder(), pieces, max_length) == b"".join(messages)


@pytest.mark.parametrize(("name", "make_encoder", "make_decoder"), CODECS, ids=CODEC_IDS)
def test_bomb_guard_bounds_every_call(
    name: str, make_encoder: Callable[[], StreamEncoder], make_decoder: Callable[[], StreamDecoder]
) -> None:
    bomb = make_encoder().compress(b"\x00" * 20_000_000)
    assert len(bomb) < 1_000_000  # ~20 KB for deflate, ~1 MB for snappy
    decoder = make_decoder()
    limit = 65536
    out = decoder.decompress(bomb, max_length=limit)
    drained_at_once = decoder.needs_input
    assert len(out) == limit
    assert not drained_at_once
    total = len(out)
    calls = 1
    while not decoder.needs_input:
        chunk = decoder.decompress(b"", max_length=limit)
        assert len(chunk) <= limit
        assert chunk.count(0) == len(chunk)
        total += len(chunk)
        calls += 1
    assert total == 20_000_000
    assert calls >= 20_000_000 // limit


def test_deflate_drains_output_zlib_holds_after_consuming_all_input() -> None:
    # A prefix can end inside a long match: zlib takes every input byte yet still owes output
    # once max_length is reached, so a full read must not report needs_input.
    stream = DeflateEncoder(6).compress(b"a" * 100_000)
    for cut in range(len(stream) + 1):
        expected = zlib.decompressobj(-15).decompress(stream[:cut])
        assert feed(DeflateDecoder(), [stream[:cut]], 1000) == expected, cut


@pytest.mark.parametrize(("name", "make_encoder", "make_decoder"), CODECS, ids=CODEC_IDS)
def test_max_length_must_be_positive(
    name: str, make_encoder: Callable[[], StreamEncoder], make_decoder: Callable[[], StreamDecoder]
) -> None:
    with pytest.raises(ValueError, match="max_length"):
        make_decoder().decompress(b"", max_length=0)


def test_snappy_bomb_guard_holds_at_most_one_chunk_of_output() -> None:
    stream = SnappyEncoder().compress(b"\x00" * 1_000_000)
    decoder = SnappyDecoder()
    assert len(decoder.decompress(stream, max_length=10)) == 10
    # One 64 KiB chunk was decoded; the rest of the input waits undecoded.
    assert len(decoder._pending) < 65536
