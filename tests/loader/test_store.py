"""The commit protocol on a local filesystem: commit, publish, recover, conflicts, lock."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hadoop_loader.errors import CommitConflictError, Gap, StateError
from hadoop_loader.fs import LocalFileSystem, join
from hadoop_loader.manifest import FileEntry, Manifest, RangeEntry, next_offsets
from hadoop_loader.store import LandingStore


@pytest.fixture
def store(tmp_path):
    s = LandingStore(LocalFileSystem(), (tmp_path / "wh").as_uri())
    s.fs.mkdirs(s.state)
    return s


def stage_run(
    store: LandingStore, sequence: int, files: dict[str, bytes], previous: Manifest | None = None
) -> Manifest:
    """Stage files as Spark would, and build the run's manifest."""
    data = store.begin(sequence)
    entries = []
    for rel, content in files.items():
        store.fs.create_new(join(data, rel), content)
        directory, _, name = rel.rpartition("/")
        entries.append(FileEntry(f"{directory}/r{sequence}-{name}", rel, len(content), 1))
    ranges = [RangeEntry("a", 0, sequence * 100, sequence * 100 + 100, len(files))]
    return Manifest(
        sequence,
        f"run{sequence}",
        1,
        2,
        "zk",
        ranges,
        entries,
        {"a": {"2024-01-01T00": len(files)}},
        next_offsets(previous.offsets if previous else {}, ranges),
        [Gap("a", 1, 0, 10)],
        0,
    )


def published(store: LandingStore) -> list[str]:
    root = store.fs.path(store.root)
    return sorted(
        f.uri[len("file://" + root) + 1 :] for f in store.fs.list_files(store.root) if "/_logferry/" not in f.uri
    )


def test_manifest_round_trip_and_malformed_manifest():
    m = Manifest(
        3,
        "r",
        1,
        2,
        "zk",
        [RangeEntry("a", 0, 0, 10, 5)],
        [FileEntry("topic=a/x.parquet", "topic=a/x.parquet", 10, 5)],
        {"a": {"2024-01-01T00": 5}},
        {"a": {0: 10}},
        [Gap("a", 0, 0, 1)],
        2,
    )
    back = Manifest.from_json(m.to_json(), "m")
    assert back == m
    with pytest.raises(StateError, match="manifest bad.json is malformed"):
        Manifest.from_json(b'{"format": "logferry-manifest/1"}', "bad.json")


def test_commit_publish_cleanup(store):
    m = stage_run(store, 1, {"topic=a/dt=2024-01-01/hr=00/part-0.parquet": b"abc"})
    assert published(store) == []
    store.commit(m)
    assert store.latest() == m
    assert store.publish(m) == 1
    store.cleanup(1)
    assert published(store) == ["topic=a/dt=2024-01-01/hr=00/r1-part-0.parquet"]
    assert store.fs.list_names(store.staging) == []
    assert store.publish(m) == 0  # idempotent once published


def test_recover_discards_uncommitted_and_rolls_committed_forward(store):
    m1 = stage_run(store, 1, {"topic=a/f1.parquet": b"1", "topic=a/f2.parquet": b"22"})
    store.commit(m1)
    # crash during publish: one file moved, one still staged
    store.fs.rename(join(store.staging_data(1), "topic=a/f1.parquet"), join(store.root, "topic=a/r1-f1.parquet"))
    stage_run(store, 2, {"topic=a/g.parquet": b"333"}, m1)  # never committed
    report = store.recover()
    assert report.rolled_forward == [1] and report.discarded == [2] and report.files_moved == 1
    assert published(store) == ["topic=a/r1-f1.parquet", "topic=a/r1-f2.parquet"]
    assert store.fs.list_names(store.staging) == []
    assert store.latest().sequence == 1


def test_missing_committed_file_is_a_state_error(store):
    m = stage_run(store, 1, {"topic=a/f.parquet": b"x"})
    store.commit(m)
    store.fs.delete(join(store.staging_data(1), "topic=a/f.parquet"))
    with pytest.raises(StateError, match="neither staged"):
        store.recover()


def test_commit_conflicts(store):
    m1 = stage_run(store, 1, {})
    store.commit(m1)
    with pytest.raises(CommitConflictError):
        store.commit(m1)
    m3 = stage_run(store, 3, {}, m1)
    with pytest.raises(CommitConflictError, match="last committed run is 1"):
        store.commit(m3)
    with pytest.raises(CommitConflictError):
        store.begin(1)


def test_offsets_carry_forward():
    prev = {"a": {0: 100, 1: 50}, "b": {0: 7}}
    out = next_offsets(prev, [RangeEntry("a", 0, 100, 180, 3), RangeEntry("c", 2, 0, 9, 1)])
    assert out == {"a": {0: 180, 1: 50}, "b": {0: 7}, "c": {2: 9}}
    assert prev["a"][0] == 100


@pytest.mark.integration  # starts a short-lived process to get the pid of a dead one
def test_lock_is_exclusive_and_taken_over_from_a_dead_process(store):
    store.acquire_lock()
    with pytest.raises(StateError, match="another load job holds"):
        LandingStore(store.fs, store.root).acquire_lock()
    store.release_lock()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    store.fs.delete(store.lock_uri)
    import socket

    store.fs.create_new(
        store.lock_uri, json.dumps({"host": socket.gethostname(), "pid": int(dead), "since_ms": 0}).encode()
    )
    store.acquire_lock()  # the holder is gone: taken over
    holder = json.loads(store.fs.read_bytes(store.lock_uri))
    import os

    assert holder["pid"] == os.getpid()
    store.release_lock()


def test_a_lock_this_process_could_not_release_is_taken_over_by_its_next_run(store):
    """A run whose release failed (its NameNode was down) leaves a lock naming this
    process: the next run of the same process (``logferry load --every``) takes it over,
    while a run still in flight in this process keeps it."""
    import os
    import socket

    store.fs.create_new(
        store.lock_uri, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since_ms": 0}).encode()
    )
    store.acquire_lock()
    assert json.loads(store.fs.read_bytes(store.lock_uri))["since_ms"] > 0  # written anew
    with pytest.raises(StateError, match="a run of this process"):
        LandingStore(store.fs, store.root).acquire_lock()
    store.release_lock()
    assert not store.fs.exists(store.lock_uri)


def test_create_new_never_overwrites(tmp_path):
    fs = LocalFileSystem()
    uri = (tmp_path / "m.json").as_uri()
    fs.create_new(uri, b"one")
    with pytest.raises(FileExistsError):
        fs.create_new(uri, b"two")
    assert fs.read_bytes(uri) == b"one"
    assert [n for n in fs.list_names(tmp_path.as_uri())] == ["m.json"]


@pytest.mark.integration
def test_hadoop_filesystem_through_spark_behaves_like_the_local_one(spark, tmp_path):
    from hadoop_loader.fs import HadoopFileSystem

    fs = HadoopFileSystem(spark)
    root = (tmp_path / "h").as_uri()
    fs.create_new(join(root, "a/b/one.json"), b"one")
    with pytest.raises(FileExistsError):
        fs.create_new(join(root, "a/b/one.json"), b"two")
    assert fs.read_bytes(join(root, "a/b/one.json")) == b"one"
    assert fs.size(join(root, "a/b/one.json")) == 3 and fs.size(join(root, "nope")) is None
    fs.rename(join(root, "a/b/one.json"), join(root, "c/moved.json"))
    with pytest.raises(FileExistsError):
        fs.create_new(join(root, "c/moved.json"), b"x")
    files = [f for f in fs.list_files(root) if not f.uri.endswith(".crc")]
    assert [(f.uri, f.size) for f in files] == [(join(root, "c/moved.json"), 3)]
    # the modification time verification compares: the local file system's, to the millisecond
    local = [f for f in LocalFileSystem().list_files(root) if not f.uri.endswith(".crc")]
    assert [f.mtime_ns // 1_000_000 for f in files] == [f.mtime_ns // 1_000_000 for f in local]
    assert "c" in fs.list_names(root) and fs.list_names(join(root, "missing")) == []
    fs.delete(join(root, "c"))
    assert not fs.exists(join(root, "c/moved.json"))

    store = LandingStore(fs, join(root, "wh"))
    fs.mkdirs(store.state)
    store.acquire_lock()
    m = stage_run(store, 1, {"topic=a/dt=2024-01-01/hr=00/part-0.parquet": b"abc"})
    store.commit(m)
    assert store.latest() == m
    assert store.recover().rolled_forward == [1]
    assert fs.size(join(store.root, "topic=a/dt=2024-01-01/hr=00/r1-part-0.parquet")) == 3
    store.release_lock()
