"""``nsqd.dat`` (topics, channels, paused flags) and the data-path lock.

The file is nsqd's JSON::

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],
     "version":"1.3.0"}

written through a temporary file, fsync and rename, so a crash leaves the old or the new
version, never a torn one. nsqpy adds a topic's or channel's dead-letter/TTL settings
(``nsqpy.nsqd.core.policy``) as extra fields, only when set::

    {"name":"c","paused":false,"max_attempts":5,"message_ttl":"1h0m0s",
     "dead_letter_topic":"t.failed"}

A clean stop also records how many deferred messages it wrote to a channel's disk queue,
``"deferred_records":N``, so that they count as deferred (not as depth) from the first
``/stats`` after the restart; the start rewrites the file without it, so a crash never
leaves a stale count behind.

Go's ``json.Unmarshal`` ignores fields its structs do not name, so nsqd v1.3.0 still opens the
directory (and drops the settings when it next writes the file).

nsqd refuses to start on an unreadable file; nsqpy sets it aside as ``nsqd.dat.bad`` and
rebuilds the list from the disk-queue files present, so no queued message is stranded.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import secrets
from typing import Any, Final

from nsqpy.nsqd.core.meta import ChannelMeta, TopicMeta
from nsqpy.nsqd.core.policy import Settings, SettingsError, settings_from_json
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.names import is_ephemeral, is_valid_name

log = logging.getLogger("nsqpy.nsqd")

FILE_NAME: Final = "nsqd.dat"
DEFERRED_FIELD: Final = "deferred_records"
_QUEUE_FILE: Final = re.compile(r"(?P<name>.+)\.diskqueue\.(?:meta|\d{6})\.dat")


class MetadataError(Exception):
    """nsqd.dat could not be written."""


def encode(topics: list[TopicMeta]) -> bytes:
    """nsqd.dat's bytes; ephemeral topics and channels are never persisted."""
    doc = {
        "topics": [
            {
                "name": t.name,
                "paused": t.paused,
                "channels": [
                    {
                        "name": c.name,
                        "paused": c.paused,
                        **c.settings.set_fields(),
                        **({DEFERRED_FIELD: c.deferred} if c.deferred > 0 else {}),
                    }
                    for c in t.channels
                    if not is_ephemeral(c.name)
                ],
                **t.settings.set_fields(),
            }
            for t in topics
            if not is_ephemeral(t.name)
        ],
        "version": NSQ_VERSION,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode(data: bytes) -> list[TopicMeta]:
    """Parse nsqd.dat; raises ValueError if it is not nsqd's JSON. Bad names are skipped."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("topics", []), list | None):
        raise ValueError("not an nsqd metadata document")
    topics: list[TopicMeta] = []
    for raw in doc.get("topics") or []:
        topic = _topic(raw)
        if topic is not None:
            topics.append(topic)
    return topics


def _topic(raw: Any) -> TopicMeta | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ValueError("topic entry without a name")
    name = raw["name"]
    if not is_valid_name(name):
        log.warning("skipping creation of invalid topic %s", name)
        return None
    topic = TopicMeta(name, bool(raw.get("paused", False)), settings=_settings(raw, name, name))
    for chan in raw.get("channels") or []:
        if not isinstance(chan, dict) or not isinstance(chan.get("name"), str):
            raise ValueError("channel entry without a name")
        if not is_valid_name(chan["name"]):
            log.warning("skipping creation of invalid channel %s", chan["name"])
            continue
        settings = _settings(chan, name, f"{name}:{chan['name']}")
        deferred = chan.get(DEFERRED_FIELD, 0)
        if not isinstance(deferred, int) or isinstance(deferred, bool) or deferred < 0:
            deferred = 0  # not ours, or damaged: count them in depth until read, as before
        paused = bool(chan.get("paused", False))
        topic.channels.append(ChannelMeta(chan["name"], paused, settings, deferred))
    return topic


def _settings(raw: dict[str, Any], topic: str, what: str) -> Settings:
    try:
        return settings_from_json(raw, topic)
    except SettingsError as err:
        log.error("ignoring the dead-letter/TTL settings of %s in %s - %s", what, FILE_NAME, err)
        return Settings()


def load(data_path: str) -> list[TopicMeta]:
    """Read nsqd.dat; an unreadable one is set aside and rebuilt from the queue files."""
    path = os.path.join(data_path, FILE_NAME)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    try:
        return decode(data)
    except ValueError as err:
        bad = path + ".bad"
        os.replace(path, bad)
        log.error("failed to parse metadata in %s - %s (set aside as %s)", path, err, bad)
        return recover_from_queue_files(data_path)


def recover_from_queue_files(data_path: str) -> list[TopicMeta]:
    """Topics and channels named by the ``*.diskqueue.*`` files in ``data_path``."""
    topics: dict[str, TopicMeta] = {}
    for entry in sorted(os.listdir(data_path)):
        match = _QUEUE_FILE.fullmatch(entry)
        if match is None:
            continue
        topic_name, _, channel_name = match.group("name").partition(":")
        if not is_valid_name(topic_name):
            continue
        topic = topics.setdefault(topic_name, TopicMeta(topic_name))
        known = {c.name for c in topic.channels}
        if channel_name and is_valid_name(channel_name) and channel_name not in known:
            topic.channels.append(ChannelMeta(channel_name))
    return list(topics.values())


def persist(data_path: str, topics: list[TopicMeta]) -> None:
    """Write nsqd.dat atomically (temporary file, fsync, rename)."""
    write_file(data_path, encode(topics))


def write_file(data_path: str, data: bytes) -> None:
    """Write ``data`` (``encode``'s) as nsqd.dat atomically: temporary file, fsync, rename.
    Any thread may call it; raises MetadataError."""
    path = os.path.join(data_path, FILE_NAME)
    tmp = f"{path}.{secrets.randbelow(1 << 31)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        raise MetadataError(f"failed to persist metadata - {err}") from err


class DataPathLock:
    """An exclusive flock on the data directory, as nsqd takes (one nsqd per directory)."""

    def __init__(self, data_path: str) -> None:
        self.path = data_path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            raise MetadataError(
                f"failed to lock data-path: cannot flock directory {self.path} - {err.strerror}"
                " (possibly in use by another instance of nsqd)"
            ) from err
        self._fd = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
