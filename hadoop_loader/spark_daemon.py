"""Spark's Python daemon with its workers' imports done once, before it forks them.

Spark starts one Python daemon (``pyspark.daemon``) per kind of worker and forks a
worker from it for each task and each data source planning step (``lookup_data_sources``,
``create_data_source``, ``plan_data_source_read``). Each fork then imports its worker
module, pyarrow, numpy and this package's source: about half a second of CPU, paid by
every worker of every load (Spark kills a worker after a minute idle). pyspark imports
the worker module after the fork only because pandas, numpy and pyarrow may start
threads as they are imported, and a fork keeps none of them. Here they start none:
numpy's BLAS is asked for one thread (``OPENBLAS_NUM_THREADS``) and pyarrow's jemalloc
for no background thread (``JE_ARROW_MALLOC_CONF``), so this daemon imports it all once
and checks that it still has one thread before it serves; if anything started one, it
becomes the plain ``pyspark.daemon`` instead.

Used through ``spark.python.daemon.module`` (:data:`hadoop_loader.spark_session.SPARK_CONF`).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

PRELOAD = ("pyarrow", "numpy", "hadoop_loader.source")
"""Imported beside the worker module Spark names (``sys.argv[1]``)."""


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: no way to tell, so no preloading
        return -1


def main() -> None:
    import contextlib
    import importlib

    worker = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") else "pyspark.worker"
    for name in (worker, *PRELOAD):
        with contextlib.suppress(Exception):  # the worker imports it again after the fork, and reports it
            importlib.import_module(name)
    if _threads() != 1:
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
