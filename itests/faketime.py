"""One process's wall clock, stepped at will: Debian's libfaketime, preloaded.

The process's wall clock follows an offset file the test rewrites (``-3600``: an hour back), while
its monotonic clock stays the machine's, as a real step (NTP, an operator) leaves
``CLOCK_MONOTONIC``. Stepping the machine's own clock would disturb every other process on the host.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))


def faked_clock(offset_file: Path) -> dict[str, str]:
    """The environment that makes a process's wall clock follow ``offset_file``; it starts at ``+0``."""
    if not LIBFAKETIME:  # system-packages.txt installs it: a missing one is a broken set-up, not a skip
        pytest.fail("libfaketime is not installed (scripts/ensure-system-packages installs it)")
    offset_file.write_text("+0\n")
    return {
        "LD_PRELOAD": LIBFAKETIME[0],
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",  # read the file at every call: the step takes effect at once
        "DONT_FAKE_MONOTONIC": "1",
    }


def step_clock(offset_file: Path, seconds: int) -> None:
    offset_file.write_text(f"{seconds:+d}\n")
