"""The nsqd nodes ("producers") nsqadmin finds in a cluster, as NSQ's clusterinfo.Producer.

Pure: built from a lookupd ``/nodes`` or ``/lookup`` entry, or from an nsqd's ``/info`` plus
``/stats``; ``to_json`` gives ``/api/nodes``' shape in Go's field order. Versions compare as
semver (blang/semver); an unparsable version counts as 0.0.0, which makes it "out of date".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

_SEMVER: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)

#: A comparable semver: (major, minor, patch, is-release, prerelease identifiers).
VersionKey = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]


def version_key(text: str) -> VersionKey:
    """Semver precedence key; anything unparsable is 0.0.0 as in clusterinfo."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        return (0, 0, 0, 1, ())
    major, minor, patch, pre = match.groups()
    if pre is None:
        return (int(major), int(minor), int(patch), 1, ())
    # numeric identifiers sort before alphanumeric ones, and numerically among themselves
    idents = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (int(major), int(minor), int(patch), 0, idents)


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _str(doc: Mapping[str, object], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def _int(doc: Mapping[str, object], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(slots=True)
class Producer:
    """One nsqd as nsqadmin knows it."""

    broadcast_address: str
    http_port: int
    tcp_port: int = 0
    hostname: str = ""
    version: str = ""
    remote_address: str = ""
    remote_addresses: list[str] | None = None
    #: (topic, tombstoned) pairs; None when the source listed none (Go's nil slice).
    topics: list[tuple[str, bool]] | None = None
    out_of_date: bool = False
    version_obj: VersionKey = field(default=(0, 0, 0, 1, ()))

    def __post_init__(self) -> None:
        self.version_obj = version_key(self.version)

    @property
    def http_address(self) -> str:
        return join_host_port(self.broadcast_address, self.http_port)

    @property
    def tcp_address(self) -> str:
        return join_host_port(self.broadcast_address, self.tcp_port)

    @property
    def address(self) -> str:
        return self.remote_address or "N/A"

    @classmethod
    def from_lookupd(cls, doc: Mapping[str, object]) -> Producer:
        """A ``/nodes`` or ``/lookup`` producer entry."""
        names = doc.get("topics")
        flags = doc.get("tombstones")
        topics: list[tuple[str, bool]] | None = None
        if isinstance(names, list) and names:
            marks = flags if isinstance(flags, list) else []
            topics = [
                (str(name), bool(marks[i]) if i < len(marks) else False)
                for i, name in enumerate(names)
            ]
        return cls(
            broadcast_address=_str(doc, "broadcast_address"),
            http_port=_int(doc, "http_port"),
            tcp_port=_int(doc, "tcp_port"),
            hostname=_str(doc, "hostname"),
            version=_str(doc, "version"),
            remote_address=_str(doc, "remote_address"),
            topics=topics,
        )

    @classmethod
    def from_nsqd(
        cls, info: Mapping[str, object], topic_names: list[str], address: str = ""
    ) -> Producer:
        """An nsqd's ``/info`` and the topic names of its ``/stats``.

        ``address`` (where we reached it) stands in for a missing broadcast address, as
        clusterinfo does for old nsqd.
        """
        broadcast, http_port = _str(info, "broadcast_address"), _int(info, "http_port")
        hostname = _str(info, "hostname")
        host, _, port = address.rpartition(":")
        if address and not broadcast:
            broadcast, http_port = host.strip("[]"), int(port) if port.isdigit() else 0
        if address and not hostname:
            hostname = host.strip("[]")
        return cls(
            broadcast_address=broadcast,
            http_port=http_port,
            tcp_port=_int(info, "tcp_port"),
            hostname=hostname,
            version=_str(info, "version"),
            topics=[(name, False) for name in topic_names] or None,
        )

    def to_json(self) -> dict[str, object]:
        topics = None
        if self.topics is not None:
            topics = [{"topic": name, "tombstoned": dead} for name, dead in self.topics]
        return {
            "remote_addresses": self.remote_addresses,
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "topics": topics,
            "out_of_date": self.out_of_date,
        }


def search(producers: list[Producer], node: str) -> Producer | None:
    """The producer whose HTTP address is ``node`` (clusterinfo's Producers.Search)."""
    return next((p for p in producers if p.http_address == node), None)
