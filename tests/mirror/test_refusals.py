"""Sans-IO pieces of the mirror's per-topic ACL refusals (mirror/refusals.py, the tracker's
discard_from, the preserving mode's REFUSED state)."""

from __future__ import annotations

import pytest

from broker.common.errors import TopicAuthorizationFailedError
from mirror.commit_tracker import CommitTracker
from mirror.positions import COPYING, REFUSED, RESYNC, Positions
from mirror.refusals import PROBING, Refusals


def test_a_refusal_is_news_once_and_retried_after_its_interval() -> None:
    r = Refusals(retry_s=5.0)
    assert r.refuse("secret", "User:m may not produce on topic 'secret'", now=100.0)
    assert not r.refuse("secret", "again", now=101.0)  # known: no second log line
    assert r.halted("secret") and not r.halted("open")
    assert r.due(104.9) == [] and r.next_retry() == 105.0
    assert r.due(105.0) == ["secret"]
    assert not r.halted("secret") and r.topics["secret"].state == PROBING
    assert r.due(200.0) == []  # probing: not due twice
    # the probe is refused again: halted for another interval, counted, not news
    assert r.granted("open") is None
    assert not r.refuse("secret", "still", now=106.0)
    assert r.granted("secret") is None  # a late answer while refused: still refused
    assert r.halted("secret") and r.topics["secret"].attempts == 2
    assert r.due(110.9) == [] and r.due(111.0) == ["secret"]
    done = r.granted("secret")
    assert done is not None and done.attempts == 2
    assert r.granted("secret") is None and len(r) == 0
    assert r.document() == {}


def test_refusals_document_for_the_status_file() -> None:
    r = Refusals(retry_s=1.0)
    r.refuse("b", "no produce", now=1.0)
    r.refuse("a", "no create", now=2.0)
    doc = r.document()
    assert list(doc) == ["a", "b"]
    assert doc["b"] == {"state": "refused", "reason": "no produce", "refusals": 1, "since": 1.0}
    with pytest.raises(ValueError):
        Refusals(retry_s=0)


def test_discard_from_forgets_the_refused_batch_and_everything_after_it() -> None:
    t = CommitTracker()
    a = t.add(("s", 0), 0, 100, nbytes=100)
    b = t.add(("s", 0), 100, 200, nbytes=100)
    c = t.add(("s", 0), 200, 300, nbytes=100)
    other = t.add(("o", 0), 0, 50, nbytes=50)
    t.acked(a)
    t.failed(b, TopicAuthorizationFailedError("refused"))
    first = t.discard_from(b)
    assert first is not None and first.offset == 100
    assert t.inflight_bytes == 150 and len(t) == 2
    t.acked(c)  # a late outcome of a discarded batch is ignored
    t.acked(other)
    assert t.advance().positions == {("s", 0): 100, ("o", 0): 50}
    assert t.discard_from(b) is None and len(t) == 0 and t.inflight_bytes == 0


def test_a_refused_partition_sends_nothing_until_retried_then_resyncs() -> None:
    p = Positions()
    tp = ("secret", 0)
    p.resynced(tp, 0)
    assert p.accept(tp, 0, 100, 10, 100) is not None
    p.refuse(tp)
    assert p.state(tp) == REFUSED and p.inflight_bytes == 0
    assert p.accept(tp, 100, 200, 10, 100) is None  # polled while refused: dropped
    assert tp not in p.needs_resync()
    p.retry(tp)
    assert p.state(tp) == RESYNC and tp in p.needs_resync()
    p.resynced(tp, 100)
    assert p.state(tp) == COPYING and p.accept(tp, 100, 200, 10, 100) is not None
