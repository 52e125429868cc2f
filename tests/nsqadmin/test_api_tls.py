"""nsqadmin's HTTP client TLS flags against an nsqd whose HTTP API requires TLS.

Such an nsqd answers plain http with 403 ``TLS_REQUIRED`` naming its ``https_port``; nsqadmin
retries there over https, trusting ``--http-client-tls-root-ca-file`` (or nothing extra, in
which case the test CA's certificate is refused and the node is a warning).
"""

from __future__ import annotations

from pathlib import Path

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.options import TLS_REQUIRED
from tests.tls_certs import make_certs

from .conftest import AdminCluster


async def _tls_only_nsqd(c: AdminCluster, certs_dir: Path) -> tuple[NSQD, Path]:
    certs = make_certs(certs_dir)
    nsqd = await c.start_nsqd(
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        https_address="127.0.0.1:0",
        tls_required=TLS_REQUIRED,
    )
    nsqd.broker.get_topic("secure")  # created in place: its HTTP API now refuses plain http
    return nsqd, certs.ca


async def test_root_ca_file_lets_nsqadmin_follow_nsqd_to_https(
    admin_cluster: AdminCluster, tmp_path: Path
) -> None:
    c = admin_cluster
    nsqd, ca = await _tls_only_nsqd(c, tmp_path / "certs")
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[],
        nsqd_http_addresses=[nsqd.http_address],
        http_client_tls_root_ca_file=str(ca),
    )
    topics = await c.get_json("/api/topics", admin=admin)
    assert topics == {"topics": ["secure"], "message": ""}


async def test_without_the_ca_the_https_node_is_refused(
    admin_cluster: AdminCluster, tmp_path: Path
) -> None:
    c = admin_cluster
    nsqd, _ = await _tls_only_nsqd(c, tmp_path / "certs")
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[], nsqd_http_addresses=[nsqd.http_address]
    )
    reply = await c.api("GET", "/api/topics", admin=admin)
    assert reply.status == 502
    assert reply.message.startswith("UPSTREAM_ERROR: failed to query any nsqd: Get ")
    assert f'"https://127.0.0.1:{nsqd.https_port}/stats' in reply.message
    assert reply.message.endswith(
        ": tls: failed to verify certificate: unable to get local issuer certificate"
    )


async def test_insecure_skip_verify_accepts_any_certificate(
    admin_cluster: AdminCluster, tmp_path: Path
) -> None:
    c = admin_cluster
    nsqd, _ = await _tls_only_nsqd(c, tmp_path / "certs")
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[],
        nsqd_http_addresses=[nsqd.http_address],
        http_client_tls_insecure_skip_verify=True,
    )
    topics = await c.get_json("/api/topics", admin=admin)
    assert topics["topics"] == ["secure"]
