"""Agent record fields as columns: the map<string,string> column, typed copies, config."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from broker.wire.records import decode_batches, encode_batch
from hadoop_loader.arrowconv import arrow_schema, to_record_batch
from hadoop_loader.config import config_from_dict
from hadoop_loader.errors import LoaderConfigError
from hadoop_loader.field_columns import as_text, string_map


def value(i: int, **extra: Any) -> bytes:
    record = {
        "time": 1_700_000_000_000 + i,
        "host": "web-1",
        "file": "/var/log/app.log",
        "offset": i * 100,
        "line": f"line {i}",
        **extra,
    }
    return msgpack.packb(record)


def test_values_as_text() -> None:
    assert [as_text(v) for v in ("s", 3, 1.5, True, False, None, b"b")] == ["s", "3", "1.5", "true", "false", None, "b"]
    same = {"a": "x", "b": None}
    assert string_map(same) is same
    assert string_map({"n": 1, 2: "k"}) == {"n": "1", "2": "k"}
    assert string_map([1]) == [1]


def test_fields_decode_into_a_string_map_column_and_unparsed_flag() -> None:
    values = [
        value(0, fields={"env": "prod", "status": 200, "ok": True, "lat": 0.5, "gone": None}),
        value(1, fields={"env": "prod"}, unparsed=True),
        value(2),
        value(3, fields=["not", "a", "map"]),
    ]
    batches, _ = decode_batches(encode_batch(values, None, 1), 0)
    converted = to_record_batch("app", 0, batches, True)
    assert converted.batch.schema.equals(arrow_schema(True))
    rows = converted.batch.to_pylist()
    assert dict(rows[0]["fields"]) == {"env": "prod", "status": "200", "ok": "true", "lat": "0.5", "gone": None}
    assert rows[0]["unparsed"] is None and rows[1]["unparsed"] is True
    assert dict(rows[1]["fields"]) == {"env": "prod"}
    assert rows[2]["fields"] is None and rows[2]["decoded"] is True
    assert rows[3]["decoded"] is False and converted.undecodable == 1


def _config(**source: Any) -> Any:
    return config_from_dict(
        {"source": {"zk": "h:2181/c", "topics": ["a"], **source}, "output": {"uri": "file:///tmp/wh"}}
    )


def test_field_columns_config() -> None:
    config = _config(decode_agent_records=True, field_columns={"status": "long", "user": "string"})
    assert config.source.field_columns == {"status": "long", "user": "string"}
    assert _config().source.field_columns == {}


@pytest.mark.parametrize(
    "source,key,words",
    [
        ({"field_columns": {"status": "long"}}, "source.field_columns", "decode_agent_records"),
        (
            {"decode_agent_records": True, "field_columns": {"status": "integer"}},
            "source.field_columns.status",
            "'long'",
        ),
        (
            {"decode_agent_records": True, "field_columns": {"host": "string"}},
            "source.field_columns.host",
            "already a column",
        ),
        (
            {"decode_agent_records": True, "field_columns": {"hr": "string"}},
            "source.field_columns.hr",
            "already a column",
        ),
        (
            {"decode_agent_records": True, "field_columns": {"a.b": "string"}},
            "source.field_columns.a.b",
            "letters, digits",
        ),
        ({"decode_agent_records": True, "field_columns": ["status"]}, "source.field_columns", "a table"),
    ],
)
def test_field_columns_errors_name_the_key(source: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(LoaderConfigError) as info:
        _config(**source)
    assert info.value.key == key and words in str(info.value)


@pytest.mark.integration  # a local SparkSession
def test_promote_casts_or_nulls(spark) -> None:
    from pyspark.sql import types as T

    from hadoop_loader.field_columns import promote

    schema = T.StructType([T.StructField("fields", T.MapType(T.StringType(), T.StringType()))])
    df = spark.createDataFrame(
        [({"status": "200", "ok": "true", "t": "2024-01-02T03:04:05Z"},), ({"status": "oops"},), (None,)], schema
    )
    rows = promote(df, {"status": "long", "ok": "boolean", "t": "timestamp"}).collect()
    assert [r["status"] for r in rows] == [200, None, None]
    assert [r["ok"] for r in rows] == [True, None, None]
    assert rows[0]["t"] is not None and rows[1]["t"] is None
