"""The topics of a Kafka consumer's join metadata, which OffsetDelete checks before it
deletes a group's offsets (broker/server/kafka/group_deletion.py)."""

from __future__ import annotations

import struct

from broker.server.kafka.group_deletion import subscribed_topics


def subscription(version: int, topics: list[str], tail: bytes = b"\xff\xff\xff\xff") -> bytes:
    """ConsumerProtocolSubscription as Kafka's clients write it (user data null)."""
    body = struct.pack(">hi", version, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + tail


def test_the_topics_of_every_version_are_read() -> None:
    for version in (0, 1, 3):
        assert subscribed_topics(subscription(version, ["orders", "clicks"])) == {"orders", "clicks"}
    assert subscribed_topics(subscription(0, [])) == set()


def test_unreadable_metadata_is_none_so_every_topic_counts_as_subscribed() -> None:
    whole = subscription(1, ["orders"])
    for cut in (0, 3, 7, 10):
        assert subscribed_topics(whole[:cut]) is None
    assert subscribed_topics(struct.pack(">hih", 0, 1, -1)) is None
    assert subscribed_topics(struct.pack(">hih", 0, 1, 2) + b"\xff\xfe") is None
