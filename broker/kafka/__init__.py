"""Kafka's wire protocol, sans IO: frames and headers, the api schemas logferry serves
(through the ``kio`` library, generated from Kafka's own message definitions), record
batches v2 (magic 2, CRC32C) and their conversion to and from logferry batches.

It sits beside :mod:`broker.wire` in the layers (it imports common and wire only); the
broker's Kafka listener in :mod:`broker.server.kafka_connection` is the IO around it.
See docs/kafka.md.
"""
