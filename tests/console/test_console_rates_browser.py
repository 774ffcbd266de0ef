"""Message rates from counts (issue 39), in a real browser against a real broker: after
large messages, a producer sends small ones at a steady pace, and the page's messages
per second for the topic is within 5% of what the producer had acknowledged over the
same window of the console's readings. Before, messages were estimated from bytes over
an average size taken from the earlier, larger messages: here about 200 times too low."""

from __future__ import annotations

import bisect
import re
import threading
import time

import pytest

from broker.client import Admin, Producer
from tests.console.browser import ConsoleProcess, open_browser

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PACE_S = 0.05
"""The producer sends a chunk this often (about 200 messages/s)."""
CHUNK = 10


class PacedProducer(threading.Thread):
    """Sends ``CHUNK`` small messages every ``PACE_S`` until stopped, and logs
    (time acknowledged, messages acknowledged so far) after each chunk."""

    def __init__(self, zk: str, topic: str):
        super().__init__(daemon=True)
        self.zk, self.topic = zk, topic
        self.log: list[tuple[float, int]] = [(time.time(), 0)]
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            acked = 0
            with Producer(zk=self.zk, linger_ms=1) as producer:
                while not self.stop.is_set():
                    started = time.monotonic()
                    producer.send(self.topic, [b"m%d" % i for i in range(CHUNK)], partition=acked // CHUNK % 2)
                    producer.flush(30)
                    acked += CHUNK
                    self.log.append((time.time(), acked))
                    self.stop.wait(max(PACE_S - (time.monotonic() - started), 0))
        except BaseException as exc:  # seen by the test
            self.error = exc

    def acked_at(self, t: float) -> int:
        """Messages acknowledged by time ``t`` (seconds since the epoch)."""
        i = bisect.bisect_right([at for at, _ in self.log], t) - 1
        return self.log[max(i, 0)][1]


def number(text: str) -> float:
    """The figure of a rate as the page shows it (``199.4 msg/s``, ``≈1.2 msg/s``)."""
    found = re.search(r"[0-9][0-9,]*(\.[0-9]+)?", text)
    return float(found.group(0).replace(",", "")) if found else float("nan")


READINGS = 5
"""Successive readings compared; the median must be within 5%. One reading alone may
miss by more on a saturated machine: its window's ends are stamped at the middle of the
console's request, and a request that takes a second under load moves an end by up to
200 messages at this pace (r20, the whole suite on 2 cores: 164.6 shown against 199.2
acknowledged, 17%)."""


@pytest.mark.timeout(120)
def test_message_rate_is_counted_not_estimated(broker_cluster):
    zk = broker_cluster(1).zk_connect
    with Admin(zk=zk) as admin:
        admin.create_topic("clicks", 2, 1)
    with Producer(zk=zk, linger_ms=2) as producer:  # large messages first: a large average size
        for p in range(2):
            producer.send("clicks", [bytes(2048)] * 150, partition=p)
        producer.flush(30)
    console = ConsoleProcess(f"live={zk}", interval=1.0)
    paced = PacedProducer(zk, "clicks")
    try:
        for page, errors in open_browser():
            page.goto(console.url + "?view=topics")
            cell = '[data-topic-row="clicks"] [data-field="topic-msgs-in"]'
            page.wait_for_selector('[data-topic-row="clicks"]', timeout=15_000)
            paced.start()
            time.sleep(6)  # the rate's window (5 s) holds only paced readings
            # what the operator reads, the topic's "messages in" column (the sixth, on the
            # page of 5f05dca too, where this test fails here: docs/testing.md), against the
            # producer's pace over the last 5 s: within a factor of 2 (the estimate was 8x to
            # 200x off); then, precisely, over the page's own window of readings
            text = page.text_content('[data-topic-row="clicks"] > td:nth-child(6)') or ""
            now = time.time()
            pace = (paced.acked_at(now) - paced.acked_at(now - 5)) / 5
            assert pace / 2 <= number(text) <= pace * 2, (
                f"the page shows {text!r} for clicks; the producer acknowledged {pace:.1f} msg/s over the last 5 s"
            )
            compared = []
            for _ in range(READINGS):
                seq = int(page.evaluate("document.body.dataset.seq"))
                page.wait_for_function("(s) => document.body.dataset.seq > s", arg=seq, timeout=5_000)
                shown = float(page.get_attribute(cell, "data-value") or "nan")
                assert page.get_attribute(cell, "data-counted") == "true"
                start_ms, end_ms = (int(v) for v in (page.get_attribute(cell, "data-window") or "").split(","))
                acked = paced.acked_at(end_ms / 1000) - paced.acked_at(start_ms / 1000)
                expected = acked / ((end_ms - start_ms) / 1000)
                compared.append((shown, round(expected, 1), acked))
                assert expected > 50, compared  # the producer kept a pace (about 200 msg/s on a quiet machine)
                assert abs(shown - expected) <= 0.25 * expected, compared  # an estimate was 8x to 200x off
            errors_pct = sorted(abs(shown - expected) / expected for shown, expected, _ in compared)
            assert errors_pct[len(errors_pct) // 2] <= 0.05, compared  # the median reading within 5%
            assert "msg/s" in (page.text_content(cell) or "")
            assert "≈" not in (page.text_content(cell) or "")
            assert errors == [], errors
            print(f"page msg/s against acknowledged msg/s over the same window (and acked count): {compared}")
    finally:
        paced.stop.set()
        if paced.is_alive():
            paced.join(30)
        assert paced.error is None, paced.error
        assert console.stop() == 0, "".join(console.stderr)
