"""Sans-IO core: multiline joining, file identity, ack tracking, audit ledger, values."""

from __future__ import annotations

import re

import msgpack
import pytest

from agent.acks import AckTracker, Chunk
from agent.audit import AuditLedger, window_of
from agent.encode import TimeParser, chunk_prefix, encode_values, valid_utf8
from agent.identity import EMPTY, Facts, FileKey, Verdict, fingerprint, judge, matches
from agent.lines import Lines, LineSplitter
from agent.multiline import MultilineJoiner
from tests.agent.conftest import FakeFuture

# -- multiline ---------------------------------------------------------------------------


def lines_of(*items: bytes, start: int = 0) -> Lines:
    offsets = []
    offset = start
    for item in items:
        offsets.append(offset)
        offset += len(item) + 1
    return Lines(list(items), offsets, frozenset(), offset)


JAVA = re.compile(rb"^(\s|Caused by)")


def test_java_stack_trace_joins_into_one_message() -> None:
    joiner = MultilineJoiner(continuation=JAVA)
    out = joiner.feed(
        lines_of(b"ERROR boom: java.lang.X", b"\tat a.b(C.java:1)", b"Caused by: y", b"\t... 3 more", b"INFO next")
    )
    assert out.lines == [b"ERROR boom: java.lang.X\n\tat a.b(C.java:1)\nCaused by: y\n\t... 3 more"]
    assert out.offsets == [0]
    # "INFO next" is held (a continuation may follow): the checkpoint stops before it.
    assert joiner.held_from == out.end == 67
    flushed = joiner.flush(end=77)
    assert flushed.lines == [b"INFO next"] and flushed.end == 77 and joiner.held_from is None


def test_start_rule_and_feeding_line_by_line() -> None:
    joiner = MultilineJoiner(start=re.compile(rb"^\d{4}-"))
    got: list[bytes] = []
    batch = lines_of(b"2024-01 a", b"cont 1", b"cont 2", b"2024-02 b", b"2024-03 c")
    for line, offset in zip(batch.lines, batch.offsets, strict=True):
        got += joiner.feed(Lines([line], [offset], frozenset(), offset + len(line) + 1)).lines
    assert got == [b"2024-01 a\ncont 1\ncont 2", b"2024-02 b"]


def test_max_bytes_splits_without_dropping() -> None:
    joiner = MultilineJoiner(continuation=JAVA, max_bytes=21)
    out = joiner.feed(lines_of(b"head line", b" cont-aaaaa", b" cont-bbbbb", b"next"))
    out2 = joiner.flush(100)
    assert out.lines == [b"head line\n cont-aaaaa", b" cont-bbbbb"]
    assert out.cut == {0}
    assert out2.lines == [b"next"]


def test_cut_line_pieces_rejoin_without_newline() -> None:
    joiner = MultilineJoiner(continuation=JAVA, max_bytes=1000)
    splitter = LineSplitter(8)
    out = joiner.feed(splitter.feed(b"0123456789ABCDEF\nNEXT\n"))
    assert out.lines == [b"0123456789ABCDEF"]


def test_joiner_needs_exactly_one_rule() -> None:
    with pytest.raises(ValueError):
        MultilineJoiner()
    with pytest.raises(ValueError):
        MultilineJoiner(continuation=JAVA, start=JAVA)


# -- identity ----------------------------------------------------------------------------

KEY = FileKey(1, 42)


def test_fingerprint_grows_and_matches_prefix() -> None:
    small = fingerprint(b"abc")
    assert small.length == 3 and matches(small, b"abcdef")
    assert not matches(small, b"abX")
    assert not matches(small, b"ab")
    assert matches(EMPTY, b"anything") and fingerprint(b"") == EMPTY


@pytest.mark.parametrize(
    "facts,offset,verdict",
    [
        (Facts(KEY, 100, b"hello world"), 50, Verdict.SAME),
        (Facts(FileKey(1, 43), 100, b"hello world"), 50, Verdict.OTHER),
        (Facts(FileKey(2, 42), 100, b"hello world"), 50, Verdict.OTHER),
        (Facts(KEY, 10, b"hello world"), 50, Verdict.TRUNCATED),
        (Facts(KEY, 0, b""), 50, Verdict.TRUNCATED),
        (Facts(KEY, 100, b"HELLO WORLD"), 50, Verdict.REPLACED),  # inode reuse
        (Facts(KEY, 100, b"hel"), 50, Verdict.REPLACED),
    ],
)
def test_judge(facts: Facts, offset: int, verdict: Verdict) -> None:
    assert judge(KEY, fingerprint(b"hello world"), offset, facts) is verdict


# -- acks -------------------------------------------------------------------------------


def chunk(future: FakeFuture, start: int, end: int, sent_at: float = 0.0) -> Chunk:
    return Chunk(future, start, end, end - start, 1, "t", 0, sent_at)


def test_checkpoint_advances_only_over_acked_prefix() -> None:
    tracker = AckTracker()
    futures = [FakeFuture() for _ in range(3)]
    for i, future in enumerate(futures):
        tracker.add(chunk(future, i * 10, i * 10 + 10))
    futures[1].complete()
    finished, rewind = tracker.poll()
    assert finished == [] and rewind is None and tracker.acked == 0
    futures[0].complete()
    finished, rewind = tracker.poll()
    assert [f.chunk.end for f in finished] == [10, 20] and tracker.acked == 20
    assert tracker.in_flight == 1


def test_failure_rewinds_to_checkpoint_and_stales_later_chunks() -> None:
    tracker = AckTracker()
    a, b, c = FakeFuture(), FakeFuture(), FakeFuture()
    tracker.add(chunk(a, 0, 10))
    tracker.add(chunk(b, 10, 20))
    tracker.add(chunk(c, 20, 30))
    a.complete()
    b.complete(RuntimeError("down"))
    finished, rewind = tracker.poll()
    assert rewind is not None and rewind.offset == 10 and tracker.acked == 10
    assert [f.ok for f in finished] == [True, False]
    c.complete()  # a stale success: counted, but does not move the checkpoint
    finished, rewind = tracker.poll()
    assert [f.ok for f in finished] == [True] and rewind is None and tracker.acked == 10
    assert tracker.in_flight == 0


def test_expired_chunks_count_as_failed() -> None:
    tracker = AckTracker()
    stuck = FakeFuture()
    tracker.add(chunk(stuck, 0, 10, sent_at=5.0))
    assert tracker.oldest_sent() == 5.0
    assert tracker.poll(expire_before=4.0) == ([], None)
    finished, rewind = tracker.poll(expire_before=6.0)
    assert rewind is not None and rewind.offset == 0 and not finished[0].ok
    assert tracker.in_flight == 0


def test_restart_lowers_checkpoint_for_truncation() -> None:
    tracker = AckTracker(acked=100)
    future = FakeFuture()
    tracker.add(chunk(future, 100, 150))
    tracker.restart(0)
    assert tracker.acked == 0
    future.complete()
    finished, _ = tracker.poll()
    assert finished[0].ok and tracker.acked == 0
    with pytest.raises(ValueError):
        tracker.add(chunk(FakeFuture(), 0, 10))
        tracker.add(chunk(FakeFuture(), 5, 10))


# -- audit -------------------------------------------------------------------------------


def test_audit_window_due_only_when_ended_and_settled() -> None:
    ledger = AuditLedger(60_000)
    window = window_of(1_700_000_012_345, 60_000)
    assert window == 1_699_999_980_000
    ledger.sent("t", window, 10)
    ledger.sent("t", window, 5)
    ledger.finished("t", window, 10, ok=True)
    assert ledger.due(window + 61_000) == []  # one chunk still unsettled
    ledger.finished("t", window, 5, ok=False)
    assert ledger.due(window + 30_000) == []  # window not over
    [record] = ledger.due(window + 60_000)
    assert (record.sent, record.acked) == (15, 10)
    assert record.to_map("h") == {
        "host": "h",
        "topic": "t",
        "window_start": window,
        "window_end": window + 60_000,
        "sent": 15,
        "acked": 10,
        "stage": "agent",
    }
    assert ledger.open_windows() == 0


def test_audit_final_flushes_open_windows() -> None:
    ledger = AuditLedger(1000)
    ledger.sent("a", 5000, 3)
    ledger.finished("a", 5000, 3, ok=True)
    assert [r.acked for r in ledger.due(5500, final=True)] == [3]


# -- values ------------------------------------------------------------------------------


def test_values_decode_to_the_documented_map() -> None:
    prefix = chunk_prefix(1_700_000_000_123, "web-1", "/var/log/app.log")
    values = encode_values(prefix, [b"hello", "h\u00e9".encode()], [0, 6])
    assert [msgpack.unpackb(v) for v in values] == [
        {"time": 1_700_000_000_123, "host": "web-1", "file": "/var/log/app.log", "offset": 0, "line": "hello"},
        {"time": 1_700_000_000_123, "host": "web-1", "file": "/var/log/app.log", "offset": 6, "line": "h\u00e9"},
    ]


def test_values_with_parsed_time_and_cut_flag() -> None:
    prefix = chunk_prefix(5, "h", "/f")
    values = encode_values(prefix, [b"a", b"b", b"c"], [0, 2, 4], cut=frozenset({1}), ptimes=[-1000, None, 7])
    decoded = [msgpack.unpackb(v) for v in values]
    assert decoded[0]["ptime"] == -1000 and "cut" not in decoded[0]
    assert decoded[1]["cut"] is True and "ptime" not in decoded[1]
    assert decoded[2]["ptime"] == 7


def test_invalid_utf8_is_replaced_only_where_needed() -> None:
    lines = [b"ok", b"bad \xff\xfe", "fine \u00e9".encode()]
    fixed = valid_utf8(lines, b"\n".join(lines))
    assert fixed[0] is lines[0] and fixed[2] is lines[2]
    assert fixed[1].decode() == "bad \ufffd\ufffd"
    assert valid_utf8([b"ascii"], b"ascii") == [b"ascii"]


def test_time_parser_formats_zones_and_cache() -> None:
    parser = TimeParser(re.compile(rb"^(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"), "%Y-%m-%d %H:%M:%S", "UTC")
    assert parser.parse(b"2024-01-02 03:04:05 x") == 1704164645000
    assert parser.parse(b"2024-01-02 03:04:05 y") == 1704164645000  # cached
    assert parser.parse(b"no time here") is None
    assert parser.parse(b"2024-13-02 03:04:05 bad month") is None and parser.failures == 1
    zoned = TimeParser(re.compile(rb"(?P<time>\S+ \S+)"), "%Y-%m-%d %H:%M:%S%z")
    assert zoned.parse(b"2024-01-02 03:04:05+0100") == 1704161045000


def test_invalid_utf8_held_across_chunks_is_still_replaced() -> None:
    from agent.config import SourceConfig
    from agent.files import TailedFile
    from agent.identity import FileKey

    source = SourceConfig(name="s", patterns=("/x",), topic="t", key=b"h")
    tailed = TailedFile(FileKey(1, 1), "/x", "/x", source, 0, "h")
    assert tailed.feed(b"abc\xff", 1) is None  # held, not ASCII
    out = tailed.feed(b"def\nok\n", 1)  # an ASCII chunk completes it
    assert out is not None
    assert [msgpack.unpackb(v)["line"] for v in out.values] == ["abc\ufffddef", "ok"]
    assert out.utf8_replaced == 1
    out = tailed.feed(b"x" * 10 + b"\n", 1)
    assert out is not None and out.start == 11 and out.end == 22


def test_time_format_without_year_gets_this_year() -> None:
    from datetime import datetime

    parser = TimeParser(re.compile(rb"^(?P<time>\w{3} [ \d]\d \d\d:\d\d:\d\d)"), "%b %d %H:%M:%S", "UTC")
    millis = parser.parse(b"Dec 10 06:55:46 LabSZ sshd[24200]: reverse mapping")
    assert millis is not None
    assert datetime.utcfromtimestamp(millis / 1000).year == datetime.now().year


# -- in-flight budget ----------------------------------------------------------------


def test_inflight_counts_sent_and_held_bytes_and_keeps_the_high_water_mark() -> None:
    from types import SimpleNamespace

    from agent.inflight import InFlight

    gauges = {"inflight_bytes_max": 0}
    inflight = InFlight(1000, gauges)
    assert gauges["inflight_bytes_cap"] == 1000 and inflight.room == 1000
    held = SimpleNamespace(counted_held=0)
    inflight.sent(600)
    inflight.hold(held, 300)  # a partial line held unsent counts too
    assert inflight.bytes == 900 and inflight.room == 100 and gauges["inflight_bytes_max"] == 900
    inflight.hold(held, 300)  # unchanged: counted once
    inflight.finished(600)
    inflight.hold(held, 0)  # flushed or restarted
    assert inflight.bytes == 0 and held.counted_held == 0 and gauges["inflight_bytes_max"] == 900
    inflight.sent(1200)  # one chunk may overshoot; reading stops
    assert inflight.room == -200 and gauges["inflight_bytes_max"] == 1200
