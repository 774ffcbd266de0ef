"""The shared vocabulary of logferry: errors, names, metrics (and soon retry and config
loading). agent, mirror, hadoop_loader and demo may import this besides broker.client."""
