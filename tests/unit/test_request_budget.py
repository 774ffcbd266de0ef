"""The broker-wide request budget: reserve, release, and waiters granted in order."""

import pytest

from broker.server.request_budget import RequestBudget


def test_reservations_fit_or_fail_without_reserving():
    budget = RequestBudget(100)
    assert budget.try_reserve(60)
    assert budget.try_reserve(40)
    assert not budget.try_reserve(1)
    assert budget.reserved == 100
    budget.release(40)
    assert budget.reserved == 60


def test_a_request_larger_than_the_budget_is_read_alone():
    budget = RequestBudget(100)
    assert budget.try_reserve(500)  # nothing else reserved
    assert not budget.try_reserve(1)
    budget.release(500)
    assert budget.try_reserve(10)
    assert not budget.try_reserve(500)


def test_waiters_are_granted_when_bytes_are_released():
    budget = RequestBudget(100)
    budget.try_reserve(90)
    granted: list[tuple[str, int]] = []
    budget.wait(50, lambda n: granted.append(("a", n)))
    budget.wait(30, lambda n: granted.append(("b", n)))
    assert granted == [] and budget.waiting == 2
    budget.release(30)  # 60 reserved: a does not fit yet (110), b does (90)
    assert granted == [("b", 30)] and budget.reserved == 90
    budget.release(60)  # 30 reserved: a fits now
    assert granted == [("b", 30), ("a", 50)] and budget.reserved == 80
    assert budget.waiting == 0


def test_waiters_are_granted_in_arrival_order_when_all_fit():
    budget = RequestBudget(100)
    budget.try_reserve(100)
    granted: list[str] = []
    for name in "xyz":
        budget.wait(10, lambda n, name=name: granted.append(name))
    budget.release(100)
    assert granted == ["x", "y", "z"] and budget.reserved == 30


def test_a_wait_that_fits_is_granted_at_once():
    budget = RequestBudget(100)
    granted: list[int] = []
    budget.wait(70, granted.append)
    assert granted == [70] and budget.waiting == 0


def test_a_cancelled_waiter_is_never_granted():
    budget = RequestBudget(10)
    budget.try_reserve(10)
    granted: list[int] = []
    grant = granted.append
    budget.wait(5, grant)
    assert budget.cancel(grant)
    assert not budget.cancel(grant)
    budget.release(10)
    assert granted == [] and budget.reserved == 0


def test_a_grant_may_release_at_once_without_losing_bytes():
    """A connection that closed while waiting gives its grant straight back."""
    budget = RequestBudget(10)
    budget.try_reserve(10)
    budget.wait(8, budget.release)
    other: list[int] = []
    budget.wait(9, other.append)
    budget.release(10)  # 8 granted and given back at once, then 9 fits
    assert other == [9] and budget.reserved == 9 and budget.waiting == 0


def test_releasing_more_than_reserved_is_a_bug():
    budget = RequestBudget(10)
    budget.try_reserve(5)
    with pytest.raises(AssertionError):
        budget.release(6)
    with pytest.raises(ValueError):
        RequestBudget(0)


def test_a_bound_method_waiter_can_be_cancelled():
    """A connection waits with ``self._granted``: a new bound-method object each time."""

    class Conn:
        def granted(self, n: int) -> None:
            raise AssertionError("cancelled waiter granted")

    budget = RequestBudget(10)
    budget.try_reserve(10)
    conn = Conn()
    budget.wait(5, conn.granted)
    assert budget.cancel(conn.granted)
    budget.release(10)
