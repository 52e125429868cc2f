"""Reachability checks run before a job starts Spark work.

Without them an unreachable nsqd shows up minutes later as a Java stack trace from deep inside
a query; a job would rather say which address is wrong, in one line, before anything starts.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Final

from nsqpy.client.connection import split_address
from nsqpy.spark.jobs.errors import JobError

TIMEOUT: Final = 3.0


def _split(address: str) -> tuple[str, int]:
    try:
        return split_address(address)
    except ValueError as exc:
        raise JobError(str(exc)) from None


def check_nsqd(addresses: Iterable[str], timeout: float = TIMEOUT) -> None:
    """Every nsqd TCP address accepts a connection."""
    for address in addresses:
        host, port = _split(address)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            raise JobError(f"nsqd {address} is unreachable: {exc}") from None


def check_lookupd(addresses: Iterable[str], timeout: float = TIMEOUT) -> None:
    """Every nsqlookupd HTTP address answers ``/ping``."""
    for address in addresses:
        base = address if "://" in address else f"http://{address}"
        if "://" not in address:
            _split(address)
        try:
            with urllib.request.urlopen(f"{base}/ping", timeout=timeout) as reply:
                reply.read()
        except (OSError, urllib.error.URLError) as exc:
            raise JobError(f"nsqlookupd {address} is unreachable: {exc}") from None
