"""Settings every test directory shares."""

import pytest
from hypothesis import HealthCheck
from hypothesis import settings

# Property tests check values, not speed: a loaded machine must not fail them on time alone.
settings.register_profile("clusterman", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("clusterman")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep `--dist loadgroup`'s groups on pytest 9.2 (pytest-xdist#1386): xdist 3.8 appends
    "@group" to a field pytest no longer reads, so each worker built the wheel venv (40 s) again.
    Where the suffix did not take, it is written where the node id is now kept."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = type(item._id).parse(item.nodeid + suffix)
