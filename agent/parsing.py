"""Sans-IO: a source's fields per line, static ones merged with parsed ones, packed.

A record's ``fields`` (docs/agent.md, "Message value") is one flat msgpack map of
``str -> str | int | float | bool | nil``, made of:

* the static fields of the config (global ``fields``, extended or overridden per source);
* with ``parse.format = "json"``, the members of a line that is a JSON object (nested
  objects and arrays become their compact JSON text, integers outside 64 bits their
  decimal text, so every value stays a scalar);
* with ``parse.format = "regex"``, the named groups of the first match of the source's
  regular expression (``re.search``), as strings; groups that did not take part are left out.

Static fields win over parsed ones of the same name: what the operator configured
(``env``, ``service``) cannot be overwritten by a line's content.

A line that does not parse (invalid JSON, JSON that is not an object, no regex match) is
shipped whole as always, with the static fields only and ``unparsed: true``; the
caller counts it (``logferry_agent_parse_failures_total{source}``).

When a source has static fields but no parsing, its fields are the same for every line
and go into the chunk prefix (:func:`agent.encode.chunk_prefix`) instead, packed once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

Scalar = str | int | float | bool | None
"""A field value: what a ``fields`` map may hold."""

_FIELDS_KEY = b"\xa6fields"
_UNPARSED = b"\xa8unparsed\xc3"
_INT64 = (-(1 << 63), 1 << 63)
_loads = json.loads
_packb = msgpack.packb
_SCALARS = (str, int, float, bool)


def scalar(value: Any) -> Scalar:
    """``value`` as a field value: nested JSON as its compact text, huge integers as text."""
    if value is None or isinstance(value, (str, float, bool)):
        return value
    if isinstance(value, int):
        return value if _INT64[0] <= value < _INT64[1] else str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_json(line: bytes) -> dict[str, Scalar] | None:
    """The members of a JSON object line as fields; None if it is not a JSON object."""
    try:
        doc = _loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return None
    if not isinstance(doc, dict):
        return None
    for value in doc.values():
        if (
            value is not None
            and type(value) not in _SCALARS
            or type(value) is int
            and not _INT64[0] <= value < _INT64[1]
        ):
            return {k: scalar(v) for k, v in doc.items()}
    return doc


def parse_regex(pattern: re.Pattern[bytes], line: bytes) -> dict[str, Scalar] | None:
    """The named groups of the first match of ``pattern`` in ``line``; None if none."""
    found = pattern.search(line)
    if found is None:
        return None
    return {name: text.decode("utf-8", "replace") for name, text in found.groupdict().items() if text is not None}


def pack_fields(fields: Mapping[str, Scalar]) -> bytes:
    """The ``fields`` key and its map, ready to append to a record's map entries."""
    packed: bytes = _packb(fields)  # msgpack is untyped: Any to mypy
    return _FIELDS_KEY + packed


class FieldParser:
    """Parses lines into ``fields`` entries for :func:`agent.encode.encode_values`.

    ``format`` is ``"json"`` or ``"regex"`` (then ``regex`` has named groups);
    ``static`` are the source's static fields.
    """

    __slots__ = ("_parse", "_static", "_failed")

    def __init__(self, format: str, regex: re.Pattern[bytes] | None = None, static: Mapping[str, Scalar] | None = None):
        if format == "json":
            self._parse = parse_json
        elif format == "regex":
            if regex is None or not regex.groupindex:
                raise ValueError("a regex parser needs a pattern with named groups")
            pattern = regex
            self._parse = lambda line: parse_regex(pattern, line)
        else:
            raise ValueError(f"unknown parse format {format!r}")
        self._static = dict(static or {})
        # A failed line: the static fields (if any) and the unparsed flag.
        self._failed = (2, pack_fields(self._static) + _UNPARSED) if self._static else (1, _UNPARSED)

    def entries(self, lines: Sequence[bytes]) -> tuple[list[tuple[int, bytes]], list[int]]:
        """Per line, (number of map entries, packed entries) to append to its record;
        and the indexes of the lines that did not parse."""
        parse = self._parse
        static = self._static
        failed = self._failed
        out: list[tuple[int, bytes]] = []
        failures: list[int] = []
        append = out.append
        for index, line in enumerate(lines):
            fields = parse(line)
            if fields is None:
                failures.append(index)
                append(failed)
            elif fields or static:
                if static:
                    fields.update(static)
                append((1, _FIELDS_KEY + _packb(fields)))
            else:
                append((0, b""))
        return out, failures
