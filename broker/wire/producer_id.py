"""The init_producer_id api (key 12), typed: an idempotent producer asks for its id.

Request header fields: none beyond the common ones. Answer: ``producer_id`` (a
64-bit integer, unique in the cluster, allocated from ZooKeeper by
:mod:`broker.coordination.producer_ids`) and ``epoch`` (0 for a new id; the producer
bumps it itself when it restarts its sequences). Every batch the producer then
writes carries both, with a sequence number per partition (magic 2 batches,
:mod:`broker.wire.records`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.wire.fields import ANSWER, as_int, header_of


class InitProducerIdRequest(NamedTuple):
    """A request for a new producer id (no fields yet)."""


class InitProducerIdAnswer(NamedTuple):
    """The producer id and epoch a broker gave out."""

    producer_id: int
    """Unique in the cluster, never given out again."""
    epoch: int
    """The epoch to start at."""


def parse_init_producer_id_request(header: dict[str, Any]) -> InitProducerIdRequest:
    """Check an init_producer_id request (it has no fields of its own)."""
    header_of(header)
    return InitProducerIdRequest()


def encode_init_producer_id_answer(answer: InitProducerIdAnswer) -> dict[str, Any]:
    """The header fields of an init_producer_id answer."""
    return {"producer_id": answer.producer_id, "epoch": answer.epoch}


def parse_init_producer_id_answer(header: dict[str, Any]) -> InitProducerIdAnswer:
    """The id and epoch of an answer; ProtocolError if the broker sent something else."""
    fields = header_of(header, ANSWER)
    pid = as_int(fields.get("producer_id"), "init_producer_id answer 'producer_id'", ANSWER)
    epoch = as_int(fields.get("epoch"), "init_producer_id answer 'epoch'", ANSWER)
    if pid < 0 or not 0 <= epoch < 1 << 15:
        raise ANSWER(f"init_producer_id answer out of range: producer_id {pid}, epoch {epoch}")
    return InitProducerIdAnswer(pid, epoch)


__all__ = [
    "InitProducerIdAnswer",
    "InitProducerIdRequest",
    "encode_init_producer_id_answer",
    "parse_init_producer_id_answer",
    "parse_init_producer_id_request",
]
