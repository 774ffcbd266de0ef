"""Field checks shared by the typed api modules (sans IO).

A header comes out of msgpack as plain dicts, lists, strings, ints, floats, bytes,
bools and nil, whatever a peer chose to send. These helpers check one field's type
and say in the error which field was wrong and what it must be. Requests from a
client raise :class:`~broker.common.errors.InvalidRequestError` (the broker answers
it); answers from a broker raise :class:`~broker.common.errors.ProtocolError` (the
client cannot trust that connection's answers).

``bool`` is never an integer here, though Python says it is: msgpack keeps ``true``
and ``1`` apart, and a peer that sends ``true`` for a partition number has a bug.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from broker.common.errors import InvalidRequestError, LogferryError, ProtocolError

ErrorClass = Callable[[str], LogferryError]
REQUEST: ErrorClass = InvalidRequestError
"""Raise this for a malformed request (the broker answers error 4)."""
ANSWER: ErrorClass = ProtocolError
"""Raise this for a malformed answer (the client drops the connection's answer)."""


def is_int(value: Any) -> bool:
    """True for an integer that is not a bool."""
    return type(value) is int


def shown(value: Any) -> str:
    """A short repr of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def as_int(value: Any, what: str, error: ErrorClass = REQUEST) -> int:
    """``value`` if it is an integer, else raise ``error`` naming ``what``."""
    if type(value) is not int:
        raise error(f"{what} must be an integer, got {shown(value)}")
    return value


def as_opt_int(value: Any, what: str, error: ErrorClass = REQUEST) -> int | None:
    """``value`` if it is an integer or nil."""
    if value is None:
        return None
    return as_int(value, what, error)


def as_number(value: Any, what: str, default: int, error: ErrorClass = REQUEST) -> int:
    """An integer from an integer, a finite float (truncated) or nil/0 (``default``).

    For fields that older clients may have filled with a float (a wait in ms) and
    that the broker always read leniently; maps, lists, strings, bools, NaN and
    infinities are refused.
    """
    if not value:
        if value is None or type(value) in (int, float):
            return default
    elif type(value) is int:
        return value
    elif type(value) is float and math.isfinite(value):
        return int(value)
    raise error(f"{what} must be a number, got {shown(value)}")


def as_str(value: Any, what: str, error: ErrorClass = REQUEST) -> str:
    """``value`` if it is a string."""
    if type(value) is not str:
        raise error(f"{what} must be a string, got {shown(value)}")
    return value


def as_list(value: Any, what: str, error: ErrorClass = REQUEST) -> list[Any]:
    """``value`` if it is a list (msgpack arrays decode as lists)."""
    if type(value) is not list:
        raise error(f"{what} must be a list, got {shown(value)}")
    return value


def as_map(value: Any, what: str, error: ErrorClass = REQUEST) -> dict[Any, Any]:
    """``value`` if it is a map."""
    if type(value) is not dict:
        raise error(f"{what} must be a map, got {shown(value)}")
    return value


def as_int_list(value: Any, what: str, error: ErrorClass = REQUEST) -> list[int]:
    """``value`` if it is a list of integers."""
    items = as_list(value, what, error)
    for item in items:
        if type(item) is not int:
            raise error(f"{what} must hold integers, got {shown(item)}")
    return items


def header_of(header: Any, error: ErrorClass = REQUEST) -> dict[str, Any]:
    """The header map itself (frames guarantee it; typed parsers check anyway)."""
    return as_map(header, "the header", error)
