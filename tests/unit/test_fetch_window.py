"""broker.client.group.window.FetchWindow: fetch sizes from the measured latency and rate.

A small model of a link stands in for the network: ``P`` backlogged partitions, each
with one fetch in flight (stop-and-wait, as the fetcher does), answers sent one after
the other over a link of ``bandwidth`` bytes/s, ``latency`` seconds of round trip. Each
answer reports when its first byte arrived and whether it waited behind another answer,
as :class:`broker.client.connection.ResponseFuture` does.
"""

from __future__ import annotations

import heapq

import pytest

from broker.client.group.window import MAX_ANSWER_BYTES, FetchWindow

MiB = 1024 * 1024


def simulate(
    window: FetchWindow,
    partitions: int,
    bandwidth: float,
    latency: float,
    seconds: float = 6.0,
    backlog: bool = True,
    sizes: list[int] | None = None,
    start: float = 0.0,
) -> float:
    """Bytes/s the partitions move together over the last third of ``seconds`` (the clock
    starting at ``start``); the sizes asked then go to ``sizes``."""
    link_free = start
    answers: list[tuple[float, int, object, int, float, bool]] = []

    def send(now: float, i: int) -> None:
        nonlocal link_free
        size = window.size("b", partitions)
        ticket = window.sent("b", now, size)
        got = size if backlog else 1000
        ready = now + latency / 2  # the broker has the answer; the link may be busy
        start = max(ready, link_free)
        idle = ready >= link_free  # its first bytes did not wait behind another answer
        link_free = start + got / bandwidth
        heapq.heappush(answers, (link_free + latency / 2, i, ticket, got, start + latency / 2, idle))

    for i in range(partitions):
        send(start, i)
    end = start + seconds
    moved = 0
    while True:
        now, i, ticket, got, first_byte_at, idle = heapq.heappop(answers)
        if now > end:
            return moved / (seconds / 3)
        window.answered(ticket, got, backlog, now, first_byte_at, idle)  # type: ignore[arg-type]
        if now > end - seconds / 3:
            moved += got
            if sizes is not None:
                sizes.append(ticket.asked)  # type: ignore[attr-defined]
        send(now, i)


def test_a_long_round_trip_grows_the_fetch_size_until_the_link_is_busy():
    fixed = simulate(FetchWindow(4 * MiB, 0), 4, 400e6, 0.05)
    window = FetchWindow(4 * MiB, 128 * MiB)
    rate = simulate(window, 4, 400e6, 0.05)
    assert fixed < 0.75 * 400e6  # 4 x 4 MiB per round trip: the window is the limit
    assert rate >= 0.85 * 400e6
    best, size = window.estimates("b")
    assert best >= 0.85 * 400e6
    assert 4 * MiB < size <= 32 * MiB


def test_without_latency_the_fetch_size_stays_at_its_base_but_for_rare_probes():
    window = FetchWindow(4 * MiB, 128 * MiB)
    sizes: list[int] = []
    rate = simulate(window, 4, 400e6, 0.0005, sizes=sizes)
    assert rate >= 0.95 * 400e6
    assert max(sizes) <= 8 * MiB  # one doubling tried now and then, never more
    assert sizes.count(4 * MiB) >= 0.8 * len(sizes)


def test_the_budget_caps_the_bytes_asked_from_one_broker():
    window = FetchWindow(4 * MiB, 32 * MiB)
    simulate(window, 4, 1e9, 0.2)
    assert window.size("b", 4) == 8 * MiB  # 4 partitions x 8 MiB = the budget
    assert window.size("b", 64) == 4 * MiB  # never below the configured fetch size


def test_one_partition_alone_grows_past_several_round_trips_per_fetch():
    window = FetchWindow(1 * MiB, 512 * MiB)
    rate = simulate(window, 1, 200e6, 0.05, seconds=10.0)
    assert rate >= 0.75 * 200e6  # stop-and-wait: busy only while a fetch outlasts the latency


def test_a_caught_up_broker_decides_nothing():
    window = FetchWindow(4 * MiB, 128 * MiB)
    simulate(window, 4, 400e6, 0.05, backlog=False)
    assert window.size("b", 4) == 4 * MiB


def test_no_budget_means_no_adapting():
    window = FetchWindow(4 * MiB, 0)
    simulate(window, 4, 400e6, 0.05)
    assert window.size("b", 4) == 4 * MiB


def test_unknown_and_forgotten_brokers_get_the_base():
    window = FetchWindow(4 * MiB, 128 * MiB)
    assert window.size("x", 4) == 4 * MiB
    simulate(window, 4, 400e6, 0.05)
    assert window.size("b", 4) > 4 * MiB
    window.forget("b")
    assert window.size("b", 4) == 4 * MiB


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError):
        FetchWindow(0, 1)
    with pytest.raises(ValueError):
        FetchWindow(1, -1)


def test_a_path_that_got_shorter_gives_the_memory_back():
    window = FetchWindow(4 * MiB, 128 * MiB)
    simulate(window, 4, 400e6, 0.1)
    assert window.size("b", 4) >= 16 * MiB
    rate = simulate(window, 4, 400e6, 0.0005, seconds=30.0, start=100.0)
    assert rate >= 0.95 * 400e6
    assert window.size("b", 4) <= 8 * MiB  # halvings that cost nothing are kept


def test_a_cold_start_fills_a_long_fat_pipe_within_a_few_round_trips():
    """Slow start: the size follows the measured rate x latency from the first answers,
    so a 50 ms path at 470 MB/s is busy after a few round trips, not after seconds."""
    window = FetchWindow(4 * MiB, 128 * MiB)
    sizes: list[int] = []
    rate = simulate(window, 4, 470e6, 0.05, seconds=0.9, sizes=sizes)  # last third: 0.6-0.9 s
    assert rate >= 0.9 * 470e6
    assert min(sizes) > 4 * MiB  # already past the base in the measured third
    bandwidth, size = window.estimates("b")
    assert 0.9 * 470e6 <= bandwidth <= 470e6 * 1.01
    assert window.latency("b") == pytest.approx(0.05)
    # about twice the bandwidth-delay product in flight over the 4 partitions, within the budget
    assert 4 * size == pytest.approx(2 * 470e6 * 0.05 * 4 / 3, rel=0.1)


def test_the_size_comes_from_the_estimates_and_stays_between_base_and_budget():
    window = FetchWindow(1 * MiB, 64 * MiB)
    ticket = window.sent("b", 0.0, 1 * MiB)
    # answered after 100 ms, its first byte after an idle wait of 80 ms: R = 80 ms
    window.answered(ticket, 10_000_000, True, 0.1, first_byte_at=0.08, after_idle=True)
    assert window.latency("b") == pytest.approx(0.08)
    assert window.estimates("b")[0] == pytest.approx(100e6)  # 10 MB answered in 100 ms
    # 2 x 100 MB/s x 80 ms = 16 MB over the other 3 of 4 partitions, rounded up to 64 KiB
    assert window.size("b", 4) == -(-int(16e6 / 3) // 65536) * 65536
    assert window.size("b", 1) == MAX_ANSWER_BYTES  # alone: 3 x 16 MB, past one answer's bound
    assert window.size("b", 200) == 1 * MiB  # never below the base


def test_an_answer_queued_behind_another_gives_no_latency_sample():
    """Its first byte waited for the answer before it on the connection, not only for the
    path: taking it as the latency would grow the window with its own queue."""
    window = FetchWindow(4 * MiB, 128 * MiB)
    first = window.sent("b", 0.0)
    window.answered(first, 4 * MiB, True, 0.06, first_byte_at=0.05, after_idle=True)
    queued = window.sent("b", 0.01)
    window.answered(queued, 4 * MiB, True, 0.5, first_byte_at=0.45, after_idle=False)
    assert window.latency("b") == pytest.approx(0.05)


def test_caught_up_answers_do_not_count_as_bandwidth():
    window = FetchWindow(4 * MiB, 128 * MiB)
    for i in range(20):
        ticket = window.sent("b", i * 1.0)
        window.answered(ticket, 1000, False, i * 1.0 + 0.05, i * 1.0 + 0.05, True)
    assert window.estimates("b")[0] == 0.0
    assert window.latency("b") == pytest.approx(0.05)
    assert window.size("b", 4) == 4 * MiB


def test_answers_completed_in_a_burst_do_not_pass_for_a_fast_link():
    """A stalled reader thread completes several answers at once: the rate sample of a
    fetch answered within a millisecond of its sending must not read them as 16 GB/s."""
    window = FetchWindow(4 * MiB, 128 * MiB)
    tickets = [window.sent("b", 0.0) for _ in range(4)]
    for i, ticket in enumerate(tickets[:3]):  # answered together after a stall
        window.answered(ticket, 4 * MiB, True, 0.100 + i * 1e-4, 0.0005, True)
    late = window.sent("b", 0.1003)
    window.answered(tickets[3], 4 * MiB, True, 0.1004, 0.0005, True)
    window.answered(late, 4 * MiB, True, 0.1010, 0.1005, False)
    bandwidth = window.estimates("b")[0]
    assert bandwidth <= 8 * MiB / 0.02  # the burst, spread over the least interval
    assert window.size("b", 4) == 4 * MiB  # 0.5 ms of latency: the base is plenty


def test_no_answer_is_asked_past_the_allocators_cliff():
    """Answers over 32 MiB are received into freshly mapped memory (5x the CPU per GB):
    a long fat path is covered by more partitions' answers, not by larger ones."""
    window = FetchWindow(4 * MiB, 1024 * MiB)
    simulate(window, 2, 2e9, 0.2)
    assert window.size("b", 2) == MAX_ANSWER_BYTES < 32 * MiB
