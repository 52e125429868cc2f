"""Can Spark run here? pyspark/pyarrow versions and Java, checked with clear messages.

Nothing here imports pyspark: these checks must work (and explain) when it is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from typing import Final

#: latestOffset(start, limit), getDefaultReadLimit and SupportsTriggerAvailableNow are 4.2.0.
MIN_PYSPARK: Final = (4, 2)
MIN_PYARROW: Final = (15,)
MIN_JAVA: Final = 17
INSTALL_HINT: Final = "pip install 'nsqpy[spark]'  (pyspark>=4.2,<5, pandas>=2.2,<3, pyarrow>=15)"

_JAVA_VERSION: Final = re.compile(r'version "(\d+)(?:\.(\d+))?')


class SparkSetupError(RuntimeError):
    """Spark cannot run: a missing or too old pyspark, pyarrow or Java."""


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric parts of a version ("4.3.0.dev1" -> (4, 3, 0))."""
    parts = []
    for piece in text.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def check_packages() -> None:
    """pyspark >= 4.2 and pyarrow >= 15 are installed, or SparkSetupError says what to do."""
    for name, minimum in (("pyspark", MIN_PYSPARK), ("pyarrow", MIN_PYARROW)):
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise SparkSetupError(f"nsqpy.spark needs {name}, which is not installed: "
                                  f"{INSTALL_HINT}") from None
        if version_tuple(found) < minimum:
            want = ".".join(map(str, minimum))
            raise SparkSetupError(f"nsqpy.spark needs {name} >= {want}, found {found}: "
                                  f"{INSTALL_HINT}")


def java_major(version_output: str) -> int | None:
    """The major version from ``java -version`` output ("1.8.0_392" -> 8, "17.0.15" -> 17)."""
    match = _JAVA_VERSION.search(version_output)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:
        return int(match.group(2))
    return major


def find_java(env: Mapping[str, str]) -> str | None:
    """The java Spark's launcher would run: $JAVA_HOME/bin/java, else java on PATH."""
    home = env.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java", path=env.get("PATH"))


def check_java(env: Mapping[str, str] | None = None) -> int:
    """Java >= 17 is available (returns its major version), or SparkSetupError explains."""
    env = os.environ if env is None else env
    java = find_java(env)
    where = f"JAVA_HOME={env['JAVA_HOME']}" if env.get("JAVA_HOME") else "PATH"
    if java is None:
        raise SparkSetupError(
            f"Spark needs Java {MIN_JAVA} or newer, but no java was found ({where}). Install "
            f"a JDK {MIN_JAVA}+ (e.g. apt-get install openjdk-{MIN_JAVA}-jre-headless) or set "
            "JAVA_HOME"
        )
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"cannot run {java} -version: {exc}") from None
    major = java_major(done.stderr + done.stdout)
    if major is None or major < MIN_JAVA:
        found = "an unknown version" if major is None else f"Java {major}"
        raise SparkSetupError(
            f"Spark needs Java {MIN_JAVA} or newer; {java} ({where}) is {found}. Install a JDK "
            f"{MIN_JAVA}+ or point JAVA_HOME at one"
        )
    return major
