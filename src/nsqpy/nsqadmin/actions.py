"""nsqadmin's admin actions across the cluster, in NSQ clusterinfo's order of calls.

Each returns the partial errors it met (shown as a warning) or raises ClusterError when the
producers of the topic could not be found at all (shown as 502 UPSTREAM_ERROR).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from nsqpy._internal.gostrconv import query_escape
from nsqpy.nsqadmin.cluster import ClusterInfo, Errors

#: The ``action`` values of ``POST /api/topics/:topic[/:channel]``.
ACTIONS: Final = ("pause", "unpause", "empty")


async def tombstone_node_for_topic(
    ci: ClusterInfo, topic: str, node: str, lookupds: Sequence[str]
) -> Errors:
    """Tombstone ``node`` for ``topic`` on every lookupd, then delete the topic on it."""
    query = f"topic={query_escape(topic)}&node={query_escape(node)}"
    errors = await ci.lookupd_post(lookupds, "topic/tombstone", query)
    producers, found_errors = await ci.nsqd_producers([node])
    errors.add(found_errors)
    errors.add(await ci.producers_post(producers, "topic/delete", f"topic={query_escape(topic)}"))
    return errors


async def create_topic_channel(
    ci: ClusterInfo, topic: str, channel: str, lookupds: Sequence[str]
) -> Errors:
    """Create the topic (and channel) in every lookupd, and the channel on every producer."""
    errors = await ci.lookupd_post(lookupds, "topic/create", f"topic={query_escape(topic)}")
    if channel:
        query = f"topic={query_escape(topic)}&channel={query_escape(channel)}"
        errors.add(await ci.lookupd_post(lookupds, "channel/create", query))
        producers, found_errors = await ci.lookupd_topic_producers(topic, lookupds)
        errors.add(found_errors)
        errors.add(await ci.producers_post(producers, "channel/create", query))
    return errors


async def delete_topic(
    ci: ClusterInfo, topic: str, lookupds: Sequence[str], nsqds: Sequence[str]
) -> Errors:
    """Find the producers first, then delete in every lookupd, then on every producer."""
    producers, errors = await ci.topic_producers(topic, lookupds, nsqds)
    query = f"topic={query_escape(topic)}"
    errors.add(await ci.lookupd_post(lookupds, "topic/delete", query))
    errors.add(await ci.producers_post(producers, "topic/delete", query))
    return errors


async def delete_channel(
    ci: ClusterInfo, topic: str, channel: str, lookupds: Sequence[str], nsqds: Sequence[str]
) -> Errors:
    producers, errors = await ci.topic_producers(topic, lookupds, nsqds)
    query = f"topic={query_escape(topic)}&channel={query_escape(channel)}"
    errors.add(await ci.lookupd_post(lookupds, "channel/delete", query))
    errors.add(await ci.producers_post(producers, "channel/delete", query))
    return errors


async def topic_channel_action(
    ci: ClusterInfo,
    action: str,
    topic: str,
    channel: str,
    lookupds: Sequence[str],
    nsqds: Sequence[str],
) -> Errors:
    """pause / unpause / empty a topic (``channel`` "") or a channel on every producer."""
    producers, errors = await ci.topic_producers(topic, lookupds, nsqds)
    if channel:
        uri = f"channel/{action}"
        query = f"topic={query_escape(topic)}&channel={query_escape(channel)}"
    else:
        uri, query = f"topic/{action}", f"topic={query_escape(topic)}"
    errors.add(await ci.producers_post(producers, uri, query))
    return errors


def notification_name(action: str, channel: str) -> str:
    """The notification's action name: ``pause_topic``, ``empty_channel``, ..."""
    return f"{action}_{'channel' if channel else 'topic'}"
