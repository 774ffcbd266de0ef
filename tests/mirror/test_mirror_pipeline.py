"""The pipelined mirror under kill -9: many batches in flight, nothing lost, duplicates
only as a re-copied uncommitted tail (one per restart and partition, in order)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.mirror.conftest import create, ends, message_count, mirrored, produce, read_batches, wait_for
from tests.mirror.test_mirror_integration import _offsets

pytestmark = pytest.mark.integration

MIN_ROUNDS, PER_ROUND, PARTITIONS = 16, 5_000, 4


def restarts(source: list[bytes], target: list[bytes]) -> int:
    """How often ``target`` goes back to an earlier source batch; fails on anything else.

    The target must be the source in order, except that it may restart at any batch it
    already holds (the tail after the last commit, copied again) and must end complete.
    """
    index = {batch: i for i, batch in enumerate(source)}
    position = count = 0
    for batch in target:
        assert batch in index, "a batch on the target that the source does not have"
        i = index[batch]
        if i != position:
            assert i < position, f"batch {position} of the source was skipped (lost)"
            count += 1
        position = i + 1
    assert position == len(source), f"the target stops at batch {position} of {len(source)}"
    return count


@pytest.mark.slow
def test_kill_9_mid_stream_with_many_batches_in_flight_loses_nothing(two_clusters, mirrors):
    source, target = two_clusters()
    create(source.zk_connect, "piped", PARTITIONS)
    # small polls and fetches, a window of many of them: lots of batches in flight at a kill
    mirror = mirrors(
        "m1",
        source,
        target,
        topics=["piped"],
        fetch_max_bytes=64 * 1024,
        poll_max_bytes=32 * 1024,
        max_inflight_bytes=1024 * 1024,
    )

    done = threading.Event()
    rounds: list[int] = []

    def keep_producing() -> None:  # until both kills are over, and at least MIN_ROUNDS
        while not done.is_set() or len(rounds) < MIN_ROUNDS:
            produce(source.zk_connect, "piped", PER_ROUND, PARTITIONS, tag=f"r{len(rounds)}", batch=100)
            rounds.append(1)
            time.sleep(0.1)

    producer = threading.Thread(target=keep_producing)
    producer.start()
    kills = 0
    try:
        for _ in range(2):
            committed = sum(_offsets(source.zk_connect, "mirror").values())
            wait_for(
                lambda committed=committed: sum(_offsets(source.zk_connect, "mirror").values()) > committed,
                60,
                "a commit in the background while copying",
            )
            member = mirror.status().get("consumer_id")
            mirror.kill()
            kills += 1
            mirror.start()
            wait_for(
                lambda member=member: mirror.status().get("consumer_id") not in (None, member),
                60,
                "the restarted mirror to run",
            )  # before any SIGTERM: its handler is set
    finally:
        done.set()
        producer.join(120)
    assert not producer.is_alive()
    produced = len(rounds) * PER_ROUND
    wait_for(
        lambda: mirrored(source.zk_connect, target.zk_connect, "piped", exact=False),
        120,
        "every source batch on the target after two kill -9",
    )
    assert mirror.terminate() == 0

    source_batches = read_batches(source.zk_connect, "piped")
    target_batches = read_batches(target.zk_connect, "piped")
    assert message_count(source_batches) == produced
    copied = message_count(target_batches)
    assert copied >= produced  # every message is there; the rest are documented duplicates
    for p, batches in source_batches.items():
        assert restarts(batches, target_batches[p]) <= kills
    # SIGTERM waited for the batches in flight: everything is committed, nothing repeats
    committed = _offsets(source.zk_connect, "mirror")
    assert {p: committed[("piped", p)] for p in range(PARTITIONS)} == ends(source.zk_connect, "piped")
    print(f"{produced} source messages, {copied} on the target ({copied - produced} duplicates after {kills} kills)")


def test_restarts_helper_rejects_loss_and_reordering():
    src = [b"a", b"b", b"c"]
    assert restarts(src, [b"a", b"b", b"a", b"b", b"c"]) == 1
    with pytest.raises(AssertionError):
        restarts(src, [b"a", b"c"])  # b lost
    with pytest.raises(AssertionError):
        restarts(src, [b"a", b"b"])  # incomplete
