"""clusterman: an autoscaler for one pool of cloud machines, driven by signals."""

__version__ = "0.1.0"
