"""The metrics datastore: the interface and keys (``store``), its backends, and metrics files."""
