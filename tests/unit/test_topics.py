"""Topic naming (no path traversal) and partition placement."""

import pytest

from broker.common.errors import InvalidTopicError
from broker.common.names import (
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
