"""The mirror and the target cluster's outages, without processes (mirror/outage.py): which
errors mean "away for now", the backoff and log of :class:`TargetOutage`, its metrics, and
both copy loops' steps that talk to the target (preparing a topic, asking where a
partition ends) waiting out an outage instead of exiting."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from broker.common.errors import (
    AuthenticationError,
    BrokerNotAvailableError,
    BrokerShuttingDownError,
    ConfigError,
    CorruptBatchError,
    DiskFullError,
    InvalidTopicError,
    LeaderNotAvailableError,
    LogferryError,
    MessageTooLargeError,
    NoClusterError,
    NotEnoughReplicasError,
    NotLeaderError,
    ProducerClosedError,
    RequestTimedOutError,
    TlsHandshakeError,
    TopicAuthorizationFailedError,
    ZooKeeperError,
)
from mirror.config import MirrorConfig
from mirror.core import Mirror
from mirror.errors import MirrorConfigError, MirrorError
from mirror.outage import BACKOFF_MAX_S, TargetOutage, TargetUnavailableError, is_transient
from mirror.positions import COPYING, RESYNC
from mirror.preserve import PreservingMirror
from mirror.status import MirrorMetrics

NO_BROKER = "no broker is registered in ZooKeeper at 127.0.0.1:2181/analysis; start one"


@pytest.mark.parametrize(
    "error",
    [
        BrokerNotAvailableError(NO_BROKER),
        BrokerNotAvailableError("connection to 127.0.0.1:9092 was closed"),
        RequestTimedOutError("no response within 30.0s"),
        ZooKeeperError("listing the brokers at h:1/analysis: ConnectionLoss(); is ZooKeeper reachable?"),
        LeaderNotAvailableError("partition t-0 has no leader right now"),
        NotLeaderError("not the leader"),
        BrokerShuttingDownError("stopping"),
        NotEnoughReplicasError("1 in sync, 2 needed"),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError("timed out"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_unreachable_or_busy_target_is_transient(error: BaseException) -> None:
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("broker address 'x' must look like host:port"),
        MirrorConfigError("target.zk_connect", "required"),
        TlsHandshakeError("certificate verify failed"),
        AuthenticationError("wrong user name or password"),
        TopicAuthorizationFailedError("User:m may not create on topic 'secret'"),
        InvalidTopicError("bad name"),
        MessageTooLargeError("too large"),
        CorruptBatchError("crc"),
        DiskFullError("no space left on /data"),
        ProducerClosedError("closed"),
        LogferryError("unclassified"),
        ValueError("a bug, not an outage"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_waiting_cannot_fix_is_permanent(error: BaseException) -> None:
    assert not is_transient(error)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_backs_off_boundedly_logs_loudly_but_rarely_and_ends_at_the_first_answer(caplog) -> None:
    clock = Clock()
    outage = TargetOutage(3600.0, clock=clock, log_every_s=10.0)
    assert not outage.away and outage.may_try() and outage.unavailable_s() == 0.0
    caplog.set_level(logging.INFO, logger="logferry.mirror")
    delays = []
    for _ in range(40):  # one probe each time the backoff allows, over about two minutes
        delay = outage.failed("prepare topic", BrokerNotAvailableError(NO_BROKER))
        delays.append(delay)
        assert not outage.may_try()
        clock.now += delay
        assert outage.may_try()
    assert outage.away and outage.outages == 1 and outage.errors["prepare topic"] == 40
    assert delays[1] > delays[0]  # exponential...
    assert max(delays) <= BACKOFF_MAX_S  # ...and bounded
    lasted = clock.now - 1000.0
    assert outage.unavailable_s() == pytest.approx(lasted)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "MIRROR TARGET UNAVAILABLE: prepare topic: no broker is registered" in errors[0].message
    still = [r for r in caplog.records if "still unavailable" in r.message]
    assert 1 <= len(still) <= lasted / 10.0  # rate limited: one line per 10 s at most
    assert "still unavailable after 1" in still[0].message  # the first one 10 s or more after the ERROR line
    assert "more failed attempts" in still[-1].message
    clock.now += 0.5
    assert outage.ok() == pytest.approx(lasted + 0.5)
    assert not outage.away and outage.may_try() and outage.unavailable_s() == 0.0
    assert outage.ok() is None  # no outage: nothing to end, nothing logged
    assert sum("MIRROR TARGET BACK after" in r.message for r in caplog.records) == 1
    # the next outage starts from the first delay again and is counted
    assert outage.failed("query end", RequestTimedOutError("no response")) == pytest.approx(delays[0], rel=0.5)
    assert outage.outages == 2 and outage.document()["last_error"] == "query end: no response"


def test_a_flapping_target_logs_one_line_of_each_kind_per_interval(caplog) -> None:
    clock = Clock()
    outage = TargetOutage(3600.0, clock=clock, log_every_s=10.0)
    caplog.set_level(logging.INFO, logger="logferry.mirror")
    for _ in range(8):  # away and back every second (a partly reachable target)
        outage.failed("query end", RequestTimedOutError("no response"))
        clock.now += 0.5
        outage.ok()
        clock.now += 0.5
    assert outage.outages == 8
    assert sum("MIRROR TARGET UNAVAILABLE" in r.message for r in caplog.records) == 1
    assert sum("MIRROR TARGET BACK" in r.message for r in caplog.records) == 1
    clock.now += 10.0
    outage.failed("query end", RequestTimedOutError("no response"))
    last = [r.message for r in caplog.records if "MIRROR TARGET UNAVAILABLE" in r.message]
    assert len(last) == 2 and "(7 more since the last line)" in last[-1]


def test_an_outage_longer_than_delivery_timeout_stops_with_one_clear_line() -> None:
    clock = Clock()
    outage = TargetOutage(60.0, clock=clock)
    for _ in range(100):
        clock.now += outage.failed("query end", BrokerNotAvailableError(NO_BROKER))
        if clock.now - 1000.0 >= 60.0:
            break
    with pytest.raises(TargetUnavailableError) as info:
        outage.failed("query end", BrokerNotAvailableError(NO_BROKER))
    message = str(info.value)
    assert isinstance(info.value, MirrorError) and "\n" not in message
    assert "unavailable for 6" in message and "delivery_timeout_s (60s)" in message and "no broker" in message


def test_the_metrics_show_the_outage_while_it_lasts() -> None:
    clock = Clock()
    metrics = MirrorMetrics()
    text = metrics.registry.render()  # no outage tracker yet: the families show zeros
    assert "logferry_mirror_target_unavailable_seconds 0.0" in text
    metrics.outage = TargetOutage(3600.0, clock=clock)
    metrics.outage.failed("append", RequestTimedOutError("no answer"))
    clock.now += 12.5
    text = metrics.registry.render()
    assert "logferry_mirror_target_unavailable_seconds 12.5" in text
    assert "logferry_mirror_target_outages_total 1.0" in text
    assert 'logferry_mirror_target_errors_total{step="append"} 1.0' in text
    assert metrics.document()["target"]["unavailable_s"] == 12.5
    metrics.outage.ok()
    assert "logferry_mirror_target_unavailable_seconds 0.0" in metrics.registry.render()


# -- the copy loops' steps, with fakes for the clients ------------------------------------------


class FakeRouter:
    """Target topics: fails with ``errors`` (one per call) first, then answers 2 partitions."""

    def __init__(self, errors: list[BaseException]):
        self.errors = list(errors)
        self.calls = 0

    def counts(self, topic: str, partition: int) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return 2, 2

    def route(self, topic: str, partition: int, raw: bytes) -> list[tuple[int, bytes]]:
        self.counts(topic, partition)
        return [(partition, raw)]


class FakeAppender:
    def __init__(self, errors: list[BaseException] | None = None):
        self.errors = list(errors or [])

    def query(self, topic: str, partition: int, deadline_s: float) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        return SimpleNamespace(start=0, end=0, last=-1, last_len=0, last_crc=0)


class FakeConsumer:
    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()
        self.seeks: list[tuple[str, int, int]] = []
        self.owned: list[tuple[str, int]] = []

    def assignment(self) -> list[tuple[str, int]]:
        return self.owned

    def pause(self, topic: str, partition: int) -> None:
        self.paused.add((topic, partition))

    def seek(self, topic: str, partition: int, offset: int) -> int:
        self.paused.discard((topic, partition))
        self.seeks.append((topic, partition, offset))
        return offset


CONFIG = MirrorConfig(source_zk="h:1/live", target_zk="h:1/analysis", topics=("_audit",), audit_topic="")


def _preserving(router: FakeRouter, appender: FakeAppender, clock: Clock) -> tuple[PreservingMirror, FakeConsumer]:
    mirror = PreservingMirror(CONFIG)
    consumer = FakeConsumer()
    mirror._router = router  # type: ignore[assignment]
    mirror._appender = appender  # type: ignore[assignment]
    mirror._consumer = consumer  # type: ignore[assignment]
    mirror._source = SimpleNamespace(offsets=lambda t, p: SimpleNamespace(start=0, end=0))  # type: ignore[assignment]
    mirror.outage = TargetOutage(CONFIG.delivery_timeout_s, clock=clock)
    return mirror, consumer


def test_a_topic_appearing_while_the_target_is_away_waits_instead_of_exiting() -> None:
    """Issue 37: "cannot prepare target topic '_audit': no broker is registered" ended the
    mirror. Now the partition stays in resync, paused, and is prepared once the target answers."""
    clock = Clock()
    router = FakeRouter([BrokerNotAvailableError(NO_BROKER), ZooKeeperError("ConnectionLoss")])
    mirror, consumer = _preserving(router, FakeAppender([RequestTimedOutError("no response")]), clock)
    tp = ("_audit", 0)
    mirror.positions.track(tp)
    mirror._resync(tp)  # no broker registered
    assert mirror.positions.state(tp) == RESYNC and tp in consumer.paused and mirror.outage.away
    calls = router.calls
    mirror._resync(tp)  # within the backoff: the target is not asked
    assert router.calls == calls
    for _ in range(2):  # ZooKeeper away; then the topic is ready but the end query times out
        clock.now += mirror.outage.wait_s()
        mirror._resync(tp)
        assert mirror.positions.state(tp) == RESYNC and mirror.outage.away
    assert dict(mirror.outage.errors) == {"prepare topic": 2, "query end": 1}
    clock.now += mirror.outage.wait_s()
    mirror._resync(tp)  # the target answers: copying from the target's end
    assert mirror.positions.state(tp) == COPYING and consumer.seeks == [("_audit", 0, 0)]
    assert not mirror.outage.away and tp not in consumer.paused


@pytest.mark.parametrize(
    "error, step",
    [
        (InvalidTopicError("the target refuses the name"), "prepare"),
        (AuthenticationError("wrong password"), "prepare"),
        (CorruptBatchError("the target answered garbage"), "query"),
    ],
)
def test_a_permanent_target_error_still_stops_with_one_line(error: LogferryError, step: str) -> None:
    clock = Clock()
    router = FakeRouter([error] if step == "prepare" else [])
    mirror, _ = _preserving(router, FakeAppender([error] if step == "query" else []), clock)
    mirror.positions.track(("t", 0))
    with pytest.raises(MirrorError) as info:
        mirror._resync(("t", 0))
    what = "cannot prepare target topic 't'" if step == "prepare" else "cannot learn where t-0 ends on the target"
    assert str(info.value).startswith(what) and str(error) in str(info.value)
    assert not mirror.outage.away


def test_an_acl_refusal_halts_its_topic_and_is_no_outage() -> None:
    clock = Clock()
    refusal = TopicAuthorizationFailedError("User:m may not create on topic 't'")
    mirror, consumer = _preserving(FakeRouter([refusal]), FakeAppender(), clock)
    consumer.owned = [("t", 0), ("t", 1)]
    mirror.positions.track(("t", 0))
    mirror._resync(("t", 0))
    assert mirror.refusals.halted("t") and not mirror.outage.away
    assert consumer.paused == {("t", 0), ("t", 1)}


def test_produce_mode_waits_out_the_target_while_routing_and_resumes() -> None:
    mirror = Mirror(CONFIG)
    router = FakeRouter([BrokerNotAvailableError(NO_BROKER), RequestTimedOutError("no response")])
    mirror._router = router  # type: ignore[assignment]
    mirror.outage = TargetOutage(CONFIG.delivery_timeout_s, initial_s=0.01, maximum_s=0.02)
    batch = SimpleNamespace(raw=b"batch")
    assert mirror._route("_audit", 1, batch) == [(1, b"batch")]  # type: ignore[arg-type]
    assert router.calls == 3 and mirror.outage.outages == 1 and not mirror.outage.away
    with pytest.raises(MirrorError, match="cannot prepare target topic '_audit': bad name"):
        router.errors = [InvalidTopicError("bad name")]
        mirror._route("_audit", 1, batch)  # type: ignore[arg-type]


def test_produce_mode_stopped_during_an_outage_sends_and_tracks_nothing_more() -> None:
    """SIGTERM while a batch waits for its target topic: the batches from there on are
    neither sent nor tracked, so no position past them is committed (the next run copies
    them); the loop returns instead of exiting with an error."""
    mirror = Mirror(CONFIG)
    mirror._router = FakeRouter([BrokerNotAvailableError(NO_BROKER)] * 100)  # type: ignore[assignment]
    mirror._producer = SimpleNamespace(send_raw=lambda *a: pytest.fail("nothing is sent"))  # type: ignore[assignment]
    mirror.outage = TargetOutage(CONFIG.delivery_timeout_s, initial_s=0.01, maximum_s=0.02)
    mirror.stop()
    batch = SimpleNamespace(offset=0, next_offset=100, count=5, raw=b"x" * 100)
    mirror._send([(("_audit", 0), batch), (("_audit", 1), batch)])  # type: ignore[list-item]
    assert len(mirror._tracker) == 0 and mirror.outage.away


# -- starting while the target is away (issue 37: the mirror killed -9 and started again
# during a WAN cut exited at once, "cannot start the mirror: ... is ZooKeeper reachable?")


def _starting(clock: Clock) -> PreservingMirror:
    mirror = PreservingMirror(CONFIG)
    mirror.outage = TargetOutage(CONFIG.delivery_timeout_s, clock=clock)
    mirror._wait_for_target = lambda seconds: setattr(clock, "now", clock.now + seconds)  # type: ignore[method-assign]
    return mirror


def test_a_start_while_the_target_is_away_waits_for_it_and_counts_the_outage() -> None:
    clock = Clock()
    mirror = _starting(clock)
    failures = [ZooKeeperError("cannot connect to ZooKeeper at h:1/analysis"), ConnectionRefusedError(111, "no")]
    attempts: list[float] = []

    def attempt() -> None:
        attempts.append(clock.now)
        if failures:
            raise failures.pop(0)

    mirror._when_target_answers("connect", attempt)
    assert len(attempts) == 3 and attempts[-1] > attempts[0]  # waited between the tries
    assert mirror.outage.outages == 1 and not mirror.outage.away and mirror.outage.errors["connect"] == 2


def test_a_start_gives_up_after_delivery_timeout_and_fails_at_once_on_a_permanent_error() -> None:
    clock = Clock()
    mirror = _starting(clock)

    def away() -> None:
        raise ZooKeeperError("cannot connect to ZooKeeper at h:1/analysis")

    with pytest.raises(TargetUnavailableError, match="longer than delivery_timeout_s"):
        mirror._when_target_answers("connect", away)

    def no_cluster() -> None:  # a mistyped chroot: waiting does not mend it
        raise NoClusterError("no logferry cluster at h:1/analysys (no broker ever registered under /analysys)")

    with pytest.raises(NoClusterError):
        _starting(Clock())._when_target_answers("connect", no_cluster)


def test_a_start_stopped_while_the_target_is_away_returns() -> None:
    clock = Clock()
    mirror = _starting(clock)

    def away() -> None:
        mirror.stop()  # SIGTERM while waiting
        raise ZooKeeperError("cannot connect")

    mirror._when_target_answers("connect", away)
    assert mirror.stopping.is_set()
