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


def build_session(config: SparkConfig, master: str | None = None,
                  timezone: str = "UTC") -> Any:
    """Get or create the SparkSession for a load run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.app_name)
    chosen = master or config.master
    if chosen is None and not SparkConf().contains("spark.master"):
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
    return builder.getOrCreate()
