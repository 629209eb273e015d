"""Whole-tree runs (`make run` for a bounded time); the checks arrive with `make run`'s local stack."""
