"""aiohttp's server half without its client half, for a daemon's start-up.

``import aiohttp.web`` first runs ``aiohttp/__init__.py``, which imports the whole client (the
connector alone builds two default SSL contexts, loading the system's CA certificates): about
half of the ~0.13 s aiohttp costs to import, none of which a daemon needs to answer ``/ping``.
``import_web()`` puts the ``aiohttp`` package in ``sys.modules`` without running its
``__init__`` yet, then imports ``aiohttp.web``; the package's own ``__init__`` runs, in the same
module object, the first time anything asks the package for a name it does not have yet
(``aiohttp.ClientSession``, ``from aiohttp import ClientTimeout``...), so code that uses the
client later gets exactly what a plain ``import aiohttp`` gives, only later.

When aiohttp was imported already, or its ``__init__`` does not look as expected, this is a
plain ``import aiohttp.web``.

A daemon that knows it will use the client (nsqd with ``--lookupd-tcp-address`` asks lookupd
over HTTP when a topic is created) calls ``import_client()`` before it serves: completing the
package on first use blocks the event loop for that ~0.07 s, and a REGISTER queued behind it
reaches nsqlookupd that much later (gnsq's suite looks 0.1 s after creating a topic).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from importlib.machinery import PathFinder
from types import ModuleType

_VERSION = re.compile(rb'^__version__ = "([^"]+)"', re.MULTILINE)


def import_web() -> ModuleType:
    """``aiohttp.web``, importing as little of the rest of aiohttp as it can."""
    if "aiohttp" not in sys.modules:
        _defer_package_init()
    return importlib.import_module("aiohttp.web")


def import_client() -> ModuleType:
    """``aiohttp`` with its client half: runs the deferred ``__init__`` now if it is pending."""
    package = importlib.import_module("aiohttp")
    if not hasattr(package, "ClientSession"):  # a name only the package's __init__ defines
        raise ImportError("aiohttp has no ClientSession")
    return package


def _defer_package_init() -> None:
    spec = importlib.util.find_spec("aiohttp")
    if spec is None or spec.loader is None or spec.origin is None:
        return
    try:
        with open(spec.origin, "rb") as fh:
            found = _VERSION.search(fh.read(4096))
    except OSError:
        return
    if found is None:
        return
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)
    # what the server modules take from the package (aiohttp.http: the Server header)
    package.__dict__["__version__"] = found.group(1).decode()

    def complete(name: str) -> object:
        """PEP 562 hook: a submodule is imported (``from . import hdrs`` asks the package
        first); any other name runs the package's ``__init__`` now and is answered from it."""
        if name.startswith("__"):
            raise AttributeError(name)  # introspection (copy, pickle, inspect): not a reason
        if PathFinder.find_spec(f"aiohttp.{name}", package.__path__) is not None:
            return importlib.import_module(f"aiohttp.{name}")
        if package.__dict__.get("__getattr__") is complete:
            del package.__dict__["__getattr__"]
            loader.exec_module(package)  # submodules imported so far are reused as they are
        return getattr(package, name)

    package.__dict__["__getattr__"] = complete
    sys.modules["aiohttp"] = package
