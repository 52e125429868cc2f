"""Option parsing for the nsq data source: pure, no Spark."""

from __future__ import annotations

from collections import UserDict
from typing import Any

import pytest

from nsqpy.spark.offsets import Offset
from nsqpy.spark.options import (
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)

BASE = {"nsqd": "127.0.0.1:4150", "topic": "events", "channel": "archive"}


class LowerKeys(UserDict[str, str]):
    """Like pyspark's CaseInsensitiveDict: keys are stored lower-cased."""

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key.lower(), value)


def read(**extra: Any) -> ReadOptions:
    return parse_read_options({**BASE, **{k: str(v) for k, v in extra.items()}})


def test_defaults() -> None:
    opts = read()
    assert opts.nsqd == ("127.0.0.1:4150",)
    assert (opts.topic, opts.channel) == ("events", "archive")
    assert opts.max_in_flight == 60_000
    assert opts.max_records_per_batch == 20_000  # a third of maxInFlight
    assert opts.msg_timeout == 120.0
    assert opts.commit_tick and opts.requeue_on_stop
    assert opts.min_records_per_batch == 0


def test_spark_lowercased_keys_are_found() -> None:
    # the pitfall: dict(CaseInsensitiveDict) then options["maxInFlight"] finds nothing
    raw = LowerKeys({**BASE, "maxInFlight": "9000", "MSGTIMEOUT": "30s", "commitTick": "false"})
    assert "maxinflight" in raw.data
    opts = parse_read_options(raw)
    assert opts.max_in_flight == 9000
    assert opts.max_records_per_batch == 3000
    assert opts.msg_timeout == 30.0
    assert opts.commit_tick is False


def test_every_read_option() -> None:
    opts = read(
        lookupd="127.0.0.1:4161, http://10.0.0.1:4161/lookup",
        maxInFlight=150000, maxRecordsPerBatch=50000, maxBytesPerBatch=1 << 20,
        minRecordsPerBatch=100, maxTriggerDelay="30s", msgTimeout="2m", numPartitions=4,
        pollTimeout="250ms", commitTick="false", requeueOnStop="0", maxRecords=10,
        idleTimeout="3s",
    )
    assert opts.lookupd == ("127.0.0.1:4161", "http://10.0.0.1:4161/lookup")
    assert (opts.max_in_flight, opts.max_records_per_batch) == (150000, 50000)
    assert opts.max_bytes_per_batch == 1 << 20
    assert (opts.min_records_per_batch, opts.max_trigger_delay) == (100, 30.0)
    assert (opts.msg_timeout, opts.num_partitions, opts.poll_timeout) == (120.0, 4, 0.25)
    assert not opts.commit_tick and not opts.requeue_on_stop
    assert (opts.max_records, opts.idle_timeout) == (10, 3.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"topic": ""}, "'topic' is required"),
        ({"channel": "bad name!"}, "'channel': invalid NSQ name"),
        ({"nsqd": ""}, "'nsqd' (host:port,...) or 'lookupd' is required"),
        ({"nsqd": "localhost"}, "'nsqd': invalid address 'localhost'"),
        ({"lookupd": "ftp://x:1"}, "'lookupd': invalid HTTP address"),
        ({"maxInFlight": "lots"}, "'maxInFlight': not an integer"),
        ({"maxInFlight": "0"}, "'maxInFlight' must be >= 1"),
        ({"msgTimeout": "120"}, "'msgTimeout': invalid duration '120'"),
        ({"msgTimeout": "16m"}, "'msgTimeout' must be between 1s and 15m"),
        ({"msgTimeout": "500ms"}, "'msgTimeout' must be between 1s and 15m"),
        ({"pollTimeout": "-1s"}, "'pollTimeout' must not be negative"),
        ({"commitTick": "maybe"}, "'commitTick': not a boolean"),
        ({"maxBytesPerBatch": str(2 << 30)}, "'maxBytesPerBatch' must be <= 1 GiB"),
        ({"maxRecordPerBatch": "5"},
         "unknown option 'maxrecordperbatch'; did you mean 'maxRecordsPerBatch'?"),
        ({"POLLTIMOUT": "1s"}, "unknown option 'polltimout'; did you mean 'pollTimeout'?"),
        ({"fooBar": "1"}, "unknown option 'foobar' (option names are case-insensitive"),
        ({"mpubBatch": "5"}, "unknown option 'mpubbatch': it is an option for writing only"),
        ({"nsq.no_such_option": "1"}, "'nsq.no_such_option': invalid option"),
        ({"nsq.heartbeat_interval": "soon"}, "'nsq.heartbeat_interval': failed to set"),
        ({"nsq.max_in_flight": "5"}, "'nsq.max_in_flight' is set by the source; use maxInFlight"),
        ({"nsq.msg_timeout": "5s"}, "use msgTimeout"),
    ],
)
def test_read_errors_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=r"^nsq source: ") as info:
        parse_read_options({**BASE, **extra})
    assert message in str(info.value)
    assert "\n" not in str(info.value)  # Spark shows it as the first line of its error


def test_passthrough_reaches_the_client_config() -> None:
    opts = read(**{"nsq.heartbeat_interval": "5s", "NSQ.Client_ID": "spark-1",
                   "nsq.snappy": "true"})
    config = opts.client_config()
    assert config.heartbeat_interval == 5.0
    assert config.client_id == "spark-1"
    assert config.snappy is True
    # owned by the source, whatever the passthrough says
    assert config.max_in_flight == opts.max_in_flight
    assert config.msg_timeout == opts.msg_timeout
    assert config.max_attempts == 0


def test_lookupd_alone_is_enough_and_spark_keys_pass() -> None:
    opts = parse_read_options({"lookupd": "127.0.0.1:4161", "topic": "t", "channel": "c",
                               "path": "ignored"})
    assert opts.nsqd == () and opts.lookupd == ("127.0.0.1:4161",)


def test_write_options() -> None:
    opts = parse_write_options({"nsqd": "a:1,b:2", "mpubBatch": "100", "mpubMaxBytes": "1024",
                                "nsq.client_id": "w"})
    assert opts == WriteOptions(nsqd=("a:1", "b:2"), topic=None, mpub_batch=100,
                                mpub_max_bytes=1024, client_options=(("client_id", "w"),))
    assert parse_write_options({"nsqd": "a:1", "topic": "t"}).topic == "t"
    assert parse_write_options({"nsqd": "a:1"}).mpub_max_bytes == 4 * 1024 * 1024
    with pytest.raises(ValueError, match=r"^nsq sink: option 'nsqd' .* is required"):
        parse_write_options({"topic": "t"})
    with pytest.raises(
        ValueError, match=r"^nsq sink: unknown option 'channel': it is an option for reading only"
    ):
        parse_write_options({"nsqd": "a:1", "channel": "c"})
    with pytest.raises(ValueError, match=r"^nsq sink: option 'topic': invalid NSQ name"):
        parse_write_options({"nsqd": "a:1", "topic": "a b"})
    with pytest.raises(ValueError, match=r"^nsq sink: option 'mpubBatch': not an integer"):
        parse_write_options({"nsqd": "a:1", "mpubbatch": "many"})


def test_offsets_round_trip_and_reject_garbage() -> None:
    off = Offset.parse({"v": 1, "seq": 10, "tick": 2})
    assert off.to_json() == {"v": 1, "seq": 10, "tick": 2}
    assert off.advanced(5) == Offset(15, 2)
    assert off.ticked() == Offset(10, 3)
    for bad in ({"seq": 1}, {"v": 2, "seq": 1}, {"v": 1, "seq": -1}, {"v": 1, "seq": "1"}, 7):
        with pytest.raises(ValueError, match="offset"):
            Offset.parse(bad)


def test_mode_and_lease_ttl() -> None:
    opts = read()
    assert (opts.mode, opts.lease_ttl) == ("auto", 600.0)
    assert read(MODE="Lease", leaseTTL="90s").mode == "lease"
    assert read(leasettl="15m").lease_ttl == 900.0
    assert read(mode="driver", minRecordsPerBatch=5).min_records_per_batch == 5
    assert read(mode="auto", minRecordsPerBatch=5).mode == "auto"  # it then reads driver-side
    for extra, message in [
        ({"mode": "kafka"}, "option 'mode' must be one of auto, lease, driver, got 'kafka'"),
        ({"leaseTTL": "16m"}, "option 'leaseTTL' must be between 1s and 15m"),
        ({"leaseTTL": "500ms"}, "option 'leaseTTL' must be between 1s and 15m"),
        ({"leaseTTL": "soon"}, "option 'leaseTTL': invalid duration 'soon'"),
        ({"mode": "lease", "minRecordsPerBatch": "10"},
         "option 'minRecordsPerBatch' needs mode 'driver'"),
    ]:  # fmt: skip
        with pytest.raises(ValueError) as info:
            read(**extra)
        assert str(info.value).startswith("nsq source: ") and message in str(info.value)
