"""The Hadoop loader: a Spark data source for logferry topics and the landing job.

* ``spark.read.format("logferry")`` / ``spark.readStream.format("logferry")``: the Python
  data source of :mod:`hadoop_loader.source` (register it with :func:`register`).
* ``logferry load --config etc/loader.toml``: the exactly-once landing job into Parquet
  partitioned by topic and event hour (:mod:`hadoop_loader.job`, commit protocol in
  :mod:`hadoop_loader.store`).

See docs/loader.md. Imports ``broker.client``, pyspark and pyarrow; never agent or mirror.
"""

from __future__ import annotations

from typing import Any

from hadoop_loader.errors import LoaderError

__all__ = ["LoaderError", "register"]


def register(spark: Any) -> None:
    """Register the ``logferry`` format on a SparkSession."""
    from hadoop_loader.source import LogferryDataSource

    spark.dataSource.register(LogferryDataSource)
