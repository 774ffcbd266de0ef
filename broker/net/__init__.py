"""Transport: the one place that opens sockets (listeners and client connections)."""
