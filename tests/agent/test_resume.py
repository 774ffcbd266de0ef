"""agent.resume, sans-IO: which lines after the checkpoint the cluster already holds."""

from __future__ import annotations

import msgpack

from agent import encode
from agent.resume import fid_marker, highest_offsets, partition_of, skip_held
from tests.agent.conftest import agent_config, wait_until


def values(host: str, fid: int | None, offsets: list[int]) -> list[bytes]:
    prefix = encode.chunk_prefix(1_700_000_000_000, host, "/var/log/app.log", file_id=fid)
    return encode.encode_values(prefix, [b"line %d" % o for o in offsets], offsets)


def test_the_highest_offset_per_wanted_fid_of_this_host():
    found = highest_offsets(
        values("web-1", 7, [0, 10, 20]) + values("web-1", 2**62 + 5, [0, 40]) + values("web-1", 7, [30]),
        "web-1",
        [7, 2**62 + 5],
    )
    assert found == {7: 30, 2**62 + 5: 40}


def test_other_hosts_other_fids_and_old_records_are_ignored():
    mixed = (
        values("web-2", 7, [0, 500])
        + values("web-1", 8, [900])
        + values("web-1", None, [800])
        + [b"not msgpack \xc1", msgpack.packb([1, 2])]
        + values("web-1", 7, [100])
    )
    assert highest_offsets(mixed, "web-1", [7]) == {7: 100}
    assert highest_offsets(mixed, "web-1", []) == {}
    assert highest_offsets(mixed, "web-3", [7]) == {}


def test_the_pre_filter_matches_the_encoded_fid():
    for fid in (0, 1, 127, 128, 2**31, 2**63 - 1):
        assert fid_marker(fid) in values("h", fid, [0])[0]


def test_skip_drops_the_held_prefix_and_says_where_to_resume():
    assert skip_held([0, 10, 20, 30], 10) == (2, 20)
    assert skip_held([0, 10, 20, 30], -1) == (0, 0)  # nothing held: send all
    assert skip_held([0, 10, 20, 30], 5) == (1, 10)  # held through a line inside a message
    assert skip_held([0, 10, 20, 30], 30) == (4, None)  # all held: the chunk's end
    assert skip_held([], 30) == (0, None)


def test_a_keyed_source_is_in_one_partition_an_unkeyed_one_in_any():
    import zlib

    assert partition_of(b"web-1", 8) == [zlib.crc32(b"web-1") % 8]
    assert partition_of(None, 3) == [0, 1, 2]


# -- the runtime's use of it, in-process with the fake producer --------------------------


def _crashed_state(tmp_path, n_lines: int):
    """A log of ``n_lines`` and a checkpoint at offset 0 with fid 42, as a kill -9 leaves."""
    import os

    from agent.checkpoint import CheckpointStore, Entry

    config = agent_config(tmp_path)
    log = tmp_path / "logs" / "app.log"
    text = b"".join(b"line %05d\n" % i for i in range(n_lines))
    log.write_bytes(text)
    st = os.stat(log)
    store = CheckpointStore(config.state_dir, config.host)
    config.state_dir.mkdir(parents=True)
    store.save([Entry(st.st_dev, st.st_ino, 0, "", str(log), str(log), 0, config.sources[0].name, fid=42)])
    return config, text


def test_a_restart_skips_what_the_cluster_holds(tmp_path, run_agent, fake_producer, monkeypatch):
    from agent import resume

    config, text = _crashed_state(tmp_path, 100)
    held_line = 59
    asked = []

    def holdings(consumer, host, wanted, since_ms, max_bytes):
        asked.append((host, wanted, max_bytes))
        return {42: text.index(b"line %05d" % held_line)}

    monkeypatch.setattr(resume, "read_holdings", holdings)
    agent = run_agent(config)
    wait_until(lambda: len(fake_producer.records("logs")) >= 100 - held_line - 1, 10, "sent")
    agent.stop()
    records = fake_producer.records("logs")
    assert [r["line"] for r in records] == [f"line {i:05d}" for i in range(held_line + 1, 100)]
    assert {r["fid"] for r in records} == {42}
    assert asked == [(config.host, [resume.Wanted("logs", config.sources[0].key, 42)], config.resume_max_bytes)]
    assert agent.agent.metrics.counters["resume_skipped"] == held_line + 1


def test_without_an_answer_it_re_sends_from_the_checkpoint(tmp_path, run_agent, fake_producer, monkeypatch):
    from agent import resume
    from broker.common.errors import BrokerNotAvailableError

    config, _ = _crashed_state(tmp_path, 50)

    def unreachable(*_args, **_kwargs):
        raise BrokerNotAvailableError("no broker")

    monkeypatch.setattr(resume, "read_holdings", unreachable)
    agent = run_agent(config)
    wait_until(lambda: len(fake_producer.records("logs")) >= 50, 10, "sent")
    agent.stop()
    assert [r["line"] for r in fake_producer.records("logs")] == [f"line {i:05d}" for i in range(50)]
    assert {r["fid"] for r in fake_producer.records("logs")} == {42}  # same identity
