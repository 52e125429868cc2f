"""The import contracts of ARCHITECTURE.md hold, and they catch a break naming both modules.

``lint-imports`` reads ``[tool.importlinter]`` from pyproject.toml. The break tests run it on a
copy of ``src/`` with one offending import added, the way a contributor's change would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter not installed")


def lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """``src/`` copied, with ``line`` appended to ``module`` (a path under nsqpy/)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    target = src / "nsqpy" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return src


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_domain_importing_an_adapter_breaks_the_build(tmp_path: Path) -> None:
    src = copy_with(tmp_path, "nsqd/core/channel.py", "import nsqpy.nsqd.server.tcp  # noqa")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "nsqpy.nsqd.core.channel -> nsqpy.nsqd.server.tcp" in result.stdout


def test_an_adapter_importing_the_daemon_breaks_the_build(tmp_path: Path) -> None:
    src = copy_with(tmp_path, "nsqd/server/http_api.py", "import nsqpy.nsqd.app  # noqa")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "nsqpy.nsqd.server.http_api -> nsqpy.nsqd.app" in result.stdout


def test_an_import_cycle_breaks_the_build(tmp_path: Path) -> None:
    # registry is imported by tcp; importing tcp back closes a cycle between siblings.
    src = copy_with(tmp_path, "nsqlookupd/registry.py", "import nsqpy.nsqlookupd.tcp  # noqa")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "No cycles are allowed in nsqpy.nsqlookupd" in result.stdout
    assert ".registry -> .tcp" in result.stdout


def test_protocol_doing_io_breaks_the_build(tmp_path: Path) -> None:
    src = copy_with(tmp_path, "protocol/frames.py", "import asyncio  # noqa")
    result = lint_imports(src)
    assert result.returncode != 0
    assert "nsqpy.protocol.frames -> asyncio" in result.stdout


def test_no_module_of_src_sits_on_an_import_cycle() -> None:
    """Sibling cycles are import-linter's; this also catches a package and its own module
    importing each other (which acyclic_siblings does not look at)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("nsqpy")
    cycles = sorted(
        f"{importer} <-> {imported}"
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if graph.chain_exists(imported=importer, importer=imported)
    )
    assert cycles == []
