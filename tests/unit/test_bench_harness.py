"""benchmarks/harness.py's run_main: how a benchmark script's run ends becomes its exit
code and one line saying why (no broker is started)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from benchmarks.harness import run_main


class StartFailed(Exception):
    pass


class Miscounted(Exception):
    pass


FAILURES: dict[type[Exception], str] = {StartFailed: "FAILED to start", Miscounted: "FAILED"}


def run(body: object) -> tuple[int, list[str]]:
    said: list[str] = []
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = run_main(body, FAILURES, "everything stopped", said.append)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code, said


def test_a_run_that_returns_exits_0_and_says_nothing_more() -> None:
    assert run(lambda: None) == (0, [])


def test_each_failure_is_said_with_its_own_prefix_and_exits_1() -> None:
    def no_start() -> None:
        raise StartFailed("kafka did not listen")

    def miscount() -> None:
        raise Miscounted("4 of 5")

    assert run(no_start) == (1, ["FAILED to start: kafka did not listen"])
    assert run(miscount) == (1, ["FAILED: 4 of 5"])


def test_sigterm_unwinds_the_body_and_exits_130() -> None:
    unwound: list[bool] = []

    def body() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts it at once
            raise AssertionError("not interrupted")
        finally:
            unwound.append(True)

    assert run(body) == (130, ["interrupted: everything stopped"])
    assert unwound == [True]


def test_other_errors_are_not_swallowed() -> None:
    def broken() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run(broken)
