"""A source topic that gains partitions while the mirror runs: the target grows to match.

The mirror's group rebalances onto the new source partitions, the first batch from one
grows the target topic (mirror/growth.py), and batches keep their partition and bytes:
nothing is re-hashed. Both modes share the module's source and target
(``module_two_clusters``), each with its own topic and mirror group.
"""

from __future__ import annotations

import pytest

from broker.client import Admin
from tests.mirror.conftest import create, ends, mirrored, produce, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["produce", "preserve"])
def test_target_topic_grows_with_its_source_and_partitions_are_kept(
    module_two_clusters, unique_name, mirrors, mode: str
):
    source, target = module_two_clusters
    grows = unique_name("grows")
    create(source.zk_connect, grows, 2)
    mirror = mirrors("m1", source, target, topics=[grows], mode=mode, group=unique_name("mirror"))
    produce(source.zk_connect, grows, 2_000, 2, tag="before")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, grows, exact=True),
        60,
        "the first 2 partitions mirrored",
    )
    with Admin(zk=source.zk_connect) as admin:
        assert len(admin.create_partitions(grows, 4)) == 4
    produce(source.zk_connect, grows, 4_000, 4, tag="after")
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, grows, exact=True),
        60,
        "all 4 partitions mirrored byte for byte, in place",
    )
    assert sorted(ends(target.zk_connect, grows)) == [0, 1, 2, 3]
    assert mirror.terminate() == 0
    log = mirror.log_file.read_text(errors="replace")
    assert f"grew target topic '{grows}' from 2 to 4 partitions" in log
    assert "NOT PRESERVED" not in log
