"""nsqadmin's web UI in headless Chromium (Debian's package, driven by Playwright's sync API).

One process cluster (nsqlookupd + 2 nsqd + nsqadmin sampling every 0.2 s) and one browser
serve the whole module. Each test publishes its own topics with known counts, drives the UI as
an operator would (links, buttons, confirm() dialogs, the lookup form) and checks what the page
shows against what it published; a real consumer proves that pausing a channel stops delivery.
Every test saves a full-page screenshot into test-output/screenshots/; with
NSQPY_UPDATE_DOCS_SCREENSHOT=1 the topic page's also replaces docs/images/nsqadmin-topic.png.
Waits are Playwright's auto-retrying expectations or polls with a deadline, never fixed sleeps.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from nsqpy.client.sync import Consumer

from .conftest import ProcessCluster

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("NSQPY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-output" / "screenshots"
DOCS_SHOT = ROOT / "docs" / "images" / "nsqadmin-topic.png"
#: Generous for a shared 2-core machine; every wait returns as soon as its condition holds.
WAIT_MS = 15_000
WAIT_S = WAIT_MS / 1000

expect.set_options(timeout=WAIT_MS)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_loop_errors() -> None:
    """Replaces the suite's asyncio guard (tests/conftest.py) for this module.

    Playwright's sync API keeps its own event loop running on this thread while the browser is
    open, so an asyncio fixture cannot start one here; these tests run no loop of their own.
    """


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():  # `make check` installs it; a skip would hide the UI tests
        pytest.fail(f"chromium not found at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Tab:
    """One browser page on the cluster's nsqadmin, recording dialogs and script errors."""

    def __init__(self, page: Page, cluster: ProcessCluster) -> None:
        self.page = page
        self.cluster = cluster
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.on("dialog", self._accept)

    def _accept(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.accept()

    def open(self, path: str = "") -> Page:
        """Load ``<base><path>`` and wait for the first render with data."""
        self.page.goto(self.cluster.admin_url + path)
        self.wait_render()
        return self.page

    def wait_render(self, after: int = 0) -> None:
        self.page.wait_for_function(
            "n => Number(document.documentElement.dataset.renders || 0) > n", arg=after
        )

    def renders(self) -> int:
        return int(self.page.evaluate("Number(document.documentElement.dataset.renders || 0)"))

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def tab(browser: Browser, process_cluster: ProcessCluster) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = Tab(context.new_page(), process_cluster)
    try:
        yield tab
    finally:
        context.close()
    assert not tab.errors, tab.errors


class Traffic:
    """Publishes page_views to both nodes at a varying rate from a thread, so the charts move."""

    TOPIC = "page_views"

    def __init__(self, cluster: ProcessCluster) -> None:
        self.cluster = cluster
        self.stop = threading.Event()
        self.published = 0
        for node in (0, 1):
            cluster.create_channel(self.TOPIC, "archive", node)
            cluster.create_channel(self.TOPIC, "analytics", node)
        self.consumer = CountingConsumer(cluster, self.TOPIC, "analytics", nodes=(0, 1))
        self.thread = threading.Thread(target=self._run, name="traffic", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        tick = 0
        while not self.stop.wait(0.1):  # a publishing pace, not a wait for a condition
            tick += 1
            burst = 2 + int(4 * (1 + _wave(tick / 12)))  # 2..10 messages per node per 0.1 s
            for node in (0, 1):
                self.cluster.publish(self.TOPIC, [b"view %d" % i for i in range(burst)], node)
            self.published += 2 * burst

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def _wave(x: float) -> float:
    # A smooth, not quite periodic curve: two sines, so the chart shows something real-looking.
    return 0.6 * math.sin(x) + 0.4 * math.sin(x * 2.7 + 1)


@pytest.fixture(scope="module")
def traffic(process_cluster: ProcessCluster) -> Iterator[Traffic]:
    traffic = Traffic(process_cluster)
    try:
        yield traffic
    finally:
        traffic.close()


class CountingConsumer:
    """nsqpy's blocking Consumer in a thread: FINs every message and counts them."""

    def __init__(
        self, cluster: ProcessCluster, topic: str, channel: str, nodes: tuple[int, ...] = (0,)
    ) -> None:
        self.received = 0
        self._consumer = Consumer(
            topic,
            channel,
            nsqd_tcp_addresses=[cluster.nsqd_tcp[n] for n in nodes],
            max_in_flight=10,
        )
        self._consumer.start()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for msg in self._consumer:
            msg.finish()
            self.received += 1

    def close(self) -> None:
        self._consumer.close(timeout=5)
        self._thread.join(10)


def poll(predicate: Any, what: str, timeout: float = WAIT_S) -> None:
    """Poll ``predicate`` until true, failing with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    step = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        step.wait(0.02)  # the polling period


def publish_counts(cluster: ProcessCluster, topic: str, counts: dict[int, int]) -> None:
    for node, count in counts.items():
        cluster.publish(topic, [b"m%d" % i for i in range(count)], node)


def channel_depth(stats: Any, topic: str, channel: str) -> int:
    """``channel``'s depth in one nsqd's /stats, 0 where that nsqd does not have it."""
    for t in stats["topics"]:
        if t["topic_name"] == topic:
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return int(c["depth"])
    return 0


def cell(page: Page, table: str, row: str, column: str) -> Any:
    return page.locator(f"{table} {row} td.{column}")


# -- pages with real numbers ------------------------------------------------------------------


def test_topics_page_lists_topics_with_message_counts(tab: Tab) -> None:
    cluster = tab.cluster
    publish_counts(cluster, "clicks", {0: 30, 1: 12})
    page = tab.open()
    row = 'tr[data-topic="clicks"]'
    expect(page.locator("#topics-table")).to_be_visible()
    # numbers come from nsqadmin's sampler: the next samples show both nodes' publishes
    expect(cell(page, "#topics-table", row, "messages")).to_have_text("42")
    expect(cell(page, "#topics-table", row, "depth")).to_have_text("42")  # no channel yet
    expect(page.locator("#nav a.active")).to_have_text("Topics")
    # the filter narrows the list client-side and survives the auto-refresh
    publish_counts(cluster, "other_topic", {0: 1})
    expect(page.locator('tr[data-topic="other_topic"]')).to_have_count(1)
    page.fill("input[data-filter]", "click")
    expect(page.locator("#topics-table tbody tr")).to_have_count(1)
    tab.wait_render(tab.renders())
    assert page.input_value("input[data-filter]") == "click"
    expect(page.locator("#topics-table tbody tr")).to_have_count(1)
    page.fill("input[data-filter]", "")
    tab.shot("topics")
    # a real link, routed client-side: no reload, so a mark left on window survives
    page.evaluate("window.sameDocument = true")
    page.click('#topics-table a:text-is("clicks")')
    expect(page).to_have_url(cluster.admin_url + "topics/clicks")
    expect(page.locator("h1")).to_contain_text("clicks")
    assert page.evaluate("window.sameDocument === true")
    page.go_back()
    expect(page.locator('tr[data-topic="clicks"]')).to_have_count(1)


def test_topic_page_shows_per_node_rows_and_channels(tab: Tab) -> None:
    cluster = tab.cluster
    for node in (0, 1):
        cluster.create_channel("orders", "billing", node)
    publish_counts(cluster, "orders", {0: 120, 1: 80})
    page = tab.open("topics/orders")
    node0, node1 = (f'tr[data-node="{addr}"]' for addr in cluster.nsqd_http)
    expect(cell(page, "#topic-nodes", node0, "messages")).to_have_text("120")
    expect(cell(page, "#topic-nodes", node1, "messages")).to_have_text("80")
    expect(cell(page, "#topic-nodes", "tr.total", "messages")).to_have_text("200")
    expect(cell(page, "#topic-nodes", "tr.total", "channels")).to_have_text("1")
    billing = 'tr[data-channel="billing"]'
    expect(cell(page, "#channels", billing, "depth")).to_have_text("200")
    expect(cell(page, "#channels", billing, "messages")).to_have_text("200")
    expect(cell(page, "#channels", billing, "connections")).to_have_text("0")
    for label in ("Pause Topic", "Empty Queue", "Delete Topic"):
        expect(page.get_by_role("button", name=label, exact=True)).to_be_visible()
    tab.shot("topic-orders")
    # channel page: per-node rows and a total
    page.click('#channels a:text-is("billing")')
    expect(page).to_have_url(cluster.admin_url + "topics/orders/billing")
    expect(cell(page, "#channel-nodes", node0, "depth")).to_have_text("120")
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("200")
    expect(page.locator("main")).to_contain_text("No clients connected to this channel.")


def test_nodes_and_node_pages(tab: Tab) -> None:
    cluster = tab.cluster
    cluster.create_channel("inventory", "sync", 1)
    publish_counts(cluster, "inventory", {1: 7})
    page = tab.open("nodes")
    rows = page.locator("#nodes-table tbody tr")
    expect(rows).to_have_count(2)
    for addr in cluster.nsqd_http:
        port = addr.rsplit(":", 1)[1]
        row = page.locator(f'#nodes-table tr[data-node="{addr}"]')
        expect(row).to_contain_text(port)
        expect(row).to_contain_text("1.3.0")
    node1 = page.locator(f'#nodes-table tr[data-node="{cluster.nsqd_http[1]}"]')
    expect(node1.locator("a.tag", has_text="inventory")).to_be_visible()
    tab.shot("nodes")
    node1.locator("td a").first.click()
    expect(page).to_have_url(cluster.admin_url + "nodes/" + cluster.nsqd_http[1])
    section = page.locator('section.node-topic[data-topic="inventory"]')
    expect(section).to_contain_text("messages 7")
    expect(section.locator("td.depth")).to_have_text("7")  # the sync channel holds them
    # charts of the node's totals (exact values: test_e2e_percentiles_and_a_real_backlog_alert)
    page.wait_for_function(
        "() => Number(document.querySelector('#chart-rate svg')?.dataset.points || 0) >= 2"
    )
    expect(page.locator("#chart-depth svg path.line")).to_have_count(3)
    legends = [re.compile(f"^{name} [\\d,]+$") for name in ("topics", "channels", "in-flight")]
    expect(page.locator("#chart-depth .legend")).to_have_text(legends)
    tab.shot("node")


def test_counter_page_counts_processed_messages_live(tab: Tab, traffic: Traffic) -> None:
    page = tab.open("counter")
    counter = page.locator("#counter")
    expect(counter.locator(".digit").first).to_be_visible()

    def total() -> int:
        return int(counter.get_attribute("data-total") or "0")

    def shown() -> int:
        return int(re.sub(r"\D", "", counter.inner_text()) or "0")

    first = total()
    assert first > 0
    # the consumer keeps processing page_views: the total rises and the digits follow it
    poll(lambda: total() > first, "the counter total to rise")
    poll(lambda: shown() > first, "the shown digits to roll forward")
    assert shown() <= total()
    expect(page.locator("#chart-rate svg path.line")).to_have_count(1)
    tab.shot("counter")


# -- actions ----------------------------------------------------------------------------------


def test_pause_channel_stops_a_real_consumer_until_unpaused(tab: Tab) -> None:
    cluster = tab.cluster
    cluster.create_channel("jobs", "workers", 0)
    consumer = CountingConsumer(cluster, "jobs", "workers")
    try:
        publish_counts(cluster, "jobs", {0: 10})
        poll(lambda: consumer.received == 10, "the consumer to get the first 10")
        page = tab.open("topics/jobs/workers")
        client = page.locator("#clients tr.client")
        expect(client).to_have_count(1)
        expect(client.locator("td.rdy")).to_have_text("10")
        expect(client).to_contain_text("nsqpy")

        page.get_by_role("button", name="Pause Channel", exact=True).click()
        expect(page.get_by_role("button", name="UnPause Channel")).to_be_visible()
        expect(page.locator("h1 .tag-paused")).to_have_text("paused")
        assert "pause" in tab.dialogs[-1] and "workers" in tab.dialogs[-1]
        publish_counts(cluster, "jobs", {0: 15})
        # the page sees them queued on the paused channel, and the consumer got none of them
        expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("15")
        assert consumer.received == 10
        tab.shot("channel-paused")

        page.get_by_role("button", name="UnPause Channel").click()
        expect(page.get_by_role("button", name="Pause Channel", exact=True)).to_be_visible()
        poll(lambda: consumer.received == 25, "the consumer to resume")
        expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("0")
        expect(page.locator("h1 .tag-paused")).to_have_count(0)
        tab.shot("channel")
    finally:
        consumer.close()


def test_empty_channel_shows_depth_zero(tab: Tab) -> None:
    cluster = tab.cluster
    for node in (0, 1):
        cluster.create_channel("backlog", "slow", node)
    publish_counts(cluster, "backlog", {0: 50, 1: 25})
    page = tab.open("topics/backlog/slow")
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("75")
    page.get_by_role("button", name="Empty Queue").click()
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("0")
    for addr in cluster.nsqd_http:
        expect(cell(page, "#channel-nodes", f'tr[data-node="{addr}"]', "depth")).to_have_text("0")
    expect(page.locator("#flash")).to_contain_text('Emptied channel "slow"')
    assert any("empty" in d for d in tab.dialogs)
    # the nsqds agree
    for node in (0, 1):
        topics = cluster.stats(node)["topics"]
        (topic,) = (t for t in topics if t["topic_name"] == "backlog")
        assert topic["channels"][0]["depth"] == 0
    # deleting the channel leads back to its topic, which no longer lists it
    page.get_by_role("button", name="Delete Channel").click()
    expect(page).to_have_url(cluster.admin_url + "topics/backlog")
    expect(page.locator("main")).to_contain_text("No channels exist for this topic.")


def test_delete_topic_removes_it_from_the_list(tab: Tab) -> None:
    cluster = tab.cluster
    publish_counts(cluster, "doomed", {0: 3, 1: 4})
    page = tab.open()
    expect(page.locator('tr[data-topic="doomed"]')).to_have_count(1)
    page.click('#topics-table a:text-is("doomed")')
    expect(cell(page, "#topic-nodes", "tr.total", "messages")).to_have_text("7")
    page.get_by_role("button", name="Delete Topic").click()
    expect(page).to_have_url(cluster.admin_url + "topics")
    expect(page.locator("#flash")).to_contain_text('Deleted topic "doomed"')
    expect(page.locator("#topics-table")).to_be_visible()
    expect(page.locator('tr[data-topic="doomed"]')).to_have_count(0)
    for node in (0, 1):
        assert all(t["topic_name"] != "doomed" for t in cluster.stats(node)["topics"])


def test_tombstone_topic_producer_on_one_node(tab: Tab) -> None:
    cluster = tab.cluster
    publish_counts(cluster, "spread", {0: 2, 1: 5})
    page = tab.open("topics/spread")
    rows = page.locator("#topic-nodes tr.node")
    expect(rows).to_have_count(2)
    victim = cluster.nsqd_http[1]
    page.locator(f'#topic-nodes tr[data-node="{victim}"] button[data-action="tombstone"]').click()
    expect(rows).to_have_count(1)
    expect(page.locator(f'#topic-nodes tr[data-node="{cluster.nsqd_http[0]}"]')).to_be_visible()
    expect(cell(page, "#topic-nodes", "tr.total", "messages")).to_have_text("2")
    assert "tombstone" in tab.dialogs[-1] and victim in tab.dialogs[-1]
    assert all(t["topic_name"] != "spread" for t in cluster.stats(1)["topics"])


def test_lookup_page_creates_topics_and_shows_server_errors(tab: Tab) -> None:
    cluster = tab.cluster
    page = tab.open("lookup")
    expect(page.locator("main")).to_contain_text(cluster.lookupd_http)
    page.fill("input[name=topic]", "planned")
    page.fill("input[name=channel]", "later")
    page.click("form.create button[type=submit]")
    expect(page.locator("#flash")).to_contain_text('Created topic "planned" with channel "later"')
    # registered in lookupd with no producer: listed as inactive, with its channel
    planned = page.locator('#inactive li[data-topic="planned"]')
    expect(planned).to_contain_text("later")
    status, body = cluster.request("GET", f"http://{cluster.lookupd_http}/channels?topic=planned")
    assert status == 200 and json.loads(body)["channels"] == ["later"]
    tab.shot("lookup")
    # the server refuses a bad name; the page shows its reason
    page.fill("input[name=topic]", "no spaces allowed")
    page.click("form.create button[type=submit]")
    expect(page.locator("#error")).to_contain_text("INVALID_TOPIC")
    # ✘ deletes the inactive topic from lookupd
    planned.locator('button[data-action="lookup-topic-delete"]').click()
    expect(planned).to_have_count(0)


# -- dead letters -----------------------------------------------------------------------------


def nsqd_json(cluster: ProcessCluster, method: str, path: str, body: Any = None) -> Any:
    """Call nsqd 0's HTTP API directly (a 200 expected): its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    status, raw = cluster.request(method, f"http://{cluster.nsqd_http[0]}{path}", data)
    assert status == 200, raw
    return json.loads(raw)


def nsqd_channel(cluster: ProcessCluster, topic: str, channel: str) -> Any:
    [found] = (
        c
        for t in cluster.stats(0)["topics"]
        if t["topic_name"] == topic
        for c in t["channels"]
        if c["channel_name"] == channel
    )
    return found


def topic_depth(cluster: ProcessCluster, topic: str) -> int:
    return sum(t["depth"] for t in cluster.stats(0)["topics"] if t["topic_name"] == topic)


def dead_letter_by_consumer(cluster: ProcessCluster, topic: str, channel: str, count: int) -> None:
    """``count`` messages on nsqd 0 into a channel with max_attempts 1, and a real consumer
    that REQs each one: nsqd moves every one of them to ``<topic>.dead``."""
    cluster.create_channel(topic, channel, 0)
    nsqd_json(
        cluster, "POST", f"/channel/config?topic={topic}&channel={channel}", {"max_attempts": 1}
    )
    consumer = Consumer(
        topic, channel, nsqd_tcp_addresses=[cluster.nsqd_tcp[0]], max_in_flight=count
    )
    consumer.start()

    def requeue_all() -> None:
        for msg in consumer:
            msg.requeue(0, backoff=False)

    thread = threading.Thread(target=requeue_all, daemon=True)
    thread.start()
    try:
        publish_counts(cluster, topic, {0: count})
        poll(
            lambda: nsqd_channel(cluster, topic, channel).get("dead_letter_count") == count,
            f"nsqd to dead-letter {count} messages of {topic}/{channel}",
        )
    finally:
        consumer.close(timeout=5)  # before any redrive: it would REQ the letters again
        thread.join(10)
    assert topic_depth(cluster, f"{topic}.dead") == count


def test_redrive_dead_letters_from_the_channel_page(tab: Tab) -> None:
    cluster = tab.cluster
    dead_letter_by_consumer(cluster, "retries", "workers", 3)
    page = tab.open("topics/retries/workers")
    facts = page.locator("#policy")
    expect(facts.locator(".dead-lettered")).to_have_text("3")
    expect(facts.locator(".max-attempts")).to_have_text("1")
    expect(facts.locator(".ttl")).to_have_text("off")
    expect(facts.locator(".expired")).to_have_text("0")
    expect(facts.locator(".dead-letter-topic a")).to_have_attribute(
        "href", re.compile(r"/topics/retries\.dead$")
    )
    node0 = f'tr[data-node="{cluster.nsqd_http[0]}"]'
    expect(cell(page, "#channel-nodes", node0, "dead-lettered")).to_have_text("3")
    expect(cell(page, "#channel-nodes", "tr.total", "expired")).to_have_text("0")
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("0")
    tab.shot("channel-dead-letters")

    page.get_by_role("button", name="Redrive dead letters").click()
    expect(page.locator("#flash")).to_contain_text("Redrove 3 messages")
    question = tab.dialogs[-1]
    assert "redrive" in question and '"retries.dead"' in question and '"workers"' in question
    # back in the channel, as nsqd sees it and as the page shows it
    assert topic_depth(cluster, "retries.dead") == 0
    assert nsqd_channel(cluster, "retries", "workers")["depth"] == 3
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("3")
    tab.shot("channel-redriven")


def test_redrive_a_dead_letter_topic_from_its_page(tab: Tab) -> None:
    cluster = tab.cluster
    dead_letter_by_consumer(cluster, "payments", "ledger", 2)
    page = tab.open("topics/payments")
    ledger = 'tr[data-channel="ledger"]'
    expect(cell(page, "#channels", ledger, "dead-lettered")).to_have_text("2")
    expect(cell(page, "#channels", ledger, "expired")).to_have_text("0")
    expect(page.get_by_role("button", name="Redrive all to their channels")).to_have_count(0)
    page.goto(cluster.admin_url + "topics/payments.dead")
    tab.wait_render()
    # the sampler has seen ledger name this topic: the page links back to it
    origin = page.locator("#dead-letter-of a")
    expect(origin).to_have_text("payments/ledger")
    expect(origin).to_have_attribute("href", re.compile(r"/topics/payments/ledger$"))
    tab.shot("topic-dead-letters")
    page.get_by_role("button", name="Redrive all to their channels").click()
    expect(page.locator("#flash")).to_contain_text("Redrove 2 messages")
    assert '"payments.dead"' in tab.dialogs[-1]
    assert topic_depth(cluster, "payments.dead") == 0
    assert nsqd_channel(cluster, "payments", "ledger")["depth"] == 2


def test_policy_form_sets_the_policy_and_shows_nsqds_refusal(tab: Tab) -> None:
    cluster = tab.cluster
    for node in (0, 1):
        cluster.create_channel("invoices", "mailer", node)
    page = tab.open("topics/invoices/mailer")
    expect(page.locator("main")).to_contain_text("No dead-letter or TTL policy applies")
    expect(page.locator("#channel-nodes th", has_text="Dead-lettered")).to_have_count(0)
    form = page.locator('form[data-form="policy"]')
    ttl = form.locator("input[name=message_ttl]")
    ttl.fill("soon")
    form.locator("button[type=submit]").click()
    # nsqd's own words, passed through nsqadmin's 400
    expect(page.locator("#error")).to_contain_text("INVALID_MESSAGE_TTL: message_ttl must be")
    tab.shot("channel-policy-refused")
    tab.wait_render(tab.renders())  # a refresh keeps what was typed, to correct it
    assert ttl.input_value() == "soon"
    ttl.fill("90s")
    form.locator("input[name=max_attempts]").fill("4")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("Updated the dead-letter policy")
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator("#policy .ttl")).to_have_text("1m30s")
    expect(page.locator("#policy .max-attempts")).to_have_text("4")
    expect(page.locator("#policy .dead-letter-topic")).to_have_text("invoices.dead")
    expect(page.locator("#channel-nodes th", has_text="Dead-lettered")).to_have_count(1)
    assert "max_attempts 4" in tab.dialogs[-1] and "message_ttl" in tab.dialogs[-1]
    for node in (0, 1):
        url = f"http://{cluster.nsqd_http[node]}/channel/config?topic=invoices&channel=mailer"
        config = cluster.get_json(url)
        assert (config["max_attempts"], config["message_ttl"]) == (4, "1m30s")
    tab.shot("channel-policy")
    page.get_by_role("button", name="Reset to inherited").click()
    expect(page.locator("main")).to_contain_text("No dead-letter or TTL policy applies")
    assert cluster.get_json(url)["max_attempts"] is None
    # nodes set apart (nsqd's own API): the page says so and lists each node's settings
    for node, attempts in ((0, 2), (1, 7)):
        path = f"http://{cluster.nsqd_http[node]}/channel/config?topic=invoices&channel=mailer"
        status, _ = cluster.request("POST", path, json.dumps({"max_attempts": attempts}).encode())
        assert status == 200
    differs = page.locator("#policy-differs")
    expect(differs).to_contain_text("settings differ across nodes")
    expect(differs.locator("li")).to_have_text(
        [re.compile(r": max attempts (2|7), TTL off, dead-letter topic invoices\.dead$")] * 2
    )
    set_to = {cluster.nsqd_http[0]: "2", cluster.nsqd_http[1]: "7"}
    first = page.locator("#channel-nodes tr.node").first.get_attribute("data-node")
    assert first in set_to
    expect(page.locator("#policy .max-attempts")).to_have_text(set_to[first])  # the first node's
    tab.shot("channel-policy-differs")


# -- charts -----------------------------------------------------------------------------------


def test_topic_page_charts_rate_and_depth(tab: Tab, traffic: Traffic) -> None:
    page = tab.open("topics/" + traffic.TOPIC)
    rate_svg = page.locator("#chart-rate svg")
    depth_svg = page.locator("#chart-depth svg")
    # the sampler adds a point every 0.2 s; the charts redraw on each refresh
    page.wait_for_function(
        "() => Number(document.querySelector('#chart-rate svg')?.dataset.points || 0) >= 25"
    )
    line = rate_svg.locator("path.line").get_attribute("d") or ""
    assert line.startswith("M") and line.count("L") >= 10, line
    ys = [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", line)]
    assert len(set(ys)) > 1, "a flat rate line: the traffic is not being charted"
    # depth: the topic's own and one line per channel
    expect(depth_svg.locator("path.line")).to_have_count(3)
    legends = [re.compile(f"^{name} ") for name in ("topic", "analytics", "archive")]
    expect(page.locator("#chart-depth .legend")).to_have_text(legends)
    expect(page.locator("#chart-rate figcaption b")).to_have_text(re.compile(r"^[\d.,]+/s$"))
    expect(cell(page, "#channels", 'tr[data-channel="analytics"]', "connections")).to_have_text("2")
    shot = tab.shot("topic")
    if os.environ.get("NSQPY_UPDATE_DOCS_SCREENSHOT") == "1":
        DOCS_SHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_SHOT)
    # the topics list draws a sparkline of the same rate
    page.click("#nav a:text-is('Topics')")
    spark = page.locator(f'tr[data-topic="{traffic.TOPIC}"] svg.spark')
    expect(spark).to_have_count(1)
    assert int(spark.get_attribute("data-points") or "0") >= 2
    # and the channel page charts depth, in-flight and deferred together
    page.goto(tab.cluster.admin_url + f"topics/{traffic.TOPIC}/archive")
    expect(page.locator("#chart-depth svg path.line")).to_have_count(3)


# -- banners and the non-admin view (UI behaviour, with the API answers rewritten) -------------


def test_warning_and_alert_banners(tab: Tab) -> None:
    page = tab.page
    alert = {
        "node": tab.cluster.nsqd_http[0],
        "topic": "orders",
        "channel": "billing",
        "kind": "depth",
        "value": 1234,
        "threshold": 1000,
        "since": time.time() - 90,
    }

    def alerts(route: Route) -> None:
        route.fulfill(json={"alerts": [alert], "message": ""})

    def warn(route: Route) -> None:
        reply = route.fetch()
        data = reply.json()
        data["message"] = "WARNING: 1 error(s) talking to nsqd: 127.0.0.1:1 connection refused"
        route.fulfill(response=reply, json=data)

    page.route("**/api/alerts", alerts)
    page.route(re.compile(r".*/api/topics$"), warn)
    tab.open()
    expect(page.locator("#warning")).to_contain_text("connection refused")
    banner = page.locator("#alerts")
    expect(banner).to_contain_text("orders/billing")
    expect(banner).to_contain_text("depth 1,234 (threshold 1,000)")
    expect(banner.locator("a", has_text="orders/billing")).to_have_attribute(
        "href", re.compile(r"/topics/orders/billing$")
    )
    tab.shot("banners")
    # the alert banner is on every page; the warning only where the API said so
    page.click("#nav a:text-is('Nodes')")
    expect(page.locator("#nodes-table")).to_be_visible()
    expect(banner).to_be_visible()
    expect(page.locator("#warning")).to_be_hidden()


# -- a second nsqadmin: under a base path, with admin users ------------------------------------


def test_base_path_and_admin_users(
    browser: Browser, process_cluster_factory: Callable[..., ProcessCluster]
) -> None:
    cluster = process_cluster_factory(
        admin_flags=["--base-path=/ops/nsq", "--admin-user=alice"], nsqd_count=1
    )
    assert cluster.admin_url.endswith("/ops/nsq/")
    cluster.create_channel("audit_log", "reader", 0)
    publish_counts(cluster, "audit_log", {0: 9})
    # alice (named by the ACL header a proxy would set) gets the buttons; anyone else does not
    for user, admin in (("alice", True), ("mallory", False)):
        context = browser.new_context(extra_http_headers={"X-Forwarded-User": user})
        try:
            tab = Tab(context.new_page(), cluster)
            page = tab.open()
            link = page.locator('#topics-table a:text-is("audit_log")')
            expect(link).to_have_attribute("href", "/ops/nsq/topics/audit_log")
            expect(page.locator("#nav a", has_text="Nodes")).to_have_attribute(
                "href", "/ops/nsq/nodes"
            )
            link.click()
            page.locator('#channels a:text-is("reader")').click()
            expect(page).to_have_url(cluster.admin_url + "topics/audit_log/reader")
            expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("9")
            expect(page.locator(".page-head button[data-action]")).to_have_count(3 if admin else 0)
            # the dead-letter policy form (with its reset button) is for admins only too
            expect(page.locator('form[data-form="policy"]')).to_have_count(1 if admin else 0)
            expect(page.locator("button[data-action]")).to_have_count(4 if admin else 0)
            page.reload()  # a page route under the base path is served by nsqadmin too
            tab.wait_render()
            expect(page.locator("h1")).to_contain_text("reader")
            if not admin:
                tab.shot("channel-viewer")
            assert not tab.errors, tab.errors
        finally:
            context.close()


# -- nsqd's e2e percentiles and backlog alerts, for real ----------------------------------------

E2E_FLAGS = [
    "--e2e-processing-latency-percentile=0.99,0.5",
    "--alert-depth=latency:*=20",  # the channels of one topic
    "--alert-check-interval=50ms",
]
DURATION = re.compile(r"^([\d.]+)(ns|µs|ms|s)$")
UNIT_NS = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}


def nanos(text: str) -> float:
    """A duration as the UI prints it (``12.34ms``) in ns."""
    match = DURATION.match(text.strip())
    assert match, f"not a duration: {text!r}"
    return float(match.group(1)) * UNIT_NS[match.group(2)]


def e2e_of(doc: Any, channel: str = "") -> Any:
    """The latency topic's (or one of its channels') e2e_processing_latency in nsqd's /stats."""
    [owner] = (t for t in doc["topics"] if t["topic_name"] == "latency")
    if channel:
        [owner] = (c for c in owner["channels"] if c["channel_name"] == channel)
    return owner["e2e_processing_latency"]


def weighted(stats: list[Any], quantile: float, channel: str = "") -> float:
    """The count-weighted average of the nodes' e2e value (nsqadmin's aggregate)."""
    total = count = 0.0
    for doc in stats:
        e2e = e2e_of(doc, channel)
        [value] = (p["value"] for p in e2e["percentiles"] if p["quantile"] == quantile)
        count += e2e["count"]
        total += value * e2e["count"]
    return total / count


def e2e_texts(page: Page, row: str) -> list[str]:
    return [t.strip() for t in page.locator(f"{row} td.e2e").all_inner_texts()]


def test_e2e_percentiles_and_a_real_backlog_alert(
    browser: Browser, process_cluster_factory: Callable[..., ProcessCluster]
) -> None:
    cluster = process_cluster_factory(nsqd_flags=E2E_FLAGS)
    for node in (0, 1):
        cluster.create_channel("latency", "workers", node)
        cluster.create_channel("latency", "backlog", node)  # nobody consumes it
    consumer = CountingConsumer(cluster, "latency", "workers", nodes=(0, 1))
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        started = time.monotonic()
        publish_counts(cluster, "latency", {0: 10, 1: 6})
        poll(lambda: consumer.received == 16, "the consumer to FIN all 16")

        def recorded() -> int:  # FINs nsqd has recorded: the consumer's may still be in transit
            return sum(e2e_of(cluster.stats(n), "workers")["count"] for n in (0, 1))

        poll(lambda: recorded() == 16, "nsqd to record the 16 FINs")
        bound = (time.monotonic() - started) * 1e9  # no message can have waited longer
        stats = [cluster.stats(node) for node in (0, 1)]
        tab = Tab(context.new_page(), cluster)
        page = tab.open("topics/latency")

        # the topic page: E2E columns with nsqd's real figures (per node, and merged)
        group = page.locator("#channels thead tr.group")
        expect(group).to_contain_text("E2E Processing Latency")
        expect(page.locator("#channels thead th", has_text=re.compile(r"^p\d+$"))).to_have_text(
            ["p99", "p50"]
        )
        workers = '#channels tr[data-channel="workers"]'
        expect(page.locator(f"{workers} td.e2e")).to_have_count(2)
        shown = e2e_texts(page, workers)
        values = [nanos(t) for t in shown]
        assert all(0 < v <= bound for v in values), (shown, bound)
        assert values[0] >= values[1]  # p99 >= p50
        for value, quantile in zip(values, (0.99, 0.5), strict=True):
            assert value == pytest.approx(weighted(stats, quantile, "workers"), rel=0.01)
        # nothing was FINed on the backlog channel: nsqd reports zeros
        assert e2e_texts(page, '#channels tr[data-channel="backlog"]') == ["0ns", "0ns"]
        for node, addr in enumerate(cluster.nsqd_http):
            row = f'#topic-nodes tr[data-node="{addr}"]'
            p99 = nanos(e2e_texts(page, row)[0])
            assert p99 == pytest.approx(weighted([stats[node]], 0.99), rel=0.01)
        tab.shot("topic-e2e")

        # the channel page: the same columns per node and in total
        page.click('#channels a:text-is("workers")')
        total = "#channel-nodes tr.total"
        expect(page.locator(f"{total} td.e2e")).to_have_count(2)
        merged = [nanos(t) for t in e2e_texts(page, total)]
        assert merged == pytest.approx(values, rel=0.01)
        expect(page.locator("#alerts")).to_be_hidden()  # 10 and 6 queued: under 20

        # past the threshold on nsqd 0's backlog channel: nsqd raises the alert, nsqadmin
        # relays it, every page shows it
        publish_counts(cluster, "latency", {0: 15})
        banner = page.locator("#alerts")
        expect(banner.locator("li")).to_have_count(1)
        expect(banner).to_contain_text("latency/backlog")
        expect(banner).to_contain_text(f"on {cluster.nsqd_http[0]}")
        expect(banner).to_contain_text("depth 25 (threshold 20)")
        [alert] = cluster.get_json(cluster.admin_url + "api/alerts")["alerts"]
        assert (alert["node"], alert["channel"], alert["value"]) == (
            cluster.nsqd_http[0], "backlog", 25,
        )  # fmt: skip
        # the node page charts where the backlog waits: in its channels
        page.click(f"#alerts a:text-is('{cluster.nsqd_http[0]}')")
        expect(page).to_have_url(cluster.admin_url + "nodes/" + cluster.nsqd_http[0])
        expect(page.locator("#chart-depth .legend")).to_have_text(
            ["topics 0", "channels 25", "in-flight 0"]
        )
        expect(page.locator("#chart-rate figcaption b")).to_have_text(re.compile(r"/s$"))
        expect(banner).to_be_visible()
        tab.shot("node-alert")

        # emptying the channel clears the alert, and the banner goes
        banner.locator("a", has_text="latency/backlog").click()
        expect(page).to_have_url(cluster.admin_url + "topics/latency/backlog")
        page.get_by_role("button", name="Empty Queue").click()
        expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text("0")
        expect(banner).to_be_hidden()
        assert cluster.get_json(cluster.admin_url + "api/alerts")["alerts"] == []
        assert not tab.errors, tab.errors
    finally:
        context.close()
        consumer.close()


# -- escaping ---------------------------------------------------------------------------------


def test_names_from_the_api_are_escaped(tab: Tab) -> None:
    # nsqd only accepts [.a-zA-Z0-9_-] names, so a hostile one is injected into the API answer
    hostile = '<img src=x onerror="window.pwned=1">"&'
    page = tab.page

    def topics(route: Route) -> None:
        route.fulfill(json={"topics": [hostile], "message": ""})

    page.route(re.compile(r".*/api/topics$"), topics)
    page.route(re.compile(r".*/api/history/topics.*"), lambda r: r.fulfill(json={"topics": {}}))
    tab.open()
    link = page.locator("#topics-table tbody a")
    expect(link).to_have_text(hostile)
    assert link.get_attribute("href") == tab.cluster.base_path + "topics/" + (
        "%3Cimg%20src%3Dx%20onerror%3D%22window.pwned%3D1%22%3E%22%26"
    )
    expect(page.locator("main img")).to_have_count(0)
    assert page.evaluate("window.pwned") is None


#: What the UI shows for a count a node does not report (an en dash).
NO_VALUE = "\u2013"


def test_leases_show_on_channel_and_topic_pages_only_where_there_are_some(tab: Tab) -> None:
    cluster = tab.cluster
    for node in (0, 1):
        cluster.create_channel("jobs", "batch", node)
    cluster.create_channel("jobs", "plain", 0)
    publish_counts(cluster, "jobs", {0: 5, 1: 3})
    lease = f"http://{cluster.nsqd_http[0]}/channel/lease?topic=jobs&channel=batch&lease=b1"
    status, body = cluster.request("POST", lease + "&count=2")
    assert status == 200, body
    page = tab.open("topics/jobs/batch")
    node0, node1 = (f'tr[data-node="{addr}"]' for addr in cluster.nsqd_http)
    expect(page.locator("#channel-nodes th", has_text="Leases")).to_have_count(1)
    expect(cell(page, "#channel-nodes", node0, "leases")).to_have_text("1")
    expect(cell(page, "#channel-nodes", node1, "leases")).to_have_text(NO_VALUE)  # no lease there
    expect(cell(page, "#channel-nodes", "tr.total", "leases")).to_have_text("1")
    expect(cell(page, "#channel-nodes", "tr.total", "in-flight")).to_have_text("2")
    tab.shot("channel-leases")
    status, body = cluster.request("POST", lease.replace("/lease?", "/lease/fin?"))
    assert status == 200, body
    expect(cell(page, "#channel-nodes", "tr.total", "leases")).to_have_text("0")
    expect(cell(page, "#channel-nodes", "tr.total", "in-flight")).to_have_text("0")

    page.goto(cluster.admin_url + "topics/jobs")
    tab.wait_render()
    expect(cell(page, "#channels", 'tr[data-channel="batch"]', "leases")).to_have_text("0")
    expect(cell(page, "#channels", 'tr[data-channel="plain"]', "leases")).to_have_text(NO_VALUE)
    # a channel that never had a lease reports nsqd's keys only: its page is as for Go's nsqd
    page.goto(cluster.admin_url + "topics/jobs/plain")
    tab.wait_render()
    expect(cell(page, "#channel-nodes", node0, "depth")).to_have_text("5")
    # node 1 may have made "plain" too: a new topic asks lookupd for its channels without
    # holding up the request that created it (CI once saw node 1's 3 messages in it)
    total = sum(channel_depth(cluster.stats(node), "jobs", "plain") for node in (0, 1))
    expect(cell(page, "#channel-nodes", "tr.total", "depth")).to_have_text(str(total))
    expect(page.locator("#channel-nodes th", has_text="Leases")).to_have_count(0)
    expect(page.locator("#channel-nodes td.leases")).to_have_count(0)
