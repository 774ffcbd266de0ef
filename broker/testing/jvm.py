"""JVM options for the short-lived JVMs of tests, benchmarks and the demo.

ZooKeeper test servers and Spark jobs of a few seconds to a few minutes spend much of
their CPU compiling: C2, the optimising JIT, compiles hot methods again after C1 did,
and the parallel GC keeps a thread per core. On a 2-core machine running a test suite
that is CPU taken from everything else. Measured with ``tests/loader/test_load_
integration.py`` (7 tests, one Spark session): the session JVM used 72 s of CPU with
the defaults, 36 s with these options, and the tests took 65 s instead of 75 s; the
ZooKeeper of ``tests/groups/test_group_api.py`` 2.6 s instead of 4.0 s.

A Spark driver JVM also loads and verifies some ten thousand classes before it runs
anything. A class archive (the JVM's application class-data sharing, CDS) holds them
already parsed: the JVM maps it and skips that work. :func:`spark_java_options` adds
Spark's archive when it has been built (:mod:`broker.testing.class_archive`, run by
``make``); a Spark session that starts and writes a little Parquet used 19 s of CPU
without it and 9 s with it. The archive is named by a fingerprint of the JVM and of
Spark's jars, so an upgrade of either is a new name, never a stale archive.

A long-running production JVM wants the defaults: C2's code pays off over hours.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

QUICK_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""C1 only, and the serial garbage collector."""

QUICK_JVM_OPTIONS_LINE = " ".join(QUICK_JVM_OPTIONS)
"""The same, as one ``extraJavaOptions`` value."""

CACHE_ENV = "LOGFERRY_JVM_CACHE"
"""Where class archives live: this variable, else ``$XDG_CACHE_HOME/logferry/jvm``
(``~/.cache/logferry/jvm``). Outside any checkout: nothing to commit by mistake."""


def java_executable(env: Mapping[str, str] | None = None) -> Path | None:
    """The ``java`` a launcher runs: ``$JAVA_HOME/bin/java`` when set, else the one on
    PATH (the rule of Spark's ``spark-class`` and of the ZooKeeper harness); None when
    there is none."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("java", path=env.get("PATH"))
    return None if found is None else Path(found)


_JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def parse_java_major(text: str) -> int | None:
    """Major version from ``java -version`` output (``"1.8.0_292"`` is 8), or None."""
    match = _JAVA_VERSION_RE.search(text)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2) is not None:  # the pre-Java-9 scheme: 1.<major>
        major = int(match.group(2))
    return major


@functools.lru_cache(maxsize=8)
def java_major(java: Path) -> int | None:
    """Run ``java -version`` once per executable: its major version, or None when it
    cannot run or says something else."""
    try:
        result = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_major(result.stderr + result.stdout)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory of class archives (see :data:`CACHE_ENV`)."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "logferry" / "jvm"


def spark_jars_dir() -> Path | None:
    """pyspark's ``jars`` directory (the driver's classpath), found without importing
    pyspark; None when pyspark is not installed."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def spark_archive_path(env: Mapping[str, str] | None = None) -> Path | None:
    """Where Spark's class archive for this JVM and these jars is (built or not); None
    without Java or pyspark."""
    java, jars = java_executable(env), spark_jars_dir()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    for part in _jvm_fingerprint(java.resolve()):
        digest.update(part.encode())
    for jar in sorted(jars.iterdir()):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return cache_dir(env) / f"spark-{digest.hexdigest()[:16]}.jsa"


def _jvm_fingerprint(java: Path) -> list[str]:
    """The JVM's path and its libjvm's size and time: a rebuilt JDK changes them."""
    parts = [f"{java}\n"]
    for libjvm in sorted(java.parent.parent.glob("lib/*/libjvm.so")):
        stat = libjvm.stat()
        parts.append(f"{libjvm}:{stat.st_size}:{stat.st_mtime_ns}\n")
    return parts


def spark_java_options(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """:data:`QUICK_JVM_OPTIONS`, plus Spark's class archive when it is built."""
    archive = spark_archive_path(env)
    if archive is None or not archive.is_file():
        return QUICK_JVM_OPTIONS
    return (*QUICK_JVM_OPTIONS, f"-XX:SharedArchiveFile={archive}")


def spark_java_options_line(env: Mapping[str, str] | None = None) -> str:
    """The same, as one ``spark.driver.extraJavaOptions`` value."""
    return " ".join(spark_java_options(env))


__all__ = [
    "CACHE_ENV",
    "QUICK_JVM_OPTIONS",
    "QUICK_JVM_OPTIONS_LINE",
    "cache_dir",
    "java_executable",
    "java_major",
    "parse_java_major",
    "spark_archive_path",
    "spark_jars_dir",
    "spark_java_options",
    "spark_java_options_line",
]
