"""The broker process: an asyncio server over the log storage and the ZooKeeper registry.

The hot paths stay per batch, never per message: a produce request is validated by
walking batch headers and CRCs (zlib, in C) and appended with one write per
partition; a fetch is a file slice handed to the kernel with sendfile. fsync runs in a
worker thread so the event loop keeps appending while the disk syncs. The broker
keeps no state about consumers. Replication (roles, followers, acks=all, the
controller) lives in :mod:`broker.replication`; this module routes requests to it.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from broker.wire import protocol, records

from broker.coordination import zk
from broker.net import transport
from broker.server.config import BrokerConfig
from broker.server.connection import BrokerConnection, FileReply
from broker.common.errors import (
    BrokerShuttingDownError,
    InvalidRequestError,
    LeaderNotAvailableError,
    LogferryError,
    NotLeaderError,
    StorageError,
    TopicExistsError,
    UnknownError,
    UnknownTopicOrPartitionError,
)
from broker.common.metrics import Metrics, MetricsServer
from broker.coordination.registry import BrokerInfo, BrokerRegistry, ClusterView
from broker.replication.controller import Controller
from broker.replication.manager import LEADER, ReplicaManager
from broker.replication.services import ReplicationServices
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PartitionLog
from broker.common.names import validate_topic_name

log = logging.getLogger("logferry.broker")

MAX_WAIT_MS = 30_000


class Broker:
    """One broker: accepts connections, hosts the partitions ZooKeeper assigns to it."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.logs = LogManager(list(config.log_dirs), config.log)
        self.metrics = Metrics()
        self.connections: set[BrokerConnection] = set()
        self.view = ClusterView()
        self.registry: BrokerRegistry | None = None
        self._zk = None
        self._server: asyncio.AbstractServer | None = None
        self._metrics_server: MetricsServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fsync_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fsync")
        self._admin_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zk-admin")
        self._flushing: set[tuple[str, int]] = set()
        self._waiters: dict[tuple[str, int], list[asyncio.Future]] = {}
        self._append_waiters: dict[tuple[str, int], list[asyncio.Future]] = {}
        self._ack_after_flush: dict[tuple[str, int], list[tuple[int, "_PendingProduce", int]]] = {}
        self.controller: Controller | None = None
        self._background: list[asyncio.Task] = []
        self._stopping = asyncio.Event()
        self.shutting_down = False
        self._known_topics: set[str] = set()
        self._declare_metrics()
        self.replication = ReplicaManager(ReplicationServices(
            config=config, logs=self.logs, admin_pool=self._admin_pool,
            fsync_pool=self._fsync_pool, isr_changes=self.isr_changes,
            truncated_bytes=self.truncated_bytes, wake_consumers=self.wake_consumers,
            wake_fetchers=self.wake_fetchers, replicated_in=self.replicated_in))

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the logs, join the cluster and start listening."""
        loop = self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        await loop.run_in_executor(None, self.logs.load)
        self.replication.load_checkpoints()
        log.info("loaded %d partitions from %s in %.2fs", len(list(self.logs.logs())),
                 ", ".join(map(str, self.config.log_dirs)), time.monotonic() - started)
        self._zk = await loop.run_in_executor(
            None, lambda: zk.connect(self.config.zk_connect,
                                     session_timeout=self.config.zk_session_timeout_s))
        granted = zk.granted_session_timeout(self._zk)
        if granted is not None and abs(granted - self.config.zk_session_timeout_s) > 0.01:
            log.warning("ZooKeeper granted a session timeout of %.1fs, not the %.1fs of "
                        "zk_session_timeout_s (the server's minSessionTimeout/"
                        "maxSessionTimeout): a dead broker is noticed after %.1fs, and "
                        "leaders' write leases follow the shorter of the two", granted,
                        self.config.zk_session_timeout_s, granted)
        # Order matters: learn the cluster view, then listen, then register, so a client
        # that finds this broker in ZooKeeper can connect and gets complete answers.
        self.registry = BrokerRegistry(
            self._zk, self.config.broker_id,
            BrokerInfo(self.config.host, self.config.port, self.config.datacenter,
                       self.config.rack),
            lambda view: loop.call_soon_threadsafe(self._apply_view, view))
        await loop.run_in_executor(None, self.registry.watch)
        self.replication.start(loop, self._zk, self.registry)
        self._apply_view(self.registry.view())
        self._server = await transport.start_server(
            lambda: BrokerConnection(self), self.config.host, self.config.port, backlog=1024)
        await loop.run_in_executor(None, self.registry.register)
        self.controller = Controller(
            self._zk, self.config.broker_id,
            unclean_election=self.config.unclean_leader_election,
            auto_rebalance_interval_s=self.config.leader_rebalance_interval_s,
            elections=self.leader_elections)
        self.controller.start()
        if self.config.metrics_port:
            self._metrics_server = MetricsServer(self.metrics, self.config.host,
                                                 self.config.metrics_port, loop=loop,
                                                 name="broker-metrics")
        self._background = [
            loop.create_task(self._flush_loop(), name="flusher"),
            loop.create_task(self._retention_loop(), name="retention"),
        ]
        if self.config.acks_all_timeout_ms <= self.config.replica_lag_time_max_ms:
            log.warning("acks_all_timeout_ms (%d) is not longer than replica_lag_time_max_ms "
                        "(%d): acks=all produces may time out while a dead follower is still "
                        "in the ISR, and the producer's retries may store them twice",
                        self.config.acks_all_timeout_ms, self.config.replica_lag_time_max_ms)
        log.info("broker %d listening on %s:%d (datacenter %s, zk %s)", self.config.broker_id,
                 self.config.host, self.config.port, self.config.datacenter,
                 self.config.zk_connect)

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        loop.add_signal_handler(signal.SIGUSR2, _log_tasks)
        await self._stopping.wait()
        await self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop (thread-unsafe; call from the loop)."""
        self._stopping.set()

    async def stop(self) -> None:
        """Stop accepting, answer in-flight requests, flush, deregister."""
        log.info("broker %d stopping", self.config.broker_id)
        self.shutting_down = True
        if self._server is not None:
            self._server.close()
        for waiters in (*self._waiters.values(), *self._append_waiters.values()):
            for waiter in waiters:  # long polls answer with what they have
                if not waiter.done():
                    waiter.set_result(None)
        pending = [t for c in list(self.connections) for t in c.tasks]
        if pending:
            log.info("stop: answering %d in-flight requests (up to %.0fs)", len(pending),
                     self.config.shutdown_timeout_s)
            _, late = await asyncio.wait(pending, timeout=self.config.shutdown_timeout_s)
            if late:
                log.warning("stop: %d requests still running after shutdown_timeout_s; "
                            "their connections are closed unanswered", len(late))
        if self.controller is not None:
            log.info("stop: handing back the controller role")
            await asyncio.get_running_loop().run_in_executor(None, self.controller.stop)
        log.info("stop: stopping replica fetchers")
        await self.replication.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        hosted = list(self.logs.logs())
        log.info("stop: flushing %d partitions", len(hosted))
        for key, plog in hosted:
            await self._flush(key, plog)
        self.logs.close()
        for conn in list(self.connections):
            conn.close()
        if self.registry is not None:
            log.info("stop: leaving the registry")
            self.registry.deregister()
        if self._zk is not None:
            zk.close(self._zk)
        if self._metrics_server is not None:
            self._metrics_server.close()
        self._fsync_pool.shutdown(wait=True)
        self._admin_pool.shutdown(wait=False)
        log.info("broker %d stopped cleanly", self.config.broker_id)

    # -- cluster view -----------------------------------------------------------------

    def _apply_view(self, view: ClusterView) -> None:
        """Host the replicas assigned to this broker, take up each one's role, and drop
        the partitions of deleted topics."""
        if self.shutting_down:
            return  # logs are closing: a late view must not reopen partitions
        me = self.config.broker_id
        for topic, assignment in view.topics.items():
            topic_id = view.topic_ids.get(topic, 0)
            for partition, replicas in assignment.items():
                if me not in replicas:
                    continue
                plog = self.logs.get(topic, partition)
                if plog is None:
                    plog = self.logs.create(topic, partition)
                    log.info("hosting %s-%d (replicas %s)", topic, partition, replicas)
                if topic_id and plog.topic_id not in (None, topic_id):
                    plog = self._replace_earlier_topics_log(topic, partition, plog)
                    if plog is None:
                        continue
                if topic_id and plog.topic_id is None:
                    try:
                        plog.set_topic_id(topic_id)
                    except StorageError as exc:
                        log.warning("%s", exc)  # only the identity check is lost
        # Only topics seen in ZooKeeper and then removed are deleted: a topic on disk
        # that ZooKeeper never listed (wrong chroot?) is kept, never wiped.
        for topic in self._known_topics - set(view.topics):
            for (t, p), _ in list(self.logs.logs()):
                if t == topic:
                    self.logs.remove(t, p)
                    log.info("deleted %s-%d: topic was deleted", t, p)
        self._known_topics = set(view.topics)
        self.view = view
        self.replication.apply(view)

    def _replace_earlier_topics_log(self, topic: str, partition: int,
                                    plog: PartitionLog) -> PartitionLog | None:
        """The topic was deleted and created again while this broker was away (or
        between two views): the log on disk is the earlier topic's. Delete it and
        start the partition empty; None (not hosted) if it cannot be deleted."""
        log.warning("%s-%d: the log on disk belongs to an earlier topic of this name "
                    "(deleted and created again meanwhile); deleting its %d bytes", topic,
                    partition, plog.size_bytes)
        self.replication.forget((topic, partition))
        try:
            self.logs.remove(topic, partition)
        except StorageError as exc:
            log.error("%s; not hosting %s-%d until it is gone", exc, topic, partition)
            return None
        fresh = self.logs.create(topic, partition)
        log.info("hosting %s-%d afresh", topic, partition)
        return fresh

    def _log_for(self, topic: Any, partition: Any, for_write: bool = False) -> PartitionLog:
        """The log of a partition this broker leads, or the error to answer with."""
        if not isinstance(topic, str) or not isinstance(partition, int):
            raise InvalidRequestError("topic must be a string and partition an integer")
        plog = self.replication.leader_log(topic, partition, for_write)
        if plog is not None:
            return plog
        validate_topic_name(topic)
        assignment = self.view.topics.get(topic)
        if assignment is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        if partition not in assignment:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0-{len(assignment) - 1}, not {partition}")
        leader = self.view.leader(topic, partition)
        if leader < 0:
            raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader right now")
        raise NotLeaderError(f"partition {topic}-{partition} is led by broker {leader}, "
                             f"not broker {self.config.broker_id}")

    def wake_consumers(self, key: tuple[str, int]) -> None:
        """The visible end of ``key`` moved: answer the consumers' long polls."""
        for waiter in self._waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def wake_fetchers(self, key: tuple[str, int]) -> None:
        """``key`` got new bytes (or changed role): answer the followers' long polls."""
        for waiter in self._append_waiters.pop(key, ()):
            if not waiter.done():
                waiter.set_result(None)

    def replicated_in(self, key: tuple[str, int], nbytes: int, messages: int) -> None:
        """A follower appended bytes copied from its leader."""
        self._replica_bytes_in[key] += nbytes
        plog = self.logs.get(*key)
        if plog is not None and plog.flush_due(_now_ms()):
            self._schedule_flush(key, plog)

    # -- produce ----------------------------------------------------------------------

    def handle_produce(self, conn: BrokerConnection, corr: int, frame: protocol.Frame) -> None:
        """Validate and append each message set; answer now, after fsync, after the
        in-sync replicas have it (acks=all, -1), or never (acks=0)."""
        started = time.perf_counter()
        header = frame.header
        acks = header.get("acks", 1)
        parts = header.get("parts")
        payload = frame.payload
        if acks not in (0, 1, -1) or not isinstance(parts, list):
            self._reply_error(conn, corr, "produce", started, InvalidRequestError(
                "produce needs acks 0, 1 or -1 (all) and a 'parts' list"))
            return
        if self.shutting_down:
            self._reply_error(conn, corr, "produce", started,
                              BrokerShuttingDownError("broker is shutting down"))
            return
        results = []
        waits: list[tuple[str, int, int]] = []
        replica_waits: list[tuple[str, int, int, int]] = []
        pos = 0
        failed = False
        flush_each = self.config.log.flush_messages == 1
        replication = self.replication
        for part in parts:
            topic = partition = None
            try:
                if not isinstance(part, list) or len(part) != 3 or not isinstance(part[2], int):
                    raise InvalidRequestError("each produce part must be [topic, partition, nbytes]")
                topic, partition, nbytes = part
                if nbytes < 0 or pos + nbytes > len(payload):
                    raise InvalidRequestError(f"part claims {nbytes} bytes but the payload "
                                              f"has {len(payload) - pos} left")
                chunk = payload[pos:pos + nbytes]
                pos += nbytes
                plog = self._log_for(topic, partition, for_write=True)
                scan = records.validate_message_set(chunk)
                if acks == -1:
                    replication.check_acks_all(topic, partition)
                base = plog.append(chunk, scan.messages)
                key = (topic, partition)
                self._bytes_in[key] += nbytes
                self._messages_in[key] += scan.messages
                if key in self._append_waiters:
                    self.wake_fetchers(key)
                results.append([topic, partition, 0, base, None])
                if acks == -1:
                    replica_waits.append((topic, partition, plog.end_offset, len(results) - 1))
                if flush_each:
                    waits.append((topic, partition, len(results) - 1))
                elif plog.flush_due(_now_ms()):
                    self._schedule_flush(key, plog)
            except LogferryError as exc:
                failed = True
                self._produce_errors[(("error", type(exc).__name__),)] += 1
                results.append([topic, partition, exc.code, -1, str(exc)])
                if isinstance(exc, InvalidRequestError):
                    break
        if acks == 0:
            self.count_request("produce", time.perf_counter() - started, error=failed)
            if failed:  # the client cannot see errors with acks=0: tell it by closing
                log.warning("closing acks=0 producer %s after a failed produce: %s",
                            conn.peer, results)
                conn.close()
            return
        if not waits and not replica_waits:
            self.count_request("produce", time.perf_counter() - started, error=failed)
            conn.send(protocol.encode_response(corr, {"parts": results}))
            return
        pending = _PendingProduce(self, conn, corr, results, started)
        for topic, partition, end, index in replica_waits:
            if replication.wait_for_replicas(topic, partition, end, pending, index):
                pending.left += 1
        # flush.messages = 1: acknowledge only after the appended bytes are fsynced.
        for topic, partition, index in waits:
            key = (topic, partition)
            plog = self.logs.get(*key)
            pending.left += 1
            self._ack_after_flush.setdefault(key, []).append((plog.end_offset, pending, index))
            self._schedule_flush(key, plog)
        pending.part_done(None)  # the handler's own hold: answers now if nothing waits

    # -- flushing ---------------------------------------------------------------------

    def _schedule_flush(self, key: tuple[str, int], plog: PartitionLog) -> None:
        if key in self._flushing:
            return
        self._flushing.add(key)
        self._loop.create_task(self._flush(key, plog))  # type: ignore[union-attr]

    async def _flush(self, key: tuple[str, int], plog: PartitionLog) -> None:
        """fsync in a worker thread, then advance the visible end and wake fetchers."""
        self._flushing.add(key)
        try:
            while True:
                pending = plog.prepare_flush()
                try:
                    await asyncio.get_running_loop().run_in_executor(self._fsync_pool, pending.run)
                except OSError as exc:
                    log.error("fsync of %s-%d failed: %s", key[0], key[1], exc)
                    return
                plog.mark_flushed(pending.end)
                self._flushed_to(key, plog.flushed_end)
                self.replication.on_flushed(key)
                # flush.messages=1 acks that arrived during this fsync need one more pass
                if not any(item[0] > plog.flushed_end
                           for item in self._ack_after_flush.get(key, ())):
                    break
        finally:
            self._flushing.discard(key)

    def _flushed_to(self, key: tuple[str, int], flushed_end: int) -> None:
        self.wake_consumers(key)
        acks = self._ack_after_flush.get(key)
        if not acks:
            return
        keep = []
        for end, pending, index in acks:
            if end <= flushed_end:
                pending.part_done(index)
            else:
                keep.append((end, pending, index))
        if keep:
            self._ack_after_flush[key] = keep
        else:
            del self._ack_after_flush[key]

    async def _flush_loop(self) -> None:
        tick = min(max(self.config.log.flush_ms / 4000, 0.005), 0.1)
        while True:
            await asyncio.sleep(tick)
            now = _now_ms()
            for key, plog in self.logs.logs():
                if key not in self._flushing and plog.flush_due(now):
                    self._schedule_flush(key, plog)

    async def _retention_loop(self) -> None:
        interval = self.config.retention_check_ms / 1000
        while True:
            await asyncio.sleep(interval)
            now = _now_ms()
            for key, plog in list(self.logs.logs()):
                try:
                    plog.maybe_roll(now)
                    deleted = plog.enforce_retention(now)
                except LogferryError as exc:
                    log.error("retention on %s-%d failed: %s", key[0], key[1], exc)
                    continue
                if deleted:
                    self._segments_deleted[key] += len(deleted)

    # -- fetch and the other apis -------------------------------------------------------

    async def handle_async(self, conn: BrokerConnection, api: int, corr: int,
                           frame: protocol.Frame) -> None:
        """Run a non-produce request and send its response (errors included)."""
        started = time.perf_counter()
        name = protocol.API_NAMES[api]
        try:
            if api == protocol.FETCH:
                reply = await self._fetch(corr, frame.header)
            else:
                handler = {
                    protocol.OFFSETS: self._offsets,
                    protocol.METADATA: self._metadata,
                    protocol.CREATE_TOPIC: self._create_topic,
                    protocol.DELETE_TOPIC: self._delete_topic,
                    protocol.ELECT_LEADERS: self._elect_leaders,
                }[api]
                fields = await handler(frame.header)
                reply = protocol.encode_response(corr, fields)
        except LogferryError as exc:
            self._reply_error(conn, corr, name, started, exc)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not take the broker down
            log.exception("%s request from %s failed", name, conn.peer)
            self._reply_error(conn, corr, name, started, UnknownError(f"internal error: {exc}"))
            return
        self.count_request(name, time.perf_counter() - started)
        conn.send(reply)

    def _reply_error(self, conn: BrokerConnection, corr: int, api: str, started: float,
                     exc: LogferryError) -> None:
        self.count_request(api, time.perf_counter() - started, error=True)
        conn.send(protocol.encode_error(corr, exc.code, str(exc)))

    async def _fetch(self, corr: int, header: dict) -> FileReply | bytes:
        parts = protocol.require(header, "parts", list)
        max_wait = min(max(int(header.get("max_wait_ms", 0) or 0), 0), MAX_WAIT_MS)
        min_bytes = max(int(header.get("min_bytes", 1) or 1), 1)
        replica = header.get("replica")
        if replica is not None and (not isinstance(replica, int) or isinstance(replica, bool)):
            raise InvalidRequestError("fetch 'replica' must be a broker id")
        size = 4 if replica is None else 5
        requests = []
        for part in parts:
            if (not isinstance(part, list) or len(part) != size
                    or not all(isinstance(x, int) for x in part[1:])):
                raise InvalidRequestError(
                    "each fetch part must be [topic, partition, offset, max_bytes]" if size == 4
                    else "each replica fetch part must be [topic, partition, offset, "
                         "max_bytes, leader_epoch]")
            requests.append(part)
        if replica is None:
            read, waiters = self._read_slices, self._waiters
        else:
            read, waiters = self._replica_reader(replica), self._append_waiters
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait / 1000
        while True:
            results, slices, total = read(requests)
            remaining = deadline - loop.time()
            if total >= min_bytes or remaining <= 0 or self.shutting_down or any(r[2] for r in results):
                break
            waiter = loop.create_future()
            for part in requests:
                waiters.setdefault((part[0], part[1]), []).append(waiter)
            try:
                async with asyncio.timeout(remaining):  # not wait_for: see fetcher.py
                    await waiter
            except TimeoutError:
                pass
            finally:
                for part in requests:
                    waiting = waiters.get((part[0], part[1]))
                    if waiting and waiter in waiting:
                        waiting.remove(waiter)
        head = protocol.encode_response(corr, {"parts": results}, payload_len=total)
        counter = self._bytes_out if replica is None else self._replica_bytes_out
        for part, piece in zip(requests, slices):
            if piece is not None and piece.count:
                counter[(part[0], part[1])] += piece.count
        return FileReply(head, [s for s in slices if s is not None]) if total else head

    def _read_slices(self, requests: list) -> tuple[list, list, int]:
        results, slices, total = [], [], 0
        for topic, partition, offset, max_bytes in requests:
            try:
                plog = self._log_for(topic, partition)
                piece = plog.read_slice(offset, max(max_bytes, 1))
                results.append([topic, partition, 0, None, plog.start_offset,
                                plog.visible_end, piece.count])
                slices.append(piece)
                total += piece.count
            except LogferryError as exc:
                start = getattr(exc, "start", None)
                end = getattr(exc, "end", None)
                results.append([topic, partition, exc.code, str(exc), start, end, 0])
                slices.append(None)
        return results, slices, total

    def _replica_reader(self, follower: int):
        """A reader for a follower's fetch: checks the epoch, records the follower's
        progress (once per request), reads up to the log end, adds the log end."""
        recorded: set[tuple[str, int]] = set()

        def read(requests: list) -> tuple[list, list, int]:
            results, slices, total = [], [], 0
            for topic, partition, offset, max_bytes, epoch in requests:
                try:
                    replica = self.replication.check_replica_fetch(topic, partition, epoch)
                    plog = replica.plog
                    if (topic, partition) not in recorded:
                        recorded.add((topic, partition))
                        self.replication.record_replica_fetch(replica, follower, offset)
                    piece = plog.read_slice(offset, max(max_bytes, 1), upto=plog.end_offset)
                    results.append([topic, partition, 0, None, plog.start_offset,
                                    plog.visible_end, piece.count, plog.end_offset])
                    slices.append(piece)
                    total += piece.count
                except LogferryError as exc:
                    plog = self.logs.get(topic, partition) if isinstance(topic, str) else None
                    start = getattr(exc, "start", None)
                    results.append([topic, partition, exc.code, str(exc), start,
                                    getattr(exc, "end", None), 0,
                                    plog.end_offset if plog is not None else None])
                    slices.append(None)
            return results, slices, total
        return read

    async def _offsets(self, header: dict) -> dict:
        topic = header.get("topic")
        partition = header.get("partition")
        plog = self._log_for(topic, partition)
        at = header.get("at", "latest")
        if at == "earliest":
            offset = plog.start_offset
        elif at == "latest":
            offset = plog.visible_end
        elif isinstance(at, int) and not isinstance(at, bool):
            offset = await asyncio.get_running_loop().run_in_executor(
                self._admin_pool, plog.offset_for_time, at)
        else:
            raise InvalidRequestError("offsets 'at' must be 'earliest', 'latest' or a time in ms")
        return {"offset": offset, "start": plog.start_offset, "end": plog.visible_end,
                "avg_message_bytes": plog.avg_message_bytes}

    async def _metadata(self, header: dict) -> dict:
        wanted = header.get("topics")
        create = bool(header.get("create", False)) and self.config.auto_create_topics
        if wanted is not None and not (isinstance(wanted, list)
                                       and all(isinstance(t, str) for t in wanted)):
            raise InvalidRequestError("metadata 'topics' must be a list of names or nil")
        view = self.view
        topics: dict[str, Any] = {}
        for topic in (wanted if wanted is not None else sorted(view.topics)):
            if topic not in view.topics and create:
                try:
                    validate_topic_name(topic)
                    await self._create_in_zk(topic, self.config.num_partitions, exists_ok=True)
                except LogferryError as exc:
                    topics[topic] = {"err": exc.code, "msg": str(exc)}
                    continue
                view = self.view
            assignment = view.topics.get(topic)
            if assignment is None:
                topics[topic] = {"err": UnknownTopicOrPartitionError.code,
                                 "msg": f"unknown topic {topic!r}"}
                continue
            # "partitions" maps each partition to its leader (-1: none right now), as
            # before replication; "replicas" and "isr" say the rest.
            states = {p: view.states.get((topic, p)) for p in assignment}
            topics[topic] = {
                "err": 0,
                "partitions": {p: s.leader if s else -1 for p, s in states.items()},
                "replicas": assignment,
                "isr": {p: list(s.isr) if s else [] for p, s in states.items()},
                "epochs": {p: s.leader_epoch if s else -1 for p, s in states.items()},
                "config": view.configs.get(topic, {}),
            }
        brokers = {b: [i.host, i.port, i.datacenter, i.rack] for b, i in view.brokers.items()}
        return {"brokers": brokers, "topics": topics, "controller": view.controller}

    async def _create_in_zk(self, topic: str, partitions: int, replication_factor: int = 0,
                            min_insync_replicas: int | None = None,
                            exists_ok: bool = False) -> dict[int, list[int]]:
        """Create a topic (replication factor 0: the broker's default, capped at the live
        brokers) and wait, bounded, until this broker's own watch has seen it and every
        partition has a state. ``exists_ok``: another client's auto-create won the race."""
        loop = asyncio.get_running_loop()
        rf = replication_factor or min(self.config.default_replication_factor,
                                       max(len(self.view.brokers), 1))
        try:
            assignment = await loop.run_in_executor(
                self._admin_pool, self.registry.create_topic,  # type: ignore[union-attr]
                topic, partitions, rf, min_insync_replicas)
        except TopicExistsError:
            if not exists_ok:
                raise
            assignment = None
        for _ in range(250):
            if self.shutting_down:  # the view no longer moves: answer now, not in 5 s
                raise BrokerShuttingDownError(f"topic {topic!r} was created, but broker "
                                              f"{self.config.broker_id} is shutting down; "
                                              "retry with another broker")
            seen = self.view.topics.get(topic)
            if seen is not None and all((topic, p) in self.view.states for p in seen):
                return seen
            await asyncio.sleep(0.02)
        if assignment is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} is being created; retry")
        return assignment

    async def _create_topic(self, header: dict) -> dict:
        topic = validate_topic_name(header.get("topic"))
        partitions = header.get("partitions") or self.config.num_partitions
        if not isinstance(partitions, int) or not 1 <= partitions <= 100_000:
            raise InvalidRequestError("partitions must be an integer from 1 to 100000")
        rf = header.get("replication_factor") or 0
        min_isr = header.get("min_insync_replicas") or None
        if not isinstance(rf, int) or isinstance(rf, bool) or not 0 <= rf <= 100:
            raise InvalidRequestError("replication_factor must be an integer from 1 to 100 "
                                      "(0: the broker's default_replication_factor)")
        if min_isr is not None and (not isinstance(min_isr, int) or min_isr < 1):
            raise InvalidRequestError("min_insync_replicas must be a positive integer")
        assignment = await self._create_in_zk(topic, partitions, rf, min_isr)
        return {"partitions": assignment}

    async def _elect_leaders(self, header: dict) -> dict:
        """Ask the controller to move leadership back to the preferred replicas."""
        def trigger() -> None:
            try:
                self._zk.create(zk.PREFERRED_ELECTION, b"{}", makepath=True)
            except zk.NodeExistsError:
                pass  # already asked; the controller deletes it when done
        await asyncio.get_running_loop().run_in_executor(self._admin_pool, trigger)
        return {"controller": self.view.controller}

    async def _delete_topic(self, header: dict) -> dict:
        topic = validate_topic_name(header.get("topic"))
        await asyncio.get_running_loop().run_in_executor(
            self._admin_pool, self.registry.delete_topic, topic)  # type: ignore[union-attr]
        return {}

    # -- metrics ----------------------------------------------------------------------

    def _declare_metrics(self) -> None:
        m = self.metrics
        self._bytes_in = _PartitionCounter(m.counter("bytes_in_total", "Bytes appended per partition"))
        self._messages_in = _PartitionCounter(m.counter("messages_in_total", "Messages appended per partition"))
        self._bytes_out = _PartitionCounter(m.counter("bytes_out_total", "Log bytes sent to fetchers per partition"))
        self._segments_deleted = _PartitionCounter(m.counter("segments_deleted_total", "Segments deleted by retention"))
        self._requests = m.counter("requests_total", "Requests handled per api")
        self._request_errors = m.counter("request_errors_total", "Requests answered with an error per api")
        self._request_seconds = m.counter("request_seconds_total", "Time spent handling requests per api")
        self._produce_errors = m.counter("produce_errors_total", "Rejected message sets by error")
        self.isr_changes = m.counter("isr_changes_total",
                                     "ISR changes this broker wrote as leader, by direction")
        self.truncated_bytes = m.counter(
            "truncated_bytes_total", "Bytes a returning follower cut because its leader lacked them")
        self.leader_elections = m.counter("leader_elections_total",
                                          "Leader changes this broker made as controller")
        self._replica_bytes_in = _PartitionCounter(m.counter(
            "replica_bytes_in_total", "Bytes a follower copied from its leader per partition"))
        self._replica_bytes_out = _PartitionCounter(m.counter(
            "replica_bytes_out_total", "Bytes sent to followers per partition"))

        def gauges():
            for (topic, partition), plog in self.logs.logs():
                labels = (("topic", topic), ("partition", str(partition)))
                yield "log_end_offset", labels, plog.end_offset
                yield "log_visible_end", labels, plog.visible_end
                yield "log_start_offset", labels, plog.start_offset
                yield "log_size_bytes", labels, plog.size_bytes
                avg = plog.avg_message_bytes
                if avg:
                    sent = self._bytes_out.values.get(labels, 0)
                    yield "messages_out_estimate", labels, sent / avg
            yield "open_connections", (), len(self.connections)
            replication = self.replication
            roles = replication.role_counts()
            for role in ("leader", "follower", "offline"):
                yield "partitions", (("role", role),), roles.get(role, 0)
            yield "under_replicated_partitions", (), len(replication.under_replicated())
            for key, replica in replication.replicas.items():
                if replica.role == LEADER and replica.tracker is not None:
                    labels = (("topic", key[0]), ("partition", str(key[1])))
                    yield "isr_size", labels, len(replica.tracker.isr)
                    lags = replica.tracker.lag_bytes(replica.plog.end_offset)
                    yield "replica_max_lag_bytes", labels, max(lags.values(), default=0)
            controller = self.controller
            yield "controller_active", (), int(bool(controller and controller.active))
            if controller is not None and controller.active:
                yield "offline_partitions", (), controller.offline_partitions

        m.gauge_source(gauges, {
            "log_end_offset": "Log end offset (bytes) per partition",
            "log_visible_end": "Visible end (high watermark) per partition",
            "log_start_offset": "First retained offset per partition",
            "log_size_bytes": "Bytes on disk per partition",
            "messages_out_estimate": "Messages sent to fetchers (bytes out / average message size)",
            "open_connections": "Open client connections",
            "partitions": "Hosted partitions per role (leader, follower, offline)",
            "under_replicated_partitions": "Led partitions whose ISR is smaller than the replica list",
            "isr_size": "In-sync replicas per led partition",
            "replica_max_lag_bytes": "Bytes the slowest follower is behind, per led partition",
            "controller_active": "1 on the broker that is the controller",
            "offline_partitions": "Partitions without a leader (controller only)",
        })

    def count_request(self, api: str, seconds: float, error: bool = False) -> None:
        """Record one handled request."""
        labels = (("api", api),)
        self._requests[labels] += 1
        self._request_seconds[labels] += seconds
        if error:
            self._request_errors[labels] += 1


class _PendingProduce:
    """A produce answer waiting for fsyncs (flush.messages = 1) and for replicas (acks=all).

    ``left`` counts the awaited events plus one hold for the handler itself; each
    :meth:`part_done` settles one, recording an error on that part if given, and the
    last one sends the answer.
    """

    __slots__ = ("broker", "conn", "corr", "results", "started", "left")

    def __init__(self, broker: Broker, conn: BrokerConnection, corr: int, results: list,
                 started: float):
        self.broker = broker
        self.conn = conn
        self.corr = corr
        self.results = results
        self.started = started
        self.left = 1

    def part_done(self, index: int | None, error: LogferryError | None = None) -> None:
        if error is not None and index is not None and not self.results[index][2]:
            self.results[index][2:5] = [error.code, -1, str(error)]
        self.left -= 1
        if self.left == 0:
            failed = any(r[2] for r in self.results)
            self.broker.count_request("produce", time.perf_counter() - self.started,
                                      error=failed)
            self.conn.send(protocol.encode_response(self.corr, {"parts": self.results}))


class _PartitionCounter:
    """A counter keyed by (topic, partition) that caches its label tuples."""

    __slots__ = ("values", "_labels")

    def __init__(self, values):
        self.values = values
        self._labels: dict[tuple[str, int], tuple] = {}

    def __getitem__(self, key: tuple[str, int]) -> float:
        return self.values[self._label(key)]

    def __setitem__(self, key: tuple[str, int], value: float) -> None:
        self.values[self._label(key)] = value

    def _label(self, key: tuple[str, int]) -> tuple:
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels[key] = (("topic", key[0]), ("partition", str(key[1])))
        return labels


def _now_ms() -> int:
    return int(time.time() * 1000)


def _log_tasks() -> None:
    """Log the stack of every asyncio task: what a slow stop or a stuck request awaits."""
    tasks = asyncio.all_tasks()
    lines = [f"{len(tasks)} asyncio tasks:"]
    for task in tasks:
        out = io.StringIO()
        task.print_stack(limit=8, file=out)
        lines.append(out.getvalue().rstrip())
    log.warning("%s", "\n".join(lines))


def run_broker(config: BrokerConfig) -> int:
    """Run a broker until it is signalled to stop; returns the process exit code."""
    broker = Broker(config)
    # kill -USR1 <pid>: every thread's stack on stderr, even with the event loop stuck;
    # kill -USR2 <pid>: every asyncio task's stack in the log (the loop must be running).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        asyncio.run(broker.run())
    except LogferryError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("cannot start broker %d: %s", config.broker_id, exc)
        return 1
    return 0


__all__ = ["Broker", "run_broker"]
