"""Chooses between a compiled module and its pure-Python twin, once, at import.

nsqpy's per-message hot path has an optional compiled twin (Cython, built by ``setup.py``
when a compiler is there). ``load(name)`` returns the compiled module, or None when the
pure-Python code must run:

- ``NSQPY_PURE_PYTHON=1``: always None (the twin is the reference implementation);
- the module is not built (no compiler, an install that skipped it): None, unless
  ``NSQPY_REQUIRE_COMPILED=1`` (CI, ``make test``), which makes that an ImportError.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: module name -> True when its compiled twin is in use (what ``load`` decided).
CHOSEN: dict[str, bool] = {}


def pure_python() -> bool:
    return os.environ.get("NSQPY_PURE_PYTHON", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None to use its pure-Python twin."""
    if pure_python():
        CHOSEN[name] = False
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        if os.environ.get("NSQPY_REQUIRE_COMPILED", "") not in ("", "0"):
            raise
        module = None
    CHOSEN[name] = module is not None
    return module
