"""Small durable state the autoscaler keeps between runs and restarts (pauses, locks)."""
