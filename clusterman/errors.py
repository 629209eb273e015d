"""The one base class for problems a person can fix (bad config, unreachable signal, cloud refusal).

Programs show these as one line naming the file, key, signal or object; anything else is a bug
and keeps its traceback. Each area defines its own subclass next to its code.
"""


class UserError(Exception):
    """A problem with input or surroundings, reported as one clear line."""
