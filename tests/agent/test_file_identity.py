"""Record identity: every agent record carries ``fid``, the id of its file's generation.

``(host, fid, offset)`` must be equal for duplicates (a batch sent again, lines re-sent
after a restart) and distinct for any two real lines, also when one path held several
files (rename rotation, copytruncate, a file replaced under the same inode). Unit
tests of the pieces, then the runtime in-process with the fake producer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgpack
import pytest

from agent.checkpoint import CheckpointStore, Entry
from agent.encode import chunk_prefix, encode_values
from agent.identity import new_file_id
from tests.agent.conftest import FakeProducer, agent_config, wait_until


@pytest.fixture(autouse=True)
def _logs_dir(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()


def lines(prefix: str, n: int, start: int = 0) -> bytes:
    return b"".join(b"%s %05d\n" % (prefix.encode(), i) for i in range(start, start + n))


def records(producer: FakeProducer) -> list[dict]:
    return producer.records("logs")


# -- pieces --------------------------------------------------------------------------------


def test_new_file_ids_are_distinct_positive_int64() -> None:
    ids = [new_file_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(0 <= i < 1 << 63 for i in ids)


def test_values_carry_the_file_id_in_every_path_of_the_encoder() -> None:
    prefix = chunk_prefix(5, "h", "/f", file_id=1 << 62)
    fast = [msgpack.unpackb(v) for v in encode_values(prefix, [b"a", b"b"], [0, 2])]
    assert fast == [
        {"time": 5, "host": "h", "file": "/f", "fid": 1 << 62, "offset": 0, "line": "a"},
        {"time": 5, "host": "h", "file": "/f", "fid": 1 << 62, "offset": 2, "line": "b"},
    ]
    slow = [msgpack.unpackb(v) for v in encode_values(prefix, [b"a", b"b"], [0, 2], cut=frozenset({0}), ptimes=[9, 10])]
    assert [(r["fid"], r.get("cut"), r["ptime"]) for r in slow] == [(1 << 62, True, 9), (1 << 62, None, 10)]


def test_a_prefix_without_file_id_encodes_the_old_record() -> None:
    """What agents before the field sent (the loader must read it with a null file_id)."""
    value = encode_values(chunk_prefix(5, "h", "/f"), [b"a"], [0])[0]
    assert msgpack.unpackb(value) == {"time": 5, "host": "h", "file": "/f", "offset": 0, "line": "a"}


def test_the_prefix_header_counts_its_entries() -> None:
    """encode_values reads how many entries the prefix holds from its header, so more
    shared fields need no change there (up to 15 entries in all: a fixmap)."""
    shared = {f"k{i:02d}": i for i in range(11)}
    prefix = msgpack.packb(shared)
    value = encode_values(prefix, [b"x"], [3], cut=frozenset({0}), ptimes=[1])[0]
    assert value[0] == 0x8F
    assert msgpack.unpackb(value) == {**shared, "offset": 3, "line": "x", "ptime": 1, "cut": True}


def test_checkpoint_keeps_the_file_id_and_reads_version_1(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "state", "h")
    store.lock()
    entry = Entry(1, 2, 3, "abc", "/p", "/p.1", 77, "src", fid=123)
    store.save([entry])
    assert store.load() == {entry.key: entry}
    old = {
        "version": 1,
        "host": "h",
        "written": 1.0,
        "files": [
            {"dev": 1, "ino": 2, "fp_len": 3, "fp": "abc", "path": "/p", "where": "/p", "offset": 7, "source": "src"}
        ],
    }
    store.path.write_text(json.dumps(old))
    assert [e.fid for e in store.load().values()] == [None]
    store.unlock()


# -- the runtime -----------------------------------------------------------------------------


def test_rotations_give_each_file_generation_its_own_id(tmp_path: Path, run_agent, fake_producer) -> None:
    """Rename rotation and copytruncate restart offsets under one path: new ids."""
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    agent = run_agent(agent_config(tmp_path))
    wait_until(lambda: len(records(fake_producer)) == 10)
    os.rename(log, log.with_name("app.log.1"))
    log.write_bytes(lines("b", 10))
    wait_until(lambda: len(records(fake_producer)) == 20)
    os.truncate(log, 0)  # copytruncate
    wait_until(lambda: agent.agent.metrics.counters["truncations"] == 1)
    with open(log, "ab") as handle:
        handle.write(lines("c", 10))
    wait_until(lambda: len(records(fake_producer)) == 30)
    agent.stop()
    got = records(fake_producer)
    assert {r["file"] for r in got} == {str(log)}
    by_gen: dict[str, set[int]] = {}
    for r in got:
        by_gen.setdefault(r["line"][0], set()).add(r["fid"])
    assert all(len(ids) == 1 for ids in by_gen.values()), by_gen
    assert len(set.union(*by_gen.values())) == 3
    # The old recipe's key collides across the three files; the new one never does.
    assert len({(r["host"], r["file"], r["offset"]) for r in got}) == 10
    assert len({(r["host"], r["fid"], r["offset"]) for r in got}) == 30


def test_lines_sent_again_after_a_restart_keep_their_id(tmp_path: Path, run_agent, fake_producer) -> None:
    """Sent, never acknowledged, agent stopped: the restart re-sends under the same id,
    because the id was checkpointed before the first line carrying it was sent."""
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path, checkpoint_interval_s=3600.0)
    fake_producer.hold = True
    first = run_agent(config)
    wait_until(lambda: len(fake_producer.pending) >= 1)
    saved = json.loads((config.state_dir / "checkpoint.json").read_text())
    sent = [msgpack.unpackb(v) for _, vals, _ in fake_producer.pending for v in vals]
    assert [f["fid"] for f in saved["files"]] == [sent[0]["fid"]]
    assert saved["files"][0]["offset"] == 0
    first.stop()  # nothing was acknowledged: the checkpoint stays at 0
    again = FakeProducer()
    second = run_agent(config, again)
    wait_until(lambda: len(records(again)) == 10)
    with open(log, "ab") as handle:
        handle.write(lines("a", 5, 10))
    wait_until(lambda: len(records(again)) == 15)
    second.stop()
    resent = records(again)
    assert {r["fid"] for r in resent} == {sent[0]["fid"]}
    assert [(r["fid"], r["offset"]) for r in resent[:10]] == [(r["fid"], r["offset"]) for r in sent]


def test_a_file_changed_while_the_agent_was_down_gets_a_new_id(tmp_path: Path, run_agent, fake_producer) -> None:
    log = tmp_path / "logs" / "app.log"
    log.write_bytes(lines("a", 10))
    config = agent_config(tmp_path)
    first = run_agent(config)
    wait_until(lambda: len(records(fake_producer)) == 10)
    first.stop()
    with open(log, "r+b") as handle:  # same inode, other content: truncated and rewritten
        handle.truncate(0)
        handle.write(lines("Z", 20))
    again = FakeProducer()
    second = run_agent(config, again)
    wait_until(lambda: len(records(again)) == 20)
    second.stop()
    (old,) = {r["fid"] for r in records(fake_producer)}
    (new,) = {r["fid"] for r in records(again)}
    assert old != new
    assert [e["fid"] for e in json.loads((config.state_dir / "checkpoint.json").read_text())["files"]] == [new]
