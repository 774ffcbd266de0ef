"""DeliveryFuture: callbacks run exactly once, however completion and registration race."""

import threading

from broker.client.delivery import DeliveryFuture
from broker.common.errors import StorageError


def test_callback_added_after_completion_runs_once():
    future = DeliveryFuture()
    future._complete(42)
    calls = []
    future.add_callback(calls.append)
    assert calls == [future] and future.wait(0) == 42


def test_callbacks_race_with_completion_and_run_exactly_once():
    for _ in range(300):
        future = DeliveryFuture()
        calls = []
        adder = threading.Thread(
            target=lambda future=future, calls=calls: [future.add_callback(calls.append) for _ in range(5)]
        )
        adder.start()
        future._complete(None, StorageError("disk full"))
        adder.join()
        assert len(calls) == 5
        assert isinstance(future.exception(), StorageError)


def test_a_waiter_blocks_until_completion_from_another_thread():
    future = DeliveryFuture()
    got = []
    waiter = threading.Thread(target=lambda: got.append(future.wait(10)))
    waiter.start()
    future._complete(7)
    waiter.join(10)
    assert got == [7] and future.wait(0) == 7


def test_many_waiters_are_all_released_by_one_completion():
    for _ in range(50):
        future = DeliveryFuture()
        got = []
        waiters = [
            threading.Thread(target=lambda got=got, future=future: got.append(future.wait(10))) for _ in range(4)
        ]
        for w in waiters:
            w.start()
        future._complete(3)
        for w in waiters:
            w.join(10)
        assert got == [3, 3, 3, 3]


def test_a_timed_out_wait_leaves_the_future_to_complete_later():
    import pytest

    from broker.common.errors import RequestTimedOutError

    future = DeliveryFuture()
    with pytest.raises(RequestTimedOutError):
        future.wait(0.01)
    future._complete(None, StorageError("disk full"))
    with pytest.raises(StorageError):
        future.wait(1)
    future._complete(99)  # the first outcome stays
    assert isinstance(future.exception(), StorageError) and future.offset is None


def test_complete_many_gives_each_future_its_offset_and_keeps_the_first_outcome():
    from broker.client.delivery import complete_many

    done_first, *rest = futures = [DeliveryFuture() for _ in range(4)]
    done_first._complete(5)
    calls = []
    rest[0].add_callback(calls.append)
    complete_many(futures, [10, 20, 30, 40])
    assert [f.offset for f in futures] == [5, 20, 30, 40]  # the first outcome stays
    assert all(f.done() for f in futures) and calls == [rest[0]]


def test_complete_many_without_offsets_or_with_an_error_wakes_waiters_and_callbacks():
    from broker.client.delivery import complete_many

    plain = [DeliveryFuture() for _ in range(3)]
    waited = plain[1]
    got = []
    waiter = threading.Thread(target=lambda: got.append(waited.wait(10)))
    waiter.start()
    complete_many(plain)  # acks=0: done, no offsets
    waiter.join(10)
    assert got == [None] and all(f.done() and f.exception() is None for f in plain)
    failed = [DeliveryFuture() for _ in range(2)]
    calls = []
    failed[1].add_callback(calls.append)
    complete_many(failed, None, StorageError("disk full"))
    assert calls == [failed[1]] and all(isinstance(f.exception(), StorageError) for f in failed)
