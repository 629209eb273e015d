"""Files clusterman ships beside its code: the default srv-configs and supervisord's config.

In a checkout, ``config`` and ``supervisord`` here are symbolic links to the top-level
directories of the same names (which the tests and the docs refer to); the wheel carries copies
of them as package data. Either way they are found through importlib.resources, so an installed
clusterman needs no checkout.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _directory(name: str) -> Path:
    """A real directory on disk: supervisord and the config loader open files by path."""
    found = resources.files(__name__) / name
    path = Path(str(found))
    if not path.is_dir():
        raise FileNotFoundError(f"clusterman's packaged {name}/ is missing (looked in {path})")
    return path


def config_directory() -> Path:
    """The default srv-configs: ``clusterman.yaml`` and ``clusterman-clusters/``."""
    return _directory("config")


def default_main_config() -> Path:
    return config_directory() / "clusterman.yaml"


def shipped_instead(path: Path) -> Path | None:
    """For a relative ``config/...`` path that is not there (a command run outside a checkout, as
    the docs show it): the same file in the config clusterman ships, if it has one."""
    if path.is_absolute() or path.exists() or path.parts[:1] != ("config",):
        return None
    packaged = config_directory().joinpath(*path.parts[1:])
    return packaged if packaged.exists() else None


def supervisor_config() -> Path:
    """supervisord.conf; its helper scripts sit beside it (``%(here)s``)."""
    return _directory("supervisord") / "supervisord.conf"
