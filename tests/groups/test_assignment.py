"""Unit tests of the sans-IO partition assignment (broker.client.group.assignment)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from broker.client.group.assignment import (
    Subscription,
    assign,
    diff,
    group_strategy,
    member_share,
    range_assign,
    resolve_subscription,
    roundrobin_assign,
)


def test_range_paper_example_contiguous_runs():
    # 10 partitions, 3 one-stream members: 4 + 3 + 3, contiguous, sorted by id.
    parts = {"t": range(10)}
    subs = {"c": {"t": 1}, "a": {"t": 1}, "b": {"t": 1}}
    result = range_assign(parts, subs)
    owners = [result[("t", p)][0] for p in range(10)]
    assert owners == ["a"] * 4 + ["b"] * 3 + ["c"] * 3


def test_range_threads_sort_numerically_by_stream_index():
    parts = {"t": range(12)}
    subs = {"a": {"t": 11}, "b": {"t": 1}}
    result = range_assign(parts, subs)
    # (a, 10) sorts after (a, 9), not after (a, 1): a-0 .. a-10, then b-0
    assert [result[("t", p)] for p in range(12)] == [("a", i) for i in range(11)] + [("b", 0)]


def test_more_threads_than_partitions_leaves_late_threads_idle():
    result = range_assign({"t": [0, 1]}, {"a": {"t": 1}, "b": {"t": 1}, "c": {"t": 1}})
    assert result == {("t", 0): ("a", 0), ("t", 1): ("b", 0)}


def test_unsubscribed_topics_and_missing_partitions_are_skipped():
    result = range_assign({"t": [0, 1], "u": []}, {"a": {"t": 1, "u": 1, "v": 2}})
    assert result == {("t", 0): ("a", 0), ("t", 1): ("a", 0)}


def test_roundrobin_spreads_many_small_topics_evenly():
    parts = {f"t{i}": [0] for i in range(6)}
    subs = {"a": {t: 1 for t in parts}, "b": {t: 1 for t in parts}, "c": {t: 1 for t in parts}}
    rr = Counter(thread[0] for thread in roundrobin_assign(parts, subs).values())
    rng = Counter(thread[0] for thread in range_assign(parts, subs).values())
    assert rr == {"a": 2, "b": 2, "c": 2}
    assert rng == {"a": 6}  # the reason roundrobin exists


def test_roundrobin_skips_threads_not_subscribed():
    parts = {"x": [0, 1, 2, 3], "y": [0, 1]}
    subs = {"a": {"x": 1}, "b": {"x": 1, "y": 1}}
    result = roundrobin_assign(parts, subs)
    assert {tp for tp, th in result.items() if th[0] == "a"} <= {("x", p) for p in range(4)}
    assert result[("y", 0)] == ("b", 0) and result[("y", 1)] == ("b", 0)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_properties_on_random_groups(strategy):
    rng = random.Random(7)
    for _ in range(400):
        topics = {f"t{i}": list(range(rng.randint(0, 13))) for i in range(rng.randint(1, 4))}
        members = {}
        for m in range(rng.randint(1, 6)):
            chosen = rng.sample(sorted(topics), rng.randint(1, len(topics)))
            members[f"m{m:02d}"] = {t: rng.randint(1, 3) for t in chosen}
        result = assign(strategy, topics, members)
        subscribed = {(t, p) for t, ps in topics.items() for p in ps if any(t in s for s in members.values())}
        assert set(result) == subscribed  # every subscribed partition exactly once
        for (topic, _), (member, stream) in result.items():
            assert stream < members[member][topic]  # only to threads subscribed to it
        # Order of the inputs does not matter: every member computes the same answer.
        shuffled_members = dict(rng.sample(sorted(members.items()), len(members)))
        shuffled_topics = {t: rng.sample(ps, len(ps)) for t, ps in reversed(list(topics.items()))}
        assert assign(strategy, shuffled_topics, shuffled_members) == result
        if strategy == "range":
            for topic, parts in topics.items():
                counts = Counter(th for (t, _), th in result.items() if t == topic)
                threads = sum(s.get(topic, 0) for s in members.values())
                if parts and threads:
                    full = [
                        counts.get(th, 0) for th in [(m, i) for m, s in members.items() for i in range(s.get(topic, 0))]
                    ]
                    assert max(full) - min(full) <= 1  # balanced within one partition


def test_assign_rejects_unknown_strategy():
    with pytest.raises(ValueError, match="range"):
        assign("sticky", {}, {})


def test_group_strategy_is_the_first_members():
    assert group_strategy({"b": "range", "a": "roundrobin"}) == "roundrobin"
    assert group_strategy({"a": "bogus", "b": "roundrobin"}) == "roundrobin"
    assert group_strategy({}) == "range"


def test_resolve_explicit_and_pattern_subscriptions():
    topics = ["logs.web", "logs.db", "metrics", "logs"]
    assert resolve_subscription(Subscription({"metrics": 2, "absent": 1}, None), topics) == {"metrics": 2}
    assert resolve_subscription(Subscription(None, r"logs\..*", 3), topics) == {"logs.db": 3, "logs.web": 3}
    assert resolve_subscription(Subscription(None, "logs", 1), topics) == {"logs": 1}  # whole name
    assert resolve_subscription(Subscription(None, "(", 1), topics) == {}


def test_subscription_json_round_trip_and_garbage():
    for sub in (Subscription({"a": 2}, None, 1), Subscription(None, "x.*", 4)):
        assert Subscription.from_json(sub.to_json()) == sub
    assert Subscription.from_json({"subscription": {"a": "two", "b": 1}}) == Subscription({"b": 1}, None, 1)
    assert Subscription.from_json({}) == Subscription({}, None, 1)


def test_diff_and_member_share():
    before = {("t", 0): 0, ("t", 1): 0, ("t", 2): 1}
    after = {("t", 1): 0, ("t", 2): 0, ("t", 3): 1}
    changes = diff(before, after)
    assert changes.revoked == [("t", 0)]
    assert changes.gained == [("t", 3)]
    assert changes.moved == [("t", 2)]
    result = range_assign({"t": range(4)}, {"a": {"t": 2}, "b": {"t": 1}})
    assert member_share(result, "a") == {("t", 0): 0, ("t", 1): 0, ("t", 2): 1}
