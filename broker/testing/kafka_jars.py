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

MirrorMaker 2 has a folder of its own, ``apache-kafka-mirrormaker2-<version>/``, from
``benchmarks/peers/apache-kafka/mirrormaker2/pom.xml`` by the same script: Maven Central
has no MirrorMaker for the clients' version, and it does not run on them (that pom says
why). The same functions take ``MIRRORMAKER2`` for it.
"""

from __future__ import annotations

import os
from pathlib import Path

KAFKA_VERSION = "4.4.0"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/pom.xml."""
MIRRORMAKER2_VERSION = "4.3.1"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/mirrormaker2/pom.xml."""
KAFKA = f"apache-kafka-{KAFKA_VERSION}"
"""The folder of the broker, the clients and the tools."""
MIRRORMAKER2 = f"apache-kafka-mirrormaker2-{MIRRORMAKER2_VERSION}"
"""The folder of MirrorMaker 2 and the clients and Connect runtime it runs on."""

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "benchmarks" / "peers" / "apache-kafka" / "pom.xml"
INSTALL_SCRIPT = REPO / "scripts" / "install-kafka-jars.sh"
RESOLVED = ".resolved"
"""Marker file the install script writes into the jar folder once every jar is there."""


def jar_dir(folder: str = KAFKA) -> Path:
    """The folder of Apache Kafka's jars (complete when :func:`resolved`)."""
    root = os.environ.get("LOGFERRY_BENCH_CACHE") or str(REPO / "benchmarks" / ".cache")
    return Path(root) / folder


def resolved(folder: str = KAFKA) -> bool:
    """Every jar is in :func:`jar_dir` (the install script finished)."""
    return (jar_dir(folder) / RESOLVED).exists()


def classpath(folder: str = KAFKA) -> str:
    """Every jar of :func:`jar_dir`, as one ``-cp`` entry (the JVM expands the ``*``)."""
    return str(jar_dir(folder) / "*")


def missing_reason(folder: str = KAFKA) -> str:
    """Why the jars are not there, in one line: the install script's own reason when it
    ran and failed, else that it has not run."""
    where = jar_dir(folder)
    note = where.with_name(where.name + ".unavailable")
    if note.is_file():
        return f"no {folder} jars: {note.read_text().strip()}"
    return f"no {folder} jars in {where}: run {INSTALL_SCRIPT} (make kafka-jars)"


__all__ = [
    "KAFKA",
    "KAFKA_VERSION",
    "MIRRORMAKER2",
    "MIRRORMAKER2_VERSION",
    "POM",
    "RESOLVED",
    "classpath",
    "jar_dir",
    "missing_reason",
    "resolved",
]
