"""How to read the demo's lake: the query script it writes and the report's lines about it.

With ``--lake file`` the lake is Parquet under ``<workdir>/warehouse`` (read with
``spark.read.parquet``); by default it is an Iceberg table per topic on the demo's HDFS,
read through Iceberg's Spark catalog over the warehouse (a Hadoop catalog: no metastore,
just the warehouse's path), with Spark SQL. Both scripts are plain PySpark, so a user can
copy them.
"""

from __future__ import annotations

from pathlib import Path

from demo.lake import CATALOG, HdfsLake


def _pick(topics: list[str]) -> tuple[str, str]:
    """(the application-log topic, the access-log topic) the example queries read."""
    return next((t for t in topics if "app" in t), topics[0]), next((t for t in topics if "access" in t), topics[-1])


def sql_example(namespace: str, topic: str) -> str:
    """The report's Spark SQL query: records per host of one topic's table."""
    return f"SELECT host, count(*) AS records FROM {CATALOG}.{namespace}.`{topic}` GROUP BY host ORDER BY host"


def write_parquet_query(workdir: Path, output: Path, topics: list[str]) -> Path:
    """A small PySpark script reading the landed Parquet (printed in the report)."""
    app = next((t for t in topics if "app" in t), topics[0])
    access = next((t for t in topics if "access" in t), topics[-1])
    path = workdir / "query.py"
    path.write_text(f'''"""Read the demo's Parquet output with Spark (written by `logferry demo`)."""
from pyspark.sql import SparkSession, functions as F

spark = (SparkSession.builder.master("local[2]").appName("logferry-demo-query")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
root = "{output.as_uri()}"

logs = spark.read.parquet(root)              # every topic; columns topic, dt, hr, host, line, ...
logs.groupBy("topic", "host").count().orderBy("topic", "host").show()

app = spark.read.parquet(f"{{root}}/topic={app}")
traces = app.filter(F.col("line").contains("\\n\\tat "))   # records with a Java stack trace
(traces.select(F.get(F.split("line", "\\n"), 1).alias("exception"))
       .groupBy("exception").count().orderBy(F.desc("count")).show(truncate=False))

access = spark.read.parquet(f"{{root}}/topic={access}")
(access.select(F.regexp_extract("line", r'" (\\d{{3}}) ', 1).alias("status"))
       .groupBy("status").count().orderBy("status").show())
''')
    return path


def write_iceberg_query(workdir: Path, warehouse: str, namespace: str, topics: list[str], jar: Path) -> Path:
    """A small PySpark script reading the Iceberg tables with Spark SQL (printed in the report)."""
    app, access = _pick(topics)
    path = workdir / "query.py"
    selects = "\n    UNION ALL ".join(
        f"SELECT '{t}' AS topic, host, count(*) AS records FROM {CATALOG}.{namespace}.`{t}` GROUP BY host"
        for t in topics
    )
    path.write_text(f'''"""Read the demo's Iceberg tables with Spark SQL (written by `logferry demo`).

The tables live on the demo's HDFS, which stops with the demo: start it again first with
    logferry hdfs start --data-dir {workdir / "hdfs"}
(it keeps its ports: the tables' metadata names its files by hdfs:// URI).
"""
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[2]").appName("logferry-demo-query")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.jars", "{jar}")  # Apache Iceberg's Spark runtime
         .config("spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
         .config("spark.sql.catalog.{CATALOG}.type", "hadoop")  # Iceberg's Hadoop catalog: a path, no service
         .config("spark.sql.catalog.{CATALOG}.warehouse", "{warehouse}")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

spark.sql("SHOW TABLES IN {CATALOG}.{namespace}").show()
spark.sql("""
    {selects}
    ORDER BY topic, host""").show()

# records with a Java stack trace, by exception (the agent joined its lines into one record)
spark.sql("""
    SELECT split(line, '\\n')[1] AS exception, count(*) AS records
    FROM {CATALOG}.{namespace}.`{app}` WHERE line LIKE '%\\n\\tat %'
    GROUP BY 1 ORDER BY records DESC""").show(truncate=False)

# HTTP status codes of the access log
spark.sql("""
    SELECT regexp_extract(line, '" ([0-9]{{3}}) ', 1) AS status, count(*) AS records
    FROM {CATALOG}.{namespace}.`{access}` GROUP BY 1 ORDER BY 1""").show()

# the loads: one snapshot per load, its consumed offsets in the summary
spark.sql("""
    SELECT snapshot_id, committed_at, summary['logferry.load'] AS load, summary['added-records'] AS records
    FROM {CATALOG}.{namespace}.`{app}`.snapshots""").show(truncate=False)
''')
    return path


def iceberg_where(
    lake: HdfsLake, topics: list[str], files: dict[str, int], query: str, python: str, logferry: str, jar: Path
) -> list[str]:
    """The report's lines: each table's hdfs:// location, a Spark SQL query and how to run it."""
    assert lake.hdfs is not None
    catalog = f"spark.sql.catalog.{CATALOG}"
    example = sql_example(lake.namespace, topics[0])
    quoted = example.replace("`", "\\`")
    spark_home = spark_home_of(python)
    return [
        f"Iceberg tables (Iceberg's Hadoop catalog, warehouse {lake.warehouse}; one table per topic, "
        "partitioned by event hour):",
        *(f"  {lake.namespace}.{t}: {lake.table_location(t)}  ({files.get(t, 0)} data file(s))" for t in topics),
        f"HDFS: NameNode web UI http://{lake.hdfs.http_address}/, data and logs in {lake.data_dir} "
        f"(stopped with the demo; `{logferry} hdfs start --data-dir {lake.data_dir}` serves it again, same ports)",
        f"Spark SQL, the catalog '{CATALOG}' over the warehouse:",
        f"  {example}",
        f"  SPARK_HOME={spark_home} {spark_home}/bin/spark-sql --jars {jar} \\",
        "    --conf spark.sql.catalogImplementation=in-memory \\",
        f"    --conf {catalog}=org.apache.iceberg.spark.SparkCatalog --conf {catalog}.type=hadoop \\",
        f'    --conf {catalog}.warehouse={lake.warehouse} -e "{quoted}"',
        f"More queries (stack traces, HTTP statuses, the loads' snapshots):  {python} {query}",
    ]


def spark_home_of(python: str) -> str:
    """Where pyspark is installed (its ``bin/spark-sql`` wants it as ``SPARK_HOME``,
    else it looks for pyspark with the ``python3`` on PATH, not this interpreter);
    ``<python's dir>/..`` when it cannot be found."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return str(Path(python).parent.parent / "pyspark")
    return str(Path(spec.origin).parent)


def parquet_where(output_uri: str, files: dict[str, int], query: str, python: str) -> list[str]:
    """The report's lines for a Parquet lake (``--lake file``)."""
    return [
        f"Parquet files: {output_uri}",
        "  " + ", ".join(f"topic={t}: {n} file(s)" for t, n in files.items()),
        f"Read them with Spark:  {python} {query}",
    ]


__all__ = ["iceberg_where", "parquet_where", "sql_example", "write_iceberg_query", "write_parquet_query"]
