"""Building the landing job's SparkSession.

Local mode by default; ``--master`` (or ``spark.master`` in the config) for a cluster,
and under ``spark-submit`` the master it was given. Python workers run the driver's
interpreter (``PYSPARK_PYTHON``), so executors import the same ``hadoop_loader`` and
``broker`` packages from the same virtualenv; on a cluster the virtualenv must exist at
the same path on every node, or be shipped with ``--archives`` (see docs/loader.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hadoop_loader.config import SparkConfig
from hadoop_loader.errors import SparkJobError


def build_session(config: SparkConfig, master: str | None = None, timezone: str = "UTC") -> Any:
    """Get or create the SparkSession for a load run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.app_name)
    chosen = master or config.master
    if chosen is None and not _submitted_with_master():
        chosen = "local[*]"
    if chosen is not None:
        builder = builder.master(chosen)
    if config.driver_memory:
        builder = builder.config("spark.driver.memory", config.driver_memory)
    builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    if sys.stderr.isatty() and "spark.ui.showConsoleProgress" not in config.conf:
        builder = builder.config("spark.ui.showConsoleProgress", "true")  # Spark's own bar
    builder = builder.config("spark.sql.session.timeZone", timezone)
    for key, value in config.conf.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # pyspark's own errors: the JVM did not start, a bad setting
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise SparkJobError(
            f"cannot start Spark (master {chosen or 'given by spark-submit'}): {first[:300]}; "
            "the JVM's own output, if any, is above (Java 17+ on PATH or JAVA_HOME? spark.* settings?)"
        ) from None


def _submitted_with_master() -> bool:
    """Whether spark-submit gave this driver a master.

    Under spark-submit the driver's settings live in the JVM that started Python; a
    ``SparkConf()`` made before the gateway is up sees none of them (the loader then
    ran in local mode on a cluster), so attach to the gateway first.
    """
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        return SparkConf().contains("spark.master")
    SparkContext._ensure_initialized()  # attaches to spark-submit's JVM
    return SparkConf().contains("spark.master")
