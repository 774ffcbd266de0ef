"""``consume --format``: turning a message into one output line, and checking the template.

The template is a :meth:`str.format` string over the message's fields. It is checked
once, before any connection, by rendering a sample message: a field that does not
exist or a malformed template is a usage error naming the fields there are, not a
``KeyError`` traceback after the first message.
"""

from __future__ import annotations

from typing import Any

from broker.common.errors import ConfigError

FIELDS = ("topic", "partition", "offset", "index", "key", "value", "timestamp")
"""What a template may use, in the order of :class:`broker.client.Message`."""

_SAMPLE = {"topic": "t", "partition": 0, "offset": 0, "index": 0, "key": "", "value": "",
           "timestamp": 0}


def available() -> str:
    """The fields as a template would write them: ``{topic} {partition} ...``."""
    return " ".join("{" + name + "}" for name in FIELDS)


def check_format(fmt: str) -> None:
    """Raise :class:`ConfigError` (one line, naming the fields) unless ``fmt`` renders."""
    try:
        fmt.format(**_SAMPLE)
    except KeyError as exc:
        raise ConfigError(f"--format {fmt!r}: unknown field {{{exc.args[0]}}}; "
                          f"available: {available()}") from None
    except IndexError:
        raise ConfigError(f"--format {fmt!r}: name each field ({{}} and {{0}} are not "
                          f"supported); available: {available()}") from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"--format {fmt!r}: {exc}; available: {available()}") from None


def render(fmt: str, message: Any) -> str:
    """One output line for ``message`` (a :class:`broker.client.Message`); key and value
    are decoded as UTF-8 (invalid bytes replaced)."""
    if fmt == "{value}":
        value = message.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    fields = message._asdict()
    for name in ("key", "value"):
        if isinstance(fields[name], bytes):
            fields[name] = fields[name].decode("utf-8", "replace")
    return fmt.format(**fields)


__all__ = ["FIELDS", "available", "check_format", "render"]
