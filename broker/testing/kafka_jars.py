"""Where Apache Kafka's jars are, for whatever runs Kafka's own code next to logferry.

One folder of jars (a :class:`broker.testing.jars.JarSet`), resolved from Maven Central by
``scripts/install-kafka-jars.sh``
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

from pathlib import Path

from broker.testing.jars import REPO, RESOLVED, JarSet

KAFKA_VERSION = "4.4.0"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/pom.xml."""

POM = REPO / "benchmarks" / "peers" / "apache-kafka" / "pom.xml"
INSTALL_SCRIPT = REPO / "scripts" / "install-kafka-jars.sh"
JARS = JarSet("apache-kafka", "Apache Kafka", KAFKA_VERSION)


def jar_dir() -> Path:
    """The folder of Apache Kafka's jars (complete when :func:`resolved`)."""
    return JARS.jar_dir()


def resolved() -> bool:
    """Every jar is in :func:`jar_dir` (the install script finished)."""
    return JARS.resolved()


def classpath() -> str:
    """Every jar of :func:`jar_dir`, as one ``-cp`` entry (the JVM expands the ``*``)."""
    return JARS.classpath()


def missing_reason() -> str:
    """Why the jars are not there, in one line (see :meth:`JarSet.missing_reason`)."""
    return JARS.missing_reason()


__all__ = ["KAFKA_VERSION", "POM", "RESOLVED", "classpath", "jar_dir", "missing_reason", "resolved"]
