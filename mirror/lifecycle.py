"""What both copy modes share: the metrics server, the source group, the copy loop's
rhythm, stopping, closing and the status file.

:class:`mirror.core.Mirror` (re-producing) and :class:`mirror.preserve.PreservingMirror`
(offset-preserving) differ in how a polled batch reaches the target and what counts as
done; each fills in the hooks below (:meth:`MirrorLoop._connect`, ``_settle``,
``_send``, ``_drain``, ``_inflight_bytes``, ``_close_target``) and keeps the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.client import Admin, GroupConsumer, RawBatch, SimpleConsumer
from broker.common.errors import LogferryError, MetricsError
from broker.common.tls import metrics_context
from mirror.audit import MirrorAudit
from mirror.config import MirrorConfig
from mirror.errors import MirrorError
from mirror.memory import keep_receive_buffers
from mirror.outage import TargetOutage, is_transient
from mirror.refusals import Refusals
from mirror.status import MirrorMetrics, write_status_file

if TYPE_CHECKING:
    from broker.common.metrics_server import MetricsServer

log = logging.getLogger("logferry.mirror")

STATUS_EVERY_S = 2.0
POLL_TIMEOUT_S = 0.5
"""Longest poll while nothing is in flight."""
BUSY_POLL_S = 0.02
"""Longest poll while batches are in flight (their acknowledgements wait meanwhile)."""

TopicPartition = tuple[str, int]


class MirrorLoop:
    """One mirror process's lifecycle: ``start()``, ``run()`` until ``stop()``, ``close()``."""

    mode = ""
    """The copy mode, written to the status file ("" for the re-producing mirror)."""

    def __init__(self, config: MirrorConfig):
        self.config = config
        self.stopping = threading.Event()
        self.metrics = MirrorMetrics()
        self._consumer: GroupConsumer | None = None
        self._source: SimpleConsumer | None = None
        self._admin: Admin | None = None
        self._server: MetricsServer | None = None
        self._wake = threading.Event()
        self._audit: MirrorAudit | None = None
        self.refusals = Refusals(config.refused_retry_s)
        """Topics the target refused for want of an ACL (each halted alone, retried)."""
        self.outage = TargetOutage(config.delivery_timeout_s)
        """Whether the target cluster answers, and when to try it again (mirror/outage.py)."""
        self.metrics.outage = self.outage
        self._last_status = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to both clusters and join the group (raises MirrorError if it cannot)."""
        cfg = self.config
        keep_receive_buffers()  # large fetch answers reuse heap memory (mirror/memory.py)
        if cfg.metrics_port:  # first: a taken port fails before anything connects
            # prometheus_client and an HTTP server cost ~50 ms of start: only a mirror with a metrics port imports them
            from broker.common.metrics_server import MetricsServer

            try:
                self._server = MetricsServer(
                    self.metrics.registry,
                    cfg.metrics_host,
                    cfg.metrics_port,
                    name="mirror-metrics",
                    ssl_context=metrics_context(cfg.metrics_tls),
                )
            except MetricsError as exc:
                raise MirrorError(f"metrics.port: {exc}") from None
        try:
            self._source = SimpleConsumer(
                zk=cfg.source_zk, tls=cfg.source_tls, sasl=cfg.source_sasl, listener=cfg.source_listener
            )
            self._when_target_answers("connect", self._open_target)
            if self.stopping.is_set():  # stopped while the target was away: nothing to copy yet
                self._close_clients()
                return
            self._consumer = GroupConsumer(
                cfg.group,
                pattern=cfg.topic_regex(),
                zk=cfg.source_zk,
                start=cfg.start,
                auto_commit_ms=cfg.commit_interval_ms,
                session_timeout=cfg.session_timeout_s,
                max_bytes=cfg.fetch_max_bytes,
                queue_bytes=cfg.queue_bytes,
                consumer_id=cfg.consumer_id,
                raw_batches=True,
                on_gap=self._on_gap,
                fetch_requests_per_broker=cfg.fetch_requests_per_broker,
                fetch_window_bytes=cfg.fetch_window_bytes,
                tls=cfg.source_tls,
                sasl=cfg.source_sasl,
                listener=cfg.source_listener,
            )
        except LogferryError as exc:
            self._close_clients()
            if isinstance(exc, MirrorError):
                raise
            raise MirrorError(f"cannot start the mirror: {exc}") from exc
        self.metrics.consumer_metrics = self._consumer.metrics
        if cfg.audit_topic:  # its own counts on the target (mirror/audit.py)
            member = self._consumer.consumer_id
            try:
                self._when_target_answers("connect", lambda: setattr(self, "_audit", self._make_audit(member)))
            except LogferryError:
                self.close()
                raise
            if self._audit is not None:
                self._audit.start()
        log.info(
            "mirror %s%s: %s -> %s, topics %s, member %s",
            cfg.group,
            f" ({self.mode})" if self.mode else "",
            cfg.source_zk,
            cfg.target_zk,
            cfg.topic_regex(),
            self._consumer.consumer_id,
        )

    def _open_target(self) -> None:
        """The target's clients: the Admin (a frozen target: its topic requests fail
        after ``request_timeout_s``) and the mode's own (:meth:`_connect`)."""
        cfg = self.config
        self._close_target_clients()  # what a failed attempt opened
        self._admin = Admin(
            zk=cfg.target_zk,
            request_timeout=cfg.request_timeout_s,
            tls=cfg.target_tls,
            sasl=cfg.target_sasl,
            listener=cfg.target_listener,
        )
        self._connect()

    def _when_target_answers(self, step: str, attempt: Callable[[], None]) -> None:
        """Run ``attempt`` (it opens clients of the target) until it succeeds, waiting out
        an outage of the target as the copy loop does (:class:`TargetOutage`: backoff,
        loud bounded logs, the status file, :class:`TargetUnavailableError` after
        ``delivery_timeout_s``), or until :meth:`stop`. A mirror started, or restarted
        by its supervisor after a kill, while the other datacenter is away would
        otherwise exit at once and again at every restart (issue 37's nemesis: the WAN
        cut with the mirror killed -9 and started again during it). Permanent errors (a
        bad config, TLS, no cluster at the chroot) raise at once."""
        while not self.stopping.is_set():
            try:
                attempt()
            except (LogferryError, OSError) as exc:
                if not is_transient(exc):
                    raise
                self._wait_for_target(self.outage.failed(step, exc))
                continue
            self.outage.ok()
            return

    def stop(self) -> None:
        """Ask :meth:`run` to finish what is in flight and return (signal-safe)."""
        self.stopping.set()
        self._wake.set()

    def run(self) -> int:
        """Copy until :meth:`stop`; returns 0. Raises MirrorError if the target refuses data."""
        if self._consumer is None and self.stopping.is_set():
            return 0  # stopped during start(), while the target was away
        assert self._consumer is not None, "start() first"
        consumer = self._consumer
        limit = self.config.max_inflight_bytes
        try:
            while not self.stopping.is_set():
                self._settle()
                now = time.monotonic()
                self._tend(now)
                inflight = self._inflight_bytes()
                room = limit - inflight
                if room > 0:
                    batches = consumer.poll_batches(
                        BUSY_POLL_S if inflight else POLL_TIMEOUT_S,
                        min(self.config.poll_max_bytes, room),
                        acknowledge=False,
                    )
                    if batches:
                        self._send(batches)
                else:
                    self._wake.wait(0.2)  # the window is full: wait for acknowledgements
                self._keep_status(now)
            self._drain()
        finally:
            self.close()
        return 0

    def _keep_status(self, now: float) -> None:
        """Take a throughput sample; rewrite the status file when it is due."""
        self.metrics.tick()
        if self.config.status_file and now - self._last_status >= STATUS_EVERY_S:
            self._last_status = now
            self._write_status()

    def _wait_for_target(self, seconds: float) -> None:
        """Wait out the target's backoff (up to ``seconds``) in the copy loop's thread,
        keeping the status file fresh; returns early on :meth:`stop`."""
        deadline = time.monotonic() + seconds
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            self._keep_status(now)
            self.stopping.wait(min(deadline - now, 0.5))

    def close(self) -> None:
        """Commit the acknowledged positions, leave the group, disconnect."""
        if self._consumer is not None:
            try:
                # acknowledged batches were counted as processed one by one; the rest is not
                self._consumer.close(processed=False)
            except LogferryError as exc:
                log.warning("mirror: closing the group consumer: %s", exc)
            self._consumer = None
        if self.config.status_file:
            self._write_status()
        self._close_clients()

    def _close_clients(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._audit is not None:
            self._audit.close()
            self._audit = None
        self._close_target_clients()
        if self._source is not None:
            self._source.close()
        self._source = None

    def _close_target_clients(self) -> None:
        self._close_target()
        if self._admin is not None:
            self._admin.close()
        self._admin = None

    def _write_status(self) -> None:
        assert self.config.status_file
        try:
            doc: dict[str, Any] = self.metrics.document()
            doc["group"] = self.config.group
            if self.mode:
                doc["mode"] = self.mode
            if self._consumer is not None:
                doc["consumer_id"] = self._consumer.consumer_id
            doc["refused"] = self.refusals.document()
            write_status_file(self.config.status_file, doc)
        except (OSError, LogferryError) as exc:
            log.debug("mirror: status file not written: %s", exc)

    # -- topics refused for want of an ACL (mirror/refusals.py) -------------------------------

    def _refuse(self, topic: str, error: LogferryError) -> bool:
        """The target refused ``topic``'s data (an AuthorizationError): halt that topic
        only, stop fetching it, retry it in ``refused_retry_s``. True if it was news."""
        news = self.refusals.refuse(topic, str(error), time.monotonic())
        if news:
            log.error(
                "MIRROR TOPIC REFUSED: %s (%s). Only %r is halted; the other topics "
                "go on; it is tried again every %.0fs, so `logferry acl add` resumes "
                "it without a restart.",
                error,
                type(error).__name__,
                topic,
                self.refusals.retry_s,
            )
        else:
            log.debug("mirror: %r still refused: %s", topic, error)
        self.metrics.refused[(("topic", topic),)] += 1
        self._pause_topic(topic)
        return news

    def _pause_topic(self, topic: str) -> None:
        if self._consumer is not None:
            for t, p in self._consumer.assignment():
                if t == topic:
                    self._consumer.pause(t, p)

    def _granted(self, topic: str) -> None:
        """A batch of ``topic`` reached the target: if it was refused, it is allowed now."""
        if topic in self.refusals.topics and self.refusals.granted(topic) is not None:
            log.warning("mirror: %r is copied again (its ACL now allows it)", topic)

    # -- what each mode fills in -------------------------------------------------------------

    def _connect(self) -> None:
        """Open the mode's target clients (``_source`` and ``_admin`` are open)."""
        raise NotImplementedError

    def _make_audit(self, member: str) -> MirrorAudit:
        """The mode's publisher of its own audit counts."""
        raise NotImplementedError

    def _tend(self, now: float) -> None:
        """Once per loop turn, before polling: the mode's housekeeping."""

    def _inflight_bytes(self) -> int:
        """Bytes sent to the target and not yet settled (the window's use)."""
        raise NotImplementedError

    def _settle(self) -> None:
        """Apply what the target answered since the last turn."""
        raise NotImplementedError

    def _send(self, batches: list[tuple[TopicPartition, RawBatch]]) -> None:
        """Send polled source batches to the target."""
        raise NotImplementedError

    def _drain(self) -> None:
        """After :meth:`stop`: wait (bounded) for what is in flight."""
        raise NotImplementedError

    def _close_target(self) -> None:
        """Close the mode's target clients."""
        raise NotImplementedError

    def _on_gap(self, topic: str, partition: int, offset: int, log_start: int) -> bool:
        """Fetcher thread: the source deleted the position to read next."""
        raise NotImplementedError


__all__ = ["BUSY_POLL_S", "MirrorLoop", "POLL_TIMEOUT_S", "STATUS_EVERY_S", "TopicPartition"]
