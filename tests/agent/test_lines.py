"""LineSplitter: whole input, one byte at a time, long lines, CRLF, partial lines."""

from __future__ import annotations

import random

import pytest

from agent.lines import LineSplitter, utf8_cut


def feed_all(splitter: LineSplitter, data: bytes, step: int) -> tuple[list[bytes], list[int], set[int]]:
    lines: list[bytes] = []
    offsets: list[int] = []
    cut: set[int] = set()
    for i in range(0, len(data), step):
        out = splitter.feed(data[i : i + step])
        cut |= {len(lines) + c for c in out.cut}
        lines += out.lines
        offsets += out.offsets
        assert out.end == splitter.held_from
    return lines, offsets, cut


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 10_000])
def test_split_any_chunking(step: int) -> None:
    data = b"alpha\nbeta\r\n\ngamma\ndelta-partial"
    lines, offsets, cut = feed_all(LineSplitter(1024), data, step)
    assert lines == [b"alpha", b"beta", b"", b"gamma"]
    assert offsets == [0, 6, 12, 13]
    assert not cut


def test_partial_line_held_then_completed() -> None:
    splitter = LineSplitter(1024, offset=100)
    assert splitter.feed(b"abc").lines == []
    assert splitter.held_from == 100 and splitter.held_bytes == 3
    out = splitter.feed(b"def\nx")
    assert out.lines == [b"abcdef"] and out.offsets == [100] and out.end == 107
    flushed = splitter.flush()
    assert flushed.lines == [b"x"] and flushed.offsets == [107] and flushed.end == 108
    assert splitter.flush().lines == []


def test_long_line_is_cut_and_never_held_beyond_limit() -> None:
    splitter = LineSplitter(10)
    data = b"0123456789abcdefghijKLMNO\nshort\n"
    lines, offsets, cut = feed_all(splitter, data, 4)
    assert b"".join(lines[:3]) == b"0123456789abcdefghijKLMNO"
    assert lines[3] == b"short"
    assert all(len(line) <= 10 for line in lines)
    assert cut == {0, 1}
    assert offsets[:4] == [0, 10, 20, 26]
    assert splitter.lines_cut == 1


def test_long_complete_lines_in_one_feed() -> None:
    splitter = LineSplitter(8)
    out = splitter.feed(b"x" * 20 + b"\nok\n" + b"y" * 9 + b"\n")
    assert out.lines == [b"x" * 8, b"x" * 8, b"x" * 4, b"ok", b"y" * 8, b"y"]
    assert out.cut == {0, 1, 4}
    assert out.offsets == [0, 8, 16, 21, 24, 32]
    assert out.end == 34
    assert splitter.lines_cut == 2


def test_cut_respects_utf8_boundaries() -> None:
    text = ("é" * 30).encode()  # 2 bytes each
    splitter = LineSplitter(11)
    lines, _, _ = feed_all(splitter, text + b"\n", 5)
    for line in lines:
        line.decode("utf-8")  # every piece is valid on its own
    assert b"".join(lines) == text
    assert utf8_cut(b"\xff" * 10, 4) == 4


def test_ten_megabyte_line_is_bounded() -> None:
    splitter = LineSplitter(1024 * 1024)
    big = b"z" * (10 * 1024 * 1024)
    total = 0
    pieces = 0
    for i in range(0, len(big), 1024 * 1024 - 3):
        out = splitter.feed(big[i : i + 1024 * 1024 - 3])
        pieces += len(out.lines)
        total += sum(map(len, out.lines))
        assert splitter.held_bytes <= 1024 * 1024
    out = splitter.feed(b"\n")
    total += sum(map(len, out.lines))
    pieces += len(out.lines)
    assert total == len(big) and pieces == 10
    assert splitter.lines_cut == 1


def test_random_chunking_matches_reference() -> None:
    rng = random.Random(7)
    lines = [bytes(rng.choice(b"ab\r\xff ") for _ in range(rng.randrange(0, 40))) for _ in range(500)]
    data = b"\n".join(lines) + b"\n"
    splitter = LineSplitter(1000)
    got: list[bytes] = []
    position = 0
    while position < len(data):
        step = rng.randrange(1, 100)
        got += splitter.feed(data[position : position + step]).lines
        position += step
    expected = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    assert got == expected


def test_reset_forgets_held_bytes() -> None:
    splitter = LineSplitter(100)
    splitter.feed(b"abc\ndef")
    splitter.reset(4)
    assert splitter.held_bytes == 0
    assert splitter.feed(b"def\n").offsets == [4]
