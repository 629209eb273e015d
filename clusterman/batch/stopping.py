"""How the long-running programs stop: SIGTERM or SIGINT sets an event they check between steps."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType


def stop_on_signals(log: logging.Logger, stopping: str) -> threading.Event:
    """An event set by SIGTERM or SIGINT; ``stopping`` says what the program does then (for the log)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s received: %s", signal.Signals(signum).name, stopping)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
