"""The run budget's shares fit the adapters that spend them."""

from clusterman.cluster import kubernetes
from clusterman.run.budget import SCHEDULER_ATTEMPTS
from clusterman.run.budget import SCHEDULER_TIMEOUT_SECONDS
from clusterman.run.budget import scheduler_timeout


def test_every_attempt_of_a_kubernetes_call_fits_in_the_budget():
    """The budget gives each attempt its share; the Kubernetes client must not try more often."""
    assert kubernetes.ATTEMPTS <= SCHEDULER_ATTEMPTS
    assert scheduler_timeout(12.0) * kubernetes.ATTEMPTS <= 12.0


def test_no_budget_and_a_long_budget_keep_the_fixed_attempt_timeout():
    assert scheduler_timeout(None) == SCHEDULER_TIMEOUT_SECONDS
    assert scheduler_timeout(600.0) == SCHEDULER_TIMEOUT_SECONDS
