"""benchmarks/vs_kafka_mirror.py's and benchmarks/peers/mirrormaker2.py's pure parts:
MirrorMaker 2's properties name one flow between fresh aliases, the records carry
their number for the order check, a copy whose first and last poll coincide has no
copy rate. No JVM or broker is started (the script's short run is the end-to-end
check: docs/benchmarks.md, "MirrorMaker 2 and logferry's mirror")."""

from __future__ import annotations

from benchmarks import vs_kafka_mirror
from benchmarks.peers import mirrormaker2


def parse(properties: str) -> dict[str, str]:
    return dict(line.split(" = ", 1) for line in properties.splitlines())


def test_mm2_copies_one_flow_between_the_aliases_it_is_given() -> None:
    props = parse(mirrormaker2.properties("127.0.0.1:1", "127.0.0.1:2", "run3-mirror", "src3", "dst3"))
    assert props["clusters"] == "src3, dst3"
    assert props["src3.bootstrap.servers"] == "127.0.0.1:1"
    assert props["dst3.bootstrap.servers"] == "127.0.0.1:2"
    assert props["src3->dst3.enabled"] == "true"
    assert props["src3->dst3.topics"] == "run3-mirror"
    assert props["dst3->src3.enabled"] == "false"
    assert props["replication.factor"] == "1"
    assert props["sync.topic.acls.enabled"] == "false"


def test_a_tuned_mm2_sets_its_copy_clients_under_the_flows_aliases_and_nothing_else() -> None:
    plain = parse(mirrormaker2.properties("127.0.0.1:1", "127.0.0.1:2", "t", "src4", "dst4"))
    tuned = parse(mirrormaker2.properties("127.0.0.1:1", "127.0.0.1:2", "t", "src4", "dst4", tuned=True))
    assert tuned["dst4.producer.enable.idempotence"] == "true"
    assert tuned["dst4.producer.max.in.flight.requests.per.connection"] == "5"
    assert tuned["src4.consumer.max.poll.records"] == "10000"
    assert tuned["tasks.max"] == "2"
    changed = {key for key in tuned if plain.get(key) != tuned[key]}
    assert changed == {key.format(source="src4", target="dst4") for key in mirrormaker2.TUNED}


def test_the_mm2_jvm_gets_its_scripts_heap_and_the_brokers_gc() -> None:
    options = vs_kafka_mirror.MM2_JVM_OPTIONS
    assert options[:2] == ("-Xms256M", "-Xmx2G")
    assert "-XX:+UseG1GC" in options
    assert not [o for o in options[2:] if o.startswith("-Xm")]


def test_a_record_carries_its_number_in_200_bytes() -> None:
    for i in (0, 7, 199_999, 9_999_999_999):
        record = vs_kafka_mirror.value(i)
        assert len(record) == vs_kafka_mirror.SIZE
        assert vs_kafka_mirror.sequence(record) == i


def test_a_copy_seen_whole_at_its_first_poll_has_no_copy_rate() -> None:
    seen_at_once = vs_kafka_mirror.Copy(4.8, 4.8, 0.8, 0.2, 50.0)
    over_two_seconds = vs_kafka_mirror.Copy(80.0, 82.0, 25.0, 3.0, 1100.0)
    assert vs_kafka_mirror.copy_rate(5_000, seen_at_once) == "-"
    assert vs_kafka_mirror.copy_rate(5_000, over_two_seconds) == "2,500"
    assert vs_kafka_mirror.spans(5_000, [seen_at_once]) == "-"
    assert vs_kafka_mirror.spans(5_000, [seen_at_once, over_two_seconds]) == "2,500"


def test_a_wrong_copy_is_told_apart() -> None:
    wanted = [0, 2, 4, 6]
    assert "1 duplicates, 0 missing" in vs_kafka_mirror.differences([0, 2, 2, 4, 6], wanted)
    assert "0 duplicates, 1 missing" in vs_kafka_mirror.differences([0, 2, 6], wanted)
    assert "out of order from offset 1 (record 4 where 2 was)" in vs_kafka_mirror.differences([0, 4, 2, 6], wanted)


def test_mm2_exactly_once_mode_is_the_targets_worker_with_its_rest_server_and_a_committed_read() -> None:
    props = parse(
        mirrormaker2.properties(
            "127.0.0.1:1", "127.0.0.1:2", "t", "srck1b", "dstk1b", offset_flush_ms=None, exactly_once_rest_port=4321
        )
    )
    assert props["dstk1b.exactly.once.source.support"] == "enabled"
    assert props["srck1b.consumer.isolation.level"] == "read_committed"
    assert props["dedicated.mode.enable.internal.rest"] == "true"
    assert props["listeners"] == "http://127.0.0.1:4321"
    assert "offset.flush.interval.ms" not in props  # Connect's default
    default = parse(mirrormaker2.properties("127.0.0.1:1", "127.0.0.1:2", "t"))
    assert default["offset.flush.interval.ms"] == "1000"
    assert not [key for key in default if "exactly.once" in key or key == "listeners"]


def test_a_copy_is_tallied_against_the_sources_own_order() -> None:
    tally = vs_kafka_mirror.tally
    source = [1, 3, 5, 7, 9]
    assert tally(source, source) == vs_kafka_mirror.Tally(5, 0, 0, 0)
    # resumed from an older position after a kill: the tail again, in order
    assert tally(source, [1, 3, 5, 3, 5, 7, 9]) == vs_kafka_mirror.Tally(7, 2, 0, 0)
    # two records lost, one in the middle
    assert tally(source, [1, 5, 9]) == vs_kafka_mirror.Tally(3, 0, 2, 0)
    # two records swapped: one place steps back
    assert tally(source, [1, 5, 3, 7, 9]) == vs_kafka_mirror.Tally(5, 0, 0, 1)
    # a record the source never had
    assert tally(source, [1, 3, 4, 5, 7, 9]) == vs_kafka_mirror.Tally(6, 0, 0, 0, foreign=1)
    total = tally(source, [1, 3, 3]) + tally([0, 2], [2, 0])
    assert total == vs_kafka_mirror.Tally(5, 1, 3, 1)
