"""nsq_to_file's file half: names, strftime, rotation, gzip members, fsync, the move out.

The clock is injected, so datetime and interval rotation are crossed without waiting.
"""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import os
import zlib
from pathlib import Path

import pytest

from nsqpy.tools.file_logger import FileLogger
from nsqpy.tools.file_names import (
    REV_REQUIRED,
    FileOptions,
    compute_filename_format,
    host_identifier,
)
from nsqpy.tools.strftime import strftime

UTC = dt.UTC
LOG = logging.getLogger("test.file_logger")


class FakeClock:
    def __init__(self) -> None:
        self.wall = dt.datetime(2024, 3, 5, 14, 59, 30, tzinfo=UTC)
        self.mono = 1000.0

    def now(self) -> dt.datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += dt.timedelta(seconds=seconds)
        self.mono += seconds


class Fsyncs:
    """Records fsync calls (and really performs them)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fd: int) -> None:
        self.count += 1
        os.fsync(fd)


def new_logger(
    tmp_path: Path, clock: FakeClock | None = None, fsync: Fsyncs | None = None, **opts: object
) -> FileLogger:
    fields: dict[str, object] = {
        "output_dir": str(tmp_path / "out"),
        "filename_format": "<TOPIC>.<HOST><REV>.<DATETIME>.log",
        **opts,
    }
    return FileLogger(
        FileOptions(**fields),  # type: ignore[arg-type]
        "events",
        "archive",
        log=LOG,
        clock=clock or FakeClock(),
        fsync=fsync or Fsyncs(),
        hostname="web1.example.com",
    )


def members(data: bytes) -> list[bytes]:
    """Split concatenated gzip into its members' decompressed contents."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        assert d.eof, "truncated gzip member"
        data = d.unused_data
    return out


# -- names ------------------------------------------------------------------------------------


def test_strftime_nsq_directives_in_english_whatever_the_locale() -> None:
    t = dt.datetime(2024, 3, 5, 14, 7, 9, tzinfo=dt.timezone(dt.timedelta(hours=-7)))
    assert strftime("%Y-%m-%d_%H", t) == "2024-03-05_14"
    assert strftime("%y %b %B %a %A %I %p %M %S %z %%", t) == (
        "24 Mar March Tue Tuesday 02 PM 07 09 -0700 %"
    )
    assert strftime("%Z", t.astimezone(UTC)) == "UTC"
    # Unknown directives and a trailing % are copied as written, as NSQ does.
    assert strftime("%j-%Q-%", t) == "%j-%Q-%"


def test_host_identifier_tokens() -> None:
    assert host_identifier("", "web1.example.com") == "web1"
    assert host_identifier("<SHORT_HOST>-<HOSTNAME>", "web1.example.com") == (
        "web1-web1.example.com"
    )


@pytest.mark.parametrize(
    "opts",
    [
        {"gzip": True},
        {"rotate_size": 10},
        {"rotate_interval": 60.0},
        {"work_dir": "/tmp/work", "output_dir": "/tmp/out"},
    ],
)
def test_rev_required_when_names_can_repeat(opts: dict[str, object]) -> None:
    fmt = FileOptions(filename_format="<TOPIC>.<DATETIME>.log", **opts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^" + REV_REQUIRED + "$"):
        compute_filename_format(fmt, "t")


def test_filename_tokens_rev_dropped_and_gz_added() -> None:
    plain = FileOptions(filename_format="<TOPIC>/<HOST>-<PID><REV>.<DATETIME>.log")
    assert compute_filename_format(plain, "t", hostname="h.x", pid=42) == ("t/h-42.<DATETIME>.log")
    gz = FileOptions(filename_format="<TOPIC><REV>.log", gzip=True)
    assert compute_filename_format(gz, "t") == "t<REV>.log.gz"
    already = FileOptions(filename_format="<TOPIC><REV>.gz", gzip=True)
    assert compute_filename_format(already, "t") == "t<REV>.gz"
    assert REV_REQUIRED == (
        "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
    )


# -- plain files ------------------------------------------------------------------------------


def test_plain_file_appends_and_syncs(tmp_path: Path) -> None:
    fsyncs = Fsyncs()
    logger = new_logger(tmp_path, fsync=fsyncs)
    assert logger.needs_rotation()  # nothing open yet
    logger.update_file()
    path = tmp_path / "out" / "events.web1.2024-03-05_14.log"
    assert logger.path == str(path)
    logger.write(b"one\n")
    logger.sync()
    assert fsyncs.count == 1
    assert path.read_bytes() == b"one\n"
    logger.close()
    # Without gzip or interval rotation, an existing file is appended to.
    again = new_logger(tmp_path)
    again.update_file()
    again.write(b"two\n")
    again.close()
    assert path.read_bytes() == b"one\ntwo\n"
    assert not again.is_open


def test_rotation_on_datetime_change(tmp_path: Path) -> None:
    clock = FakeClock()
    logger = new_logger(tmp_path, clock, gzip=False, rotate_size=1000)
    logger.update_file()
    logger.write(b"a\n")
    assert not logger.needs_rotation()
    clock.advance(31)  # 14:59:30 -> 15:00:01: a new <DATETIME>
    assert logger.needs_rotation()
    logger.update_file()
    logger.write(b"b\n")
    logger.close()
    out = tmp_path / "out"
    assert (out / "events.web1-000000.2024-03-05_14.log").read_bytes() == b"a\n"
    # A new name starts again at revision 0.
    assert (out / "events.web1-000000.2024-03-05_15.log").read_bytes() == b"b\n"


def test_rotation_by_interval_bumps_the_revision(tmp_path: Path) -> None:
    clock = FakeClock()
    clock.wall = clock.wall.replace(minute=0)
    logger = new_logger(tmp_path, clock, rotate_interval=60.0)
    logger.update_file()
    logger.write(b"a\n")
    clock.advance(60)
    assert not logger.needs_rotation()  # strictly more than the interval
    clock.advance(0.5)
    assert logger.needs_rotation()
    logger.update_file()
    logger.write(b"b\n")
    logger.close()
    out = tmp_path / "out"
    assert (out / "events.web1-000000.2024-03-05_14.log").read_bytes() == b"a\n"
    assert (out / "events.web1-000001.2024-03-05_14.log").read_bytes() == b"b\n"


def test_rotation_by_size(tmp_path: Path) -> None:
    logger = new_logger(tmp_path, rotate_size=10)
    logger.update_file()
    logger.write(b"0123456789")
    assert not logger.needs_rotation()  # rotates only beyond the size
    logger.write(b"\n")
    assert logger.needs_rotation()
    logger.update_file()
    logger.write(b"next\n")
    logger.close()
    out = tmp_path / "out"
    assert (out / "events.web1-000000.2024-03-05_14.log").read_bytes() == b"0123456789\n"
    assert (out / "events.web1-000001.2024-03-05_14.log").read_bytes() == b"next\n"


def test_existing_file_over_rotate_size_is_skipped_at_open(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "events.web1-000000.2024-03-05_14.log").write_bytes(b"x" * 11)
    (out / "events.web1-000001.2024-03-05_14.log").write_bytes(b"y" * 3)
    logger = new_logger(tmp_path, rotate_size=10)
    logger.update_file()
    assert logger.rev == 1  # revision 0 is already too big; 1 is appended to
    assert logger.filesize == 3
    logger.write(b"z\n")
    logger.close()
    assert (out / "events.web1-000001.2024-03-05_14.log").read_bytes() == b"yyyz\n"


# -- gzip -------------------------------------------------------------------------------------


def test_gzip_one_member_per_sync(tmp_path: Path) -> None:
    fsyncs = Fsyncs()
    logger = new_logger(tmp_path, fsync=fsyncs, gzip=True, gzip_level=9)
    logger.update_file()
    path = Path(logger.path)
    assert path.name == "events.web1-000000.2024-03-05_14.log.gz"
    bodies = [b"first", b"with space and \xff bytes", b"", b"last"]
    for body in bodies[:2]:
        logger.write(body + b"\n")
    logger.sync()
    # After a sync the file on disk is complete, valid gzip holding what was synced.
    assert gzip.decompress(path.read_bytes()) == b"first\nwith space and \xff bytes\n"
    for body in bodies[2:]:
        logger.write(body + b"\n")
    logger.sync()
    logger.close()
    data = path.read_bytes()
    assert gzip.decompress(data).split(b"\n")[:-1] == bodies
    # Two syncs, then close ends a last (empty) member: three members.
    assert members(data) == [b"first\nwith space and \xff bytes\n", b"\nlast\n", b""]
    assert fsyncs.count == 3
    # Like Go's writer: no file name in the header, zero mtime.
    assert data[3] & 0x08 == 0
    assert data[4:8] == b"\0\0\0\0"


def test_gzip_never_appends_to_an_existing_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    taken = out / "events.web1-000000.2024-03-05_14.log.gz"
    taken.write_bytes(b"old")
    logger = new_logger(tmp_path, gzip=True)
    logger.update_file()
    assert logger.path == str(out / "events.web1-000001.2024-03-05_14.log.gz")
    logger.write(b"m\n")
    logger.close()
    assert taken.read_bytes() == b"old"
    assert gzip.decompress(Path(logger.path).read_bytes()) == b"m\n"


def test_rotate_size_counts_uncompressed_bytes(tmp_path: Path) -> None:
    logger = new_logger(tmp_path, gzip=True, rotate_size=100)
    logger.update_file()
    logger.write(b"a" * 101)  # compresses to far less than 100 bytes
    assert logger.needs_rotation()


# -- work dir ---------------------------------------------------------------------------------


def test_work_dir_file_is_moved_on_close(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    logger = new_logger(tmp_path, work_dir=str(work))
    logger.update_file()
    name = "events.web1-000000.2024-03-05_14.log"
    assert logger.path == str(work / name)
    logger.write(b"in progress\n")
    logger.sync()
    assert not (out / name).exists()  # only finished files appear in the output dir
    logger.close()
    assert (out / name).read_bytes() == b"in progress\n"
    assert not (work / name).exists()


def test_work_dir_skips_revisions_taken_in_output_dir(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    (out / "events.web1-000000.2024-03-05_14.log").write_bytes(b"earlier run")
    logger = new_logger(tmp_path, work_dir=str(work))
    logger.update_file()
    assert logger.path == str(work / "events.web1-000001.2024-03-05_14.log")
    logger.write(b"new\n")
    logger.close()
    assert (out / "events.web1-000000.2024-03-05_14.log").read_bytes() == b"earlier run"
    assert (out / "events.web1-000001.2024-03-05_14.log").read_bytes() == b"new\n"


def test_move_never_overwrites_a_file_that_appeared_meanwhile(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    logger = new_logger(tmp_path, work_dir=str(work))
    logger.update_file()
    logger.write(b"mine\n")
    # Another writer takes the name (and the next one) while this file is open.
    (out / "events.web1-000000.2024-03-05_14.log").write_bytes(b"theirs 0")
    (out / "events.web1-000001.2024-03-05_14.log").write_bytes(b"theirs 1")
    logger.close()
    assert (out / "events.web1-000000.2024-03-05_14.log").read_bytes() == b"theirs 0"
    assert (out / "events.web1-000001.2024-03-05_14.log").read_bytes() == b"theirs 1"
    assert (out / "events.web1-000002.2024-03-05_14.log").read_bytes() == b"mine\n"
    assert list(work.iterdir()) == []


def test_reopen_after_close_uses_next_revision(tmp_path: Path) -> None:
    logger = new_logger(tmp_path, gzip=True)
    logger.update_file()
    logger.write(b"a\n")
    logger.close()  # what SIGHUP does
    assert logger.needs_rotation()
    logger.update_file()
    assert logger.rev == 1
    logger.write(b"b\n")
    logger.close()
    out = tmp_path / "out"
    assert gzip.decompress((out / "events.web1-000000.2024-03-05_14.log.gz").read_bytes()) == (
        b"a\n"
    )
    assert gzip.decompress((out / "events.web1-000001.2024-03-05_14.log.gz").read_bytes()) == (
        b"b\n"
    )
