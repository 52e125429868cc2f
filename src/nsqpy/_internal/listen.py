"""Listening addresses as Go's ``net.Listen`` takes them, and the HTTP listener every daemon opens.

nsqd, nsqlookupd and nsqadmin all turn ``--http-address`` into an aiohttp site the same way and
fail with the same ``listen (<address>) failed - <err>`` text, so that lives here once.
"""

from __future__ import annotations

import socket
import ssl

from aiohttp import web


class ListenError(Exception):
    """The address cannot be listened on; the message is nsqd's ``listen (...) failed - ...``."""

    def __init__(self, address: str, reason: object) -> None:
        super().__init__(f"listen ({address}) failed - {reason}")


def split_host_port(address: str) -> tuple[str | None, int]:
    """``host:port``, ``[v6]:port`` or ``:port``; an empty host means every interface (None,
    as asyncio wants it). ValueError, worded as Go's, when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if port and not port.isdigit():
        raise ValueError(f"address {address}: unknown port")
    return (host.strip("[]") or None), int(port or 0)


def format_address(sockname: object) -> str:
    """A bound socket's name as Go prints a ``net.Addr``: ``ip:port``, ``[v6]:port``, or a path."""
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host, port = sockname[0], sockname[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(sockname)


def bound_port(sockname: object) -> int:
    """The port of a bound socket's name; -1 for a unix socket."""
    return int(sockname[1]) if isinstance(sockname, tuple) else -1


async def serve_http(
    app: web.Application,
    address: str,
    *,
    shutdown_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    unix: bool = False,
) -> tuple[web.AppRunner, object]:
    """Serve ``app`` on ``address``; the runner (to clean up) and the bound socket name.

    With ``unix``, an address that is not host:port is a unix socket path (nsqd's rule);
    otherwise it is an error. Raises ListenError.
    """
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout
    )
    await runner.setup()
    try:
        site = _site(runner, address, ssl_context, unix)
        await site.start()
    except (OSError, ValueError) as err:
        await runner.cleanup()
        raise ListenError(address, err) from err
    server = site._server  # the bound asyncio server, to learn the real port
    sockets: list[socket.socket] = list(getattr(server, "sockets", None) or [])
    if not sockets:
        await runner.cleanup()
        raise ListenError(address, "no server")
    return runner, sockets[0].getsockname()


def _site(
    runner: web.AppRunner, address: str, context: ssl.SSLContext | None, unix: bool
) -> web.BaseSite:
    try:
        host, port = split_host_port(address)
    except ValueError:
        if not unix:
            raise
        return web.UnixSite(runner, address, ssl_context=context)
    return web.TCPSite(runner, host, port, reuse_address=True, ssl_context=context)
