"""Where Apache Kafka's jars are, for whatever runs Kafka's own code next to logferry.

One folder of jars, resolved from Maven Central by ``scripts/install-kafka-jars.sh``
(``make kafka-jars``, a prerequisite of ``make test``) from
``benchmarks/peers/apache-kafka/pom.xml``: the broker the benchmarks compare against
(benchmarks/peers/apache_kafka.py) and the Java clients and tools the tests run against
the Kafka listener (tests/support/kafka_java.py) share it. The classpath is every jar of
the folder. It is ``benchmarks/.cache/apache-kafka-<version>/`` in the checkout
(git-ignored), or under ``$LOGFERRY_BENCH_CACHE``; the script writes ``.resolved`` in it
last, and when it cannot get the jars (no Maven, no Maven Central) it writes its one-line
reason next to it, ``apache-kafka-<version>.unavailable``, for the callers to show.
"""

from __future__ import annotations

import os
from pathlib import Path

KAFKA_VERSION = "4.4.0"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/pom.xml."""

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "benchmarks" / "peers" / "apache-kafka" / "pom.xml"
INSTALL_SCRIPT = REPO / "scripts" / "install-kafka-jars.sh"
RESOLVED = ".resolved"
"""Marker file the install script writes into the jar folder once every jar is there."""


def jar_dir() -> Path:
    """The folder of Apache Kafka's jars (complete when :func:`resolved`)."""
    root = os.environ.get("LOGFERRY_BENCH_CACHE") or str(REPO / "benchmarks" / ".cache")
    return Path(root) / f"apache-kafka-{KAFKA_VERSION}"


def resolved() -> bool:
    """Every jar is in :func:`jar_dir` (the install script finished)."""
    return (jar_dir() / RESOLVED).exists()


def classpath() -> str:
    """Every jar of :func:`jar_dir`, as one ``-cp`` entry (the JVM expands the ``*``)."""
    return str(jar_dir() / "*")


def missing_reason() -> str:
    """Why the jars are not there, in one line: the install script's own reason when it
    ran and failed, else that it has not run."""
    note = jar_dir().with_name(jar_dir().name + ".unavailable")
    if note.is_file():
        return f"no Apache Kafka {KAFKA_VERSION} jars: {note.read_text().strip()}"
    return f"no Apache Kafka {KAFKA_VERSION} jars in {jar_dir()}: run {INSTALL_SCRIPT} (make kafka-jars)"


__all__ = ["KAFKA_VERSION", "POM", "RESOLVED", "classpath", "jar_dir", "missing_reason", "resolved"]
