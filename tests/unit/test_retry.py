"""broker.common.retry: the one exponential backoff, run on a fake clock and sleep."""

from __future__ import annotations

import pytest

from broker.common.errors import ConfigError
from broker.common.retry import Retry


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_backoff_grows_caps_and_jitters_with_injected_randomness():
    # (moved from tests/groups/test_streams_unit.py, where rebalance.Backoff was)
    backoff = Retry(initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.5, rng=lambda: 0.0)
    assert [round(backoff.next_delay(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    low = Retry(initial=0.1, maximum=1.0, jitter=0.5, rng=lambda: 1.0)
    assert round(low.next_delay(), 3) == 0.05
    backoff.reset()
    assert round(backoff.next_delay(), 3) == 0.1


def test_policy_maps_a_failure_count_to_a_delay_without_state():
    policy = Retry(initial=0.5, maximum=30.0)
    assert [policy.delay(n) for n in (1, 2, 3, 6, 7, 8, 100)] == [0.5, 1.0, 2.0, 16.0, 30.0, 30.0, 30.0]
    assert policy.delay(0) == 0.0
    assert policy.failures == 0  # asking the policy counts nothing


def test_multiplier_and_no_jitter_by_default():
    fixed = Retry(initial=0.25, maximum=5.0, multiplier=1.0)
    assert [fixed.next_delay() for _ in range(3)] == [0.25, 0.25, 0.25]
    triple = Retry(initial=1.0, maximum=100.0, multiplier=3.0)
    assert [triple.next_delay() for _ in range(4)] == [1.0, 3.0, 9.0, 27.0]


def test_jitter_stays_between_the_jittered_floor_and_the_cap():
    rolls = iter([0.0, 0.5, 0.999])
    retry = Retry(initial=2.0, maximum=2.0, jitter=0.5, rng=lambda: next(rolls))
    assert [retry.delay(1) for _ in range(3)] == pytest.approx([2.0, 1.5, 1.001])


def test_a_very_long_outage_does_not_overflow():
    retry = Retry(initial=0.05, maximum=2.0)
    assert retry.delay(5000) == 2.0
    assert Retry(initial=1.0, maximum=1e400).delay(5000) == 1e400  # inf cap: the overflow path


def test_sleep_counts_failures_and_uses_the_injected_sleep():
    t = FakeTime()
    retry = Retry(initial=0.1, maximum=0.3, sleep=t.sleep, clock=t.clock)
    assert [retry.sleep() for _ in range(4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])
    assert t.slept == pytest.approx([0.1, 0.2, 0.3, 0.3])
    assert retry.failures == 4
    assert retry.elapsed() == pytest.approx(0.9)


def test_max_tries_exhausts_a_sequence_until_reset():
    retry = Retry(initial=0.0, max_tries=3)
    outcomes = []
    for _ in range(5):
        retry.next_delay()
        outcomes.append(retry.exhausted)
    assert outcomes == [False, False, True, True, True]
    retry.reset()
    assert not retry.exhausted and retry.failures == 0


def test_deadline_on_the_injected_clock():
    t = FakeTime()
    retry = Retry(initial=1.0, maximum=4.0, deadline=5.0, sleep=t.sleep, clock=t.clock)
    assert retry.remaining() == 5.0 and not retry.expired
    retry.sleep()  # 1 s
    retry.sleep()  # 2 s
    assert retry.remaining() == pytest.approx(2.0) and not retry.exhausted
    retry.sleep()  # 4 s: past the deadline
    assert retry.expired and retry.exhausted and retry.remaining() == 0.0
    retry.reset()  # a new sequence gets the whole deadline again
    assert not retry.expired and retry.remaining() == 5.0
    assert Retry().remaining() is None and not Retry().expired


def test_an_event_wait_makes_the_sleep_interruptible():
    import threading

    stop = threading.Event()
    stop.set()
    retry = Retry(initial=60.0, maximum=60.0, sleep=stop.wait)
    assert retry.sleep() == 60.0  # returns at once: the event is set


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"initial": -1.0}, "negative"),
        ({"maximum": -0.5}, "negative"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"max_tries": 0}, "max_tries"),
    ],
)
def test_nonsense_settings_are_refused_with_the_setting_named(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        Retry(**kwargs)


def test_call_site_policies_keep_their_delays():
    """The delays call sites used before they moved to Retry (no behaviour change)."""
    from agent import runtime
    from broker.client.group import fetcher
    from broker.client.sender import RetryPolicy

    assert [runtime.REREAD_BACKOFF.delay(n) for n in (1, 2, 7, 8)] == [0.5, 1.0, 30.0, 30.0]
    ceiling = fetcher.RETRY.ceiling
    assert [ceiling(1), ceiling(2), ceiling(5), ceiling(6)] == [0.1, 0.2, 1.6, 2.0]
    # the producer: retry_backoff_ms doubling, at most 64 times it and at most 5 s
    for backoff, cap in ((0.1, 5.0), (0.05, 3.2), (0.0, 0.0)):
        policy = RetryPolicy(None, backoff, 120.0, rng=lambda: 0.0)
        assert policy.delay(1) == backoff and policy.delay(1000) == pytest.approx(cap)
