"""The compiled core and its pure-Python twins, side by side, for tests that compare them.

``compiled(name)`` imports a compiled module directly (whatever NSQPY_PURE_PYTHON says), so
both twins run in one test run. When it is not built the test is skipped, unless
NSQPY_REQUIRE_COMPILED=1 (CI, ``make test``): then a missing module fails the test.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

from nsqpy._internal.compiled import CHOSEN, pure_python

WIRE = "nsqpy.protocol._cwire"
DELIVERY = "nsqpy.nsqd.core._cdelivery"


def required() -> bool:
    return os.environ.get("NSQPY_REQUIRE_COMPILED", "") not in ("", "0")


def compiled(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        if required():
            pytest.fail(f"NSQPY_REQUIRE_COMPILED=1 but {name} is not built: {err}")
        pytest.skip(f"{name} is not built (no compiler?)")


def in_use(name: str) -> ModuleType | None:
    """The compiled module ``name`` when the code under test selected it, None when it runs
    the pure-Python twins (``NSQPY_PURE_PYTHON=1``). Skips when it is neither built nor
    required."""
    if pure_python():
        assert CHOSEN[name] is False
        return None
    if not required() and not CHOSEN.get(name):
        pytest.skip("compiled core not built and not required")
    assert CHOSEN[name] is True
    return compiled(name)
