"""nsqlookupd refuses registration changes that pages of other web origins send (nsqpy's rule,
as nsqd's and nsqadmin's): a visited site cannot delete or tombstone what consumers look up."""

from __future__ import annotations

import aiohttp
import pytest

from nsqpy.nsqlookupd.app import NSQLookupd, StartupError
from nsqpy.nsqlookupd.options import NsqlookupdOptions, parse_nsqlookupd_args

from .conftest import LookupdFactory

FOREIGN = "http://evil.example"


async def post(
    lookupd: NSQLookupd, path: str, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    url = f"http://127.0.0.1:{lookupd.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.post(
        url, headers=headers or {}, data=b"", timeout=aiohttp.ClientTimeout(total=10)
    ) as resp:
        return resp.status, await resp.text()


async def topics(lookupd: NSQLookupd, headers: dict[str, str] | None = None) -> list[str]:
    url = f"http://127.0.0.1:{lookupd.http_port}/topics"
    async with aiohttp.ClientSession() as session, session.get(
        url, headers=headers or {}, timeout=aiohttp.ClientTimeout(total=10)
    ) as resp:
        assert resp.status == 200
        doc = await resp.json()
    return sorted(doc["topics"])


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": FOREIGN, "Content-Type": "text/plain"},
        {"Origin": "http://127.0.0.1:1"},  # another port is another origin
        {"Origin": "null"},  # a sandboxed page or a file: URL
        {"Sec-Fetch-Site": "cross-site"},  # a browser that sent no Origin
    ],
)
async def test_a_foreign_page_cannot_create_or_delete(
    lookupd_factory: LookupdFactory, headers: dict[str, str]
) -> None:
    lookupd = await lookupd_factory()
    assert (await post(lookupd, "/topic/create?topic=kept"))[0] == 200
    for path in (
        "/topic/delete?topic=kept",
        "/topic/create?topic=planted",
        "/channel/create?topic=kept&channel=c",
        "/topic/tombstone?topic=kept&node=127.0.0.1:4151",
    ):
        status, body = await post(lookupd, path, headers)
        assert (status, body) == (403, '{"message":"CROSS_ORIGIN_REQUEST_FORBIDDEN"}'), path
    assert await topics(lookupd) == ["kept"]


async def test_programs_allowed_origins_and_reads_are_unaffected(
    lookupd_factory: LookupdFactory,
) -> None:
    lookupd = await lookupd_factory(http_allowed_origins=["https://admin.example"])
    assert (await post(lookupd, "/topic/create?topic=by_curl"))[0] == 200  # no Origin
    status, _ = await post(
        lookupd, "/topic/create?topic=by_friend", {"Origin": "https://admin.example"}
    )
    assert status == 200
    # a foreign page may still read: nothing changes on GET
    assert await topics(lookupd, {"Origin": FOREIGN}) == ["by_curl", "by_friend"]


async def test_star_allows_every_origin_as_nsq_does(lookupd_factory: LookupdFactory) -> None:
    lookupd = await lookupd_factory(http_allowed_origins=["*"])
    assert (await post(lookupd, "/topic/create?topic=t", {"Origin": FOREIGN}))[0] == 200
    assert await topics(lookupd) == ["t"]


def test_the_flag_and_a_bad_value() -> None:
    opts = parse_nsqlookupd_args(
        ["--http-allowed-origin=https://a.example", "--http-allowed-origin", "http://b:8080/"]
    )
    assert opts.http_allowed_origins == ["https://a.example", "http://b:8080/"]
    with pytest.raises(SystemExit) as exited:
        parse_nsqlookupd_args(["--http-allowed-origin=not an origin"])
    assert exited.value.code == 2


async def test_a_bad_configured_origin_refuses_to_start() -> None:
    opts = NsqlookupdOptions(
        tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", http_allowed_origins=["ftp:/x"]
    )
    lookupd = NSQLookupd(opts)
    with pytest.raises(StartupError, match="invalid --http-allowed-origin"):
        await lookupd.start()
    await lookupd.stop()
