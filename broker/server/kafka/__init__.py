"""The Kafka front end: Kafka's wire protocol and the listener that speaks it.

The codec is sans IO: frames and headers (:mod:`.protocol`, schemas from the ``kio``
library, generated from Kafka's own message definitions), record batches v2
(:mod:`.record_batch`, CRC32C), their conversion to and from logferry batches
(:mod:`.convert`), fetch answers as buffer lists (:mod:`.chunks`). Around it: the
connection (:mod:`.connection`), the services seen through Kafka's apis
(:mod:`.service`, :mod:`.configs`), the group coordinator (:mod:`.groups`,
:mod:`.group_service`) and SASL framing (:mod:`.sasl`). :func:`.front_end.build` is
what the broker calls for a ``[kafka]`` section. It imports nothing of the native
front end. See docs/kafka.md.
"""
