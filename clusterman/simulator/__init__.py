"""The simulator: one pool replayed through the real autoscaling cycle on simulated adapters.

``clusterman simulate`` (docs/simulator.md). The run is ``manager.cycle.Cycle`` itself, wired to
simulated resource groups (``cloud.simulated_group``), the simulated scheduler (``cluster.simulated_scheduler``),
its lifecycle, and the pool's own signals; only the clock, the workload and the bookkeeping of
cost and shortfall belong here. It never decides anything itself.
"""
