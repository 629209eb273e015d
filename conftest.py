"""Settings every test directory shares."""

from hypothesis import HealthCheck
from hypothesis import settings

# Property tests check values, not speed: a loaded machine must not fail them on time alone.
settings.register_profile("clusterman", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("clusterman")
