"""The audit across tiers (sans IO): the shared ledger, the mirror's per-batch counts,
the console's pipeline view and the loader's chain of tiers."""

from __future__ import annotations

import dataclasses
import datetime as dt

import msgpack

from broker.client import (
    MIRROR_STAGE,
    AuditLedger,
    AuditRecord,
    DeliveryFuture,
    RawBatch,
    batch_timestamp,
    batch_windows,
    encode_batch,
)
from broker.common.errors import LogferryError
from broker.wire.codecs import CODEC_GZIP
from console.audit import AuditTally, pipeline_rows, tier_completeness, window_state
from hadoop_loader.audit import AuditReport, HourAudit, stage_counts
from mirror.audit import MirrorAudit


def test_ledger_stamps_its_stage_and_waits_for_unfinished_chunks():
    ledger = AuditLedger(60_000, stage=MIRROR_STAGE)
    ledger.sent("t", 0, 5)
    assert ledger.due(120_000) == []  # unfinished
    ledger.finished("t", 0, 5, ok=True)
    (record,) = ledger.due(120_000)
    assert record == AuditRecord("t", 0, 60_000, 5, 5, stage="mirror")


def test_batch_timestamp_reads_the_header_only():
    raw = encode_batch([b"a", b"b"], None, [1_700_000_000_123, 1_700_000_000_999])
    assert batch_timestamp(raw) == 1_700_000_000_123


def test_batch_windows_count_each_message_in_its_own_window():
    stamps = [59_990, 59_999, 60_000, 60_500, 121_000]
    for codec in (0, CODEC_GZIP):
        raw = encode_batch([b"v%d" % i for i in range(5)], [b"k"] * 5, stamps, codec=codec)
        assert batch_windows(raw, 60_000) == [(0, 2), (60_000, 2), (120_000, 1)]
    assert batch_windows(encode_batch([b"a", b"b"], None, 60_001), 60_000) == [(60_000, 2)]


def test_mirror_audit_splits_a_batch_that_straddles_a_window_boundary():
    # a producer's batch holding lines read either side of a boundary: before, it counted
    # whole in its first message's window (one window over 100%, the next under)
    producer = _Producer()
    audit = MirrorAudit(producer, "mirror-1", window_s=60, clock=lambda: 1000.0)  # type: ignore[arg-type]
    raw = encode_batch([b"x"] * 10, None, [59_000] * 4 + [61_000] * 6)
    done = DeliveryFuture()
    audit.copied("logs", RawBatch(0, len(raw), 10, memoryview(raw)), [0], [done])
    done._complete(0)
    assert audit.publish_due() == 2
    records = sorted(AuditRecord.decode(v) for _, values, _ in producer.sent for v in values)  # type: ignore[type-var]
    assert [(r.window_start, r.sent, r.acked) for r in records] == [(0, 4, 4), (60_000, 6, 6)]


class _Producer:  # records what the mirror's audit publishes (unit test stand-in)
    def __init__(self):
        self.sent: list[tuple[str, list[bytes], bytes | None]] = []

    def send(self, topic, values, key=None):
        self.sent.append((topic, values, key))

    def flush(self, timeout=None):
        pass


def _batch(count: int, ts: int) -> RawBatch:
    raw = encode_batch([b"x"] * count, None, [ts] * count)
    return RawBatch(0, len(raw), count, memoryview(raw))


def test_mirror_audit_counts_batches_once_every_send_is_acknowledged():
    producer = _Producer()
    now = [1000.0]
    audit = MirrorAudit(producer, "mirror-1", window_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    done, split = DeliveryFuture(), [DeliveryFuture(), DeliveryFuture()]
    audit.copied("logs", _batch(10, 61_000), [0], [done])
    audit.copied("logs", _batch(4, 62_000), [0, 1], split)  # re-hashed into two target batches
    audit.copied("_audit", _batch(3, 61_000), [0], [DeliveryFuture()])  # not data: not counted
    done._complete(0)
    split[0]._complete(0)
    assert audit.publish_due() == 0  # the split batch is not finished
    split[1]._complete(None, LogferryError("refused"))
    assert audit.publish_due() == 1
    ((topic, values, key),) = producer.sent
    record = AuditRecord.decode(values[0])
    assert (topic, key) == ("_audit.mirror", b"mirror-1")
    assert record == AuditRecord("logs", 60_000, 120_000, 14, 10, "mirror-1", "mirror")


def test_tiers_are_judged_against_the_tier_before_them():
    stages = tier_completeness(
        {
            "landed": {"sent": 0, "acked": 90},
            "mirror": {"sent": 110, "acked": 110},
            "agent": {"sent": 100, "acked": 100},
        }
    )
    assert list(stages) == ["agent", "mirror", "landed"]
    assert stages["mirror"]["complete_pct"] == 110.0 and stages["mirror"]["of"] == "agent"
    assert stages["landed"]["complete_pct"] == 81.82


def test_a_window_is_judged_only_once_settled():
    assert window_state(0, 60_000, 59_999, 30_000) == "open"
    assert window_state(0, 60_000, 60_000, 30_000) == "settling"
    assert window_state(0, 60_000, 119_999, 30_000) == "settling"  # at least one window length
    assert window_state(0, 60_000, 120_000, 30_000) == "settled"
    assert window_state(0, 1_000, 4_000, 3_000) == "settled"
    tally = AuditTally(settle_s=3)
    tally.add(AuditRecord("app", 0, 1_000, 10, 10, "web-1"))
    assert [r["state"] for r in tally.rows(now_ms=2_000)] == ["settling"]
    (row,) = pipeline_rows([("live", {"rows": tally.rows(now_ms=4_000)})], now_ms=4_000, settle_s=3)
    assert row["state"] == "settled"


def test_pipeline_takes_each_stage_from_the_first_cluster_that_has_it():
    live, analysis = AuditTally(), AuditTally()
    live.add(AuditRecord("app", 0, 60_000, 100, 100, "web-1"))
    analysis.add(AuditRecord("app", 0, 60_000, 100, 100, "web-1"))  # the mirror's copy
    analysis.add(AuditRecord("app", 0, 60_000, 100, 100, "web-1"))  # copied twice
    analysis.add(AuditRecord("app", 0, 60_000, 200, 200, "m-1", "mirror"))
    (row,) = pipeline_rows([("live", {"rows": live.rows()}), ("analysis", {"rows": analysis.rows()}), ("gone", None)])
    assert row["stages"]["agent"]["acked"] == 100 and row["stages"]["agent"]["cluster"] == "live"
    assert row["stages"]["mirror"]["complete_pct"] == 200.0  # the duplicates show


def test_a_tier_missing_from_a_window_is_marked_missing_not_judged_past():
    # the agents' count of the second window never arrived; the mirror's did: judged
    # against the tiers present only, the mirror read 100% (its own acked / sent)
    live, analysis = AuditTally(), AuditTally()
    live.add(AuditRecord("app", 0, 60_000, 100, 100, "web-1"))
    for start in (0, 60_000):
        analysis.add(AuditRecord("app", start, start + 60_000, 100, 100, "m-1", "mirror"))
    views = [("live", {"rows": live.rows()}), ("analysis", {"rows": analysis.rows()})]
    newer, older = pipeline_rows(views, now_ms=10**9)
    assert older["stages"]["mirror"]["complete_pct"] == 100.0 and "missing" not in older["stages"]["agent"]
    agent, mirror = newer["stages"]["agent"], newer["stages"]["mirror"]
    assert agent == {"sent": None, "acked": None, "complete_pct": None, "missing": True, "counted_after": True}
    assert mirror["complete_pct"] is None and mirror["of"] == "agent"
    assert list(newer["stages"]) == ["agent", "mirror"]


def test_a_later_tier_missing_has_nothing_after_it_and_early_windows_expect_nothing():
    tally = AuditTally()
    tally.add(AuditRecord("app", 0, 60_000, 10, 10, "web-1"))  # before the mirror counted
    for start in (60_000, 120_000):
        tally.add(AuditRecord("app", start, start + 60_000, 10, 10, "web-1"))
    tally.add(AuditRecord("app", 60_000, 120_000, 10, 10, "m-1", "mirror"))
    tally.add(AuditRecord("other", 120_000, 180_000, 5, 5, "web-1"))  # never mirrored
    rows = {(r["topic"], r["window_start"]): r["stages"] for r in tally.rows(now_ms=10**9)}
    assert rows[("app", 120_000)]["mirror"]["missing"] and not rows[("app", 120_000)]["mirror"]["counted_after"]
    assert rows[("app", 120_000)]["mirror"]["of"] == "agent"
    assert "mirror" not in rows[("app", 0)]  # the mirror's first count is later: nothing expected
    assert rows[("app", 60_000)]["mirror"]["complete_pct"] == 100.0
    assert list(rows[("other", 120_000)]) == ["agent"]
    # the pipeline takes the per-cluster rows' missing markers for nothing
    (row,) = [
        r
        for r in pipeline_rows([("live", {"rows": tally.rows(now_ms=10**9)})])
        if r["window_start"] == 120_000 and r["topic"] == "app"
    ]
    assert row["stages"]["mirror"]["missing"] and row["stages"]["agent"]["acked"] == 10


def test_loader_chain_ends_with_landed_against_the_mirror():
    tz = dt.UTC
    records = [
        msgpack.unpackb(r.encode())
        for r in (
            AuditRecord("app", 0, 60_000, 100, 100, "web-1"),
            AuditRecord("app", 0, 60_000, 120, 120, "m-1", "mirror"),
        )
    ]
    report = AuditReport(tiers=stage_counts(records, "acked", tz))
    hour = HourAudit("app", "1970-01-01T00", 100, 114, True, duplicates=6)
    assert report.chain(hour) == [("agent", 100, None), ("mirror", 120, 1.2), ("landed", 120, 1.0)]


class _Target:  # the target partitions' ends, as SimpleConsumer.offsets reports them
    def __init__(self, ends):
        self.ends = ends

    def offsets(self, topic, partition):
        from broker.client import OffsetRange

        return OffsetRange(0, self.ends[(topic, partition)])


def test_mirror_audit_does_not_count_copies_the_target_held_already():
    producer = _Producer()
    audit = MirrorAudit(
        producer,
        "m",
        window_s=60,
        clock=lambda: 1000.0,  # type: ignore[arg-type]
        target=_Target({("logs", 0): 500}),
    )  # type: ignore[arg-type]
    audit.before_send("logs", [0])
    held, fresh = DeliveryFuture(), DeliveryFuture()
    audit.copied("logs", _batch(7, 1000), [0], [held])
    audit.copied("logs", _batch(3, 1000), [0], [fresh])
    held._complete(120)  # dropped as a duplicate: answered where the batch lies
    fresh._complete(500)  # appended at the end
    audit.publish_due(final=True)
    record = AuditRecord.decode(producer.sent[0][1][0])
    assert (record.sent, record.acked) == (10, 3)


def test_heartbeats_list_files_by_lag_and_go_stale_after_three_intervals():
    from agent.heartbeat import Heartbeats
    from agent.metrics import Snapshot
    from broker.client import AgentHeartbeat
    from console.agents import AgentsReader

    beats = Heartbeats("_agents", 10.0, "web-1")
    snap = Snapshot(
        host="web-1",
        pid=7,
        started=100.0,
        state="running",
        gauges={"lag_bytes": 30},
        files=[{"path": "/a", "lag": 0, "offset": 5, "size": 5}, {"path": "/b", "lag": 30, "offset": 1, "size": 31}],
    )
    beat = AgentHeartbeat.decode(beats.record(snap, now=1000.0).encode())
    assert beat is not None and beat.time_ms == 1_000_000 and beat.lag_bytes == 30
    assert [f["path"] for f in beat.files] == ["/b", "/a"]
    # a path rotated twice: three files, told apart by where each is now and its inode
    rotated = [
        {"path": "/app.log", "where": "/app.log", "inode": 30, "lag": 0, "rotated": False},
        {"path": "/app.log", "where": "/app.log.1", "inode": 20, "lag": 0, "rotated": True},
        {"path": "/app.log", "where": None, "inode": 10, "lag": 0, "rotated": True, "deleted": True},
    ]
    again = AgentHeartbeat.decode(beats.record(dataclasses.replace(snap, files=rotated), now=1000.0).encode())
    assert again is not None
    assert [(f["where"], f["inode"], f["rotated"], f["deleted"]) for f in again.files] == [
        (None, 10, True, True),
        ("/app.log.1", 20, True, False),
        ("/app.log", 30, False, False),
    ]
    assert AgentHeartbeat.decode(b"\x01") is None
    reader = AgentsReader()
    reader.add(beat)
    reader.add(beat._replace(time_ms=900_000))  # older: ignored
    (fresh,) = reader.view(now_ms=1_030_000)["agents"]
    assert fresh["age_s"] == 30.0 and not fresh["stale"]
    (late,) = reader.view(now_ms=1_030_001)["agents"]
    assert late["stale"]
    reader.add(beat._replace(time_ms=1_000_001, state="stopped"))
    assert not reader.view(now_ms=9_000_000)["agents"][0]["stale"]  # it said it stopped

    class Sink:
        def __init__(self):
            self.sent = []

        def send(self, topic, value, key=None):
            self.sent.append((topic, key))

    sink = Sink()
    assert beats.maybe_publish(sink, snap) and not beats.maybe_publish(sink, snap)
    assert beats.maybe_publish(sink, snap, "stopped", force=True)
    assert sink.sent == [("_agents", b"web-1")] * 2


def test_loader_summary_prints_the_chain_when_a_mirror_publishes_too():
    import io
    import json

    from hadoop_loader.summary import print_audit

    tiers = {"agent": {("app", "1970-01-01T00"): 100}, "mirror": {("app", "1970-01-01T00"): 105}}
    report = AuditReport(hours=[HourAudit("app", "1970-01-01T00", 100, 105, True)], tiers=tiers)
    out = io.StringIO()
    print_audit(report, out)
    assert "agent 100  ->  mirror 105 (105.00%)  ->  landed 105 (100.00%)" in out.getvalue()
    (hour,) = json.loads(report.to_json())["hours"]
    assert [t["stage"] for t in hour["tiers"]] == ["agent", "mirror", "landed"]


def test_mirror_audit_in_preserve_mode_counts_appends_that_succeeded():
    producer = _Producer()
    audit = MirrorAudit(producer, "m", window_s=60, clock=lambda: 1000.0)  # type: ignore[arg-type]
    first, second = _batch(4, 1000), _batch(6, 1000)._replace(offset=100)
    audit.appending(("logs", 0), first)
    audit.appending(("logs", 0), second)
    audit.appending(("_audit", 0), first)  # a copy of the agents' records: not data
    audit.appended(("logs", 0), 0, True)
    audit.appended(("logs", 0), 100, False)  # mismatched: resent later, counted then
    audit.appended(("logs", 0), 100, True)  # not pending any more: ignored
    audit.publish_due(final=True)
    record = AuditRecord.decode(producer.sent[0][1][0])
    assert (record.sent, record.acked) == (10, 4)
