"""Benchmarks: each module here with a ``run(quick: bool) -> dict`` is one benchmark.

Every figure is reported next to a baseline measured in the same run (as a ratio), never against
a hard-coded time: machines differ, ratios travel.
"""
