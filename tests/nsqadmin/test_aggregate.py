"""clusterinfo's aggregation rules on hand-written /stats documents (pure)."""

from __future__ import annotations

from typing import Any

from nsqpy._internal import gojson
from nsqpy.nsqadmin.aggregate import (
    StatsCollector,
    client_stats,
    counter_stats,
    e2e_add,
    e2e_from_node,
    node_totals,
    topic_aggregate,
)
from nsqpy.nsqadmin.wire import decode_action, decode_body

NOW = 1_700_000_100.7
POLICY_KEYS = (
    "max_attempts", "message_ttl", "dead_letter_topic", "dead_letter_count", "expired_count",
)  # fmt: skip


def node_stats(messages: int, depth: int, clients: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "topics": [
            {
                "topic_name": "t",
                "channels": [
                    {
                        "channel_name": "c",
                        "depth": depth,
                        "backend_depth": 1,
                        "in_flight_count": 2,
                        "deferred_count": 3,
                        "message_count": messages,
                        "requeue_count": 4,
                        "timeout_count": 5,
                        "client_count": len(clients or ()),
                        "clients": clients,
                        "paused": depth > 10,
                        "e2e_processing_latency": {
                            "count": 10,
                            "percentiles": [{"quantile": 0.99, "value": 2000.0 * depth}],
                        },
                    }
                ],
                "depth": depth,
                "backend_depth": 0,
                "message_count": messages,
                "message_bytes": 0,
                "paused": False,
                "e2e_processing_latency": {"count": 0, "percentiles": None},
            }
        ]
    }


def a_client(hostname: str) -> dict[str, Any]:
    return {
        "client_id": hostname,
        "hostname": hostname,
        "version": "V2",
        "remote_address": f"{hostname}:5000",
        "state": 3,
        "ready_count": 7,
        "in_flight_count": 1,
        "message_count": 9,
        "finish_count": 8,
        "requeue_count": 0,
        "connect_ts": 1_700_000_000,
        "sample_rate": 0,
        "deflate": False,
        "snappy": True,
        "user_agent": "nsqpy/1",
        "tls": False,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }


def test_channel_aggregate_sums_nodes_and_sorts_clients() -> None:
    collector = StatsCollector("t", NOW)
    collector.add_node("h2:4151", "zulu", node_stats(5, 20, [a_client("z")]))
    collector.add_node("h1:4151", "alpha", node_stats(3, 4, [a_client("b"), a_client("a")]))
    total = collector.channels["c"]
    assert total["node"] == "*"
    assert total["hostname"] == ""
    assert [total[k] for k in ("depth", "memory_depth", "backend_depth", "message_count")] == [
        24, 22, 2, 8,
    ]  # fmt: skip
    assert total["in_flight_count"] == 4 and total["timeout_count"] == 10
    assert total["client_count"] == 3
    assert total["paused"] is True  # any node paused
    assert [n["hostname"] for n in total["nodes"]] == ["alpha", "zulu"]
    assert [c["hostname"] for c in total["clients"]] == ["a", "b", "z"]
    client = total["clients"][0]
    assert list(client)[:3] == ["node", "remote_address", "version"]
    assert client["node"] == "h1:4151"
    assert client["connected"] == 100 * 1_000_000_000  # whole seconds since connect_ts
    assert "state" not in client
    # the JSON is Go's field order
    assert gojson.dumps(total).startswith(
        b'{"node":"*","hostname":"","topic_name":"t","channel_name":"c","depth":24,'
        b'"memory_depth":22,"backend_depth":2,"in_flight_count":4,"deferred_count":6,'
        b'"requeue_count":8,"timeout_count":10,"message_count":8,"client_count":3,"nodes":['
    )


def with_policy(stats: dict[str, Any], **policy: Any) -> dict[str, Any]:
    """``stats`` whose channel carries nsqpy's dead-letter keys, in nsqd's order."""
    stats["topics"][0]["channels"][0].update(policy)
    return stats


def policy(attempts: int, ttl: str, target: str, dead: int, expired: int) -> dict[str, Any]:
    return dict(zip(POLICY_KEYS, (attempts, ttl, target, dead, expired), strict=True))


def test_dead_letter_keys_sum_counts_and_take_the_first_hostnames_settings() -> None:
    collector = StatsCollector("t", NOW)
    # added out of hostname order, one node without the feature
    collector.add_node(
        "h3:4151", "zulu", with_policy(node_stats(1, 1, None), **policy(5, "1m0s", "t.dead", 4, 1))
    )
    collector.add_node("h2:4151", "mike", node_stats(1, 1, None))
    collector.add_node(
        "h1:4151", "alpha", with_policy(node_stats(1, 1, None), **policy(2, "0s", "other", 3, 0))
    )
    total = collector.channels["c"]
    assert list(total)[-6:] == ["e2e_processing_latency", *POLICY_KEYS]
    assert {k: total[k] for k in POLICY_KEYS} == policy(2, "0s", "other", 7, 1)
    nodes = {n["hostname"]: n for n in total["nodes"]}
    assert "dead_letter_count" not in nodes["mike"]
    assert (nodes["zulu"]["max_attempts"], nodes["zulu"]["dead_letter_count"]) == (5, 4)
    # nodes without the feature: Go's keys, nothing more
    plain = StatsCollector("t", NOW)
    plain.add_node("h2:4151", "mike", node_stats(1, 1, None))
    assert list(plain.channels["c"])[-1] == "e2e_processing_latency"
    assert list(plain.topics[0]["channels"][0])[-1] == "e2e_processing_latency"


def test_lease_count_is_summed_over_the_nodes_that_report_it_and_kept_last() -> None:
    collector = StatsCollector("t", NOW)
    leased = node_stats(1, 1, None)
    leased["topics"][0]["channels"][0]["lease_count"] = 2
    collector.add_node("h1:4151", "alpha", leased)
    collector.add_node("h2:4151", "mike", node_stats(1, 1, None))  # Go's nsqd: no such key
    # a node whose channel has a dead-letter policy and a lease, added last
    both = with_policy(node_stats(1, 1, None), **policy(2, "0s", "t.dead", 0, 0))
    both["topics"][0]["channels"][0]["lease_count"] = 3
    collector.add_node("h3:4151", "zulu", both)
    total = collector.channels["c"]
    assert total["lease_count"] == 5
    assert list(total)[-7:] == ["e2e_processing_latency", *POLICY_KEYS, "lease_count"]
    nodes = {n["hostname"]: n for n in total["nodes"]}
    assert (nodes["alpha"]["lease_count"], nodes["zulu"]["lease_count"]) == (2, 3)
    assert "lease_count" not in nodes["mike"]
    assert list(nodes["zulu"])[-1] == "lease_count"
    # only nodes without leases: no key anywhere
    plain = StatsCollector("t", NOW)
    plain.add_node("h2:4151", "mike", node_stats(1, 1, None))
    assert "lease_count" not in plain.channels["c"]
    assert "lease_count" not in plain.topics[0]["channels"][0]


def test_e2e_percentiles_merge_as_nsq_does() -> None:
    one = e2e_from_node({"count": 10, "percentiles": [{"quantile": 0.99, "value": 8.0}]})
    assert one == {
        "count": 10,
        "percentiles": [{"average": 8.0, "count": 10.0, "max": 8.0, "min": 8.0,
                         "quantile": 0.99, "value": 8.0}],
        "topic": "", "channel": "", "host": "",
    }  # fmt: skip
    two = e2e_from_node({"count": 30, "percentiles": [{"quantile": 0.99, "value": 4.0}]})
    total = {"count": 0, "percentiles": None, "topic": "t", "channel": "c", "host": "*"}
    e2e_add(total, one)
    e2e_add(total, two)
    assert total["count"] == 40
    merged = total["percentiles"][0]
    assert list(merged) == ["average", "count", "max", "min", "quantile"]  # a Go map: sorted
    assert merged["max"] == 8.0
    # NSQ sets min = Min(node max, merged max): the last node's max, a quirk kept
    assert merged["min"] == 4.0
    assert merged["count"] == 40.0
    assert merged["average"] == 8.0 + (4.0 - 8.0) * 30 / 40  # a count-weighted mean: 5.0
    assert e2e_from_node(None) is None


def test_topic_aggregate_and_node_view_totals() -> None:
    collector = StatsCollector("t", NOW)
    collector.add_node("h2:4151", "zulu", node_stats(5, 20, None))
    collector.add_node("h1:4151", "alpha", node_stats(3, 4, None))
    topics = collector.sorted_topics()
    total = topic_aggregate("t", topics, list(collector.channels.values()))
    assert (total["node"], total["hostname"], total["depth"], total["message_count"]) == (
        "*", "", 24, 8,
    )  # fmt: skip
    assert [n["node"] for n in total["nodes"]] == ["h1:4151", "h2:4151"]
    assert total["nodes"][0]["nodes"] is None
    assert total["channels"][0]["channel_name"] == "c"
    assert total["e2e_processing_latency"]["host"] == "*"
    assert total["e2e_processing_latency"]["percentiles"] is None
    empty = topic_aggregate("x", [], None)
    assert (empty["node"], empty["nodes"], empty["channels"], empty["e2e_processing_latency"]) == (
        "", None, None, None,
    )  # fmt: skip
    with_clients = StatsCollector("", NOW)
    with_clients.add_node("h1:4151", "alpha", node_stats(3, 4, [a_client("a"), a_client("b")]))
    assert node_totals(with_clients.sorted_topics()) == (3, 2)


def test_counter_is_per_topic_channel_node() -> None:
    collector = StatsCollector("", NOW)
    collector.add_node("h2:4151", "zulu", node_stats(5, 1, None))
    collector.add_node("h1:4151", "alpha", node_stats(3, 1, None))
    assert counter_stats(collector.channels) == {
        "t:c:h1:4151": {"node": "h1:4151", "topic_name": "t", "channel_name": "c",
                        "message_count": 3},
        "t:c:h2:4151": {"node": "h2:4151", "topic_name": "t", "channel_name": "c",
                        "message_count": 5},
    }  # fmt: skip


def test_client_stats_defaults_for_missing_fields() -> None:
    client = client_stats({"connect_ts": 1_700_000_000}, "n:1", NOW)
    assert client["auth_identity"] == "" and client["authed"] is False
    assert client["connected"] == 100_000_000_000


def test_json_bodies_decode_as_gos_decoder() -> None:
    assert decode_body(b' {"action": "pause"} trailing', ("action",)) == {"action": "pause"}
    assert decode_body(b'{"Action": "empty", "x": 1}', ("action",)) == {"action": "empty"}
    assert decode_body(b"null", ("action",)) == {"action": ""}
    cases = {
        b"": "EOF",
        b"  \n": "EOF",
        b'{"action":': "unexpected EOF",
        b"pause": "invalid character 'p' looking for beginning of value",
        b'{"action": 5}': (
            "json: cannot unmarshal number into Go struct field .action of type string"
        ),
        b"[1]": "json: cannot unmarshal array into Go value of type struct",
    }
    for raw, message in cases.items():
        try:
            decode_body(raw, ("action",))
        except ValueError as err:
            assert str(err) == message, raw
        else:
            raise AssertionError(raw)


def test_action_bodies_keep_their_other_keys() -> None:
    raw = b'{"Action": "config", "max_attempts": 3, "message_ttl": null} trailing'
    assert decode_action(raw) == ("config", {"max_attempts": 3, "message_ttl": None})
    assert decode_action(b"null") == ("", {})
    for raw, message in ((b"", "EOF"), (b'{"action": []}', "json: cannot unmarshal array")):
        try:
            decode_action(raw)
        except ValueError as err:
            assert str(err).startswith(message), raw
        else:
            raise AssertionError(raw)
