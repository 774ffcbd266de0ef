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
        adder = threading.Thread(target=lambda: [future.add_callback(calls.append) for _ in range(5)])
        adder.start()
        future._complete(None, StorageError("disk full"))
        adder.join()
        assert len(calls) == 5
        assert isinstance(future.exception(), StorageError)
