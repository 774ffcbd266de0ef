"""The agent record's ``fields`` as columns: one ``map<string,string>`` and typed copies.

An agent record may carry ``fields`` (docs/agent.md, "Message value"): a flat map of
static and parsed fields whose values are strings, numbers, booleans or nil. The
loader lands all of them in one ``fields`` column of type ``map<string,string>`` (every
value as text: numbers in their JSON form, booleans ``true``/``false``), so no field is
lost and the schema never depends on the data. The landing job's
``source.field_columns`` then adds a typed top-level column per named field (a copy of
``fields[name]`` cast with ``try_cast``: a value that does not convert is null, never a
failed run), which is what makes ``WHERE status >= 500`` cheap in Parquet.
"""

from __future__ import annotations

import json
from typing import Any

TYPES = {
    "string": "string",
    "long": "bigint",
    "int": "int",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}
"""``source.field_columns`` types -> the Spark SQL type each column is cast to."""


def as_text(value: Any) -> str | None:
    """One field value as the text the ``fields`` column holds."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)


def string_map(fields: Any) -> Any:
    """``fields`` with every key and value as text (what Arrow's map<string,string> takes).

    Anything but a map is returned as is, for the caller's type check to refuse.
    """
    if not isinstance(fields, dict):
        return fields
    if all(type(k) is str and (type(v) is str or v is None) for k, v in fields.items()):
        return fields
    return {k if type(k) is str else str(as_text(k)): as_text(v) for k, v in fields.items()}


def promote(df: Any, columns: dict[str, str]) -> Any:
    """Add a typed column per ``name -> type`` (:data:`TYPES`) from the ``fields`` map."""
    from pyspark.sql import functions as F

    for name, kind in columns.items():
        df = df.withColumn(name, F.col("fields").getItem(name).try_cast(TYPES[kind]))
    return df
