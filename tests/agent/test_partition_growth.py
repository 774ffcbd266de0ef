"""An agent notices a topic's new partitions within seconds and loses no line.

The agent keys by host, so a host's lines go to ``crc32(host) % partitions``: the host
here is chosen so that growing the topic from 2 to 4 partitions moves its key to a new
partition (the key remapping docs/operations.md describes).
"""

from __future__ import annotations

import time
import zlib

import pytest

from broker.client import Admin
from tests.agent.conftest import consume, wait_until
from tests.agent.test_integration import base_doc

pytestmark = pytest.mark.integration


def test_an_agent_sends_to_new_partitions_and_every_line_arrives(broker_cluster, agent_process, tmp_path):
    cluster = broker_cluster(1)
    host = next(f"web-{i}" for i in range(100) if zlib.crc32(f"web-{i}".encode()) % 4 >= 2)
    moved_to = zlib.crc32(host.encode()) % 4
    with Admin(brokers=cluster.bootstrap) as admin:
        admin.create_topic("app", 2)
    doc = base_doc(tmp_path, cluster.bootstrap, host=host)
    log_file = tmp_path / "logs" / "a.log"
    lines = [b"line %06d" % i for i in range(4000)]
    log_file.write_bytes(b"\n".join(lines[:1000]) + b"\n")
    agent = agent_process(doc).start()
    wait_until(lambda: agent.counter("messages_acked") >= 1000, 30, "acks before growing")
    with Admin(brokers=cluster.bootstrap) as admin:
        admin.create_partitions("app", 4)
    grown_at = time.time()
    with log_file.open("ab") as out:
        for i in range(1000, 4000, 100):  # 3000 more lines over about 6 s
            out.write(b"\n".join(lines[i : i + 100]) + b"\n")
            out.flush()
            time.sleep(0.2)
    wait_until(lambda: agent.counter("messages_acked") >= len(lines), 60, "every line acked")
    assert agent.terminate() == 0
    got = consume(cluster.bootstrap, "app")
    assert sorted(v["line"].encode() for _, _, v in got) == lines  # each line once
    partitions = {p for p, _, _ in got}
    assert partitions == {zlib.crc32(host.encode()) % 2, moved_to}, partitions
    first_moved = min(v["time"] for p, _, v in got if p == moved_to)
    print(
        f"agent's host {host} moved to partition {moved_to}; first line read for it "
        f"{first_moved / 1000 - grown_at:.1f} s after the growth (metadata_max_age_s 5)"
    )
