"""The console's landed tier of an Iceberg lake (console/iceberg_tables.py, console/landed.py,
console/lake_files.py, broker/common/webhdfs.py), without a JVM.

The tables here are small fixtures written with pyiceberg's own Avro writers (manifests,
a manifest list) and metadata JSON as the Hadoop catalog lays it out
(``<warehouse>/<namespace>/<table>/metadata/vN.metadata.json`` and ``version-hint.text``):
a table loaded twice, then compacted (the rewritten files DELETED, the new one ADDED,
the untouched one EXISTING), its first snapshot expired.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.common.errors import ConfigError
from broker.common.lake import iceberg_hour_key, summary_duplicates
from broker.common.webhdfs import WebHdfs
from console.config import parse_config
from console.iceberg_tables import (
    EntryRow,
    current_history,
    history_facts,
    hour_positions,
    live_rows,
    newest_metadata,
)
from console.lake_files import HdfsFiles, LocalFiles, lake_files, local_path
from console.landed import LakeReader

pytest.importorskip("pyiceberg.manifest")

H0 = 474_792  # 2024-03-01T00:00Z in hours since the epoch (Iceberg's hours transform)
HOUR_MS = 3_600_000
T0 = H0 * HOUR_MS
PARIS = zoneinfo.ZoneInfo("Europe/Paris")
EXISTING, ADDED, DELETED = 0, 1, 2
SPEC = {"spec-id": 0, "fields": [{"name": "timestamp_hour", "transform": "hour", "source-id": 4, "field-id": 1000}]}


# -- the sans-IO parts --------------------------------------------------------------------------


def test_iceberg_hours_are_named_in_the_lakes_time_zone():
    assert iceberg_hour_key(H0, dt.UTC) == "2024-03-01T00"
    assert iceberg_hour_key(H0, PARIS) == "2024-03-01T01"  # UTC+1 in March
    assert iceberg_hour_key(H0 + 23, PARIS) == "2024-03-02T00"
    assert iceberg_hour_key(H0 + 24 * 30, PARIS) == "2024-03-31T01"
    assert iceberg_hour_key(H0 + 24 * 30 + 1, PARIS) == "2024-03-31T03"  # the clocks go forward: no 02


def test_live_rows_count_added_and_existing_files_never_deleted_ones():
    entries = [
        EntryRow(ADDED, 100, (H0,)),
        EntryRow(EXISTING, 40, (H0,)),
        EntryRow(DELETED, 70, (H0 + 1,)),  # a compaction's rewritten file: its rows are in an ADDED one
        EntryRow(ADDED, 70, (H0 + 1,)),
        EntryRow(ADDED, 5, (None,)),  # no timestamp: no event hour, as the loader's audit counts
    ]
    assert live_rows(entries, 0) == {H0: 140, H0 + 1: 70}
    assert live_rows([EntryRow(ADDED, 3, ("a", H0))], 1) == {H0: 3}
    assert live_rows(entries, None) == {}


def test_the_hour_field_of_each_partition_spec():
    two = {"spec-id": 1, "fields": [{"transform": "identity"}, {"transform": "hour"}]}
    assert hour_positions({"partition-specs": [SPEC, two, {"spec-id": 2, "fields": []}]}) == {0: 0, 1: 1, 2: None}
    assert hour_positions({"partition-spec": [{"transform": "hour"}]}) == {0: 0}  # format version 1


def summary(run: str | None, load: int = 0, started: int = 0, **more: str) -> dict[str, str]:
    out = {"operation": "append" if run else "replace", **more}
    if run:
        out |= {"logferry.run-id": run, "logferry.load": str(load), "logferry.started-ms": str(started)}
    return out


def test_history_runs_times_and_duplicates_from_the_landing_snapshots():
    history = [
        {"snapshot-id": 3, "timestamp-ms": T0 + 9_000, "summary": summary(None)},  # a compaction
        {
            "snapshot-id": 2,
            "timestamp-ms": T0 + 5_000,
            "summary": summary("r2", 2, T0 + 4_000, **{"logferry.duplicate-hours": json.dumps({str(H0): 4})}),
        },
        {
            "snapshot-id": 1,
            "timestamp-ms": T0 + 2_000,
            "summary": summary("r1", 1, T0 + 1_000, **{"logferry.duplicates": "7"}),  # before duplicate-hours
        },
    ]
    facts = history_facts(history)
    assert facts.duplicates == {H0: 4} and facts.unplaced == 7 and facts.runs == {"r1", "r2"}
    # the last commit is the last load's, not the compaction's
    assert (facts.last_committed_ms, facts.last_started_ms, facts.loads, facts.bad) == (T0 + 5_000, T0 + 4_000, 2, ())
    bad = history_facts([{"snapshot-id": 9, "summary": summary("r", 1, **{"logferry.duplicate-hours": "[1"})}])
    assert bad.runs == {"r"} and bad.bad and "snapshot 9" in bad.bad[0] and "duplicate-hours" in bad.bad[0]
    with pytest.raises(ValueError, match="unreadable"):
        summary_duplicates({"logferry.duplicate-hours": "{}x"})


def test_the_current_history_walks_parents_while_they_are_kept():
    meta = {
        "current-snapshot-id": 4,
        "snapshots": [
            {"snapshot-id": 2, "parent-snapshot-id": 1},  # its parent expired
            {"snapshot-id": 3, "parent-snapshot-id": 2},  # rolled back: not in the current history
            {"snapshot-id": 4, "parent-snapshot-id": 2},
        ],
    }
    assert [s["snapshot-id"] for s in current_history(meta)] == [4, 2]
    assert current_history({"current-snapshot-id": -1, "snapshots": []}) == []


def test_the_newest_metadata_file_of_a_folder():
    names = ["v9.metadata.json", "v10.gz.metadata.json", "version-hint.text", "snap-1.avro", "x-m0.avro"]
    assert newest_metadata(names) == "v10.gz.metadata.json" and newest_metadata(["snap-1.avro"]) is None


def test_locations_of_local_and_hdfs_lakes():
    assert local_path("file:/data/lake/x") == local_path("file:///data/lake/x") == Path("/data/lake/x")
    assert HdfsFiles.path("hdfs://nn:8020/w/t/metadata/v1.metadata.json") == "/w/t/metadata/v1.metadata.json"
    files = lake_files("hdfs://namenode:8020/w")
    assert isinstance(files, HdfsFiles) and files.webhdfs.base == "http://namenode:9870"
    assert lake_files("hdfs://nn:8020/w", "http://nn:50070/").webhdfs.base == "http://nn:50070"  # type: ignore[attr-defined]
    assert isinstance(lake_files("/data/lake"), LocalFiles)
    with pytest.raises(OSError, match="not an hdfs:// location"):
        HdfsFiles.path("file:/tmp/x")


# -- a table on disk ----------------------------------------------------------------------------


class Table:
    """An Iceberg table of the Hadoop catalog in ``<warehouse>/<namespace>/<name>``,
    written piece by piece with pyiceberg's Avro writers."""

    def __init__(self, warehouse: Path, name: str = "app", topic: str | None = "app", namespace: str = "logferry"):
        self.root = warehouse / namespace / name
        self.meta = self.root / "metadata"
        self.meta.mkdir(parents=True)
        self.topic = topic
        self.snapshots: list[dict] = []
        self.manifests: list = []
        """The current snapshot's."""
        self.version = 0

    def manifest(self, name: str, entries: list[tuple[int, int, int]], snapshot_id: int) -> object:
        """A data manifest of ``(status, record_count, hour)`` entries, written by ``snapshot_id``."""
        from pyiceberg.io.fsspec import FsspecFileIO
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, write_manifest
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import HourTransform
        from pyiceberg.typedef import Record
        from pyiceberg.types import LongType, NestedField, TimestamptzType

        schema = Schema(
            NestedField(1, "offset", LongType(), False), NestedField(4, "timestamp", TimestamptzType(), False)
        )
        spec = PartitionSpec(PartitionField(4, 1000, HourTransform(), "timestamp_hour"), spec_id=0)
        path = f"file:{self.meta}/{name}.avro"  # as Hadoop names local files: file:/...
        with write_manifest(2, spec, schema, FsspecFileIO({}).new_output(path), snapshot_id, "null") as writer:
            for i, (status, rows, hour) in enumerate(entries):
                data = DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=f"file:{self.root}/data/{name}-{i}.parquet",
                    file_format=FileFormat.PARQUET,
                    partition=Record(hour),
                    record_count=rows,
                    file_size_in_bytes=1000,
                )
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=status,
                        snapshot_id=snapshot_id,
                        sequence_number=snapshot_id,
                        file_sequence_number=snapshot_id,
                        data_file=data,
                    )
                )
            return writer.to_manifest_file()

    def commit(self, snapshot_id: int, manifests: list, summary: dict, ms: int, expire: tuple[int, ...] = ()) -> None:
        """A snapshot over ``manifests``, then the next ``vN.metadata.json`` and its hint."""
        from pyiceberg.io.fsspec import FsspecFileIO
        from pyiceberg.manifest import write_manifest_list

        listed = f"file:{self.meta}/snap-{snapshot_id}.avro"
        parent = self.snapshots[-1]["snapshot-id"] if self.snapshots else None
        with write_manifest_list(
            2, FsspecFileIO({}).new_output(listed), snapshot_id, parent, snapshot_id, "null"
        ) as writer:
            writer.add_manifests(manifests)
        self.snapshots.append(
            {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": parent,
                "timestamp-ms": ms,
                "manifest-list": listed,
                "summary": summary,
            }
        )
        self.snapshots = [s for s in self.snapshots if s["snapshot-id"] not in expire]
        self.manifests = manifests
        self.version += 1
        metadata = {
            "format-version": 2,
            "location": f"file:{self.root}",
            "current-snapshot-id": snapshot_id,
            "snapshots": self.snapshots,
            "partition-specs": [SPEC],
            "default-spec-id": 0,
            "properties": {"logferry.topic": self.topic} if self.topic else {},
        }
        (self.meta / f"v{self.version}.metadata.json").write_text(json.dumps(metadata))
        (self.meta / "version-hint.text").write_text(str(self.version))


class Counting(LocalFiles):
    """Local files, remembering what was read."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def read(self, location: str) -> bytes:
        self.reads.append(location.rsplit("/", 1)[-1])
        return super().read(location)


def loaded_and_compacted(warehouse: Path) -> Table:
    """Two loads, then a compaction of hour H0+1 and the first snapshot expired."""
    table = Table(warehouse)
    m1 = table.manifest("m1", [(ADDED, 100, H0), (ADDED, 50, H0 + 1)], 1)
    table.commit(1, [m1], summary("r1", 1, T0 + 2 * HOUR_MS, **{"logferry.duplicates": "1"}), T0 + 2 * HOUR_MS + 9)
    m2 = table.manifest("m2", [(ADDED, 20, H0 + 1)], 2)
    dups = {"logferry.duplicate-hours": json.dumps({str(H0 + 1): 4})}
    table.commit(2, [m2, m1], summary("r2", 2, T0 + 3 * HOUR_MS, **dups), T0 + 3 * HOUR_MS + 9)
    m3 = table.manifest("m3", [(DELETED, 50, H0 + 1), (DELETED, 20, H0 + 1), (ADDED, 70, H0 + 1)], 3)
    m4 = table.manifest("m4", [(EXISTING, 100, H0)], 3)
    table.commit(3, [m3, m4], summary(None), T0 + 4 * HOUR_MS, expire=(1,))
    return table


def test_an_iceberg_lake_counts_live_files_per_hour_after_compaction_and_expiry(tmp_path):
    loaded_and_compacted(tmp_path)
    Table(tmp_path, "not-ours", topic=None).commit(7, [], summary(None), T0)  # another writer's: passed over
    lake = LakeReader("lake", tmp_path.as_uri(), "live", timezone="Europe/Paris")
    lake.poll()
    assert (lake.format, lake.error) == ("iceberg", None)
    # in Paris (UTC+1): H0 is 01, H0+1 is 02; the first load's duplicate expired with its snapshot
    assert lake.landed == {("app", "2024-03-01T01"): 100, ("app", "2024-03-01T02"): 70}
    assert lake.duplicates == {("app", "2024-03-01T02"): 4} and lake.unplaced == 0
    # runs: the kept snapshots name one, the table's load number says two
    assert (lake.runs, lake.last_committed_ms, lake.last_started_ms) == (2, T0 + 3 * HOUR_MS + 9, T0 + 3 * HOUR_MS)
    tiers = {("app", T0): {"agent": 100}, ("app", T0 + HOUR_MS): {"agent": 74}}
    rows = {r["hour"]: r for r in lake.rows(tiers, settle_s=60)}
    assert {h: (r["landed"], r["duplicates"], r["complete_pct"]) for h, r in rows.items()} == {
        "2024-03-01T01": (100, 0, 100.0),
        "2024-03-01T02": (70, 4, 100.0),
    }
    # the newest run started at 03:00Z: the hour 01Z (02 in Paris) ended 2 hours before, judged
    assert rows["2024-03-01T02"]["state"] == "settled"
    view = lake.view(tiers)
    assert (view["format"], view["tables"], view["path"]) == ("iceberg", 1, tmp_path.as_uri())


def test_a_table_is_read_again_only_when_its_metadata_changed_and_a_manifest_decoded_once(tmp_path):
    table = loaded_and_compacted(tmp_path)
    files = Counting()
    lake = LakeReader("lake", str(tmp_path), "live", format="iceberg", files=files)
    lake.poll()
    assert sorted(files.reads) == ["m3.avro", "m4.avro", "snap-3.avro", "v3.metadata.json", "version-hint.text"]
    files.reads.clear()
    lake.poll()
    assert files.reads == ["version-hint.text"]  # unchanged: the hint alone
    m5 = table.manifest("m5", [(ADDED, 9, H0 + 2)], 4)
    table.commit(4, [m5, *table.manifests], summary("r3", 3), T0 + 5 * HOUR_MS)
    files.reads.clear()
    lake.poll()
    assert files.reads == ["version-hint.text", "v4.metadata.json", "snap-4.avro", "m5.avro"]
    assert lake.landed[("app", "2024-03-01T02")] == 9 and (lake.runs, lake.last_committed_ms) == (3, T0 + 5 * HOUR_MS)


def test_errors_are_one_line_naming_the_path_and_other_tables_are_still_counted(tmp_path):
    loaded_and_compacted(tmp_path)
    broken = Table(tmp_path, "broken", topic="other")
    broken.commit(1, [broken.manifest("b1", [(ADDED, 1, H0)], 1)], summary("r9", 1), T0)
    (broken.meta / "snap-1.avro").write_bytes(b"Obj\x01 not avro")  # the manifest list is damaged
    lake = LakeReader("lake", str(tmp_path), "live")
    lake.poll()
    assert lake.error and "\n" not in lake.error and "snap-1.avro" in lake.error, lake.error
    assert lake.landed == {("app", "2024-03-01T00"): 100, ("app", "2024-03-01T01"): 70}
    (broken.meta / "v1.metadata.json").write_text("{not json")
    (broken.meta / "version-hint.text").write_text("1")
    lake.poll()
    assert lake.error and "broken" in lake.error and "\n" not in lake.error
    missing = LakeReader("gone", str(tmp_path / "nowhere"), "live", format="iceberg")
    missing.poll()
    assert missing.error == f"{tmp_path / 'nowhere'} does not exist"
    empty = LakeReader("new", str(tmp_path / "new"), "live")
    (tmp_path / "new").mkdir()
    empty.poll()  # nothing landed yet: no error, format not known yet
    assert (empty.error, empty.format, empty.view({})["format"]) == (None, "auto", None)


def test_a_lake_with_both_formats_asks_for_one(tmp_path):
    (tmp_path / "_logferry" / "manifests").mkdir(parents=True)
    (tmp_path / "logferry").mkdir()
    lake = LakeReader("lake", str(tmp_path), "live")
    lake.poll()
    assert lake.error and "format" in lake.error and lake.format == "auto"
    parquet = LakeReader("lake", str(tmp_path), "live", format="parquet")
    parquet.poll()
    assert (parquet.error, parquet.runs) == (None, 0)


# -- WebHDFS ------------------------------------------------------------------------------------


@pytest.fixture
def namenode() -> Iterator[str]:
    """A stand-in for a NameNode's WebHDFS answers (the real one: tests/console/
    test_console_landed_iceberg.py)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path, _, query = self.path.partition("?")
            if path == "/webhdfs/v1/w/logferry" and "op=LISTSTATUS" in query:
                body = {"FileStatuses": {"FileStatus": [{"pathSuffix": "app", "type": "DIRECTORY", "length": 0}]}}
                self._answer(200, json.dumps(body).encode())
            elif path == "/webhdfs/v1/w/logferry" and "op=GETCONTENTSUMMARY" in query:
                body = {"ContentSummary": {"directoryCount": 3, "fileCount": 7, "length": 1024, "quota": -1}}
                self._answer(200, json.dumps(body).encode())
            elif path == "/webhdfs/v1/w/odd":  # a 200 answer without what was asked for
                self._answer(200, b'{"Boolean": true}')
            elif path == "/webhdfs/v1/w/hint" and "op=OPEN" in query:
                self._answer(200, b"3\n")
            elif path == "/webhdfs/v1/w/safe":
                body = {"RemoteException": {"exception": "SafeModeException", "message": "in safe mode\nmore"}}
                self._answer(403, json.dumps(body).encode())
            else:
                body = {"RemoteException": {"exception": "FileNotFoundException", "message": "File does not exist"}}
                self._answer(404, json.dumps(body).encode())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_webhdfs_lists_reads_and_names_what_failed(namenode):
    files = HdfsFiles(WebHdfs(namenode))
    assert files.list("hdfs://nn:8020/w/logferry") == [("app", True)]
    assert files.read("hdfs://nn:8020/w/hint") == b"3\n"
    assert WebHdfs(namenode).file_count("/w/logferry") == 7
    with pytest.raises(OSError, match="GETCONTENTSUMMARY /w/odd .*no fileCount"):
        WebHdfs(namenode).file_count("/w/odd")
    with pytest.raises(FileNotFoundError):
        WebHdfs(namenode).file_count("/w/nothing")
    with pytest.raises(FileNotFoundError, match="/w/nothing does not exist"):
        files.read("hdfs://nn:8020/w/nothing")
    with pytest.raises(OSError, match="HTTP 403 SafeModeException: in safe mode$"):
        files.list("/w/safe")
    with pytest.raises(OSError, match="cannot reach WebHDFS at http://127.0.0.1:1 "):
        HdfsFiles(WebHdfs("http://127.0.0.1:1")).list("/w")


# -- settings -----------------------------------------------------------------------------------


def test_iceberg_and_hdfs_lake_settings():
    config = parse_config(
        {
            "cluster": [{"name": "live", "zk_connect": "zk:2181/l"}],
            "lake": [
                {"path": "hdfs://nn:8020/w", "format": "iceberg", "namespace": "logs", "webhdfs": "http://nn:50070"},
                {"path": "hdfs://nn:8020/w"},
                {"path": "/data/lake", "format": "parquet"},
            ],
        }
    )
    assert [(lk.format, lk.namespace, lk.webhdfs) for lk in config.lakes] == [
        ("iceberg", "logs", "http://nn:50070"),
        ("auto", "logferry", None),
        ("parquet", "logferry", None),
    ]


@pytest.mark.parametrize(
    "lake, key, says",
    [
        ({"path": "/x", "format": "orc"}, "lake[0].format", "'auto' or 'parquet' or 'iceberg'"),
        ({"path": "/x", "webhdfs": "http://nn:9870"}, "lake[0].webhdfs", "only for an hdfs:// path"),
        ({"path": "hdfs://nn:8020/w", "webhdfs": "nn"}, "lake[0].webhdfs", "http://host:port"),
        ({"path": "hdfs://nn:8020/w", "webhdfs": "http://nn"}, "lake[0].webhdfs", "http://host:port"),
        ({"path": "s3://bucket/w"}, "lake[0].path", "a local directory, a file:// or an hdfs:// URI"),
        ({"path": "hdfs:///w"}, "lake[0].path", "names no NameNode"),
        ({"path": "/x", "namespace": "a/b"}, "lake[0].namespace", "a folder name"),
    ],
)
def test_lake_settings_errors_name_the_key(lake, key, says):
    with pytest.raises(ConfigError) as caught:
        parse_config({"cluster": [{"name": "live", "zk_connect": "zk:2181/l"}], "lake": [lake]})
    assert key in str(caught.value) and says in str(caught.value), str(caught.value)
