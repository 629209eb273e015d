"""Whole-tree acceptance runs: `make run` for a bounded time, checked against its workload trace."""
