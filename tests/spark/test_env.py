"""Setup checks: Java, pyspark and pyarrow versions (no Spark needed)."""

from __future__ import annotations

import stat
from importlib import metadata
from pathlib import Path

import pytest

from nsqpy.spark import env


def fake_java(tmp_path: Path, version: str) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return home


def test_java_major_versions() -> None:
    assert env.java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert env.java_major('java version "1.8.0_392"') == 8
    assert env.java_major('openjdk version "21" 2023-09-19') == 21
    assert env.java_major("no version here") is None


def test_missing_java_is_explained() -> None:
    with pytest.raises(env.SparkSetupError, match="no java was found"):
        env.check_java({"PATH": "/nonexistent"})
    with pytest.raises(env.SparkSetupError, match=r"no java was found \(JAVA_HOME=/nope"):
        env.check_java({"JAVA_HOME": "/nope", "PATH": "/usr/bin"})


def test_old_java_is_refused_and_a_new_one_accepted(tmp_path: Path) -> None:
    old = fake_java(tmp_path / "old", "11.0.2")
    with pytest.raises(env.SparkSetupError, match="is Java 11"):
        env.check_java({"JAVA_HOME": str(old)})
    assert env.check_java({"JAVA_HOME": str(fake_java(tmp_path / "new", "17.0.1"))}) == 17


def test_missing_or_old_packages_are_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(env.SparkSetupError, match=r"needs pyspark.*pip install 'nsqpy\[spark\]'"):
        env.check_packages()
    monkeypatch.setattr(metadata, "version", lambda name: "4.1.1")
    with pytest.raises(env.SparkSetupError, match=r"pyspark >= 4\.2, found 4\.1\.1"):
        env.check_packages()
    monkeypatch.setattr(metadata, "version", lambda name: "4.2.0" if name == "pyspark" else "14.0")
    with pytest.raises(env.SparkSetupError, match=r"pyarrow >= 15, found 14\.0"):
        env.check_packages()


def test_import_does_not_need_pyspark() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pyspark'] = None; sys.modules['pyarrow'] = None\n"
        "import nsqpy, nsqpy.spark, nsqpy.spark.options, nsqpy.spark.ingest\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.stdout.strip() == "ok", done.stderr
