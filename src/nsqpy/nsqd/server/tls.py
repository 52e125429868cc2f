"""nsqd's TLS configuration: the server context (TCP ``tls_v1`` upgrade, HTTPS) and the client
context used to call the auth server, from ``--tls-*`` options (nsqd's buildTLSConfig).

``--tls-client-auth-policy``: ``require-verify`` asks for a client certificate and verifies it
against ``--tls-root-ca-file``; ``require`` asks for one too. Go accepts any certificate
there without verifying it; OpenSSL (through Python's ``ssl``) cannot skip the verification of
a certificate it requested, so nsqpy verifies under ``require`` as well (against the root CA
file when given, else the system's CAs). Any other value asks for no certificate.
"""

from __future__ import annotations

import ssl
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsqpy.nsqd.options import NsqdOptions


class TLSConfigError(Exception):
    """The certificate, key or CA file cannot be used."""


def _min_version(version: int) -> ssl.TLSVersion:
    try:
        return ssl.TLSVersion(version)
    except ValueError:
        return ssl.TLSVersion.TLSv1


def _set_min_version(ctx: ssl.SSLContext, version: int) -> None:
    with warnings.catch_warnings():  # TLS 1.0 and 1.1 are deprecated, still nsqd's default
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = _min_version(version)


def server_context(opts: NsqdOptions) -> ssl.SSLContext | None:
    """The server context, or None when no certificate and key are configured."""
    if not opts.tls_cert and not opts.tls_key:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(opts.tls_cert, opts.tls_key or None)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(str(err)) from err
    _set_min_version(ctx, opts.tls_min_version)
    policy = opts.tls_client_auth_policy
    if policy in ("require", "require-verify"):
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not opts.tls_root_ca_file:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    if opts.tls_root_ca_file:
        try:
            ctx.load_verify_locations(cafile=opts.tls_root_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise TLSConfigError(f"failed to append certificate to pool ({err})") from err
    return ctx


def client_context(opts: NsqdOptions) -> ssl.SSLContext:
    """For https auth servers: system CAs, or ``--tls-root-ca-file`` when given."""
    try:
        ctx = ssl.create_default_context(cafile=opts.tls_root_ca_file or None)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(str(err)) from err
    _set_min_version(ctx, opts.tls_min_version)
    return ctx


def common_name(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str:
    """The client certificate's subject CN ("" without one)."""
    if ssl_object is None:
        return ""
    cert = ssl_object.getpeercert()
    if not cert:
        return ""
    for rdn in cert.get("subject", ()):
        for pair in rdn:
            if pair[0] == "commonName":
                return str(pair[1])
    return ""
