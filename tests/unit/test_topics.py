"""Topic naming (no path traversal) and partition placement."""

import pytest

from broker.errors import InvalidTopicError
from broker.topics import (
    assign_partitions,
    parse_partition_dir_name,
    partition_dir_name,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["a", "access-log", "app.errors_v2", "A" * 249, "..x", "-"])
def test_legal_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "a b", "ü", "A" * 250,
                                  "x\x00", None, 5])
def test_illegal_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_partition_dir_names_round_trip():
    assert parse_partition_dir_name(partition_dir_name("web-access", 12)) == ("web-access", 12)
    assert parse_partition_dir_name("lost+found") is None
    assert parse_partition_dir_name("topic-x") is None


def test_assignment_is_balanced_and_deterministic():
    a = assign_partitions("t", 12, [3, 1, 2])
    assert a == assign_partitions("t", 12, [1, 2, 3])
    counts = {b: list(a.values()).count(b) for b in (1, 2, 3)}
    assert counts == {1: 4, 2: 4, 3: 4}
    with pytest.raises(ValueError):
        assign_partitions("t", 1, [])
