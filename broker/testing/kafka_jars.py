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

MirrorMaker 2 has a folder of its own, ``apache-kafka-mirrormaker2-<version>/``, from
``benchmarks/peers/apache-kafka/mirrormaker2/pom.xml`` by the same script: Maven Central
has no MirrorMaker for the clients' version, and it does not run on them (that pom says
why). The same functions take ``MIRRORMAKER2`` for it.
"""

from __future__ import annotations

from pathlib import Path

from broker.testing.jars import REPO, RESOLVED, JarSet

KAFKA_VERSION = "4.4.0"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/pom.xml."""
MIRRORMAKER2_VERSION = "4.3.1"
"""Keep in step with ``kafka.version`` in benchmarks/peers/apache-kafka/mirrormaker2/pom.xml."""
KAFKA = f"apache-kafka-{KAFKA_VERSION}"
"""The folder of the broker, the clients and the tools."""
MIRRORMAKER2 = f"apache-kafka-mirrormaker2-{MIRRORMAKER2_VERSION}"
"""The folder of MirrorMaker 2 and the clients and Connect runtime it runs on."""

POM = REPO / "benchmarks" / "peers" / "apache-kafka" / "pom.xml"
INSTALL_SCRIPT = REPO / "scripts" / "install-kafka-jars.sh"
JARS = JarSet("apache-kafka", "Apache Kafka", KAFKA_VERSION)
_SETS = {
    KAFKA: JARS,
    MIRRORMAKER2: JarSet("apache-kafka-mirrormaker2", "Apache Kafka's MirrorMaker 2", MIRRORMAKER2_VERSION),
}


def jar_dir(folder: str = KAFKA) -> Path:
    """The folder of Apache Kafka's jars (complete when :func:`resolved`)."""
    return _SETS[folder].jar_dir()


def resolved(folder: str = KAFKA) -> bool:
    """Every jar is in :func:`jar_dir` (the install script finished)."""
    return _SETS[folder].resolved()


def classpath(folder: str = KAFKA) -> str:
    """Every jar of :func:`jar_dir`, as one ``-cp`` entry (the JVM expands the ``*``)."""
    return _SETS[folder].classpath()


def missing_reason(folder: str = KAFKA) -> str:
    """Why the jars are not there, in one line (see :meth:`JarSet.missing_reason`)."""
    return _SETS[folder].missing_reason()


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
