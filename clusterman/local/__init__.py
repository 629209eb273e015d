"""The embedded local stack: what `make run` and the integration tests start on loopback."""
