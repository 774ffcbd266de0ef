"""Audit comparison (pure) and data source option parsing."""

from __future__ import annotations

import datetime as dt

import pytest

from hadoop_loader.audit import (
    HOUR_MS,
    compare,
    expected_counts,
    hour_key,
    landed_counts,
    require_complete,
)
from hadoop_loader.errors import IncompleteError, LoaderConfigError
from hadoop_loader.manifest import Manifest
from hadoop_loader.options import parse_options

UTC = dt.UTC
H0 = 1_700_000_000_000 // HOUR_MS * HOUR_MS  # an hour start


def rec(topic, start, sent, acked, host="h1", stage="agent", window=60_000):
    return {
        "host": host,
        "topic": topic,
        "window_start": start,
        "window_end": start + window,
        "sent": sent,
        "acked": acked,
        "stage": stage,
    }


def test_expected_counts_sum_windows_of_an_hour_over_hosts():
    records = [
        rec("a", H0, 10, 9),
        rec("a", H0 + 60_000, 5, 5, host="h2"),
        rec("a", H0 + HOUR_MS, 7, 7),
        rec("b", H0, 1, 1),
        rec("a", H0, 100, 100, stage="mirror"),
        {"junk": 1},
        dict(rec("a", H0, 1, 1), window_start="x"),
    ]
    expected, used, skipped = expected_counts(records, "agent", "acked", UTC)
    assert expected == {
        ("a", hour_key(H0, UTC)): 14,
        ("a", hour_key(H0 + HOUR_MS, UTC)): 7,
        ("b", hour_key(H0, UTC)): 1,
    }
    assert used == 4 and skipped == 3


def test_compare_judges_settled_hours_only():
    h0, h1 = hour_key(H0, UTC), hour_key(H0 + HOUR_MS, UTC)
    expected = {("a", h0): 100, ("a", h1): 50, ("b", h0): 10}
    landed = {("a", h0): 99, ("a", h1): 10, ("c", h0): 5}
    report = compare(expected, landed, ["a", "b"], H0, H0 + HOUR_MS + 1, UTC, threshold=0.995)
    by = {(h.topic, h.hour): h for h in report.hours}
    assert set(by) == {("a", h0), ("a", h1), ("b", h0)}
    assert by[("a", h0)].completeness == 0.99 and by[("a", h0)].judged
    assert not by[("a", h1)].judged
    assert by[("b", h0)].landed == 0
    assert [(h.topic, h.hour) for h in report.failing()] == [("a", h0), ("b", h0)]
    with pytest.raises(IncompleteError, match="2 audited hour"):
        require_complete(report, 0.995)
    require_complete(report, 0.0)


def test_hour_keys_follow_the_time_zone():
    la = dt.timezone(dt.timedelta(hours=-8))
    assert hour_key(H0, UTC) != hour_key(H0, la)


def test_landed_counts_stop_at_old_manifests():
    def m(seq, committed, hours):
        return Manifest(seq, "r", 0, committed, "zk", hours={"a": hours})

    newest_first = [m(3, 300, {"x": 1}), m(2, 200, {"x": 2, "y": 4}), m(1, 100, {"x": 100})]
    assert landed_counts(newest_first, 150) == {("a", "x"): 3, ("a", "y"): 4}


def test_options_parse():
    o = parse_options(
        {
            "zk": "h:1/c",
            "topics": "a, b",
            "startingOffsets": "latest",
            "maxBytesPerPartition": "1048576",
            "decodeAgentRecords": "b",
        }
    )
    assert o.topics == ("a", "b") and o.decode == {"b"} and o.agent_columns
    assert o.max_bytes_per_partition == 1 << 20
    o = parse_options({"BROKERS": "h:1,h:2", "topics": "a", "decodeAgentRecords": "true"})
    assert o.endpoint.brokers == ("h:1", "h:2") and o.decode == {"a"}


@pytest.mark.parametrize(
    "options, name",
    [
        ({"topics": "a"}, "zk"),
        ({"zk": "h:1/c"}, "topics"),
        ({"zk": "h:1/c", "topics": "a", "maxBytesPerPartition": "0"}, "maxBytesPerPartition"),
        ({"zk": "h:1/c", "topics": "a", "onRetentionGap": "maybe"}, "onRetentionGap"),
        ({"zk": "h:1/c", "topics": "a", "decodeAgentRecords": "z"}, "decodeAgentRecords"),
        ({"zk": "h:1/c", "topics": "a", "endingOffsets": "{"}, "endingOffsets"),
        ({"zk": "h:1/c", "topics": "a", "colour": "red"}, "colour"),
        ({"zk": "h:1/c", "topics": "a/b"}, "topics"),
        # PySpark 4.1 (the Iceberg pin) has no admission control for Python sources
        ({"zk": "h:1/c", "topics": "a", "maxBytesPerTrigger": "65536"}, "maxBytesPerTrigger"),
    ],
)
def test_bad_options_name_the_option(options, name):
    with pytest.raises(LoaderConfigError, match=name):
        parse_options(options)


def test_executor_errors_come_back_as_loader_errors():
    from hadoop_loader.errors import RetentionGapError, SparkJobError, error_from_spark

    text = (
        "Job aborted due to stage failure: Task 3 failed ...\n"
        '  File "/work/main/hadoop_loader/fetching.py", line 88, in _fetch\n'
        "hadoop_loader.errors.RetentionGapError: retention gap while reading: a/0: offsets "
        "[0, 100) (100 bytes) were deleted by retention after the run was planned; rerun\n"
        "\tat org.apache.spark.api.python..."
    )
    error = error_from_spark("the Spark job writing run 3", text)
    assert isinstance(error, RetentionGapError)
    assert str(error).startswith("retention gap while reading: a/0: offsets [0, 100)")
    other = error_from_spark("the Spark job writing run 3", "java.lang.OutOfMemoryError: x\nmore")
    assert isinstance(other, SparkJobError)
    assert str(other) == "the Spark job writing run 3 failed: java.lang.OutOfMemoryError: x"
    py4j = (
        "An error occurred while calling o559.parquet.\n: org.apache.spark.SparkException: [TASK_WRITE_FAILED]\n"
        "\tat org.apache.spark...\nCaused by: org.apache.spark.SparkException: Job aborted\n"
        "Caused by: org.apache.hadoop.ipc.RemoteException(java.io.IOException): File /wh/x could only be "
        "written to 0 of the 1 minReplication nodes.\n\tat org.apache.hadoop..."
    )
    hdfs = error_from_spark("the Spark job writing run 3", py4j)
    assert str(hdfs) == (
        "the Spark job writing run 3 failed: org.apache.hadoop.ipc.RemoteException(java.io.IOException): "
        "File /wh/x could only be written to 0 of the 1 minReplication nodes."
    )
    # no "Caused by:": the Java exception is the line after py4j's header
    lost = error_from_spark(
        "reading the Iceberg tables' last loads",
        "An error occurred while calling o307.refresh.\n: org.apache.iceberg.exceptions.ValidationException: "
        "Metadata file for version 4 is missing\n\tat org.apache.iceberg.hadoop.HadoopTableOperations...",
    )
    assert str(lost) == (
        "reading the Iceberg tables' last loads failed: org.apache.iceberg.exceptions.ValidationException: "
        "Metadata file for version 4 is missing"
    )


class _NoTopicConsumer:
    """A consumer whose cluster has no such topic, or cannot be reached."""

    def __init__(self, error: Exception):
        self.error = error

    def partitions(self, topic):
        raise self.error


def test_missing_audit_topic_is_nothing_to_audit_not_an_error():
    from broker.common.errors import UnknownTopicOrPartitionError
    from hadoop_loader.audit import read_audit_records

    consumer = _NoTopicConsumer(UnknownTopicOrPartitionError("unknown topic '_audit'"))
    assert read_audit_records(consumer, "_audit", 0) is None


def test_unreachable_cluster_while_reading_the_audit_topic_is_an_error():
    from broker.common.errors import BrokerNotAvailableError
    from hadoop_loader.audit import read_audit_records
    from hadoop_loader.errors import SourceError

    consumer = _NoTopicConsumer(BrokerNotAvailableError("no broker at 127.0.0.1:1"))
    with pytest.raises(SourceError, match="reading the audit topic '_audit'"):
        read_audit_records(consumer, "_audit", 0)


def test_summary_says_there_is_nothing_to_audit_without_the_topic():
    import io

    from hadoop_loader.audit import AuditReport
    from hadoop_loader.summary import print_audit

    out = io.StringIO()
    print_audit(AuditReport(missing_topic="_audit"), out)
    assert out.getvalue().startswith("audit: topic '_audit' does not exist yet")
    assert "nothing to audit" in out.getvalue()
