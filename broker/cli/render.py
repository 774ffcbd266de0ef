"""``consume`` output: turning a message into one output line (``--format`` template or
``--output json``), and checking the template.

Agent records (msgpack maps with ``time``, ``host``, ``file``, ``offset`` and ``line``,
docs/agent.md "Message value") are decoded: the text output shows the record's
``line`` in place of ``{value}`` and its ``fields`` map as ``{fields}`` (``k=v`` pairs),
the JSON output all of the record. ``--raw`` keeps the bytes.

The template is a :meth:`str.format` string over the message's fields. It is checked
once, before any connection, by rendering a sample message: a field that does not
exist or a malformed template is a usage error naming the fields there are, not a
``KeyError`` traceback after the first message.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from broker.client import AGENT_RECORD_FIELDS, agent_record
from broker.common.errors import ConfigError

FIELDS = ("topic", "partition", "offset", "index", "key", "value", "timestamp", "fields")
"""What a template may use: :class:`broker.client.Message`'s fields, then an agent
record's ``fields`` (empty for other values)."""

_SAMPLE = {"topic": "t", "partition": 0, "offset": 0, "index": 0, "key": "", "value": "", "timestamp": 0, "fields": ""}


def available() -> str:
    """The fields as a template would write them: ``{topic} {partition} ...``."""
    return " ".join("{" + name + "}" for name in FIELDS)


def check_format(fmt: str) -> None:
    """Raise :class:`ConfigError` (one line, naming the fields) unless ``fmt`` renders."""
    try:
        fmt.format(**_SAMPLE)
    except KeyError as exc:
        raise ConfigError(f"--format {fmt!r}: unknown field {{{exc.args[0]}}}; available: {available()}") from None
    except IndexError:
        raise ConfigError(
            f"--format {fmt!r}: name each field ({{}} and {{0}} are not supported); available: {available()}"
        ) from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"--format {fmt!r}: {exc}; available: {available()}") from None


AGENT_FIELDS = AGENT_RECORD_FIELDS
"""The fields every agent record has (``ptime``, ``cut``, ``fields`` and ``unparsed``
are optional; the JSON output shows them all under ``record``)."""


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def render(fmt: str, message: Any, raw: bool = False) -> str:
    """One output line for ``message`` (a :class:`broker.client.Message`); key and value
    are decoded as UTF-8 (invalid bytes replaced). Unless ``raw``, an agent record's
    value is its ``line``."""
    value = message.value
    record = None if raw or not isinstance(value, bytes) else agent_record(value)
    shown: str = (
        record["line"]
        if record is not None
        else (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    )
    if fmt == "{value}":
        return shown
    fields = message._asdict()
    fields["value"] = shown
    fields["fields"] = _logfmt(record.get("fields")) if record is not None else ""
    if isinstance(fields["key"], bytes):
        fields["key"] = _text(fields["key"])
    return fmt.format(**fields)


def _logfmt(fields: Any) -> str:
    """An agent record's fields as ``name=value`` pairs; values with spaces or quotes quoted."""
    if not isinstance(fields, dict):
        return ""
    out = []
    for name, value in fields.items():
        text = value if isinstance(value, str) else json.dumps(value, default=_jsonable)
        if not text or any(c in text for c in ' "=\t\n'):
            text = json.dumps(text, ensure_ascii=False)
        out.append(f"{name}={text}")
    return " ".join(out)


def _put_bytes(out: dict[str, Any], name: str, data: bytes | None) -> None:
    """``out[name]`` as UTF-8 text, or ``out[name + "_b64"]`` when it is not UTF-8."""
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_b64"] = base64.b64encode(data).decode("ascii")


def _header_json(header: Any) -> dict[str, Any]:
    """One record header as ``{"key": ..., "value": ...}``, each text when it is UTF-8,
    else base64 under ``key_b64``/``value_b64`` (as a message's key and value); a null
    value is ``null``."""
    key, value = header
    out: dict[str, Any] = {}
    for name, data in (("key", key), ("value", value)):
        if isinstance(data, str):
            out[name] = data
        else:
            _put_bytes(out, name, None if data is None else bytes(data))
    return out


def render_json(message: Any, raw: bool = False) -> str:
    """One JSON object (one line) for ``message``: topic, partition, offset, index, key,
    value, timestamp and headers. Key and value are text when they are UTF-8, else
    base64 under ``key_b64``/``value_b64``. ``headers`` is a list, in order, of
    ``{"key": ..., "value": ...}`` objects with the same rule (``[]`` when the message
    has none): a list, not a map, because Kafka allows a key more than once. Unless
    ``raw``, an agent record is decoded: its fields go under ``record`` and ``value`` is
    its ``line``."""
    out: dict[str, Any] = {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "index": message.index,
    }
    _put_bytes(out, "key", message.key)
    record = None if raw else agent_record(message.value)
    if record is not None:
        out["value"] = record["line"]
        out["record"] = {
            name: (base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v) for name, v in record.items()
        }
    else:
        _put_bytes(out, "value", message.value)
    out["timestamp"] = message.timestamp
    out["headers"] = [_header_json(header) for header in getattr(message, "headers", None) or ()]
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=_jsonable)


def _jsonable(obj: object) -> object:
    """Anything JSON lacks (bytes, msgpack extension types) inside a record: as text."""
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode("ascii")
    return repr(obj)


__all__ = ["AGENT_FIELDS", "FIELDS", "agent_record", "available", "check_format", "render", "render_json"]
