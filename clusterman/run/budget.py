"""How one run's budget is shared out among the calls a run makes.

A run must end within its budget (``--budget-seconds``, by default the period) whatever outside it
stops answering, so every wait has its share. Budgets and waits are seconds on the monotonic
clock, so a wall clock stepped by NTP or an operator neither stretches nor cuts them.

  the scheduler's API   each attempt a third (a call is tried ``SCHEDULER_ATTEMPTS`` times), at most 30 s
  a metrics store call  a quarter, its retries included (DynamoDB, Prometheus)
  the signals           half, all of them together, their metrics reads included (a quarter of that
                        kept for the default signal: ``signals/evaluator.py``)
  the cloud, the state  the whole budget per call, each attempt a third (``aws.session.budget_config``)

The metrics collector shares its ``run_interval_seconds`` the same way. ``None`` (no budget, as in
a command without ``--timeout``): each adapter's own limits.
"""

from __future__ import annotations

SCHEDULER_ATTEMPTS = 3  # no scheduler adapter tries a call more often (tests/test_budget.py)
SCHEDULER_TIMEOUT_SECONDS = 30.0  # each attempt of a scheduler API call, when no run budget bounds it
SIGNAL_SHARE = 0.5  # the snapshot before the signals and the acting after them need the rest
METRICS_SHARE = 0.25


def scheduler_timeout(budget_seconds: float | None) -> float:
    """Each attempt of a call to the scheduler's API (Kubernetes, Mesos): an API server that does not
    answer holds a call at most the budget, not two minutes."""
    if budget_seconds is None:
        return SCHEDULER_TIMEOUT_SECONDS
    return min(SCHEDULER_TIMEOUT_SECONDS, budget_seconds / SCHEDULER_ATTEMPTS)


def metrics_timeout(budget_seconds: float | None) -> float | None:
    """One call to a remote metrics store, its retries included. A store that does not answer
    must not make the run overrun."""
    return None if budget_seconds is None else budget_seconds * METRICS_SHARE


def signal_seconds(budget_seconds: float | None) -> float | None:
    """All of a run's signals together: a stopped runner costs its app the fallback, not the run."""
    return None if budget_seconds is None else budget_seconds * SIGNAL_SHARE
