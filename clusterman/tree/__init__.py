"""The process tree of one autoscaler instance: the CMAN_* contract, supervisord, and its helpers.

``python -m clusterman.batch.autoscaler_bootstrap`` drives it; docs/deployment.md describes it.
"""
