"""The errors programs report as one line, as opposed to bugs, which keep their traceback.

``Reported`` is the base: its message names the file, key, signal or object, and what to do.
Two kinds derive from it, so a reader of the code knows whose move it is:

- ``UserError``: the input is wrong (a config key, an argument, a file's content); the person
  who gave it fixes it.
- ``OperationalError``: the surroundings failed (a cloud call, an unreachable signal or event
  API); retrying later, or fixing the environment, helps.

Anything else (``ValueError``, ``KeyError``, ... raised by our code or a library) is a bug: the
command line lets it through with its traceback. Each area defines its own subclasses next to
its code.
"""

import contextlib
from collections.abc import Iterator


class Reported(Exception):
    """A problem shown as one clear line: not a bug in clusterman."""


class UserError(Reported):
    """The input (config, arguments, a file) is wrong; its message names where."""


class OperationalError(Reported):
    """Something around clusterman failed (cloud, network, a signal, the event API)."""


class Unworkable(Reported):
    """Mixed into an adapter's error: what the configuration names cannot work where it runs (a
    state directory that is a regular file, a table that does not exist, an unreadable kubeconfig).

    Waiting does not mend it, an edit does: an autoscaler that meets it cannot act, and the
    bootstrap does not keep its configuration as the last good one. A shared dependency that is
    out for a while (throttled, restarting, unreachable) is not this."""


@contextlib.contextmanager
def reading_input() -> Iterator[None]:
    """Around the step that parses a person's input: its ``ValueError`` is the input's fault.

    Used at the command line's edges only, so a ``ValueError`` from anywhere else stays a bug.
    """
    try:
        yield
    except Reported:
        raise
    except ValueError as e:
        raise UserError(str(e)) from e
