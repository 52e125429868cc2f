"""Cross-site request forgery from a real web page, in headless Chromium (Playwright, sync).

A tiny web server on 127.0.0.1 port 0 serves an "attacker" page; Chromium resolves the names
``evil.example``, ``friend.example`` and ``nsqadmin.example`` to 127.0.0.1, so that page is a
page of another site, exactly as one on the internet would be. Its script sends what any page
may send without asking the server first: ``fetch(..., {mode: "no-cors"})`` POSTs with
``Content-Type: text/plain``, and a plain form post into a hidden frame. Against NSQ v1.3.0
(and nsqpy before it refused them) these empty, delete and publish. The tests check through
nsqd's /stats that nothing changed, that the same page served from an origin given to
``--http-allowed-origin`` does act (so the requests really arrive), and that nsqadmin's own
pages, reached under a host name, still act. Waits are polls with a deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from .conftest import ProcessCluster
from .test_browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, WAIT_MS, poll

pytestmark = pytest.mark.browser

NAMES = ("evil.example", "friend.example", "nsqadmin.example")

#: The attacker's page: what it sends needs no CORS preflight, so the browser just sends it.
ATTACK_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Cute cats</title></head>
<body>
<h1>Cute cats</h1>
<iframe name="sink" style="display:none"></iframe>
<script>
  // a no-cors fetch resolves with an opaque response once the server has answered
  window.sendText = async (url, body) => {
    const resp = await fetch(url, {
      method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body,
    });
    return resp.type;
  };
  // the classic, script-free forgery: a form posted into a hidden frame
  window.postForm = (url) => new Promise((resolve) => {
    const frame = document.querySelector('iframe[name=sink]');
    frame.addEventListener('load', () => resolve('loaded'), {once: true});
    const form = document.createElement('form');
    form.method = 'POST';
    form.action = url;
    form.target = 'sink';
    document.body.appendChild(form);
    form.submit();
  });
</script>
</body></html>
"""


@pytest.fixture(autouse=True)
def _no_loop_errors() -> None:
    """Replaces the suite's asyncio guard: Playwright's sync API owns this thread's loop."""


class Site:
    """The attacker's web server, on 127.0.0.1 port 0 (any host name reaches it)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(ATTACK_PAGE)))
                self.end_headers()
                self.wfile.write(ATTACK_PAGE)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def origin(self, name: str) -> str:
        return f"http://{name}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = Site()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():  # `make check` installs it; a skip would hide the UI tests
        pytest.fail(f"chromium not found at {CHROMIUM}: apt-get install chromium")
    rules = ", ".join(f"MAP {name} 127.0.0.1" for name in NAMES)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules={rules}"],
        )
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Callable[[], Page]]:
    contexts = []

    def make() -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        return page

    yield make
    for context in contexts:
        context.close()


# -- helpers ----------------------------------------------------------------------------------


def topic_depths(cluster: ProcessCluster, topic: str) -> list[int | None]:
    """The topic's depth on each nsqd, from its /stats (None: the topic does not exist)."""
    depths: list[int | None] = []
    for node in range(len(cluster.nsqd_http)):
        found = [t for t in cluster.stats(node)["topics"] or () if t["topic_name"] == topic]
        depths.append(found[0]["depth"] if found else None)
    return depths


def held_topic(cluster: ProcessCluster, topic: str, counts: list[int]) -> None:
    """``topic`` holding ``counts[i]`` messages on nsqd i, known to nsqadmin on every node."""
    for node, count in enumerate(counts):
        cluster.publish(topic, [b"m%d" % i for i in range(count)], node)
    url = f"http://{cluster.admin_address}/api/topics/{topic}"

    def nodes() -> int:  # a 502 until lookupd has heard of the topic
        status, body = cluster.request("GET", url)
        return len(json.loads(body)["nodes"]) if status == 200 else 0

    poll(lambda: nodes() == len(counts), f"{topic} on every node")
    assert topic_depths(cluster, topic) == counts


def attack(page: Page, cluster: ProcessCluster, topic: str) -> None:
    """From the page, on a two-node cluster: empty ``topic`` through nsqadmin, delete it on
    nsqd 0 with a fetch and on nsqd 1 with a form, then publish to it on nsqd 1; each request
    answered by its server (an opaque response, a loaded frame)."""
    admin = f"http://{cluster.admin_address}"
    first, second = cluster.nsqd_http
    send = "([u, b]) => sendText(u, b)"
    empty = page.evaluate(send, [f"{admin}/api/topics/{topic}", '{"action":"empty"}'])
    delete = page.evaluate(send, [f"http://{first}/topic/delete?topic={topic}", ""])
    form = page.evaluate("(u) => postForm(u)", f"http://{second}/topic/delete?topic={topic}")
    publish = page.evaluate(send, [f"http://{second}/pub?topic={topic}", "planted"])
    assert [empty, delete, form, publish] == ["opaque", "opaque", "loaded", "opaque"]


def logged(cluster: ProcessCluster, daemon: int, text: str) -> bool:
    """Whether ``cluster.daemons[daemon]`` (0 lookupd, 1-2 nsqd, 3 nsqadmin) logged ``text``."""
    return any(text in line for line in cluster.daemons[daemon].lines)


# -- tests ------------------------------------------------------------------------------------


def test_a_page_of_another_site_cannot_empty_delete_or_publish(
    process_cluster: ProcessCluster, site: Site, new_page: Callable[[], Page]
) -> None:
    cluster = process_cluster
    held_topic(cluster, "victim", [3, 2])
    page = new_page()
    page.goto(site.origin("evil.example") + "/cats")
    expect(page.locator("h1")).to_have_text("Cute cats")
    attack(page, cluster, "victim")
    # not emptied, not deleted on either node, nothing planted
    assert topic_depths(cluster, "victim") == [3, 2]
    assert cluster.get_json(f"http://{cluster.admin_address}/api/topics/victim")["depth"] == 5
    # and the daemons say what they refused, and from where
    evil = site.origin("evil.example")
    assert [d.name for d in cluster.daemons] == ["nsqlookupd", "nsqd", "nsqd", "nsqadmin"]
    for daemon, request in [
        (3, "POST /api/topics/victim"),
        (1, "POST /topic/delete?topic=victim"),  # the fetch
        (2, "POST /topic/delete?topic=victim"),  # the form
        (2, "POST /pub?topic=victim"),
    ]:
        line = f"refused {request} from {evil}: not an allowed origin"
        poll(lambda d=daemon, t=line: logged(cluster, d, t), line)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "cross-site-page.png"))


def test_the_same_page_acts_from_an_allowed_origin(
    process_cluster_factory: Callable[..., ProcessCluster], site: Site, new_page: Callable[[], Page]
) -> None:
    friend = f"--http-allowed-origin={site.origin('friend.example')}"
    cluster = process_cluster_factory(admin_flags=[friend], nsqd_flags=[friend])
    held_topic(cluster, "shared", [3, 2])
    evil = new_page()
    evil.goto(site.origin("evil.example") + "/")
    attack(evil, cluster, "shared")
    assert topic_depths(cluster, "shared") == [3, 2]  # the flag names one origin only
    page = new_page()
    page.goto(site.origin("friend.example") + "/")
    attack(page, cluster, "shared")
    # emptied through nsqadmin everywhere, deleted on both nodes by fetch and form, then
    # created again on the second by the publish, holding just that message
    poll(lambda: topic_depths(cluster, "shared") == [None, 1], "the allowed page's effects")


def test_nsqadmins_own_pages_act_under_a_host_name_the_page_next_door_cannot(
    process_cluster: ProcessCluster, site: Site, new_page: Callable[[], Page]
) -> None:
    cluster = process_cluster
    held_topic(cluster, "own", [4, 1])
    page = new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    port = cluster.admin_address.rsplit(":", 1)[1]
    page.goto(f"http://nsqadmin.example:{port}{cluster.base_path}topics/own")
    page.wait_for_function("Number(document.documentElement.dataset.renders || 0) > 0")
    page.get_by_role("button", name="Empty Queue").click()
    expect(page.locator("#flash")).to_contain_text('Emptied topic "own"')
    assert any("empty" in d for d in dialogs)
    assert topic_depths(cluster, "own") == [0, 0]
    # another tab of the same browser, on another site, cannot do what the UI just did
    cluster.publish("own", [b"again"], 0)
    evil = page.context.new_page()
    evil.goto(site.origin("evil.example") + "/")
    admin = f"http://nsqadmin.example:{port}{cluster.base_path}api/topics/own"
    sent = evil.evaluate("([u, b]) => sendText(u, b)", [admin, '{"action":"empty"}'])
    assert sent == "opaque"
    assert topic_depths(cluster, "own") == [1, 0]
