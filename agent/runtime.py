"""The agent's main loop: discover files, read them, publish, checkpoint, audit.

One thread owns all agent state and runs :meth:`Agent.run`. Other threads only hand
it work through thread-safe queues and then set ``_wake``: the producer's sender
thread (a chunk's future completed), the watchdog thread (a file appeared, moved or
vanished) and the signal handlers (stop; reload on SIGHUP). Every pass of the loop:

1. collect finished chunks: advance checkpoints, or rewind a file whose batch failed;
   apply a requested reload of the sources (:meth:`Agent._reload`);
2. apply watchdog events; rescan the patterns every ``scan_interval_s``;
3. every ``poll_interval_s``, ``fstat`` open files (growth, truncation, deletion) and
   ``stat`` closed ones;
4. read ready files, one chunk per file per turn (fair across files), until the bytes
   in flight reach ``max_inflight_bytes`` (backpressure: the files are the buffer);
5. time-based duties: flush partial lines and multiline messages of quiet files,
   close idle, rotated and deleted files, write the checkpoint, publish due audit
   records, refresh the status snapshot.

The agent is composed of: a :class:`~agent.inventory.FileInventory` (which files
exist and which is which: steps 2 and 3, and what the loop learns when it opens a
file), an :class:`~agent.inflight.InFlight` (the byte budget of step 4), the counters
(:mod:`agent.metrics`), the checkpoint store and the audit ledger. Rotation and
identity rules live in :mod:`agent.identity`; acknowledgement order in
:mod:`agent.acks`; the audit window rule in :mod:`agent.audit`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack

from agent import resume
from agent.acks import Chunk
from agent.audit import AuditLedger, AuditRecord, window_of
from agent.checkpoint import CheckpointStore, write_atomically
from agent.config import AgentConfig
from agent.errors import AgentError, CheckpointError, PublishError
from agent.files import Outgoing, TailedFile
from agent.heartbeat import Heartbeats
from agent.identity import Facts, FileKey, Verdict, judge
from agent.inflight import InFlight
from agent.inventory import FileInventory
from agent.metrics import AgentCounters, Snapshot, StatusServer
from agent.reload import apply_sources, held_limit_problem, restart_only_changes, source_changes
from broker.common.errors import CorruptBatchError, MessageTooLargeError, MetricsError
from broker.common.retry import Retry
from broker.common.tls import metrics_context

log = logging.getLogger("logferry.agent")

ProducerFactory = Callable[[AgentConfig], Any]
ConfigLoader = Callable[[], AgentConfig]

MAX_RETRY_DELAY = 30.0
"""Longest pause before re-reading a file whose batch failed."""
REREAD_BACKOFF = Retry(initial=0.5, maximum=MAX_RETRY_DELAY)

BATCH_REFUSALS = (CorruptBatchError, MessageTooLargeError)
"""Errors about a batch itself: after three of them for the same chunk, the chunk is
dropped (counted in ``messages_dropped``). Every other failure (no ACL, wrong
credentials, an unknown topic, a broker down) keeps the lines and retries."""
"""Pause before re-reading a file whose batch failed: 0.5 s, doubling per repeated failure."""
AUDIT_BACKLOG = 10_000
"""Audit records kept for re-publishing while the audit topic is unreachable."""
ROUND_SECONDS = 0.05
"""Longest stretch of reading before the loop attends to its other duties."""


def make_producer(config: AgentConfig) -> Any:
    """Create the ``broker.client.Producer`` the agent publishes with."""
    from broker.client import LogferryError, Producer

    p = config.producer
    try:
        return Producer(
            zk=config.zk,
            brokers=list(config.brokers) if config.brokers else None,
            tls=config.tls,
            sasl=config.sasl,
            listener=config.listener,
            acks=p.acks,
            linger_ms=p.linger_ms,
            batch_bytes=p.batch_bytes,
            batch_messages=p.batch_messages,
            # The agent enforces its own cap before reading; the producer's buffer is
            # larger so that send() never blocks the loop.
            buffer_bytes=2 * config.max_inflight_bytes + 4 * config.read_chunk_bytes,
            block_timeout=1.0,
            compression=p.compression,
            delivery_timeout=p.delivery_timeout_s,
            request_timeout=p.request_timeout_s,
            retry_backoff_ms=p.retry_backoff_ms,
            client_id=f"agent-{config.host}",
            idempotence=True,
        )  # acks 1 or all (0 is refused): a retry appends nothing twice
    except LogferryError as exc:
        raise PublishError(f"cannot create the producer: {exc}") from None


class Agent:
    """Tails the configured files and publishes them; see the module docstring."""

    def __init__(
        self,
        config: AgentConfig,
        producer_factory: ProducerFactory = make_producer,
        reload_config: ConfigLoader | None = None,
    ):
        self.config = config
        self._producer_factory = producer_factory
        self._reload_config = reload_config
        """Reads the config file again (SIGHUP); None: reloading is not possible."""
        self._reload_requested = threading.Event()
        self.producer: Any = None
        self.metrics = AgentCounters(tuple(s.name for s in config.sources if s.parse))
        self.inflight = InFlight(config.max_inflight_bytes, self.metrics.gauges)
        self.inventory = FileInventory(config, self.metrics, self.inflight)
        self._store = CheckpointStore(config.state_dir, config.host)
        self._ledger = AuditLedger(int(config.audit.window_s * 1000))
        a = config.audit
        self._heartbeats = (
            Heartbeats(a.agents_topic, a.heartbeat_s, config.host) if a.enabled and a.heartbeat_s > 0 else None
        )
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._done: deque[TailedFile] = deque()  # files with a finished chunk
        self._audit_done: deque[tuple[Any, AuditRecord]] = deque()
        self._audit_backlog: list[AuditRecord] = []
        self._audit_pending = 0
        self._server: StatusServer | None = None
        self._started = time.time()
        self._next_closed_poll = 0.0
        self._next_checkpoint = 0.0
        self._next_second = 0.0
        self.snapshot = Snapshot()
        p = config.producer
        self._ack_timeout = p.delivery_timeout_s + p.request_timeout_s + 10.0
        """Longer than the producer can legitimately take to complete a future."""
        self._producer_stuck = False
        self._quiet_until = 0.0  # rate limit for repeated warnings
        self._audit_retry_at = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop (safe from signal handlers and other threads)."""
        self._stopping.set()
        self._wake.set()

    def reload(self) -> None:
        """Ask the loop to re-read the config and apply its sources (SIGHUP; safe from
        signal handlers and other threads)."""
        self._reload_requested.set()
        self._wake.set()

    def run(self) -> int:
        """Run until :meth:`stop`; shut down cleanly; return the exit code (0)."""
        self._start()
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                busy = self._pass()
                if not busy:
                    self._wake.wait(self._idle_wait())
        finally:
            self._shutdown()
        return 0

    def _start(self) -> None:
        self._store.lock()
        try:
            checkpointed = self._store.load()
            self.producer = self._producer_factory(self.config)
            if self.config.metrics_port is not None:
                try:
                    self._server = StatusServer(
                        self.config.metrics_bind, self.config.metrics_port, metrics_context(self.config.metrics_tls)
                    )
                except MetricsError as exc:
                    raise AgentError(f"metrics.port: {exc}") from None
            if self.config.watch:
                self.inventory.watch(self._wake.set)
            self.inventory.adopt(checkpointed)
            self.inventory.scan(initial=True)
            if self.config.resume_from_cluster:
                self._learn_holdings()
        except BaseException:
            self._close_resources()
            raise
        log.info(
            "agent %s started: %d files, %d sources, in-flight cap %d bytes",
            self.config.host,
            len(self.inventory.files),
            len(self.config.sources),
            self.config.max_inflight_bytes,
        )
        self._refresh_snapshot("running")

    def _shutdown(self) -> None:
        """SIGTERM path: stop reading, flush, wait for acks (bounded), checkpoint, audit."""
        log.info(
            "stopping: waiting up to %.0fs for %d bytes in flight", self.config.shutdown_timeout_s, self.inflight.bytes
        )
        deadline = time.monotonic() + self.config.shutdown_timeout_s
        try:
            if self.producer is not None:
                try:
                    self.producer.flush(timeout=max(deadline - time.monotonic(), 0.1))
                except Exception as exc:  # noqa: BLE001 - report and go on shutting down
                    log.warning("not every batch was acknowledged before the deadline: %s", exc)
                self._collect()
                self._publish_audit(final=True)
                if self._heartbeats is not None:
                    self._heartbeats.maybe_publish(self.producer, self.snapshot, "stopped", force=True)
                try:
                    self.producer.flush(timeout=max(deadline - time.monotonic(), 0.1))
                except Exception as exc:  # noqa: BLE001
                    log.warning("audit records not acknowledged: %s", exc)
                self._collect()
            self._write_checkpoint()
        finally:
            self._refresh_snapshot("stopped")
            self._close_resources()
        log.info("stopped: checkpoint written, %d messages acknowledged", self.metrics.counters["messages_acked"])

    def _close_resources(self) -> None:
        self.inventory.close()
        if self.producer is not None:
            with contextlib.suppress(Exception):  # closing; nothing left to save
                self.producer.close(timeout=1.0)
        if self._server is not None:
            self._server.close()
        self._store.unlock()

    def _learn_holdings(self) -> None:
        """After a crash: find, per checkpointed file behind its size, the last line the
        cluster already holds, so those lines are skipped rather than re-sent.

        Bounded (the tail since the checkpoint's time minus the acknowledgement timeout,
        at most ``resume_max_bytes`` per partition, 5 s requests); any failure only
        means re-sending from the checkpoint, as without it (agent.resume)."""
        written = self._store.written
        behind: list[TailedFile] = []
        for tailed in self.inventory.everything():
            if not tailed.file_id_saved or tailed.where is None:
                continue
            try:
                size = os.stat(tailed.where).st_size
            except OSError:
                continue
            if size > tailed.acks.acked:
                behind.append(tailed)
        if written is None or not behind:
            return
        from broker.client import LogferryError, SimpleConsumer

        since_ms = int((written - self._ack_timeout) * 1000)
        wanted = [resume.Wanted(t.source.topic, t.source.key, t.file_id) for t in behind]
        started = time.monotonic()
        try:
            with SimpleConsumer(
                self.config.zk,
                list(self.config.brokers or ()) or None,
                tls=self.config.tls,
                sasl=self.config.sasl,
                listener=self.config.listener,
                request_timeout=5.0,
                metadata_retries=1,
                client_id=f"agent-{self.config.host}-resume",
            ) as consumer:
                held = resume.read_holdings(consumer, self.config.host, wanted, since_ms, self.config.resume_max_bytes)
        except (LogferryError, OSError) as exc:
            log.warning(
                "cannot learn what the cluster holds of %d files (%s); re-sending "
                "them from their checkpoint (duplicates keep their identity)",
                len(behind),
                exc,
            )
            return
        for tailed in behind:
            offset = held.get(tailed.file_id)
            if offset is not None and offset >= tailed.acks.acked:
                tailed.held_by_cluster = (tailed.file_id, offset)
                log.info("%s", resume.describe(tailed.path, offset, tailed.acks.acked))
        log.info(
            "looked for %d files behind their checkpoint in the cluster in %.2fs: %d found",
            len(behind),
            time.monotonic() - started,
            sum(t.held_by_cluster is not None for t in behind),
        )

    def _skip_held(self, tailed: TailedFile, out: Outgoing) -> Outgoing | None:
        """Drop the leading messages of ``out`` the cluster holds; None if all are."""
        fid, through = tailed.held_by_cluster  # type: ignore[misc]  # caller checked
        if fid != tailed.file_id:  # truncated or replaced since: a new generation
            tailed.held_by_cluster = None
            return out
        keep, resume_at = resume.skip_held(out.offsets, through)
        self.metrics.add("resume_skipped", keep)
        self.inventory.dirty = True
        if resume_at is None:
            tailed.acks.acked = max(tailed.acks.acked, out.end)
            return None
        tailed.held_by_cluster = None
        tailed.acks.acked = max(tailed.acks.acked, resume_at)
        if keep == 0:
            return out
        values = out.values[keep:]
        return out._replace(
            values=values,
            offsets=out.offsets[keep:],
            start=resume_at,
            nbytes=sum(map(len, values)),
            parse_failed=tuple(i - keep for i in out.parse_failed if i >= keep),
        )

    # -- the loop ---------------------------------------------------------------------------

    def _pass(self) -> bool:
        """One pass of the loop; True when it read something (so do not sleep)."""
        now = time.monotonic()
        inventory = self.inventory
        self._collect()
        if self._reload_requested.is_set():
            self._reload_requested.clear()
            self._reload()
        inventory.apply_events()
        if now >= inventory.next_scan:
            inventory.scan()
            inventory.next_scan = now + self.config.scan_interval_s
        if now >= inventory.next_poll:
            inventory.poll_open()
            inventory.next_poll = now + self.config.poll_interval_s
        if now >= self._next_closed_poll:
            inventory.poll_closed()
            self._next_closed_poll = now + max(1.0, self.config.poll_interval_s)
        busy = self._read_round()
        self._collect()
        if now >= self._next_second:
            self._timeouts(now)
        if now >= self._next_checkpoint:
            self._write_checkpoint()
            self._next_checkpoint = now + self.config.checkpoint_interval_s
        if now >= self._next_second:
            self._publish_audit()
            self._refresh_snapshot("running")
            if self._heartbeats is not None:
                self._heartbeats.maybe_publish(self.producer, self.snapshot)
            self._next_second = now + min(1.0, self.config.poll_interval_s * 4)
        return busy

    def _idle_wait(self) -> float:
        if self.inventory.ready and self.inflight.room > 0:
            return 0.01
        return min(self.config.poll_interval_s, 0.25)

    # -- reload ----------------------------------------------------------------------------

    def _reload(self) -> None:
        """Re-read the config; apply its sources, keep every file's position.

        An invalid file is logged and changes nothing (the agent goes on with the config
        it has). Settings other than the sources need a restart: a change to one is
        logged as a warning and ignored (:mod:`agent.reload`).
        """
        if self._reload_config is None:
            log.warning("reload requested, but this agent has no config file to re-read")
            return
        try:
            loaded = self._reload_config()
            problem = held_limit_problem(apply_sources(self.config, loaded))
        except AgentError as exc:
            problem = str(exc)
        if problem is not None:
            log.error("reload failed, still running with the previous config: %s", problem)
            self.metrics.add("reload_failures")
            self.metrics.add("errors")
            return
        fixed = restart_only_changes(self.config, loaded)
        if fixed:
            log.warning(
                "reload: %s changed; restart the agent to apply %s (it keeps the values it started with)",
                ", ".join(fixed),
                "it" if len(fixed) == 1 else "them",
            )
        changes = source_changes(self.config.sources, loaded.sources)
        before = {s.name for s in self.config.sources}
        fresh = frozenset(i for i, s in enumerate(loaded.sources) if s.name not in before)
        self.config = apply_sources(self.config, loaded)
        files_before = len(self.inventory.files)
        kept, stopped = self.inventory.reload(self.config, fresh)
        self.metrics.add("reloads")
        log.info(
            "reloaded the config: %s; %d files kept (positions kept), %d stopped, %d new",
            changes.describe(),
            kept,
            stopped,
            max(len(self.inventory.files) - files_before + stopped, 0),
        )

    # -- completions ---------------------------------------------------------------------

    def _on_done(self, tailed: TailedFile) -> Callable[[Any], None]:
        done = self._done
        wake = self._wake

        def callback(_future: Any) -> None:  # runs in the producer's sender thread
            done.append(tailed)
            wake.set()

        return callback

    def _collect(self, expire_before: float | None = None) -> None:
        """Account finished chunks; advance checkpoints; rewind files whose batch failed."""
        done = self._done
        # Take what is queued now (callbacks keep appending: those wait for the next call).
        batch = list({id(t): t for t in [done.popleft() for _ in range(len(done))]}.values())
        for tailed in batch:
            before = tailed.acks.acked
            finished, rewind = tailed.acks.poll(expire_before)
            counters = self.metrics.counters
            if expire_before is not None and any(not c.completion.done() for c, _ in finished):
                if not self._producer_stuck:
                    log.error(
                        "%s: no acknowledgement within %.0fs; sending again from offset "
                        "%d with a new producer (other files may follow)",
                        tailed.path,
                        self._ack_timeout,
                        tailed.acks.acked,
                    )
                self._producer_stuck = True
            for chunk, ok in finished:
                self.inflight.finished(chunk.nbytes)
                self._ledger.finished(chunk.topic, chunk.window, chunk.messages, ok)
                if ok:
                    counters["messages_acked"] += chunk.messages
                else:
                    counters["messages_failed"] += chunk.messages
            if tailed.acks.acked != before:
                self.inventory.dirty = True
                tailed.failures = 0
            if rewind is not None:
                self._rewind(tailed, rewind.offset, rewind.error)
        while self._audit_done:
            future, record = self._audit_done.popleft()
            self._audit_pending -= 1
            if future.exception() is None:
                self.metrics.add("audit_records")
            elif len(self._audit_backlog) < AUDIT_BACKLOG:
                self._audit_backlog.append(record)

    def _replace_producer(self) -> None:
        """A future never completed (a client bug): its partition may be wedged for good.

        Replace the producer; the old one is closed in the background, which fails
        whatever it still holds, and those files are read again from their checkpoints.
        """
        self._producer_stuck = False
        old = self.producer
        try:
            self.producer = self._producer_factory(self.config)
        except AgentError as exc:
            log.error("cannot replace the producer: %s", exc)
            self.producer = old
            return
        self.metrics.add("errors")

        def close_old() -> None:
            try:
                old.close(timeout=1.0)
            except Exception as exc:  # noqa: BLE001 - it failed what it held: that is the point
                log.debug("old producer closed: %s", exc)

        threading.Thread(target=close_old, daemon=True, name="agent-old-producer").start()

    def _rewind(self, tailed: TailedFile, offset: int, error: BaseException) -> None:
        """A batch failed: read the file again from its checkpoint, after a pause."""
        self.metrics.add("rewinds")
        self.metrics.add("errors")
        tailed.failures = tailed.failures + 1 if tailed.fail_offset == offset else 1
        tailed.fail_offset = offset
        # only a batch the brokers refuse for what it is (corrupt, too large) is ever
        # given up on; anything else (an ACL or credentials missing, an unknown topic)
        # is fixed by an operator, and the lines wait for it
        about_the_batch = isinstance(error, BATCH_REFUSALS)
        delay = REREAD_BACKOFF.delay(tailed.failures)
        if time.monotonic() >= self._quiet_until:
            log.warning(
                "%s: batch failed (%s); re-reading from offset %d in %.1fs (repeats muted for 10s)",
                tailed.path,
                error,
                offset,
                delay,
            )
            self._quiet_until = time.monotonic() + 10.0
        if about_the_batch and tailed.failures >= 3 and tailed.fd is not None:
            self._skip_chunk(tailed, offset)
            return
        self.inventory.restart(tailed, offset)
        tailed.retry_at = time.monotonic() + delay

    def _skip_chunk(self, tailed: TailedFile, offset: int) -> None:
        """Give up on the lines after ``offset`` that keep failing for good (counted)."""
        tailed.restart_at(offset)
        data = tailed.read(self.config.read_chunk_bytes)
        out = tailed.feed(data, int(time.time() * 1000)) or tailed.flush_held(0)
        count = len(out.values) if out is not None else 0
        end = out.end if out is not None else offset + len(data)
        log.error(
            "%s: dropping %d messages at offsets %d-%d after %d non-retriable failures",
            tailed.path,
            count,
            offset,
            end,
            tailed.failures,
        )
        self.metrics.add("messages_dropped", count)
        tailed.acks.acked = end
        tailed.failures = 0
        self.inventory.restart(tailed, end)
        self.inventory.dirty = True

    # -- reading -------------------------------------------------------------------------

    def _read_round(self) -> bool:
        """Read ready files in turns until caught up, capped, or the round's time is up."""
        ready = self.inventory.ready
        if not ready:
            return False
        chunk = self.config.read_chunk_bytes
        deadline = time.monotonic() + ROUND_SECONDS
        read_any = False
        while ready:
            progressed = False
            for tailed in list(ready):
                room = self.inflight.room
                if room <= 0:
                    self.metrics.add("backpressure_waits")
                    return read_any
                if not self._can_read(tailed):
                    continue
                # Encoded messages are larger than the bytes read (about 1.5x for
                # 200-byte lines): size the read so its messages fit in the room left.
                size = min(chunk, int(room / (tailed.expansion * 1.1)))
                if size < 4096:
                    self.metrics.add("backpressure_waits")
                    return read_any
                if self._read_once(tailed, size):
                    progressed = read_any = True
                if time.monotonic() >= deadline:
                    return read_any
            if not progressed:
                break
        return read_any

    def _can_read(self, tailed: TailedFile) -> bool:
        waiting = tailed.waiting_for
        if waiting is not None:
            if not self.inventory.fully_read(waiting) and not _waits_for_itself(tailed):
                return False
            tailed.waiting_for = None
        if tailed.retry_at and time.monotonic() < tailed.retry_at:
            return False
        if tailed.fd is None:
            return self._reopen(tailed)
        return True

    def _reopen(self, tailed: TailedFile) -> bool:
        """Open a closed file (verifying it is still the same one) within the handle limit."""
        inventory = self.inventory
        if tailed.where is None:
            inventory.ready.pop(tailed, None)
            return False
        if inventory.open_count >= self.config.max_open_files and not self._close_lru():
            return False
        try:
            st = tailed.open()
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                inventory.closed_file_vanished(tailed)
            else:
                log.warning("%s: cannot open (%s)", tailed.where, exc.strerror)
                self.metrics.add("errors")
                inventory.ready.pop(tailed, None)
            return False
        self.metrics.add("files_opened")
        inventory.open_changed()
        if FileKey(st.st_dev, st.st_ino) != tailed.key:
            tailed.close()
            inventory.open_changed()
            inventory.rotated_away(tailed)
            return False
        verdict = judge(tailed.key, tailed.fp, tailed.pos, Facts(tailed.key, st.st_size, tailed.head(tailed.fp.length)))
        if verdict in (Verdict.TRUNCATED, Verdict.REPLACED):
            if verdict is Verdict.REPLACED:
                self.metrics.add("replaced_files")
            inventory.truncated(tailed, st.st_size)
        tailed.size = st.st_size
        return True

    def _close_lru(self) -> bool:
        """Close the least recently used idle live file to free a handle."""
        candidates = [
            t
            for t in self.inventory.files.values()
            if t.fd is not None and not t.draining and t.at_eof and t not in self.inventory.ready
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda t: t.last_used)
        victim.close()
        self.metrics.add("files_closed")
        self.inventory.open_changed()
        return True

    def _read_once(self, tailed: TailedFile, size: int) -> bool:
        """Read one chunk of ``tailed`` and send what it completes; False at end of file."""
        try:
            data = tailed.read(size)
        except OSError as exc:
            log.warning("%s: read failed (%s)", tailed.path, exc.strerror)
            self.metrics.add("errors")
            self.inventory.ready.pop(tailed, None)
            return False
        if not data:
            tailed.at_eof = True
            tailed.reached_eof_once = True
            self.inventory.ready.pop(tailed, None)
            return False
        counters = self.metrics.counters
        counters["bytes_read"] += len(data)
        if tailed.fp.length < self.config.fingerprint_bytes and tailed.pos - len(data) < self.config.fingerprint_bytes:
            tailed.grow_fingerprint(self.config.fingerprint_bytes)
        before = tailed.splitter.lines_cut
        out = tailed.feed(data, _now_ms())
        counters["lines_cut"] += tailed.splitter.lines_cut - before
        self.inflight.hold(tailed, tailed.held)
        room = self.inflight.room
        if out is not None and out.nbytes > room:
            out = tailed.trim(out, room)
            self.inflight.hold(tailed, 0)
            self.metrics.add("backpressure_waits")
            if out is None:
                return False
        if out is not None:
            self._send(tailed, out)
            covered = out.end - out.start
            if covered >= 4096:
                tailed.expansion = max(out.nbytes / covered, 1.0)
        if len(data) < size:
            tailed.at_eof = True
            tailed.reached_eof_once = True
            self.inventory.ready.pop(tailed, None)
        return True

    def _send(self, tailed: TailedFile, out: Outgoing) -> None:
        """Hand one chunk to the producer and track it."""
        from broker.client import LogferryError

        if tailed.held_by_cluster is not None:
            skipped = self._skip_held(tailed, out)
            if skipped is None:
                return
            out = skipped
        source = tailed.source
        count = len(out.values)
        if not tailed.file_id_saved:
            # Write-ahead: a restart must find this generation's id in the checkpoint, or
            # it would re-send these lines under another id (duplicates nobody can match).
            self.inventory.dirty = True
            self._write_checkpoint()
            tailed.file_id_saved = True  # on failure too (logged): no write per chunk
        try:
            future = self.producer.send(source.topic, out.values, key=source.key, timestamp=out.time_ms)
        except LogferryError as exc:
            # Not queued (brokers unreachable, buffer full): read these bytes again later.
            if time.monotonic() >= self._quiet_until:
                log.warning(
                    "%s: send failed (%s); reading offset %d again in 1s (repeats of this warning are muted for 10s)",
                    tailed.path,
                    exc,
                    out.start,
                )
                self._quiet_until = time.monotonic() + 10.0
            self.metrics.add("errors")
            tailed.restart_at(out.start)
            self.inflight.hold(tailed, 0)
            tailed.retry_at = time.monotonic() + 1.0
            self.inventory.ready[tailed] = None
            return
        window = window_of(out.time_ms, self._ledger.window_ms)
        tailed.acks.add(Chunk(future, out.start, out.end, out.nbytes, count, source.topic, window, time.monotonic()))
        self.inflight.sent(out.nbytes)
        self._ledger.sent(source.topic, window, count)
        counters = self.metrics.counters
        counters["lines_read"] += count
        counters["messages_sent"] += count
        counters["bytes_sent"] += out.nbytes
        counters["utf8_replaced"] += out.utf8_replaced
        if out.parse_failed:
            self.metrics.parse_failures[source.name] += len(out.parse_failed)
        future.add_callback(self._on_done(tailed))

    # -- time-based duties -------------------------------------------------------------

    def _timeouts(self, now: float) -> None:
        """Expire lost acks; flush quiet partial lines; close idle, rotated and deleted files."""
        expire_before = now - self._ack_timeout
        inventory = self.inventory
        for tailed in inventory.everything():
            oldest = tailed.acks.oldest_sent()
            if oldest is not None and oldest < expire_before:
                self._done.append(tailed)
        if self._done:
            self._collect(expire_before)
        if self._producer_stuck:
            self._replace_producer()
        inventory.finish_leaving()
        now_ms = _now_ms()
        for tailed in inventory.everything():
            quiet = now - tailed.last_data
            source = tailed.source
            if tailed.held and tailed.at_eof:
                limit = source.partial_line_timeout_s
                if tailed.splitter.held_bytes == 0 and source.multiline is not None:
                    limit = source.multiline.timeout_s
                if tailed.draining and tailed.deleted or quiet >= limit:
                    self._flush_held(tailed, now_ms)
            if tailed.fd is None or not tailed.at_eof or tailed in inventory.ready:
                continue
            if tailed.deleted:
                if not tailed.held and not tailed.acks.in_flight:
                    log.info("%s: deleted file shipped; closing it", tailed.path)
                    inventory.forget(tailed)
            elif tailed.rotated:
                if quiet >= self.config.rotated_close_s and not tailed.held and not tailed.acks.in_flight:
                    tailed.close()
                    self.metrics.add("files_closed")
                    inventory.open_changed()
                    if tailed.where is None:
                        inventory.forget(tailed)
            elif quiet >= source.idle_close_s:
                tailed.close()
                self.metrics.add("files_closed")
                inventory.open_changed()

    def _flush_held(self, tailed: TailedFile, now_ms: int) -> None:
        out = tailed.flush_held(now_ms)
        self.inflight.hold(tailed, tailed.held)
        if out is not None:
            self._send(tailed, out)

    # -- checkpoint, audit, status ---------------------------------------------------------

    def _write_checkpoint(self) -> None:
        if not self.inventory.dirty:
            return
        try:
            self._store.save(self.inventory.entries())
        except CheckpointError as exc:
            log.error("%s", exc)
            self.metrics.add("errors")
            return
        self.inventory.dirty = False
        self.metrics.add("checkpoints_written")
        for tailed in self.inventory.files.values():
            tailed.file_id_saved = True

    def _publish_audit(self, final: bool = False) -> None:
        audit = self.config.audit
        if not audit.enabled or (not final and time.monotonic() < self._audit_retry_at):
            return
        records = self._audit_backlog + self._ledger.due(_now_ms(), final=final)
        self._audit_backlog = []
        if not records:
            return
        from broker.client import LogferryError

        host = self.config.host
        key = host.encode()
        for record in records:
            value = msgpack.packb(record.to_map(host))
            try:
                future = self.producer.send(audit.topic, value, key=key)
            except LogferryError as exc:
                if time.monotonic() >= self._quiet_until:
                    log.warning("audit records not sent (%s); will retry", exc)
                    self._quiet_until = time.monotonic() + 10.0
                self._audit_backlog.extend(records[records.index(record) :])
                self._audit_retry_at = time.monotonic() + 2.0
                break
            self._audit_pending += 1
            future.add_callback(functools.partial(self._audit_acked, record))

    def _audit_acked(self, record: AuditRecord, future: Any) -> None:
        """A delivery callback: hand the audit record's outcome to the main loop."""
        self._audit_done.append((future, record))
        self._wake.set()

    def _refresh_snapshot(self, state: str) -> None:
        gauges = self.metrics.gauges
        everything = self.inventory.everything()
        gauges["inflight_bytes"] = max(self.inflight.bytes, 0)
        gauges["tracked_files"] = len(everything)
        gauges["held_deleted_files"] = sum(1 for t in everything if t.draining and t.fd is not None and t.lag)
        gauges["lag_bytes"] = sum(t.lag for t in everything)
        files = [
            {
                "path": t.path,
                "where": t.where,
                "inode": t.key.ino,
                "fid": t.file_id,
                "offset": t.acks.acked,
                "read": t.pos,
                "size": t.size,
                "lag": t.lag,
                "open": t.fd is not None,
                "rotated": t.rotated,
                "deleted": t.deleted,
                "ready": t in self.inventory.ready,
                "after": t.waiting_for.where if t.waiting_for is not None else None,
            }
            for t in everything
        ]
        self.snapshot = Snapshot(
            host=self.config.host,
            pid=os.getpid(),
            started=self._started,
            updated=time.time(),
            state=state,
            counters=dict(self.metrics.counters),
            gauges=dict(gauges),
            files=files,
            metrics_url=self._server.url if self._server is not None else None,
            parse_failures=dict(self.metrics.parse_failures),
        )
        if self._server is not None:
            self._server.snapshot = self.snapshot
        try:
            import json

            write_atomically(self.config.status_path, json.dumps(self.snapshot.to_json()).encode(), durable=False)
        except OSError as exc:
            log.debug("status file not written: %s", exc)


def _waits_for_itself(tailed: TailedFile) -> bool:
    """True when the chain of predecessors leads back to ``tailed`` (never wait forever)."""
    step = tailed.waiting_for
    for _ in range(1000):
        if step is None:
            return False
        if step is tailed:
            log.warning("%s: cyclic wait between rotated files; reading it now", tailed.path)
            return True
        step = step.waiting_for
    return True


def _now_ms() -> int:
    return int(time.time() * 1000)
