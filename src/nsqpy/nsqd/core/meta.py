"""What ``nsqd.dat`` records of the broker: topics, channels, paused flags and settings.

The broker produces and restores these; ``storage.metadata`` turns them into the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsqpy.nsqd.core.policy import Settings


@dataclass
class ChannelMeta:
    name: str
    paused: bool = False
    settings: Settings = field(default_factory=Settings)
    #: deferred records a clean stop left in the channel's disk queue (0: not known)
    deferred: int = 0


@dataclass
class TopicMeta:
    name: str
    paused: bool = False
    channels: list[ChannelMeta] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
