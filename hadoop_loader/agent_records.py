"""Decoding the agent's message values (msgpack maps) into columns, tolerantly.

The agent publishes each log line as a msgpack map (schema in ``docs/agent.md``,
"Message value"; built by ``agent/encode.py``)::

    {"time": int, "host": str, "file": str, "fid": int, "offset": int, "line": str,
     "ptime": int (optional), "cut": true (optional),
     "fields": {str: scalar} (optional), "unparsed": true (optional)}

The fields below become nullable columns; a value that is not a msgpack map, or whose
fields have unexpected types, is kept raw in ``value``, gets ``decoded = false`` and
nulls in the agent columns, and is counted. Nothing here ever fails a read.

Speed: one ``msgpack.unpackb`` per value (C) and one ``pa.array(..., struct)``
conversion per fetch (C++); the per-row Python work is the loop calling unpackb.
Only when the fast conversion trips over a badly typed field does a per-row check run,
for that fetch only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgpack
import pyarrow as pa
from pyspark.sql import types as T

from hadoop_loader.field_columns import string_map


class AgentField(NamedTuple):
    """One decoded column: where it comes from and its types."""

    column: str
    """Column name in the DataFrame."""
    key: str
    """Key in the agent's msgpack map."""
    arrow_type: pa.DataType
    """Arrow type the value is converted to."""
    spark_type: T.DataType
    """The same type in Spark."""
    python_types: tuple[type, ...]
    """Accepted Python types after msgpack decoding (others become null)."""


TIMESTAMP = pa.timestamp("us", tz="UTC")
"""Spark's TimestampType as Arrow: the agent's millisecond times become UTC timestamps."""
_MILLIS = pa.timestamp("ms", tz="UTC")
_MAX_MILLIS = (1 << 63) // 1000
"""Millisecond times beyond this do not fit a microsecond timestamp."""


AGENT_FIELDS: tuple[AgentField, ...] = (
    AgentField("host", "host", pa.string(), T.StringType(), (str,)),
    AgentField("file", "file", pa.string(), T.StringType(), (str,)),
    # One generation of one file on its host (null from agents before the field), so
    # (host, file_id, file_offset) is a record's identity: docs/operations.md, "Duplicates".
    AgentField("file_id", "fid", pa.int64(), T.LongType(), (int,)),
    AgentField("file_offset", "offset", pa.int64(), T.LongType(), (int,)),
    AgentField("line", "line", pa.string(), T.StringType(), (str,)),
    AgentField("read_time", "time", TIMESTAMP, T.TimestampType(), (int,)),
    AgentField("parsed_time", "ptime", TIMESTAMP, T.TimestampType(), (int,)),
    AgentField("cut", "cut", pa.bool_(), T.BooleanType(), (bool,)),
    AgentField(
        "fields", "fields", pa.map_(pa.string(), pa.string()), T.MapType(T.StringType(), T.StringType()), (dict,)
    ),
    AgentField("unparsed", "unparsed", pa.bool_(), T.BooleanType(), (bool,)),
)
"""The agent record's fields, in column order: ``file_offset`` is the line's byte offset in
its file, ``read_time`` the agent's clock when it read the line (ms, also the message
timestamp), ``parsed_time`` the time parsed out of the line when configured (both UTC
timestamps from the agent's epoch milliseconds),
``cut`` true when the line was cut at the agent's maximum line length, ``fields`` the
record's static and parsed fields as text (see :mod:`hadoop_loader.field_columns`),
``unparsed`` true when the agent's parse rule did not match the line."""

DECODED_COLUMN = "decoded"
"""Boolean column: true when the value decoded as an agent record."""

_STRUCT = pa.struct([pa.field(f.key, _MILLIS if f.arrow_type == TIMESTAMP else f.arrow_type) for f in AGENT_FIELDS])
"""What msgpack gives: times as integer milliseconds (cast to :data:`TIMESTAMP` after)."""
_unpackb = msgpack.unpackb


def spark_columns() -> list[tuple[str, T.DataType]]:
    """The agent columns (and ``decoded``), appended to the base schema."""
    return [(f.column, f.spark_type) for f in AGENT_FIELDS] + [(DECODED_COLUMN, T.BooleanType())]


def _unpack(value: bytes) -> dict[Any, Any] | None:
    try:
        record = _unpackb(value, raw=False, strict_map_key=False)
    except Exception:  # msgpack raises several types for bad input
        return None
    if not isinstance(record, dict):
        return None
    if "fields" in record:
        record["fields"] = string_map(record["fields"])
    return record


def decode_values(values: Sequence[bytes]) -> tuple[list[pa.Array], pa.Array, int]:
    """Decode ``values`` into one array per agent field plus the ``decoded`` mask.

    Returns ``(field_arrays, decoded, undecodable)``; undecodable values get nulls.
    """
    records = [_unpack(v) for v in values]
    try:
        struct = pa.array(records, type=_STRUCT)
        fields = _cast_times(struct)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        records = [_sanitize(r) for r in records]
        struct = pa.array(records, type=_STRUCT)
        fields = _cast_times(struct)
    decoded = struct.is_valid()
    undecodable = len(values) - decoded.true_count
    return fields, decoded, undecodable


def _cast_times(struct: pa.StructArray) -> list[pa.Array]:
    """The struct's columns, millisecond times cast to :data:`TIMESTAMP` (checked)."""
    return [a.cast(TIMESTAMP) if a.type == _MILLIS else a for a in struct.flatten()]


def _sanitize(record: dict[Any, Any] | None) -> dict[Any, Any] | None:
    """Keep a record only if every known field it has is of an accepted type."""
    if record is None:
        return None
    for f in AGENT_FIELDS:
        value: Any = record.get(f.key)
        if value is None:
            continue
        if not isinstance(value, f.python_types):
            return None
        if isinstance(value, bool) and bool not in f.python_types:
            return None
        # int64 and timestamp fields take ints only (python_types): their range
        if f.arrow_type == pa.int64() and isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
            return None
        if f.arrow_type == TIMESTAMP and isinstance(value, int) and not -_MAX_MILLIS <= value < _MAX_MILLIS:
            return None
    return record


def null_columns(n: int) -> tuple[list[pa.Array], pa.Array]:
    """Agent columns for ``n`` rows of a topic that is not decoded: all null."""
    return [pa.nulls(n, f.arrow_type) for f in AGENT_FIELDS], pa.nulls(n, pa.bool_())
