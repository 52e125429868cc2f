"""nsqadmin's admin actions across the cluster, in NSQ clusterinfo's order of calls.

Each returns the partial errors it met (shown as a warning) or raises ClusterError when the
producers of the topic could not be found at all (shown as 502 UPSTREAM_ERROR).

nsqpy adds two actions on nsqd's dead-letter routes, fanned out the same way: ``redrive``
(``/channel/redrive`` or, on a dead-letter topic, ``/topic/redrive``; the letters moved are
summed over the nodes) and ``config`` (``/channel/config`` or ``/topic/config`` with the
settings as a JSON body). An nsqd's 400 stops them with RefusedError (see cluster.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from nsqpy._internal.gostrconv import query_escape
from nsqpy.nsqadmin.cluster import ClusterInfo, Errors

#: The ``action`` values of ``POST /api/topics/:topic[/:channel]``.
ACTIONS: Final = ("pause", "unpause", "empty")
#: The keys a ``config`` action may carry, as nsqd's config routes name them.
CONFIG_KEYS: Final = ("max_attempts", "message_ttl", "dead_letter_topic")


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
    errors.add(await ci.producers_post(producers, *_target(action, topic, channel)))
    return errors


def _target(action: str, topic: str, channel: str) -> tuple[str, str]:
    """nsqd's route and query for an action on a topic (``channel`` "") or a channel."""
    if channel:
        return f"channel/{action}", f"topic={query_escape(topic)}&channel={query_escape(channel)}"
    return f"topic/{action}", f"topic={query_escape(topic)}"


async def redrive(
    ci: ClusterInfo, topic: str, channel: str, lookupds: Sequence[str], nsqds: Sequence[str]
) -> tuple[int, Errors]:
    """Redrive on every producer of ``topic``: the letters moved back, summed."""
    producers, errors = await ci.topic_producers(topic, lookupds, nsqds)
    answers, post_errors = await ci.producers_post_json(
        producers, *_target("redrive", topic, channel)
    )
    errors.add(post_errors)
    return sum(_count(answer, "redriven") for answer in answers), errors


def settings_body(settings: Mapping[str, object]) -> bytes:
    """The JSON body of nsqd's config routes; ValueError names a key nsqd does not know."""
    for key in settings:
        if key not in CONFIG_KEYS:
            raise ValueError(f"unknown key {json.dumps(key)} (known: {', '.join(CONFIG_KEYS)})")
    return json.dumps(dict(settings)).encode()


async def configure(
    ci: ClusterInfo,
    topic: str,
    channel: str,
    body: bytes,
    lookupds: Sequence[str],
    nsqds: Sequence[str],
) -> Errors:
    """POST the settings (``settings_body``) to the config route of every producer."""
    producers, errors = await ci.topic_producers(topic, lookupds, nsqds)
    _, post_errors = await ci.producers_post_json(
        producers, *_target("config", topic, channel), body
    )
    errors.add(post_errors)
    return errors


def _count(answer: object, key: str) -> int:
    value = answer.get(key) if isinstance(answer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def notification_name(action: str, channel: str) -> str:
    """The notification's action name: ``pause_topic``, ``empty_channel``, ..."""
    return f"{action}_{'channel' if channel else 'topic'}"
