"""The TLS and SASL options of the commands: they live in :mod:`broker.common.tls_args`
(so plugins such as ``logferry console``, which may import only ``broker.client`` and
``broker.common``, offer the same options); re-exported here for the CLI's commands."""

from broker.common.tls_args import add_sasl_args, add_tls_args, sasl_from_args, tls_from_args

__all__ = ["add_sasl_args", "add_tls_args", "sasl_from_args", "tls_from_args"]
