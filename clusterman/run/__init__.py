"""One autoscaling run: read the pool, ask the signals, decide, act within the permit, record."""
