"""The hand-written Prometheus text format (0.0.4): golden text, escaping, numbers, and the
process metrics, all read back with prometheus_client's parser."""

from __future__ import annotations

import math
import os
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nsqpy._internal import prometheus
from nsqpy._internal.prometheus import Family, labels, render


def test_golden_text() -> None:
    depth = Family("nsq_channel_depth", "gauge", "Messages queued in the channel.")
    depth.add(5, labels(("topic", "t"), ("channel", "c")))
    depth.add(0, labels(("topic", "t"), ("channel", "d")))
    total = Family("nsq_topic_messages_total", "counter", "Messages published.")
    total.add(12, labels(("topic", "t")))
    up = Family("nsq_health", "gauge", "1 while healthy.")
    up.add(True)
    empty = Family("nsq_quiet", "gauge", "No samples yet.")
    assert render([depth, total, up, empty]) == (
        "# HELP nsq_channel_depth Messages queued in the channel.\n"
        "# TYPE nsq_channel_depth gauge\n"
        'nsq_channel_depth{topic="t",channel="c"} 5\n'
        'nsq_channel_depth{topic="t",channel="d"} 0\n'
        "# HELP nsq_topic_messages_total Messages published.\n"
        "# TYPE nsq_topic_messages_total counter\n"
        'nsq_topic_messages_total{topic="t"} 12\n'
        "# HELP nsq_health 1 while healthy.\n"
        "# TYPE nsq_health gauge\n"
        "nsq_health 1\n"
        "# HELP nsq_quiet No samples yet.\n"
        "# TYPE nsq_quiet gauge\n"
    )


def test_label_values_and_help_are_escaped() -> None:
    odd = 'a\\b"c\nd'
    family = Family("x", "gauge", "help with \\ and\nnewline")
    family.add(1, labels(("name", odd), ("plain", "a.b_c#ephemeral")))
    text = render([family])
    assert text == (
        "# HELP x help with \\\\ and\\nnewline\n"
        "# TYPE x gauge\n"
        'x{name="a\\\\b\\"c\\nd",plain="a.b_c#ephemeral"} 1\n'
    )
    [parsed] = text_string_to_metric_families(text)
    assert parsed.documentation == "help with \\ and\nnewline"
    assert parsed.samples[0].labels == {"name": odd, "plain": "a.b_c#ephemeral"}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (-3, "-3"),
        (2**63, "9223372036854775808"),
        (False, "0"),
        (0.5, "0.5"),
        (1e-9, "1e-09"),
        (1e22, "1e+22"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
    ],
)
def test_values(value: float, text: str) -> None:
    assert prometheus.format_value(value) == text
    family = Family("v", "gauge", "v")
    family.add(value)
    [parsed] = text_string_to_metric_families(render([family]))
    got = parsed.samples[0].value
    if math.isnan(value):
        assert math.isnan(got)
    else:
        assert got == float(value)


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "é"])
def test_invalid_metric_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid metric name"):
        Family(name, "gauge", "x")


@pytest.mark.parametrize("name", ["", "a:b", "__reserved", "1a", "a-b"])
def test_invalid_label_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid label name"):
        labels((name, "v"))


def test_a_family_may_appear_once() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        render([Family("x", "gauge", "a"), Family("x", "gauge", "b")])


def test_no_labels_is_no_braces() -> None:
    assert labels() == ""


def test_process_families_parse_and_make_sense() -> None:
    text = render(prometheus.process_families())
    found = {f.name: f for f in text_string_to_metric_families(text)}
    cpu = found["process_cpu_seconds"]  # the parser drops a counter's _total
    assert cpu.type == "counter"
    times = os.times()
    assert 0 < cpu.samples[0].value <= times.user + times.system
    assert found["process_resident_memory_bytes"].samples[0].value > 1 << 20
    assert found["process_open_fds"].samples[0].value >= 3
    assert found["process_max_fds"].samples[0].value >= found["process_open_fds"].samples[0].value
    start = found["process_start_time_seconds"].samples[0].value
    assert 1_500_000_000 < start <= time.time()
    generations = {s.labels["generation"] for s in found["python_gc_collections"].samples}
    assert generations >= {"0", "1", "2"}
    [info] = found["python_info"].samples
    assert info.labels["implementation"] == "CPython"
