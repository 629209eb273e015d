"""Reaching signals: the wire protocol, the socket client, and evaluation with fallback."""
