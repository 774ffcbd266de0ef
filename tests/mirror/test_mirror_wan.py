"""The mirror across a WAN: every message copied once, in order, through a delayed path.

The source cluster is reached through :mod:`benchmarks.delay_proxy` (real sockets, each
direction delayed), as the WAN benchmark does: the mirror runs in this process because
its source clients are routed to the proxy by the benchmark's address map (brokers have
no "advertised address" setting). The fetch window starts at a small ``fetch_max_bytes``
so that it has to grow with the measured latency x bandwidth while copying. Both modes
share the module's source and target (``module_two_clusters``), each with its own topic
and mirror group.
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from benchmarks.delay_proxy import DelayProxy
from benchmarks.mirror_throughput import routed_through
from mirror.config import MirrorConfig
from mirror.core import Mirror
from mirror.preserve import PreservingMirror
from tests.mirror.conftest import (
    assert_mirrored,
    create,
    ends,
    message_count,
    produce,
    read_batches,
    values_by_partition,
    wait_for,
)

pytestmark = pytest.mark.integration

MESSAGES, PARTITIONS, DELAY_S = 40_000, 4, 0.010
BASE = 64 * 1024


@pytest.mark.parametrize("mode", ["preserve", "produce"])
def test_a_delayed_source_is_copied_whole_and_in_order(module_two_clusters, unique_name, mode):
    source, target = module_two_clusters
    wan = unique_name("wan")
    create(source.zk_connect, wan, PARTITIONS)
    produce(source.zk_connect, wan, MESSAGES, PARTITIONS, tag="w", batch=100)
    wait_for(
        lambda: message_count(read_batches(source.zk_connect, wan)) == MESSAGES,
        30,
        "the source to hold every message",
    )
    zk_hostport, _, chroot = source.zk_connect.partition("/")
    zk_host, _, zk_port = zk_hostport.rpartition(":")
    broker_host, _, broker_port = source.brokers[0].address.rpartition(":")
    zk_address, broker_address = (zk_host, int(zk_port)), (broker_host, int(broker_port))
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(DelayProxy([zk_address, broker_address], DELAY_S * 1000))
        via_proxy = f"127.0.0.1:{proxy.ports[zk_address]}/{chroot}"
        stack.enter_context(routed_through(via_proxy, {broker_address: ("127.0.0.1", proxy.ports[broker_address])}))
        config = MirrorConfig(
            source_zk=via_proxy,
            target_zk=target.zk_connect,
            group=unique_name("wan"),
            topics=(wan,),
            mode=mode,
            fetch_max_bytes=BASE,
            commit_interval_ms=300,
            audit_topic="",
        )
        mirror = PreservingMirror(config) if mode == "preserve" else Mirror(config)
        mirror.start()
        thread = threading.Thread(target=mirror.run, name="wan-mirror")
        thread.start()
        try:
            wanted = ends(source.zk_connect, wan)
            wait_for(
                lambda: ends(target.zk_connect, wan) == wanted or not thread.is_alive(),
                120,
                "the target to reach the source's ends",
            )
            assert thread.is_alive(), "the mirror stopped"
            assert mirror._consumer is not None
            stats = mirror._consumer.metrics()
        finally:
            mirror.stop()
            thread.join(60)
    assert not thread.is_alive()
    # the window grew past the base: fewer, larger fetches than fetch_max_bytes allows
    assert stats["bytes_fetched"] / stats["fetch_requests"] > BASE
    assert ends(target.zk_connect, wan) == wanted
    assert_mirrored(source.zk_connect, target.zk_connect, wan, exact=True)
    sent, copied = values_by_partition(source.zk_connect, wan), values_by_partition(target.zk_connect, wan)
    assert sum(len(v) for v in copied.values()) == MESSAGES  # sent N, received N
    assert copied == sent  # the same values, in the same order, in each partition
