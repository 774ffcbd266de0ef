"""tests.support.waiting: the suite's one bounded poll (sync and asyncio)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.waiting import wait_until, wait_until_async


def test_returns_the_first_truthy_value():
    values = iter([None, 0, [], "leader 3"])
    assert wait_until(lambda: next(values), 5, "a leader", interval=0.001) == "leader 3"


def test_times_out_naming_what_and_the_last_value():
    with pytest.raises(AssertionError, match=r"waiting for the ISR \(last: \[\]\)"):
        wait_until(lambda: [], 0.05, "the ISR", interval=0.01)
    with pytest.raises(AssertionError, match=r"after 0.05s waiting for x$"):
        wait_until(lambda: False, 0.05, "x", interval=0.01)


def test_the_last_value_is_shown_when_falsy_but_telling():
    seen = iter(range(1_000_000))
    with pytest.raises(AssertionError, match=r"last: 0"):
        wait_until(lambda: 0 * next(seen), 0.03, "a count", interval=0.01)


def test_ignored_errors_mean_not_yet_and_others_propagate():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("broker down")
        return True

    assert wait_until(flaky, 5, "the broker", interval=0.001, ignore=(ConnectionError,))
    with pytest.raises(AssertionError, match="ConnectionError"):
        wait_until(
            lambda: (_ for _ in ()).throw(ConnectionError("down")),
            0.03,
            "never",
            interval=0.01,
            ignore=(ConnectionError,),
        )
    with pytest.raises(KeyError):
        wait_until(lambda: {}["missing"], 5, "a key", interval=0.001)


def test_the_predicate_is_asked_once_more_at_the_deadline():
    # a long interval: the only other check is the one at the deadline
    calls = []
    assert wait_until(lambda: calls.append(1) or len(calls) == 2, 0.05, "the second look", interval=10)
    assert len(calls) == 2


def test_async_variant_lets_the_loop_run():
    async def scenario():
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.02, done.set)
        return await wait_until_async(done.is_set, 5, "the timer")

    assert asyncio.run(scenario()) is True
    with pytest.raises(AssertionError, match="the impossible"):
        asyncio.run(wait_until_async(lambda: False, 0.03, "the impossible"))
