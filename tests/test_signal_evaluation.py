"""Reading required metrics, and evaluating a pool's signals with fallback (fake clients)."""

import time

import pytest

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import RequiredMetric
from clusterman.core.config import Scheduler
from clusterman.core.config import SignalConfig
from clusterman.core.resources import ResourceRequest
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import app_key
from clusterman.datastore.store import split_key
from clusterman.datastore.store import system_key
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.metrics_window import read_required_metrics
from clusterman.signals.protocol import SignalError
from clusterman.signals.protocol import SignalTimeout
from clusterman.signals.specs import SignalSpec

IDENT = PoolIdentity("norcal", "batch", Scheduler.MESOS)
SYS = MetricType.SYSTEM_METRICS
APP = MetricType.APP_METRICS


def test_keys_are_clusterman_compatible():
    assert system_key("cpus_allocated", "norcal", "batch.mesos") == "cpus_allocated|cluster=norcal,pool=batch.mesos"
    assert app_key("myapp", "queue_depth") == "myapp,queue_depth"
    assert split_key("x|pool=p,cluster=c") == ("x", {"pool": "p", "cluster": "c"})


def test_point_rejects_non_numbers():
    with pytest.raises(ValueError, match="k: metric value must be a number"):
        Point(SYS, "k", 1, "ten")
    with pytest.raises(ValueError, match="finite"):
        Point(SYS, "k", 1, float("nan"))


@pytest.fixture
def store():
    s = InMemoryStore()
    key = system_key("cpus_allocated", "norcal", "batch.mesos")
    s.write(Point(SYS, key, t, float(t)) for t in range(0, 3601, 60))
    s.write(Point(SYS, system_key("cpus_allocated", "other", "batch.mesos"), 3600, 999.0) for _ in range(1))
    s.write(Point(APP, app_key("batch", "queue_depth"), t, 5.0) for t in (3000, 3500))
    s.write(Point(APP, app_key("batch", "queue_age"), 3500, 7.0) for _ in range(1))
    s.write(Point(APP, app_key("other", "queue_depth"), 3500, 100.0) for _ in range(1))
    return s


def test_window_strips_prefixes_and_dimensions(store):
    required = (
        RequiredMetric("cpus_allocated", SYS, 10),
        RequiredMetric("queue_depth", APP, 60),
        RequiredMetric("missing", SYS, 10),
    )
    window = read_required_metrics(store, required, "batch", IDENT, 3600)
    # the store's (timestamp, value) pairs, handed over without a copy
    assert [list(p) for p in window["cpus_allocated"]] == [[t, float(t)] for t in range(3000, 3601, 60)]
    assert [list(p) for p in window["queue_depth"]] == [[3000, 5.0], [3500, 5.0]]
    assert window["missing"] == []


def test_window_regex_for_app_metrics(store):
    window = read_required_metrics(store, (RequiredMetric("queue_.*", APP, 60, regex=True),), "batch", IDENT, 3600)
    assert set(window) == {"queue_depth", "queue_age"}


class FakeClient:
    def __init__(self, answer):
        self.answer = answer
        self.calls = 0

    def evaluate(self, metrics, timestamp, timeout=None):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self):
        pass


def spec(app, name="S"):
    return SignalSpec(app, "ns", SignalConfig(period_minutes=1, name=name, branch_or_tag="v1"))


def make_evaluator(answers, apps):
    clients = {app: FakeClient(answer) for app, answer in answers.items()}
    evaluator = SignalEvaluator(
        IDENT, spec("__default__", "Default"), [spec(a) for a in apps], lambda s: clients[s.app]
    )
    return evaluator, clients


def test_pool_without_app_signals_uses_the_default(store):
    evaluator, _ = make_evaluator({"__default__": ResourceRequest(cpus=4)}, [])
    [evaluation] = evaluator.evaluate(store, 3600)
    assert evaluation.app == "__default__" and evaluation.request.cpus == 4 and not evaluation.is_fallback


def test_failed_app_signal_falls_back_and_is_counted(store):
    evaluator, clients = make_evaluator(
        {
            "__default__": ResourceRequest(cpus=4),
            "a": SignalError("signal ns.S (app a): boom"),
            "b": ResourceRequest(cpus=1),
            "c": SignalError("signal ns.S (app c): bang"),
        },
        ["a", "b", "c"],
    )
    results = {e.app: e for e in evaluator.evaluate(store, 3600)}
    assert results["a"].request.cpus == 4 and "boom" in results["a"].fallback_reason
    assert results["b"].request.cpus == 1 and not results["b"].is_fallback
    assert results["c"].request.cpus == 4 and results["c"].is_fallback
    assert clients["__default__"].calls == 1  # evaluated once, only because it was needed
    assert evaluator.failures == {"a": 1, "c": 1}


def test_default_failing_too_is_an_error(store):
    evaluator, _ = make_evaluator({"__default__": SignalError("default down"), "a": SignalError("a down")}, ["a"])
    with pytest.raises(SignalError, match="default down"):
        evaluator.evaluate(store, 3600)


class Hung:
    """A runner that never answers: it takes the whole timeout it is given, then fails."""

    def __init__(self):
        self.timeouts = []

    def evaluate(self, metrics, timestamp, timeout=None):
        assert timeout is not None, "a run's signal must be bounded"
        self.timeouts.append(timeout)
        time.sleep(max(timeout, 0.0))
        raise SignalError("signal ns.S: no answer")

    def close(self):
        pass


class Bounded(FakeClient):
    def evaluate(self, metrics, timestamp, timeout=None):
        self.timeout = timeout
        return super().evaluate(metrics, timestamp)


def test_hung_app_signals_share_the_runs_time_and_the_default_keeps_a_quarter(store):
    """Each wait had the whole budget, twice with the reconnect: one hung app signal made every
    run overrun and hold, so the pool was not scaled at all."""
    clients = {"__default__": Bounded(ResourceRequest(cpus=4)), "a": Hung(), "b": Hung()}
    evaluator = SignalEvaluator(
        IDENT, spec("__default__", "Default"), [spec("a"), spec("b")], lambda s: clients[s.app], signal_seconds=0.8
    )
    started = time.monotonic()
    results = {e.app: e for e in evaluator.evaluate(store, 3600)}
    assert time.monotonic() - started < 0.8 + 0.1
    [waited] = clients["a"].timeouts
    assert 0.5 < waited <= 0.6  # the share less the quarter kept for the default
    assert 0.1 < clients["__default__"].timeout <= 0.2
    [waited] = clients["b"].timeouts  # once the default answered, what is left: no quarter kept
    assert 0.1 < waited <= 0.2
    assert all(results[app].request.cpus == 4 and "no answer" in results[app].fallback_reason for app in "ab")
    assert evaluator.failures == {"a": 1, "b": 1}


def test_an_app_signal_is_not_asked_once_the_time_is_gone(store):
    clients = {"__default__": Bounded(ResourceRequest(cpus=4)), "a": Hung(), "b": Bounded(ResourceRequest(cpus=1))}
    evaluator = SignalEvaluator(
        IDENT, spec("__default__", "Default"), [spec("a"), spec("b")], lambda s: clients[s.app], signal_seconds=0.4
    )
    clients["__default__"].answer = ResourceRequest(cpus=4)

    def slow_default(metrics, timestamp, timeout=None):
        time.sleep(max(timeout, 0.0))  # the default answers at the last moment
        return ResourceRequest(cpus=4)

    clients["__default__"].evaluate = slow_default
    results = {e.app: e for e in evaluator.evaluate(store, 3600)}
    assert "not asked: the run's 0.4 s for signals went to signals that did not answer" in results["b"].fallback_reason
    assert clients["b"].calls == 0


def test_without_a_share_each_signal_has_its_own_limits(store):
    clients = {"__default__": Bounded(ResourceRequest(cpus=4))}
    evaluator = SignalEvaluator(IDENT, spec("__default__", "Default"), [], lambda s: clients[s.app])
    evaluator.evaluate(store, 3600)
    assert clients["__default__"].timeout is None


def test_apps_whose_runners_do_not_answer_are_remembered_until_they_answer(store):
    timed_out = SignalTimeout("signal ns.S (app a): timed out")
    clients = {"__default__": FakeClient(ResourceRequest(cpus=4)), "a": FakeClient(timed_out)}
    elapsed = [0.0]  # the monotonic clock
    evaluator = SignalEvaluator(
        IDENT, spec("__default__", "Default"), [spec("a")], lambda s: clients[s.app], monotonic=lambda: elapsed[0]
    )
    evaluator.evaluate(store, 3600)
    elapsed[0] = 60.0
    evaluator.evaluate(store, 3660)
    assert evaluator.unanswered == {"a": (3600, 3660)}  # the first and the last run it did not answer
    elapsed[0] = 120.0
    evaluator.evaluate(store, 20)  # the wall clock stepped back an hour: silent for 120 s all the same
    assert evaluator.unanswered == {"a": (-100, 20)}
    clients["a"].answer = ResourceRequest(cpus=1)
    evaluator.evaluate(store, 3720)
    assert evaluator.unanswered == {}
    clients["a"].answer = SignalError("signal ns.S (app a): a bad reply")
    evaluator.evaluate(store, 3780)
    assert evaluator.unanswered == {}  # it answered, badly: alive, a restart would not help


def test_an_answer_beyond_any_demand_of_the_pool_is_refused_like_a_nan(store):
    """1e308 cpus is a finite number: taken as demand it sized the pool to its max in one run. An
    app's such answer falls back to the default signal; the default's own leaves no demand."""
    from clusterman.core.resources import Resources
    from clusterman.decision.answer_bound import NO_POOL_HOLDS
    from clusterman.decision.answer_bound import answer_bounds
    from clusterman.signals.protocol import AnswerRefused
    from tests.scaling_builders import group
    from tests.scaling_builders import nodes
    from tests.scaling_builders import policy
    from tests.scaling_builders import snapshot

    bounds = answer_bounds(snapshot(nodes(4, cpus=2, mem=8000)), policy(max_capacity=10))
    assert bounds.most == {"cpus": 2000.0, "mem": 8_000_000.0}  # 100 × 10 units of 2 cpus, 8000 MB
    assert bounds.refusal(ResourceRequest(cpus=2000, mem=8e6, gpus=3)) == ""  # gpus: no unit holds them
    assert bounds.refusal(ResourceRequest(gpus=NO_POOL_HOLDS * 2)).startswith("gpus=2e+12 is over 1e+12")
    refused = bounds.refusal(ResourceRequest(cpus=1e308))
    assert refused == (
        "cpus=1e+308 is over 2000, 100 times the pool at max_capacity 10 (2 cpus a weight unit): refused as garbage"
    )
    empty = snapshot([], [group("g1", 0, node_resources=Resources(cpus=4, mem=16000))])
    assert answer_bounds(empty, policy(max_capacity=10)).most["cpus"] == 4000.0  # no node yet: the groups' size

    evaluator, _ = make_evaluator(
        {"__default__": ResourceRequest(cpus=4), "a": ResourceRequest(cpus=1e308), "b": ResourceRequest(cpus=1)},
        ["a", "b"],
    )
    results = {e.app: e for e in evaluator.evaluate(store, 3600, bounds)}
    assert results["a"].request.cpus == 4 and results["a"].fallback_reason == f"signal ns.S (app a): {refused}"
    assert results["b"].request.cpus == 1 and not results["b"].is_fallback
    evaluator, _ = make_evaluator({"__default__": ResourceRequest(cpus=1e308)}, [])
    with pytest.raises(AnswerRefused, match=r"signal ns.Default .app __default__.: cpus=1e.308 is over 2000"):
        evaluator.evaluate(store, 3600, bounds)
