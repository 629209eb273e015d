"""The signal SDK: base classes for signals, the runner that serves them, and the signal namespaces.

This package is installed into signal virtualenvs on its own; it imports nothing from
``clusterman`` and needs nothing outside the standard library.
"""

# Signal namespaces may also live in other directories on sys.path that hold a
# ``clusterman_signals/`` folder (tests use this for fixture signals).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
