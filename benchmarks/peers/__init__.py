"""The systems of the paper experiment (section 5 of the Kafka paper) and its report.

``benchmarks/paper_experiment.py`` runs them; each module here wraps one system with
the same :class:`peers.base.System` interface: logferry, RabbitMQ, ActiveMQ (the
paper's peers), NATS JetStream and Redis Streams (modern peers). The
config templates next to the modules (activemq.xml, log4j.properties,
rabbitmq-env.conf, rabbitmq.conf, logferry-broker.toml) are what those servers run on.
"""
