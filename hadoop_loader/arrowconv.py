"""Decoded batches to Arrow record batches, column by column.

Spark's Python data source accepts ``pyarrow.RecordBatch`` from ``read()``; handing it
whole columns instead of Python rows is what makes the reader fast (about 6x here). The
broker's batches are already columnar (``values`` is a list of bytes, timestamps are a
base plus deltas), so a fetch's worth of batches becomes one record batch with no
per-message Python object: ``values`` lists are concatenated and converted by
``pa.array(..., pa.binary())`` in C, offsets/indexes/timestamps are built with numpy.

The schema here must equal what Spark derives from :func:`spark_schema` (Spark checks it
batch by batch); a unit test holds the two together.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T

from broker.client import Batch
from hadoop_loader import agent_records

BASE_COLUMNS: list[tuple[str, T.DataType]] = [
    ("topic", T.StringType()),
    ("partition", T.IntegerType()),
    ("offset", T.LongType()),
    ("index", T.IntegerType()),
    ("timestamp", T.TimestampType()),
    ("key", T.BinaryType()),
    ("value", T.BinaryType()),
]
"""The data source's columns; ``(topic, partition, offset, index)`` identifies a row."""

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
"""Spark's TimestampType as Arrow (microseconds, UTC)."""

BASE_FIELDS = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("index", pa.int32()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
]
AGENT_ARROW_FIELDS = [pa.field(f.column, f.arrow_type) for f in agent_records.AGENT_FIELDS] + [
    pa.field(agent_records.DECODED_COLUMN, pa.bool_())
]


def spark_schema(with_agent_columns: bool) -> T.StructType:
    """The DataFrame schema (every column nullable, as Spark's Arrow check expects)."""
    columns = BASE_COLUMNS + (agent_records.spark_columns() if with_agent_columns else [])
    return T.StructType([T.StructField(name, dtype, True) for name, dtype in columns])


def arrow_schema(with_agent_columns: bool) -> pa.Schema:
    """The Arrow schema of every record batch the reader yields."""
    return pa.schema(BASE_FIELDS + (AGENT_ARROW_FIELDS if with_agent_columns else []))


class Converted:
    """A record batch and what converting it found."""

    __slots__ = ("batch", "undecodable")

    def __init__(self, batch: pa.RecordBatch, undecodable: int):
        self.batch = batch
        self.undecodable = undecodable
        """Values that did not decode as agent records (0 when not decoding)."""


def to_record_batch(topic: str, partition: int, batches: Sequence[Batch], decode: bool | None) -> Converted:
    """One record batch holding every message of ``batches`` (non-empty, in order).

    ``decode``: True decodes values as agent records, False fills the agent columns with
    nulls (a topic that is not decoded, in a read that has the columns), None leaves the
    agent columns out of the schema.
    """
    counts = np.fromiter((len(b.values) for b in batches), np.int64, len(batches))
    n = int(counts.sum())
    firsts = np.cumsum(counts) - counts  # row number of each batch's first message

    offsets = np.repeat(np.fromiter((b.offset for b in batches), np.int64, len(batches)), counts)
    index = (np.arange(n, dtype=np.int64) - np.repeat(firsts, counts)).astype(np.int32)
    bases = np.repeat(np.fromiter((b.base_timestamp for b in batches), np.int64, len(batches)), counts)
    if any(b.deltas is not None for b in batches):
        deltas = np.fromiter(
            chain.from_iterable(b.deltas if b.deltas is not None else repeat(0, len(b.values)) for b in batches),
            np.int64,
            n,
        )
        millis = bases + deltas
    else:
        millis = bases
    timestamps = pa.array(millis * 1000, pa.int64()).view(TIMESTAMP_TYPE)

    if len(batches) == 1:
        values_list: Sequence[bytes] = batches[0].values
    else:
        values_list = list(chain.from_iterable(b.values for b in batches))
    values = pa.array(values_list, pa.binary())
    if all(b.keys is None for b in batches):
        keys = pa.nulls(n, pa.binary())
    else:
        keys = pa.array(
            list(chain.from_iterable(b.keys if b.keys is not None else repeat(None, len(b.values)) for b in batches)),
            pa.binary(),
        )

    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array(index, pa.int32()),
        timestamps,
        keys,
        values,
    ]
    undecodable = 0
    if decode is True:
        fields, decoded, undecodable = agent_records.decode_values(values_list)
        columns += fields + [decoded]
    elif decode is False:
        fields, decoded = agent_records.null_columns(n)
        columns += fields + [decoded]
    schema = arrow_schema(decode is not None)
    return Converted(pa.RecordBatch.from_arrays(columns, schema=schema), undecodable)
