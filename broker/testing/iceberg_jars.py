"""Apache Iceberg's Spark runtime, as ``scripts/install-jars.sh apache-iceberg`` resolves it.

For what runs the loader with ``output.format = "iceberg"`` and cannot import the loader
(the demo, under the import contracts): where the one shaded jar is, to hand to Spark as
``spark.jars``. The loader keeps the same version as ``hadoop_loader.iceberg.
ICEBERG_VERSION`` (tests/loader/test_iceberg_units.py checks both against the pom).
"""

from __future__ import annotations

from pathlib import Path

from broker.testing.jars import JarSet

ICEBERG_VERSION = "1.12.0"
SPARK_MINOR = "4.1"
"""The Spark minor the runtime is built for: the pinned pyspark's."""
RUNTIME_JAR = f"iceberg-spark-runtime-{SPARK_MINOR}_2.13-{ICEBERG_VERSION}.jar"
JARS = JarSet("apache-iceberg", "Apache Iceberg's Spark runtime", ICEBERG_VERSION)
INSTALL_HINT = "run `make iceberg-jars` (scripts/install-jars.sh apache-iceberg)"


def runtime_jar() -> Path | None:
    """The runtime jar's path, or None when it has not been resolved."""
    jar = JARS.jar_dir() / RUNTIME_JAR
    return jar if JARS.resolved() and jar.is_file() else None


__all__ = ["ICEBERG_VERSION", "INSTALL_HINT", "JARS", "RUNTIME_JAR", "SPARK_MINOR", "runtime_jar"]
