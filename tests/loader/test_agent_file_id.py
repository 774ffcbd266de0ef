"""The agent's ``fid`` lands as the ``file_id`` column; records without it get null."""

from __future__ import annotations

from agent.encode import chunk_prefix, encode_values
from broker.wire.records import decode_batches, encode_batch
from hadoop_loader.arrowconv import arrow_schema, to_record_batch


def test_file_id_column_from_new_records_and_null_from_old_ones():
    new = encode_values(
        chunk_prefix(1_700_000_000_000, "web-1", "/var/log/app.log", file_id=1 << 62), [b"a", b"b"], [0, 2]
    )
    old = encode_values(chunk_prefix(1_700_000_000_000, "web-1", "/var/log/app.log"), [b"c"], [4])
    wrong = encode_values(
        chunk_prefix(1_700_000_000_000, "web-1", "/f", file_id="not an int"),  # type: ignore[arg-type]
        [b"d"],
        [6],
    )
    batches, _ = decode_batches(encode_batch(new + old + wrong, None, 1), 0)
    converted = to_record_batch("app", 0, batches, True)
    rows = converted.batch.to_pylist()
    assert [r["file_id"] for r in rows] == [1 << 62, 1 << 62, None, None]
    assert [r["decoded"] for r in rows] == [True, True, True, False]
    assert rows[2]["file_offset"] == 4 and rows[2]["line"] == "c"
    assert converted.batch.schema.equals(arrow_schema(True))
    assert arrow_schema(True).field("file_id").type == "int64"
