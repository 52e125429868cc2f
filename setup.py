"""Builds nsqpy's optional compiled core (Cython); everything else is in pyproject.toml.

Each extension has a pure-Python twin, so a machine without Cython or a C compiler gets a
working nsqpy: the build prints one warning line and leaves the extension out.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: (module, source): the compiled twins of the per-message hot path.
EXTENSIONS = [
    ("nsqpy.protocol._cwire", "src/nsqpy/protocol/_cwire.pyx"),
    ("nsqpy.nsqd.core._cdelivery", "src/nsqpy/nsqd/core/_cdelivery.pyx"),
    ("nsqpy.nsqd.storage._cfsync", "src/nsqpy/nsqd/storage/_cfsync.pyx"),
    ("nsqpy.nsqd.storage._cframes", "src/nsqpy/nsqd/storage/_cframes.pyx"),
    ("nsqpy.nsqd.storage._cunfinished", "src/nsqpy/nsqd/storage/_cunfinished.pyx"),
]


def _warn(reason: str) -> None:
    print(
        f"WARNING: nsqpy's compiled core was not built ({reason}); it runs as pure Python",
        file=sys.stderr,
    )


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failures are a warning, never a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - any compiler/toolchain failure
            _warn(f"{type(err).__name__}: {err}".splitlines()[0])

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # noqa: BLE001
            _warn(f"{ext.name}: the C compiler failed, {type(err).__name__}")


def _stale_builds(source: str) -> list[Path]:
    """Compiled copies of ``source`` left in the tree by an earlier in-place build."""
    path = Path(source)
    return sorted(path.parent.glob(f"{path.stem}.*.so")) + sorted(
        path.parent.glob(f"{path.stem}.*.pyd")
    )


def _extensions() -> list[object]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed")
        return []
    built: list[object] = []
    for name, src in EXTENSIONS:
        try:
            built.extend(
                cythonize([Extension(name, [src], optional=True)], quiet=True, language_level=3)
            )
        except Exception as err:  # noqa: BLE001 - a Cython error must not fail the install
            _warn(f"{name}: Cython failed, {type(err).__name__}")
            # an older build must not keep running in place of code that no longer compiles
            for stale in _stale_builds(src):
                stale.unlink()
    return built


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
