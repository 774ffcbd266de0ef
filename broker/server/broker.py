"""The broker process: lifecycle and wiring of an asyncio server over the log storage
and the ZooKeeper registry.

This module starts and stops the broker, follows the cluster view, and wires the
rooms of :mod:`broker.server` (docs/architecture.md, "Inside broker/server"): the
services (:mod:`.services.produce`, :mod:`.services.fetch` (long poll),
:mod:`.services.admin`), durability (:mod:`.durability.flusher`: fsync and retention),
security, :mod:`.broker_metrics`, and the front ends that turn bytes into requests:
:mod:`.native.connection` with :mod:`.native.dispatch`, and Kafka's, built by
:mod:`.kafka.front_end` when a Kafka listener is configured. Every listener is bound
through :class:`~.listening.Listening`; every long-lived task runs in
:class:`~broker.common.background.BackgroundTasks`. The hot paths stay per batch,
never per message.
The broker keeps no state about consumers. Replication (roles, followers, acks=all,
the controller) lives in :mod:`broker.replication`.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import io
import logging
import resource
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from broker.common.background import BackgroundTasks
from broker.common.errors import ConfigError, ListenError, LogferryError, StorageError, ZooKeeperError
from broker.common.metrics import Metrics
from broker.common.tls import client_tls, server_context
from broker.coordination import zk
from broker.coordination.acl_store import AclStore
from broker.coordination.credentials import CredentialStore, ScramCredential
from broker.coordination.registry import BrokerInfo, BrokerRegistry, ClusterView
from broker.replication.controller import Controller
from broker.replication.manager import ReplicaManager
from broker.replication.services import ReplicationServices
from broker.server.broker_metrics import BrokerMetrics
from broker.server.config import BrokerConfig, config_warnings, effective_listeners
from broker.server.controlled_shutdown import hand_over_leadership
from broker.server.durability.flusher import Flusher, run_retention
from broker.server.gc_pause import freeze_startup_objects
from broker.server.listeners import KAFKA, LOGFERRY, ListenerConfig
from broker.server.listening import Listening
from broker.server.native.connection import (
    ACCEPT_BURST,
    BrokerConnection,
    close_stalled,
    fd_limit_warning,
)
from broker.server.native.dispatch import Dispatcher
from broker.server.request_budget import RequestBudget
from broker.server.security.authentication import Authenticator
from broker.server.security.authorizer import Authorizer
from broker.server.services.admin import AdminService
from broker.server.services.fetch import FetchService
from broker.server.services.produce import ProduceService
from broker.server.services.routing import PartitionRouter
from broker.server.topic_settings import LOG_KEYS, codec_for, log_config_for
from broker.storage.log_manager import LogManager
from broker.storage.partition_log import PartitionLog

if TYPE_CHECKING:
    from broker.common.metrics_server import MetricsServer

log = logging.getLogger("logferry.broker")


def kafka_front_end() -> Any:
    """:mod:`broker.server.kafka.front_end`, imported only when a broker has a Kafka
    listener: its libraries (kio, crc32c, cramjam) are the ``kafka`` extra, which hosts
    that do not speak Kafka (an agent's web server) need not install."""
    try:
        from broker.server.kafka import front_end
    except ImportError as exc:
        raise ConfigError(
            f"[kafka] needs the Kafka protocol libraries ({exc.name} is not installed): pip install 'logferry[kafka]'"
        ) from None
    return front_end


class Broker:
    """One broker: accepts connections, hosts the partitions ZooKeeper assigns to it."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.logs = LogManager(list(config.log_dirs), config.log)
        self.metrics = Metrics()
        self.connections: set[BrokerConnection] = set()
        self.request_budget = RequestBudget(config.max_queued_request_bytes)
        self.view = ClusterView()
        self.registry: BrokerRegistry | None = None
        self._zk: Any = None
        """The kazoo client (None before the start connects)."""
        self._metrics_server: MetricsServer | None = None
        self._fsync_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fsync")
        self._admin_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zk-admin")
        self.stats = BrokerMetrics(
            self.metrics,
            self.logs,
            self.connections,
            lambda: self.replication,
            lambda: self.controller,
            self.request_budget,
        )
        self.controller: Controller | None = None
        self.background = BackgroundTasks(self._background_crashed, f"broker {config.broker_id}")
        """Every long-lived task of this broker: a crash stops it with exit code 1."""
        self._background: list[asyncio.Task[Any]] = []
        self._stopping = asyncio.Event()
        self._starting: asyncio.Future[None] | None = None
        """The start in progress under :meth:`run` (a stop signal cancels it)."""
        self.stopped_by: int | None = None
        """The signal that stopped :meth:`run` (SIGINT: the CLI exits 130, Ctrl-C's code)."""
        self.shutting_down = False
        self._known_topics: set[str] = set()
        self._topic_codecs: dict[str, int] = {}
        """Topic -> codec of its ``compression`` setting (topic_settings.codec_for)."""
        self._logs_loaded = False
        self._replication_started = False
        self.listeners = [
            Listening(listener, self._authenticator(listener))
            for listener in effective_listeners(config)
            if listener.protocol == LOGFERRY
        ]
        """The logferry listeners, default first."""
        self.kafka_listening = next(
            (
                Listening(listener, self._authenticator(listener))
                for listener in effective_listeners(config)
                if listener.protocol == KAFKA
            ),
            None,
        )
        """The Kafka listener, or None."""
        self.authenticator = self.listeners[0].authenticator
        """The default listener's (None: it offers no SASL)."""
        inter = next(lst for lst in self.listeners if lst.config.name == config.inter_broker_listener)
        # A follower speaks to its leaders' inter-broker listener with that listener's
        # own TLS settings (its CA, and its certificate for mutual TLS).
        leader_ssl_context, leader_server_hostname = client_tls(inter.config.tls)
        self.replication = ReplicaManager(
            ReplicationServices(
                config=config,
                logs=self.logs,
                admin_pool=self._admin_pool,
                fsync_pool=self._fsync_pool,
                isr_changes=self.stats.isr_changes,
                truncated_bytes=self.stats.truncated_bytes,
                wake_consumers=self.wake_consumers,
                wake_fetchers=self.wake_fetchers,
                replicated_in=self.replicated_in,
                leader_ssl_context=leader_ssl_context,
                leader_server_hostname=leader_server_hostname,
                leader_sasl=config.sasl,
                leader_listener=config.inter_broker_listener,
                background=self.background,
            )
        )
        self._wire_services()

    def _authenticator(self, listener: ListenerConfig) -> Authenticator | None:
        """The SASL side of one listener (None: it offers none)."""
        if listener.auth is None:
            return None
        return Authenticator(
            listener.auth, self._read_credentials, self.stats.authentication_failures, tls=listener.tls is not None
        )

    def _connection_factory(self, listening: Listening) -> Callable[[], BrokerConnection]:
        return lambda: BrokerConnection(self, listening.authenticator, listening.name)

    @property
    def _all_listening(self) -> list[Listening]:
        """Every listener, the logferry ones first, the Kafka one last."""
        return [*self.listeners, *filter(None, [self.kafka_listening])]

    @property
    def kafka_connections(self) -> set[Any]:
        """The Kafka listener's open connections (empty without one)."""
        return self.kafka.connections if self.kafka is not None else set()

    async def _read_credentials(self, user: str) -> dict[str, ScramCredential] | None:
        """A user's SCRAM credentials from ZooKeeper (None: no such user)."""

        def read() -> dict[str, ScramCredential] | None:
            if self._zk is None:
                raise ZooKeeperError("not connected to ZooKeeper yet")
            try:
                return CredentialStore(self._zk).get(user)
            except Exception as exc:
                raise ZooKeeperError(f"cannot read credentials from ZooKeeper: {exc}") from None

        return await asyncio.get_running_loop().run_in_executor(self._admin_pool, read)

    def _wire_services(self) -> None:
        """Build the request handlers, each given only what it uses."""

        def shutting_down() -> bool:
            return self.shutting_down

        router = PartitionRouter(self.config.broker_id, self.replication, lambda: self.view)
        self.authorizer = Authorizer(self.config.authorizer, self.config.broker_id, self.stats.authorization_denied)
        self.fetch = FetchService(router, self.replication, self.logs, self.stats, shutting_down, self.authorizer)
        self.flusher = Flusher(
            self.logs,
            self.config.log.flush_ms,
            self._fsync_pool,
            self.fetch.wake_consumers,
            self.replication.on_publishable,
            background=self.background,
        )
        produce = ProduceService(
            router,
            self.replication,
            self.logs,
            self.flusher,
            self.fetch,
            self.stats,
            self.config.log.flush_messages == 1,
            shutting_down,
            authorizer=self.authorizer,
            topic_codecs=lambda: self._topic_codecs,
        )
        admin = AdminService(
            self.config,
            router,
            lambda: self.view,
            lambda: self.registry,
            lambda: self._zk,
            self._admin_pool,
            shutting_down,
            self.authorizer,
        )
        self.dispatcher = Dispatcher(produce, self.fetch, admin)
        self.kafka: Any = None
        """The Kafka front end (:class:`~broker.server.kafka.front_end.KafkaFrontEnd`)."""
        if self.kafka_listening is not None:  # its libraries are the `kafka` extra
            self.kafka = kafka_front_end().build(
                self.config,
                router,
                produce,
                self.fetch,
                admin,
                lambda: self.view,
                self.logs,
                lambda: self._zk,
                self._admin_pool,
                self.count_request,
            )

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the ports, recover the logs, join the cluster and start serving.

        Every port is bound before ZooKeeper hears of this broker, so a taken port
        fails the start at once. A start that fails at any step leaves nothing behind:
        no registration, no controller node, no open ZooKeeper session, no bound port
        (see :meth:`_abandon_start`); the error is raised for the caller to report.
        """
        try:
            await self._start()
        except BaseException:
            try:
                await self._abandon_start()
            except Exception:  # the start's own error is the one to report
                log.debug("failed start: cleaning up failed too", exc_info=True)
            raise

    def _admit_handshake(self, handshaking: int) -> bool:
        """A TLS connection is accepted before its handshake: it counts against
        max_connections from then on (refused at once, and counted, when they are taken)."""
        if len(self.connections) + handshaking < self.config.max_connections:
            return True
        self.stats.connections_refused[()] += 1
        return False

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        # Bound, not yet listening: connections are refused until the cluster view is
        # known, so a client never gets "unknown topic" for a topic not yet heard of.
        for listening in self.listeners:
            await listening.bind(self._connection_factory(listening), ACCEPT_BURST, admit=self._admit_handshake)
        if self.kafka_listening is not None:
            await self.kafka_listening.bind(
                self.kafka.connection_factory(self.kafka_listening.authenticator), ACCEPT_BURST
            )
        if self.config.metrics_port:
            # prometheus_client and an HTTP server cost ~50 ms of start: only a broker with a metrics port imports them
            from broker.common.metrics_server import MetricsServer

            self._metrics_server = MetricsServer(
                self.metrics,
                self.config.host,
                self.config.metrics_port,
                loop=loop,
                name="broker-metrics",
                ssl_context=(server_context(self.config.metrics_tls) if self.config.metrics_tls else None),
            )
        started = time.monotonic()
        await loop.run_in_executor(None, self.logs.load)
        self._logs_loaded = True
        self.replication.load_checkpoints()
        log.info(
            "loaded %d partitions from %s in %.2fs",
            len(list(self.logs.logs())),
            ", ".join(map(str, self.config.log_dirs)),
            time.monotonic() - started,
        )
        self._zk = await loop.run_in_executor(
            None,
            lambda: zk.connect(
                self.config.zk_connect,
                create=True,
                timeout=self.config.zk_connect_timeout_s,
                session_timeout=self.config.zk_session_timeout_s,
            ),
        )
        granted = zk.granted_session_timeout(self._zk)
        if granted is not None and abs(granted - self.config.zk_session_timeout_s) > 0.01:
            log.warning(
                "ZooKeeper granted a session timeout of %.1fs, not the %.1fs of "
                "zk_session_timeout_s (the server's minSessionTimeout/"
                "maxSessionTimeout): a dead broker is noticed after %.1fs, and "
                "leaders' write leases follow the shorter of the two",
                granted,
                self.config.zk_session_timeout_s,
                granted,
            )

        if self.authorizer.enabled:  # the ACLs in force before the first request is read
            await loop.run_in_executor(None, AclStore(self._zk).watch, self.authorizer.set_acls)

        def view_changed(view: ClusterView) -> None:  # on kazoo's threads
            with contextlib.suppress(RuntimeError):  # the loop is closed: this broker is gone, and so is its view
                loop.call_soon_threadsafe(self._apply_view, view)

        # Order matters: learn the cluster view, then listen, then register, so a client
        # that finds this broker in ZooKeeper can connect and gets complete answers.
        self.registry = BrokerRegistry(
            self._zk,
            self.config.broker_id,
            BrokerInfo(
                *self.listeners[0].address,
                self.config.datacenter,
                self.config.rack,
                *(self.kafka_address or ("", 0)),
                listeners=tuple((lst.config.name, *lst.address) for lst in self.listeners),
                endpoints=self._endpoints(),
            ),
            view_changed,
        )
        await loop.run_in_executor(None, self.registry.watch)
        self.replication.start(loop, self._zk, self.registry)
        self._replication_started = True
        self._apply_view(self.registry.view())
        for listening in self._all_listening:
            await listening.start_serving()
        await loop.run_in_executor(None, self.registry.register)
        self.controller = Controller(
            self._zk,
            self.config.broker_id,
            unclean_election=self.config.unclean_leader_election,
            auto_rebalance_interval_s=self.config.leader_rebalance_interval_s,
            elections=self.stats.leader_elections,
        )
        self.controller.start()
        start = self.background.start
        self._background = [
            start(self.flusher.run(), "flusher"),
            start(run_retention(self.logs, self.config.retention_check_ms, self.stats.segments_deleted), "retention"),
            start(self._close_stalled_connections(), "stalled-connections"),
        ]
        if self.kafka is not None:
            self._background.extend(start(run(), name) for name, run in self.kafka.background().items())
        fd_warning = fd_limit_warning(self.config.max_connections, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for warning in [*config_warnings(self.config), *filter(None, [fd_warning])]:
            log.warning("%s", warning)
        if self.kafka_address is not None:
            log.info("broker %d speaks Kafka on %s:%d", self.config.broker_id, *self.kafka_address)
        for listening in self.listeners[1:]:
            log.info(
                "broker %d listener %s on %s:%d (%s)",
                self.config.broker_id,
                listening.config.name,
                *listening.address,
                listening.security,
            )
        log.info(
            "broker %d listening on %s:%d (datacenter %s, zk %s)",
            self.config.broker_id,
            *self.listeners[0].address,
            self.config.datacenter,
            self.config.zk_connect,
        )

    async def _abandon_start(self) -> None:
        """Undo what a failed :meth:`start` did so far, quietly (the caller reports the
        error): give up the controller role, remove the registration, close the
        ZooKeeper session (its ephemeral nodes go with it at once, so the next start
        does not wait for them to expire), release the ports, and close the logs if
        they were loaded (a half-loaded log dir keeps no clean-shutdown marker)."""
        loop = asyncio.get_running_loop()
        self.shutting_down = True
        for listening in self._all_listening:
            listening.close()
        for conn in [*self.connections, *self.kafka_connections]:
            conn.close()
        steps: list[tuple[str, Callable[[], Any]]] = []
        if self.controller is not None:
            steps.append(("give up the controller role", self.controller.stop))
        if self.registry is not None:
            steps.append(("leave the registry", self.registry.deregister))
        for what, step in steps:
            try:
                await loop.run_in_executor(None, step)
            except Exception as exc:
                log.debug("failed start: could not %s: %s", what, exc)
        if self._replication_started:
            try:
                await self.replication.stop()
            except Exception as exc:
                log.debug("failed start: could not stop replication: %s", exc)
        await self.background.cancel(self._background)
        if self._zk is not None:
            zk.close(self._zk)
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self._logs_loaded:
            try:
                for key, plog in list(self.logs.logs()):
                    await self.flusher.flush(key, plog)
                self.flusher.close()
                self.logs.close()
            except LogferryError as exc:
                log.debug("failed start: could not close the logs: %s", exc)
        self._fsync_pool.shutdown(wait=True)
        self._admin_pool.shutdown(wait=False)

    async def run(self, freeze_startup: bool = False) -> None:
        """Start, serve until SIGTERM or SIGINT, then stop cleanly. ``freeze_startup``:
        once started, exempt the objects made so far from garbage collection
        (:mod:`broker.server.gc_pause`; only for a process that runs one broker)."""
        loop = asyncio.get_running_loop()
        # before start(): a signal sent as soon as the broker listens (or is registered)
        # must dump (SIGUSR2) or stop it cleanly once started (SIGTERM, SIGINT), not kill it
        loop.add_signal_handler(signal.SIGUSR2, _log_tasks)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop_on_signal, sig)
        self._starting = asyncio.ensure_future(self.start())
        try:
            await self._starting
        except asyncio.CancelledError:
            if self.stopped_by is None:
                raise
            return  # stopped during the start, which cleaned up after itself
        finally:
            self._starting = None
        if freeze_startup and not self._stopping.is_set():
            log.debug("froze %d startup objects", freeze_startup_objects())
        await self._stopping.wait()
        await self.stop()

    def _stop_on_signal(self, signum: int) -> None:
        self.stopped_by = signum
        self._stopping.set()
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()  # e.g. Ctrl-C while waiting for a stale registration

    def _background_crashed(self, name: str, exc: BaseException) -> None:
        """A long-lived task died (logged by :class:`BackgroundTasks`): stop, so that a
        broker that no longer flushes, retains or replicates does not go on serving."""
        self._stopping.set()

    @property
    def exit_code(self) -> int:
        """The process's exit code once :meth:`run` returned: 1 after a background
        task crashed, 130 after SIGINT (Ctrl-C's), else 0."""
        if self.background.crashed:
            return 1
        return 130 if self.stopped_by == signal.SIGINT else 0

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop (thread-unsafe; call from the loop)."""
        self._stopping.set()

    async def stop(self) -> None:
        """Hand leadership over (controlled shutdown), stop accepting, answer in-flight
        requests, stop fetching, deregister (so the ISRs drop this broker at once),
        flush."""
        log.info("broker %d stopping", self.config.broker_id)
        if self.config.controlled_shutdown and self._zk is not None and not self.shutting_down:
            await hand_over_leadership(
                self.config.broker_id,
                self._zk,
                lambda: self.view,
                self._admin_pool,
                self.config.controlled_shutdown_timeout_s,
            )
        self.shutting_down = True
        for listening in self._all_listening:
            listening.close()
        self.fetch.release_all()  # long polls answer with what they have
        pending = [t for c in [*self.connections, *self.kafka_connections] for t in c.tasks]
        if pending:
            log.info(
                "stop: answering %d in-flight requests (up to %.0fs)", len(pending), self.config.shutdown_timeout_s
            )
            _, late = await asyncio.wait(pending, timeout=self.config.shutdown_timeout_s)
            if late:
                log.warning(
                    "stop: %d requests still running after shutdown_timeout_s; their connections are closed unanswered",
                    len(late),
                )
        if self.controller is not None:
            log.info("stop: handing back the controller role")
            await asyncio.get_running_loop().run_in_executor(None, self.controller.stop)
        log.info("stop: stopping replica fetchers")
        await self.replication.stop()
        if self.registry is not None:
            # at once: this broker no longer fetches, so acks=all writes to the partitions
            # it follows wait for it until the controller drops it from their ISRs
            log.info("stop: leaving the registry")
            await asyncio.get_running_loop().run_in_executor(None, self.registry.deregister)
        await self.background.cancel(self._background)
        hosted = list(self.logs.logs())
        log.info("stop: flushing %d partitions", len(hosted))
        for key, plog in hosted:
            await self.flusher.flush(key, plog)
        self.flusher.close()
        self.logs.close()
        for conn in [*self.connections, *self.kafka_connections]:
            conn.close()
        if self._zk is not None:
            zk.close(self._zk)
        if self._metrics_server is not None:
            self._metrics_server.close()
        self._fsync_pool.shutdown(wait=True)
        self._admin_pool.shutdown(wait=False)
        if self.background.crashed:
            log.error(
                "broker %d stopped because background task %r crashed (exit code 1)",
                self.config.broker_id,
                self.background.crashed[0][0],
            )
        else:
            log.info("broker %d stopped cleanly", self.config.broker_id)

    async def _close_stalled_connections(self) -> None:
        """Drop clients that owe a request past ``incomplete_request_timeout_ms``."""
        timeout = self.config.incomplete_request_timeout_ms / 1000
        interval = min(1.0, timeout / 4)
        while True:
            await asyncio.sleep(interval)
            close_stalled(self.connections, time.monotonic(), timeout)

    def _endpoints(self) -> tuple[tuple[str, str, str, int, str], ...]:
        """Every bound listener as the registration shows it: (name, protocol, host,
        port, security), the Kafka one last."""
        return tuple((lst.config.name, lst.config.protocol, *lst.address, lst.security) for lst in self._all_listening)

    @property
    def kafka_address(self) -> tuple[str, int] | None:
        """Where the Kafka listener listens (its port once bound), or None."""
        return self.kafka_listening.address if self.kafka_listening is not None else None

    # -- cluster view -----------------------------------------------------------------

    def _apply_view(self, view: ClusterView) -> None:
        """Host the replicas assigned to this broker, take up each one's role, and drop
        the partitions of deleted topics."""
        if self.shutting_down:
            return  # logs are closing: a late view must not reopen partitions
        me = self.config.broker_id
        codecs: dict[str, int] = {}
        for topic, assignment in view.topics.items():
            topic_id = view.topic_ids.get(topic, 0)
            overrides = view.configs.get(topic, {})
            log_config = log_config_for(self.config.log, overrides)
            codec = codec_for(overrides)
            if codec is not None:
                codecs[topic] = codec
            for partition, replicas in assignment.items():
                if me not in replicas:
                    continue
                plog = self.logs.get(topic, partition)
                if plog is None:
                    plog = self.logs.create(topic, partition)
                    log.info("hosting %s-%d (replicas %s)", topic, partition, replicas)
                if plog.config != log_config:  # a topic setting changed: no restart needed
                    log.info(
                        "%s: log settings %s",
                        plog.name,
                        {k: overrides[k] for k in LOG_KEYS if k in overrides} or "the broker's",
                    )
                    plog.config = log_config
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
        # A reassignment moved the replica away: stop replicating, delete the local log.
        for (t, p), _ in list(self.logs.logs()):
            if t in view.topics and p in view.topics[t] and me not in view.topics[t][p]:
                self.replication.forget((t, p))
                self.logs.remove(t, p)
                log.info("deleted %s-%d: replica moved to brokers %s", t, p, view.topics[t][p])
        self._known_topics = set(view.topics)
        self._topic_codecs = codecs
        self.view = view
        self.replication.apply(view)

    def _replace_earlier_topics_log(self, topic: str, partition: int, plog: PartitionLog) -> PartitionLog | None:
        """The topic was deleted and created again while this broker was away (or
        between two views): the log on disk is the earlier topic's. Delete it and
        start the partition empty; None (not hosted) if it cannot be deleted."""
        log.warning(
            "%s-%d: the log on disk belongs to an earlier topic of this name "
            "(deleted and created again meanwhile); deleting its %d bytes",
            topic,
            partition,
            plog.size_bytes,
        )
        self.replication.forget((topic, partition))
        try:
            self.logs.remove(topic, partition)
        except StorageError as exc:
            log.error("%s; not hosting %s-%d until it is gone", exc, topic, partition)
            return None
        fresh = self.logs.create(topic, partition)
        log.info("hosting %s-%d afresh", topic, partition)
        return fresh

    def wake_consumers(self, key: tuple[str, int]) -> None:
        """The visible end of ``key`` moved: answer the consumers' long polls."""
        self.fetch.wake_consumers(key)

    def wake_fetchers(self, key: tuple[str, int]) -> None:
        """``key`` got new bytes (or changed role): answer the followers' long polls."""
        self.fetch.wake_fetchers(key)

    def replicated_in(self, key: tuple[str, int], nbytes: int, messages: int) -> None:
        """A follower appended bytes copied from its leader."""
        self.stats.replica_bytes_in[key] += nbytes
        plog = self.logs.get(*key)
        if plog is not None:
            self.flusher.appended(key, plog)

    def count_request(self, api: str, seconds: float, error: bool = False) -> None:
        """Record one handled request (connections count the ones no handler sees)."""
        self.stats.count_request(api, seconds, error)


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
        asyncio.run(broker.run(freeze_startup=True))
    except OSError as exc:  # LogferryErrors go up as they are: the CLI prints its one line
        raise ListenError(f"cannot start broker {config.broker_id}: {exc}") from exc
    return broker.exit_code


__all__ = ["Broker", "run_broker"]
