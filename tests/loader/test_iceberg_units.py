"""The Iceberg output's decisions without a JVM: versions in step, the offsets in a
snapshot summary and the walk that finds them, config validation."""

from __future__ import annotations

import json
import re

import pytest

from broker.common.lake import STARTED_MS
from broker.testing.jars import REPO
from hadoop_loader.config import config_from_dict
from hadoop_loader.errors import Gap, LoaderConfigError, StateError
from hadoop_loader.iceberg import (
    DUPLICATE_HOURS,
    DUPLICATES,
    EXTENSIONS,
    ICEBERG_VERSION,
    IDENTITIES,
    LOAD,
    OFFSETS,
    RANGES,
    RUNTIME_JAR,
    SPARK_MINOR,
    SnapshotInfo,
    catalog_conf,
    catalog_name,
    identities_since,
    landed_state,
    session_settings,
    summary_properties,
    table_name,
)
from hadoop_loader.identity import IdentityRange


def test_runtime_version_is_the_poms_and_built_for_the_installed_spark():
    pom = (REPO / "scripts" / "jars" / "apache-iceberg" / "pom.xml").read_text()
    assert re.search(r"<iceberg.version>(.+)</iceberg.version>", pom).group(1) == ICEBERG_VERSION
    assert f"iceberg-spark-runtime-{SPARK_MINOR}_2.13" in pom
    import pyspark

    assert pyspark.__version__.startswith(SPARK_MINOR + "."), "the runtime is built for one Spark minor"
    # the demo's copy (it may not import the loader) names the same jar
    from broker.testing import iceberg_jars

    assert (iceberg_jars.ICEBERG_VERSION, iceberg_jars.RUNTIME_JAR) == (ICEBERG_VERSION, RUNTIME_JAR)


def test_summary_properties_carry_offsets_ranges_and_gaps():
    props = summary_properties(3, "r1", {1: 200, 0: 100}, [(1, 150, 200)], [Gap("t", 0, 0, 40)], "zk/x")
    assert props[LOAD] == "3" and json.loads(props[OFFSETS]) == {"0": 100, "1": 200}
    assert json.loads(props[RANGES]) == [[1, 150, 200]]
    assert json.loads(props["logferry.gaps"]) == [{"topic": "t", "partition": 0, "start": 0, "end": 40}]
    assert "logferry.gaps" not in summary_properties(1, "r", {}, [], [], "zk")
    # when the run started, for the console's landed tier (its hours are judged against it)
    assert summary_properties(1, "r", {}, [], [], "zk", started_ms=1_700_000_000_123)[STARTED_MS] == "1700000000123"
    assert STARTED_MS not in props


def test_dedup_state_rides_in_the_same_summary_as_the_offsets():
    ranges = [
        IdentityRange("t", "web-2", 7, 0, 900),
        IdentityRange("t", None, 3, 5, 5),
        IdentityRange("t", "a", 7, 1, 2),
    ]
    props = summary_properties(1, "r", {0: 10}, [(0, 0, 10)], [], "zk", ranges, 4)
    assert json.loads(props[IDENTITIES]) == [[None, 3, 5, 5], ["a", 7, 1, 2], ["web-2", 7, 0, 900]]
    assert props[DUPLICATES] == "4" and OFFSETS in props
    # dedup off: no dedup state at all (a later run with dedup on finds nothing to read)
    assert IDENTITIES not in summary_properties(1, "r", {0: 10}, [], [], "zk")
    assert json.loads(summary_properties(1, "r", {}, [], [], "zk", [], 0)[IDENTITIES]) == []
    # the copies per event hour (hours since the epoch), for the audit; none: no property
    hours = summary_properties(1, "r", {0: 10}, [], [], "zk", ranges, 4, {480_001: 3, 480_000: 1})
    assert json.loads(hours[DUPLICATE_HOURS]) == {"480000": 1, "480001": 3}
    assert DUPLICATE_HOURS not in props


def test_the_audit_counts_a_table_by_hour_of_the_loaders_time_zone():
    """Iceberg's hour partitions (UTC hours since the epoch) become the audit's hour keys
    in ``load.timezone``; duplicates come from the landing snapshots' summaries."""
    import zoneinfo

    from hadoop_loader.audit import snapshot_duplicates, table_hours

    utc, paris = zoneinfo.ZoneInfo("UTC"), zoneinfo.ZoneInfo("Europe/Paris")
    h = 1_709_251_200_000 // 3_600_000  # 2024-03-01T00 UTC
    assert table_hours("t", {h: 5, h + 1: 7}, utc) == {("t", "2024-03-01T00"): 5, ("t", "2024-03-01T01"): 7}
    assert table_hours("t", {h: 5}, paris) == {("t", "2024-03-01T01"): 5}
    snaps = [
        SnapshotInfo(3, 2, {DUPLICATES: "4", DUPLICATE_HOURS: json.dumps({str(h): 3, str(h + 1): 1})}),
        SnapshotInfo(2, 1, {"operation": "replace"}),  # a compaction: no dedup state
        SnapshotInfo(1, None, {DUPLICATES: "2", DUPLICATE_HOURS: json.dumps({str(h): 2})}),
        SnapshotInfo(0, None, {DUPLICATES: "9"}),  # a load from before the hours were kept
    ]
    dups, unplaced = snapshot_duplicates("t", snaps, utc)
    assert dups == {("t", "2024-03-01T00"): 5, ("t", "2024-03-01T01"): 1} and unplaced == 9


def test_the_identity_walk_reads_the_loads_of_the_last_hours_through_compactions():
    def ids(*ranges: list) -> dict[str, str]:
        return {IDENTITIES: json.dumps(list(ranges)), OFFSETS: "{}"}

    history = {
        1: snap(1, None, **ids(["h", 1, 0, 100])),  # too old: before since_ms
        2: snap(2, 1, **ids(["h", 1, 101, 300], ["h", 2, 0, 50])),
        3: snap(3, 2, **{OFFSETS: "{}"}),  # a load with dedup off
        4: snap(4, 3, operation="replace"),  # a compaction
        5: snap(5, 4, **ids(["h", 1, 250, 400], [None, 9, 7, 7])),
    }
    found = identities_since("tbl", "t", history[5], history.get, since_ms=2000)
    assert found == [
        IdentityRange("t", None, 9, 7, 7),
        IdentityRange("t", "h", 1, 101, 400),  # overlapping ranges of one file generation, merged
        IdentityRange("t", "h", 2, 0, 50),
    ]
    assert identities_since("tbl", "t", history[5], {5: history[5]}.get, 0) == [  # older snapshots expired
        IdentityRange("t", None, 9, 7, 7),
        IdentityRange("t", "h", 1, 250, 400),
    ]
    assert identities_since("tbl", "t", None, history.get, 0) == []  # a new table
    with pytest.raises(StateError, match=f"snapshot 6 has an unreadable {IDENTITIES}"):
        identities_since("tbl", "t", snap(6, None, **{IDENTITIES: '[["h", 1]]'}), history.get, 0)


def test_dedup_is_allowed_with_iceberg():
    c = config(output={"format": "iceberg"}, dedup={"enabled": True}, source={"decode_agent_records": True})
    assert c.dedup.enabled and c.output.format == "iceberg"


def snap(i: int, parent: int | None, **summary: str) -> SnapshotInfo:
    return SnapshotInfo(i, parent, summary, i * 1000)


def test_the_walk_passes_compactions_and_stops_at_the_newest_landing_snapshot():
    history = {
        1: snap(1, None, **{OFFSETS: '{"0": 10}', LOAD: "1"}),
        2: snap(2, 1, **{OFFSETS: '{"0": 20}', LOAD: "2"}),
        3: snap(3, 2, operation="replace"),  # a compaction: no offsets
    }
    state, found = landed_state("t", history[3], history.get)
    assert state.offsets == {0: 20} and state.load == 2 and state.snapshot_id == 2 and found == history[2]
    assert landed_state("t", None, history.get)[0].load == 0  # a new table


def test_a_history_without_offsets_is_an_error_not_a_fresh_start():
    expired = {3: snap(3, 2, operation="replace")}  # its parent (a landing snapshot) expired
    with pytest.raises(StateError, match="none in its current history carries logferry's offsets"):
        landed_state("t", expired[3], expired.get)
    with pytest.raises(StateError, match="unreadable"):
        landed_state("t", snap(1, None, **{OFFSETS: "{"}), {}.get)


def test_one_catalog_per_warehouse_and_quoted_names():
    a, b = catalog_name("file:///a"), catalog_name("hdfs://nn:8020/a")
    assert a != b and a == catalog_name("file:///a") and re.fullmatch(r"[a-z0-9_]+", a)
    assert catalog_conf("file:///a")[f"spark.sql.catalog.{a}.warehouse"] == "file:///a"
    assert table_name("file:///a", "logferry", "app-log") == f"{a}.`logferry`.`app-log`"
    assert session_settings({"spark.sql.extensions": "x.Y"})["spark.sql.extensions"] == f"x.Y,{EXTENSIONS}"
    assert session_settings({})["spark.sql.extensions"] == EXTENSIONS


def config(**sections: dict):
    data = {"source": {"zk": "h:1/c", "topics": ["t"]}, "output": {"uri": "file:///tmp/wh"}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return config_from_dict(data, "loader.toml")


@pytest.mark.parametrize(
    "sections, key",
    [
        ({"output": {"format": "iceburg"}}, "output.format"),
        ({"output": {"format": "iceberg", "namespace": "a-b"}}, "output.namespace"),
        ({"output": {"format": "iceberg"}, "dedup": {"enabled": True}}, "dedup.enabled"),  # needs decoded records
        ({"maintenance": {"keep_snapshots": 2}}, "maintenance"),  # Parquet has nothing to maintain
        ({"output": {"format": "iceberg"}, "maintenance": {"keep_snapshots": 0}}, "maintenance.keep_snapshots"),
        # Iceberg's procedure refuses less: a younger file may belong to a write in flight
        ({"output": {"format": "iceberg"}, "maintenance": {"orphan_after_hours": 1}}, "maintenance.orphan_after_hours"),
        # the table's writer gives one file per hour and task, or per hour after the shuffle
        ({"output": {"format": "iceberg", "files_per_hour": 2}}, "output.files_per_hour"),
    ],
)
def test_bad_iceberg_config_names_the_key(sections, key):
    with pytest.raises(LoaderConfigError) as info:
        config(**sections)
    assert str(info.value).startswith(f"loader.toml: {key}:"), str(info.value)


def test_iceberg_config_defaults():
    c = config(output={"format": "iceberg"})
    assert c.output.format == "iceberg" and c.output.namespace == "logferry"
    assert c.maintenance.expire_after_hours == 168 and c.maintenance.orphan_after_hours == 72
    assert config().output.format == "parquet"


def test_a_session_without_the_runtime_is_one_line_saying_how_to_get_it():
    """py4j answers a class it cannot load with a JavaPackage (a JavaClass when it can)."""
    from types import SimpleNamespace

    from hadoop_loader.iceberg import IcebergRuntimeError, check_runtime

    class JavaPackage:
        pass

    class JavaClass:
        pass

    def session(found: object) -> SimpleNamespace:
        spark = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(iceberg=SimpleNamespace())))
        spark.org.apache.iceberg.spark = SimpleNamespace(SparkCatalog=found)
        return SimpleNamespace(_jvm=spark)

    with pytest.raises(IcebergRuntimeError, match="make iceberg-jars") as info:
        check_runtime(session(JavaPackage()))
    assert "\n" not in str(info.value) and info.value.exit_code == 2
    check_runtime(session(JavaClass()))
