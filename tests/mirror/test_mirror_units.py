"""The mirror's pure parts: config validation, topic selection, the re-hash fallback, raw fetch parsing."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from broker.client.group.fetcher import raw_batches
from broker.common.errors import CorruptBatchError
from broker.wire import records
from mirror.config import load_config, parse_config
from mirror.errors import MirrorConfigError, MirrorError
from mirror.routing import rehash

ROOT = Path(__file__).resolve().parents[2]
BASE = {"source": {"zk_connect": "h:1/live"}, "target": {"zk_connect": "h:1/analysis"}, "mirror": {"topics": ["a"]}}


def _with(section: str, **keys) -> dict:
    data = {k: dict(v) for k, v in BASE.items()}
    data.setdefault(section, {}).update(keys)
    return data


def test_example_config_loads():
    config = load_config(ROOT / "etc" / "mirror.toml")
    assert config.on_gap == "stop" and config.pattern == ".*" and config.metrics_port == 9393


def test_pipeline_defaults_and_the_example_agree():
    config, defaults = load_config(ROOT / "etc" / "mirror.toml"), parse_config(BASE)
    for key in (
        "fetch_max_bytes",
        "fetch_requests_per_broker",
        "queue_bytes",
        "poll_max_bytes",
        "max_inflight_bytes",
        "max_request_bytes",
        "fetch_window_bytes",
    ):
        assert getattr(config, key) == getattr(defaults, key), key
    assert defaults.queue_bytes >= 2 * 4 * defaults.fetch_max_bytes  # 4 partitions in flight, twice


@pytest.mark.parametrize(
    "data, key",
    [
        ({"target": BASE["target"], "mirror": BASE["mirror"]}, "source"),
        (_with("source", zk_connect="h:1"), "source.zk_connect"),
        (_with("target", zk_connect="h:1/live"), "target.zk_connect"),
        (_with("mirror", pattern="x"), "mirror.topics"),
        ({**BASE, "mirror": {}}, "mirror.topics"),
        ({**BASE, "mirror": {"pattern": "("}}, "mirror.pattern"),
        (_with("mirror", exclude=["["]), "mirror.exclude"),
        (_with("mirror", on_gap="ignore"), "mirror.on_gap"),
        (_with("mirror", poll_max_bytes=0), "mirror.poll_max_bytes"),
        (_with("mirror", max_inflight_bytes=0), "mirror.max_inflight_bytes"),
        (_with("mirror", fetch_requests_per_broker=0), "mirror.fetch_requests_per_broker"),
        (_with("mirror", fetch_window_bytes=-1), "mirror.fetch_window_bytes"),
        (_with("mirror", fetch_window_bytes=1 << 30), "mirror.fetch_window_bytes"),
        (_with("mirror", max_request_bytes=0), "mirror.max_request_bytes"),
        (_with("mirror", session_timeout_s="6"), "mirror.session_timeout_s"),
        (_with("mirror", group="a/b"), "mirror.group"),
        (_with("mirror", colour="red"), "mirror.colour"),
        (_with("metrics", port=70000), "metrics.port"),
        ({**BASE, "extra": {}}, "extra"),
    ],
)
def test_config_errors_name_the_key(data, key):
    with pytest.raises(MirrorConfigError) as info:
        parse_config(data)
    assert info.value.key == key and key in str(info.value)
    assert isinstance(info.value, MirrorError)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(MirrorConfigError, match="none.toml: no such config file"):
        load_config(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("[mirror\n")
    with pytest.raises(MirrorConfigError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml")


def test_topic_selection_by_list_or_pattern_with_excludes():
    listed = parse_config(_with("mirror", topics=["a.b", "c"]))
    assert listed.matches("a.b") and listed.matches("c")
    assert not listed.matches("aXb") and not listed.matches("cc")
    pattern = parse_config({**BASE, "mirror": {"pattern": "logs-.*", "exclude": ["logs-private.*"]}})
    assert pattern.matches("logs-web") and not pattern.matches("logs-private")
    assert not pattern.matches("logs-private-2") and not pattern.matches("metrics")
    everything = parse_config({**BASE, "mirror": {"pattern": ".*"}})
    assert everything.matches("_audit") and everything.matches("app-logs")
    # a cluster's own status is never copied: the agents' heartbeats, a mirror's audit counts
    assert not everything.matches("_agents") and not everything.matches("_audit.mirror")
    assert not listed.matches("_agents")


def test_rehash_keeps_keys_together_keyless_by_source_partition_and_codec():
    values = [b"v%d" % i for i in range(20)]
    keys = [b"k%d" % (i % 5) if i % 4 else None for i in range(20)]
    raw = records.encode_batch(values, keys, list(range(1000, 1020)), records.CODEC_GZIP)
    out = rehash(raw, source_partition=5, target_count=3)
    seen = []
    for p, data in out.items():
        [batch], _ = records.decode_batches(data, 0)
        assert batch.codec == records.CODEC_GZIP
        for key, value, ts in zip(batch.keys, batch.values, batch.timestamps, strict=True):
            expected = zlib.crc32(key) % 3 if key is not None else 5 % 3
            assert p == expected
            seen.append((key, value, ts))
    assert sorted(seen, key=lambda m: m[2]) == list(zip(keys, values, range(1000, 1020), strict=True))


def test_compression_defaults_to_none_and_is_checked():
    assert parse_config(BASE).compression == "none"  # byte for byte
    assert load_config(ROOT / "etc" / "mirror.toml").compression == "none"
    assert parse_config(_with("mirror", compression="zstd")).compression == "zstd"
    with pytest.raises(MirrorConfigError) as info:
        parse_config(_with("mirror", compression="snappy"))
    assert info.value.key == "mirror.compression" and "zstd" in str(info.value)


def test_rehash_gives_uncompressed_batches_the_mirror_codec():
    values = [b"v%d" % i for i in range(20)]
    keys = [b"k%d" % (i % 5) for i in range(20)]
    raw = records.encode_batch(values, keys, 1000)
    out = rehash(raw, source_partition=0, target_count=2, codec=records.CODEC_ZSTD)
    decoded = [records.decode_batches(data, 0)[0][0] for data in out.values()]
    assert {b.codec for b in decoded} == {records.CODEC_ZSTD}
    assert sorted(v for b in decoded for v in b.values) == sorted(values)


def test_raw_batches_keep_bytes_count_messages_and_leave_a_torn_tail():
    one = records.encode_batch([b"a", b"b"], None, 1)
    two = records.encode_batch([b"c"], [b"k"], 2, records.CODEC_GZIP)
    data = memoryview(one + two + two[:10])
    got, used = raw_batches(data, 100)
    assert used == len(one) + len(two)
    assert [(b.offset, b.next_offset, b.count, bytes(b.raw)) for b in got] == [
        (100, 100 + len(one), 2, one),
        (100 + len(one), 100 + used, 1, two),
    ]
    corrupt = bytearray(one + two)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match=f"offset {100 + len(one)}"):
        raw_batches(memoryview(bytes(corrupt)), 100)
