"""The sans-IO parts of verification, dedup state, repair grouping and the audit formula."""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker.client import WindowCounts
from hadoop_loader.audit import HOUR_MS, compare, duplicate_counts, hour_key
from hadoop_loader.config import config_from_dict
from hadoop_loader.errors import LoaderConfigError
from hadoop_loader.identity import IdentityRange, is_landed, merge_ranges, ranges_to_keep
from hadoop_loader.job import final_path
from hadoop_loader.manifest import FileEntry, Manifest, RangeEntry, Repair
from hadoop_loader.repair import Group, groups_of
from hadoop_loader.verify import (
    Damage,
    Expected,
    FooterError,
    expected_files,
    footer_rows,
    judge,
    topic_hour,
)

UTC = dt.UTC


def parquet_bytes(rows: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(rows)), "s": ["v" * 20] * rows}), out)
    return out.getvalue()


def reader(data: bytes):
    return lambda offset, length: data[offset : offset + length]


def footer_of(data: bytes):
    """What verification hands :func:`judge`: the footer's row count of ``data``."""
    return lambda: footer_rows(reader(data), len(data))


def test_footer_rows_reads_the_row_count_from_the_end_only():
    data = parquet_bytes(1234)
    asked = []

    def read(offset, length):
        asked.append((offset, length))
        return data[offset : offset + length]

    assert footer_rows(read, len(data)) == 1234
    assert len(asked) == 2 and sum(n for _, n in asked) < len(data) // 2
    assert asked[0] == (len(data) - 8, 8)


@pytest.mark.parametrize("cut", [1, 8, 100, 0.5])
def test_footer_rows_refuses_a_truncated_file(cut):
    data = parquet_bytes(500)
    short = data[: len(data) - cut] if isinstance(cut, int) else data[: int(len(data) * cut)]
    with pytest.raises(FooterError):
        footer_rows(reader(short), len(short))


def test_footer_rows_refuses_garbage_and_tiny_files():
    with pytest.raises(FooterError, match="too short"):
        footer_rows(reader(b"PAR1"), 4)
    junk = b"x" * 100 + (50).to_bytes(4, "little") + b"PAR1"
    with pytest.raises(FooterError, match="does not parse"):
        footer_rows(reader(junk), len(junk))
    huge = b"x" * 10 + (5000).to_bytes(4, "little") + b"PAR1"
    with pytest.raises(FooterError, match="does not fit"):
        footer_rows(reader(huge), len(huge))


def entry(path, size=100, rows=10, origin=None):
    return FileEntry(path, "staged/" + path, size, rows, origin)


def manifest(seq, files=(), repairs=(), committed=0, identities=(), duplicates=None):
    return Manifest(
        seq,
        f"r{seq}",
        committed,
        committed,
        "zk",
        files=list(files),
        repairs=list(repairs),
        identities=list(identities),
        duplicates=duplicates or {},
    )


def test_expected_files_leave_out_what_a_later_repair_replaced():
    a = "topic=t/dt=2024-03-01/hr=00/r1-a.parquet"
    b = "topic=t/dt=2024-03-01/hr=01/r1-b.parquet"
    new = "topic=t/dt=2024-03-01/hr=00/r00000002-o1-a.parquet"
    m1 = manifest(1, [entry(a), entry(b)])
    m2 = manifest(2, [entry(new, origin=1)], [Repair(1, "topic=t/dt=2024-03-01/hr=00", (a,), 10)])
    found = expected_files([m2, m1])
    assert [(e.run, e.entry.path, e.origin) for e in found] == [(2, new, 1), (1, b, 1)]


def test_judge_names_what_was_expected_and_found():
    good = parquet_bytes(10)
    e = Expected(3, entry("topic=t/dt=2024-03-01/hr=05/f.parquet", len(good), 10))
    assert judge(e, len(good), footer_of(good)) == (10, None)
    rows, missing = judge(e, None, footer_of(b""))
    assert rows == 0 and missing is not None and missing.found_size is None
    assert "missing" in missing.describe() and "run 3" in missing.describe()
    cut = good[: len(good) // 2]
    rows, truncated = judge(e, len(cut), footer_of(cut))
    assert rows == 0 and truncated is not None and truncated.found_rows is None
    assert (
        f"expected {len(good):,} bytes, 10 rows; found {len(cut):,} bytes, no readable footer" in truncated.describe()
    )
    other = parquet_bytes(7)
    rows, wrong = judge(e, len(other), footer_of(other))
    assert rows == 7 and wrong is not None and wrong.found_rows == 7
    same_size = Expected(3, entry(e.entry.path, len(good), 11))
    rows, count = judge(same_size, len(good), footer_of(good))
    assert rows == 10 and count is not None and "row count" in count.reason


def test_topic_hour_and_final_path():
    assert topic_hour("topic=app.log/dt=2024-03-01/hr=07/r1-x.parquet") == ("app.log", "2024-03-01T07")
    assert (
        final_path("topic=a/dt=2024-03-01/hr=07/duplicate=false/part-0.parquet", 12)
        == "topic=a/dt=2024-03-01/hr=07/r00000012-part-0.parquet"
    )
    assert (
        final_path("topic=a/dt=2024-03-01/hr=07/part-0.parquet", 3)
        == "topic=a/dt=2024-03-01/hr=07/r00000003-part-0.parquet"
    )


def test_groups_of_damage_by_origin_run_and_directory():
    def d(run, path, origin):
        return Damage(run, path, origin, 1, None, 1, None, "gone")

    groups = groups_of(
        [
            d(1, "topic=t/dt=d/hr=00/a", 1),
            d(1, "topic=t/dt=d/hr=00/b", 1),
            d(4, "topic=t/dt=d/hr=00/c", 2),
            d(1, "topic=t/dt=d/hr=01/e", 1),
        ]
    )
    assert groups == [Group(1, "topic=t/dt=d/hr=00"), Group(1, "topic=t/dt=d/hr=01"), Group(2, "topic=t/dt=d/hr=00")]


def test_identity_ranges_merge_only_overlaps_of_one_file_generation():
    r = [
        IdentityRange("t", "h", 7, 0, 100),
        IdentityRange("t", "h", 7, 50, 300),
        IdentityRange("t", "h", 7, 301, 400),
        IdentityRange("t", "h2", 7, 0, 10),
        IdentityRange("u", "h", 7, 0, 10),
        IdentityRange("t", None, 7, 5, 6),
    ]
    merged = merge_ranges(r)
    assert IdentityRange("t", "h", 7, 0, 300) in merged
    assert IdentityRange("t", "h", 7, 301, 400) in merged  # touching is not overlapping
    assert len(merged) == 5
    assert is_landed(merged, "t", "h", 7, 300) and not is_landed(merged, "t", "h", 8, 3)
    assert not is_landed(merged, "t", "h2", 7, 11) and is_landed(merged, "t", None, 7, 5)


def test_ranges_to_keep_stop_at_manifests_older_than_the_window():
    old = manifest(1, committed=100, identities=[IdentityRange("t", "h", 1, 0, 9)])
    new = manifest(2, committed=300, identities=[IdentityRange("t", "h", 2, 0, 9)])
    assert ranges_to_keep([new, old], 200) == [IdentityRange("t", "h", 2, 0, 9)]
    assert len(ranges_to_keep([new, old], 0)) == 2


def test_manifest_round_trip_keeps_dedup_and_repair_fields_and_reads_old_ones():
    m = Manifest(
        5,
        "r",
        1,
        2,
        "zk",
        [RangeEntry("a", 0, 0, 10, 5, 2)],
        [FileEntry("topic=a/dt=d/hr=00/x", "s/x", 3, 5, 2)],
        {"a": {"d": 5}},
        {"a": {0: 10}},
        duplicates={"a": {"2024-03-01T00": 2}},
        identities=[IdentityRange("a", "h", 9, 0, 40), IdentityRange("a", None, 9, 1, 2)],
        repairs=[Repair(2, "topic=a/dt=d/hr=00", ("topic=a/dt=d/hr=00/old",), 5)],
    )
    back = Manifest.from_json(m.to_json(), "m.json")
    assert back == m
    plain = Manifest(1, "r", 1, 2, "zk", [RangeEntry("a", 0, 0, 10, 5)], [FileEntry("p", "s", 3, 5)])
    raw = plain.to_json()
    assert b"duplicates" not in raw and b"origin" not in raw and b"identities" not in raw
    assert Manifest.from_json(raw, "m.json") == plain


def test_window_counts_split_duplicates_from_missing():
    c = WindowCounts(expected=100, landed=90, duplicates=6)
    assert (c.arrived, c.missing, c.extra) == (96, 4, 0) and c.completeness == 0.96
    more = WindowCounts(100, 100, 5)
    assert (more.missing, more.extra) == (0, 5)
    assert WindowCounts(None, 5).missing is None and WindowCounts(0, 5).completeness is None


def test_compare_reports_duplicates_and_missing_per_tier_and_hour():
    h0 = 1_700_000_000_000 // HOUR_MS * HOUR_MS
    k = hour_key(h0, UTC)
    report = compare({("a", k): 100}, {("a", k): 90}, ["a"], h0, h0 + HOUR_MS, UTC, duplicates={("a", k): 6})
    (h,) = report.hours
    assert (h.tier, h.expected, h.landed, h.duplicates, h.missing) == ("agent", 100, 90, 6, 4)
    data = report.to_json()
    assert b'"duplicates": 6' in data and b'"missing": 4' in data
    newest_first = [
        manifest(2, committed=300, duplicates={"a": {k: 4}}),
        manifest(1, committed=100, duplicates={"a": {k: 9}}),
    ]
    assert duplicate_counts(newest_first, 200) == {("a", k): 4}


def test_dedup_config_needs_decoded_topics():
    base = {"source": {"zk": "h:1/c", "topics": ["a"]}, "output": {"uri": "file:///tmp/x"}}
    with pytest.raises(LoaderConfigError, match="dedup.enabled"):
        config_from_dict({**base, "dedup": {"enabled": True}})
    on = config_from_dict(
        {
            **base,
            "source": {**base["source"], "decode_agent_records": True},
            "dedup": {"enabled": True, "keep_hours": 24},
        }
    )
    assert on.dedup.enabled and on.dedup.keep_hours == 24
    assert not config_from_dict(base).dedup.enabled
    with pytest.raises(LoaderConfigError, match="dedup.keep_hours"):
        config_from_dict({**base, "dedup": {"keep_hours": 0}})


class _Cluster:
    """What the repair asks the cluster: (first retained offset, visible end) per partition."""

    def __init__(self, ends):
        self.ends = ends

    def log_range(self, topic, partition):
        return self.ends[(topic, partition)]


def test_repair_names_what_retention_removed():
    from hadoop_loader.repair import _unrepairable

    config = config_from_dict({"source": {"zk": "h:1/c", "topics": ["t"]}, "output": {"uri": "file:///tmp/x"}})
    run = Manifest(3, "r", 0, 0, "zk", [RangeEntry("t", 0, 0, 500, 9), RangeEntry("t", 1, 100, 900, 9)])
    assert _unrepairable(_Cluster({("t", 0): (0, 600), ("t", 1): (0, 900)}), config, run, "t") is None
    why = _unrepairable(_Cluster({("t", 0): (0, 600), ("t", 1): (400, 900)}), config, run, "t")
    assert why is not None and "retention removed the data: t/1 offsets [100, 400)" in why
    why = _unrepairable(_Cluster({("t", 0): (0, 300), ("t", 1): (0, 900)}), config, run, "t")
    assert why is not None and "ends at 300" in why
    assert "no longer in source.topics" in _unrepairable(_Cluster({}), config, run, "u")
    assert "manifest is gone" in _unrepairable(_Cluster({}), config, None, "t")


def test_a_repair_run_publishes_its_files_and_deletes_the_replaced_ones_idempotently(tmp_path):
    from hadoop_loader.fs import LocalFileSystem, join
    from hadoop_loader.store import LandingStore

    store = LandingStore(LocalFileSystem(), (tmp_path / "wh").as_uri())
    store.fs.mkdirs(store.state)
    old = "topic=t/dt=2024-03-01/hr=00/r1-part-0.parquet"
    good = parquet_bytes(5)
    store.fs.create_new(join(store.root, old), good[:10])  # the damaged file
    store.commit(manifest(1, [entry(old, len(good), 5)]))
    data = store.begin(2)
    store.fs.create_new(join(data, "origin=1/topic=t/dt=2024-03-01/hr=00/part-9.parquet"), good)
    new = "topic=t/dt=2024-03-01/hr=00/r00000002-o1-part-9.parquet"
    repair = manifest(
        2,
        [FileEntry(new, "origin=1/topic=t/dt=2024-03-01/hr=00/part-9.parquet", len(good), 5, 1)],
        [Repair(1, "topic=t/dt=2024-03-01/hr=00", (old,), 5)],
    )
    store.commit(repair)
    # a crash here: the next run's recovery publishes the repair
    recovery = store.recover()
    assert recovery.rolled_forward == [2] and recovery.files_moved == 1
    assert store.fs.size(join(store.root, old)) is None
    assert store.fs.size(join(store.root, new)) == len(good)
    assert store.publish(store.read_manifest(2)) == 0  # again: nothing to do
    assert [e.entry.path for e in expected_files([store.read_manifest(s) for s in store.committed()])] == [new]
