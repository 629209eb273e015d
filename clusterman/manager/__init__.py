"""Acting on a pool: applying decisions, one autoscaling cycle, and the loop around it."""
