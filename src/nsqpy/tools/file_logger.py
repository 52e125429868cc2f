"""nsq_to_file's output file for one topic: rotation, gzip members, fsync, the move out.

This is the file half of NSQ's ``FileLogger``; the message half (buffering, when to sync, FIN)
is ``file_router``. Everything here is synchronous and takes its clock and fsync as parameters,
so rotation and durability decisions can be tested without waiting or touching real disks' caches.

File lifecycle, as in NSQ v1.3.0 (names: ``file_names``):

- a file is opened in ``--work-dir`` with O_EXCL when gzip or interval rotation is on (a new file
  every time: the revision is bumped until the name is free), else appended to;
- ``sync`` ends the current gzip member (its trailer checksums what was ACKed) and fsyncs, so a
  gzip file is a concatenation of members;
- ``close`` fsyncs and, with a separate work dir, hard-links the file into ``--output-dir`` and
  unlinks it (never overwriting: a taken name bumps the revision).
"""

from __future__ import annotations

import errno
import gzip
import logging
import os
from collections.abc import Callable
from typing import BinaryIO

from nsqpy._internal.duration import SECOND, format_go_duration
from nsqpy.tools.file_names import (
    Clock,
    FileOptions,
    SystemClock,
    compute_filename_format,
    go_path_join,
    rev_name,
)
from nsqpy.tools.strftime import strftime


class FileLoggerFatal(Exception):
    """A file operation failed; NSQ logs it as FATAL and exits 1, so the caller must stop."""


def exclusive_rename(src: str, dst: str) -> None:
    """Move without ever replacing ``dst`` (link fails with EEXIST if it is taken)."""
    os.link(src, dst)
    os.remove(src)


def _make_parent_dir(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, mode=0o770, exist_ok=True)


class FileLogger:
    """The current output file of one topic (None until the first open)."""

    def __init__(
        self,
        opts: FileOptions,
        topic: str,
        channel: str,
        *,
        log: logging.Logger,
        clock: Clock | None = None,
        fsync: Callable[[int], None] = os.fsync,
        hostname: str | None = None,
    ) -> None:
        self.opts = opts
        self.template = compute_filename_format(opts, topic, hostname=hostname)
        self.tag = f"[{topic}/{channel}]"
        self._log = log
        self._clock = clock or SystemClock()
        self._fsync = fsync
        self._work_dir = opts.effective_work_dir
        self._out: BinaryIO | None = None
        self._gz: gzip.GzipFile | None = None
        self.path = ""  # the open file in the work dir
        self._name = ""  # its name relative to the work (and output) dir, <REV> filled in
        self.filename = ""  # current name template (<DATETIME> filled, <REV> not)
        self.rev = 0
        self.filesize = 0
        self._open_time = 0.0

    @property
    def is_open(self) -> bool:
        return self._out is not None

    def current_filename(self) -> str:
        return self.template.replace(
            "<DATETIME>", strftime(self.opts.datetime_format, self._clock.now())
        )

    # -- rotation -----------------------------------------------------------------------------

    def needs_rotation(self) -> bool:
        """Whether the next write must go to a new file: none open, new name, age or size."""
        if self._out is None:
            return True
        filename = self.current_filename()
        if filename != self.filename:
            self._info("new filename %s, rotating...", filename)
            return True
        if self.opts.rotate_interval > 0:
            age = self._clock.monotonic() - self._open_time
            if age > self.opts.rotate_interval:
                self._info("%s since last open, rotating...", format_go_duration(int(age * SECOND)))
                return True
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self._info_too_big()
            return True
        return False

    def update_file(self) -> None:
        """Close the current file and open the next one (new name, or the next revision)."""
        self.close()  # uses the old name and rev to resolve a clash in the output dir
        filename = self.current_filename()
        self.rev = 0 if filename != self.filename else self.rev + 1
        self.filename = filename
        self._open_time = self._clock.monotonic()
        self._guard(_make_parent_dir, go_path_join(self._work_dir, filename), "create dir")
        while not self._try_open(rev_name(filename, self.rev)):
            self.rev += 1

    def _try_open(self, name: str) -> bool:
        """Open work-dir file ``name`` as the current file; False when this revision is unusable."""
        if self._taken_in_output_dir(name):
            return False
        path = go_path_join(self._work_dir, name)
        # A file that must be new (gzip, interval rotation) is never appended to.
        exclusive = self.opts.gzip or self.opts.rotate_interval > 0
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_APPEND)
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            self._log.warning("%s working file already exists: %s", self.tag, path)
            return False
        except OSError as err:
            raise self._fatal(f"unable to open {path}: {err}") from err
        self._info("opening %s", path)
        out = os.fdopen(fd, "wb")
        self.filesize = os.fstat(fd).st_size
        self.path, self._name = path, name
        if self.opts.rotate_size > 0 and self.filesize > self.opts.rotate_size:
            self._info_too_big()
            out.close()  # NSQ leaks this descriptor; there is no reason to
            return False
        self._out = out
        return True

    def _taken_in_output_dir(self, name: str) -> bool:
        """With a work dir, skip revisions whose name already exists in the output dir."""
        if self._work_dir == self.opts.output_dir:
            return False
        out_path = go_path_join(self.opts.output_dir, name)
        self._guard(_make_parent_dir, out_path, "create dir")
        if os.path.lexists(out_path):
            self._log.warning("%s output file already exists: %s", self.tag, out_path)
            return True
        return False

    # -- writing ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Append ``data``; rotate-size counts these (uncompressed) bytes, as NSQ does."""
        if self._out is None:
            raise self._fatal("writing message to disk: no file is open")
        writer: BinaryIO | gzip.GzipFile = self._out
        if self.opts.gzip:
            writer = self._gz = self._gz or self._new_member(self._out)
        try:
            writer.write(data)
        except OSError as err:
            raise self._fatal(f"writing message to disk: {err}") from err
        self.filesize += len(data)

    def sync(self) -> None:
        """Make everything written so far durable; only then may its messages be FINished."""
        out = self._out
        if out is None:
            return
        try:
            if self._gz is not None:
                self._gz.close()  # ends the member: its trailer covers exactly what is synced
                # The next member starts with the next write, so that until then the file on
                # disk is complete gzip (Go's writer also writes its header lazily).
                self._gz = None
            out.flush()
            self._fsync(out.fileno())
        except OSError as err:
            raise self._fatal(f"failed syncing messages: {err}") from err

    def _new_member(self, out: BinaryIO) -> gzip.GzipFile:
        # No name and a zero mtime in the header, like Go's gzip.Writer.
        return gzip.GzipFile(
            filename="", mode="wb", compresslevel=self.opts.gzip_level, fileobj=out, mtime=0
        )

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish, fsync and close the current file, then move it to the output dir."""
        out = self._out
        if out is None:
            return
        self._out = None
        try:
            if self.opts.gzip:
                # Closing Go's writer ends a member even if nothing was written since the
                # last sync (an empty one); readers skip it, and we keep the same bytes.
                (self._gz or self._new_member(out)).close()
                self._gz = None
            out.flush()
            self._fsync(out.fileno())
            out.close()
        except OSError as err:
            raise self._fatal(f"failed to close output file: {err}") from err
        if self._work_dir != self.opts.output_dir:
            self._move_out(self.path, go_path_join(self.opts.output_dir, self._name))

    def _move_out(self, src: str, dst: str) -> None:
        self._info("moving finished file %s to %s", src, dst)
        try:
            exclusive_rename(src, dst)
            return
        except FileExistsError:
            pass
        except OSError as err:
            raise self._fatal(f"unable to move file from {src} to {dst}: {err}") from err
        template = go_path_join(self.opts.output_dir, self.filename)
        rev = self.rev + 1
        while True:
            self._log.warning("%s destination file already exists: %s", self.tag, dst)
            candidate = rev_name(template, rev)
            try:
                exclusive_rename(src, candidate)
            except OSError as err:
                if err.errno == errno.EEXIST:
                    rev += 1
                    continue
                raise self._fatal(
                    f"unable to rename file from {src} to {candidate}: {err}"
                ) from err
            self._info("renamed finished file %s to %s to avoid overwrite", src, candidate)
            return

    # -- helpers ------------------------------------------------------------------------------

    def _info(self, fmt: str, *args: object) -> None:
        self._log.info("%s " + fmt, self.tag, *args)

    def _info_too_big(self) -> None:
        self._info(
            "%s currently %d bytes (> %d), rotating...",
            self.path,
            self.filesize,
            self.opts.rotate_size,
        )

    def _fatal(self, message: str) -> FileLoggerFatal:
        return FileLoggerFatal(f"{self.tag} {message}")

    def _guard(self, action: Callable[[str], None], path: str, what: str) -> None:
        try:
            action(path)
        except OSError as err:
            raise self._fatal(f"unable to {what}: {err}") from err
