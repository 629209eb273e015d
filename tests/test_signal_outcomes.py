"""Each app's signal as of the last run (for /healthz and ``status``), and the run line's fallback."""

from clusterman.core.resources import ResourceRequest
from clusterman.run.demand_source import Requests
from clusterman.run.report import Outcome
from clusterman.run.report import RunReport
from clusterman.signals.evaluator import Evaluation
from clusterman.signals.outcomes import ALL_APPS
from clusterman.signals.outcomes import SignalOutcome
from clusterman.signals.outcomes import SignalOutcomes
from clusterman.wiring.pool_status import measured
from tests.scaling_builders import nodes
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot

T0 = 1_700_000_000
ZERO_DIVISION = "signal ns.Broken (app web): the signal failed: value() raised ZeroDivisionError: division by zero"


def answered(app: str, signal: str = "ns.Queue") -> Evaluation:
    return Evaluation(app, ResourceRequest(cpus=1.0), signal, 0.01)


def fell_back(app: str, reason: str = ZERO_DIVISION, failed: str = "ns.Broken") -> Evaluation:
    return Evaluation(app, ResourceRequest(cpus=2.0), "clusterman.ForecastHeadroom", 0.01, reason, failed)


def test_a_fallback_is_degraded_since_its_first_run_until_the_signal_answers_again():
    outcomes = SignalOutcomes()
    outcomes.observe([answered("api"), fell_back("web")], T0)
    outcomes.observe([answered("api"), fell_back("web", "signal ns.Broken (app web): timed out")], T0 + 60)
    web = dict((o.app, o) for o in outcomes.outcomes)["web"]
    assert (web.since, web.cause, web.answered_by) == (T0, "timed out", "clusterman.ForecastHeadroom")
    assert outcomes.degraded() == [
        "app web: ns.Broken failed, on clusterman.ForecastHeadroom since 2023-11-14T22:13:20Z: timed out"
    ]
    outcomes.observe([answered("api"), answered("web", "ns.Broken")], T0 + 120)
    assert outcomes.degraded() == []
    assert [(o.app, o.ok, o.since) for o in outcomes.outcomes] == [("api", True, T0), ("web", True, T0 + 120)]


def test_a_run_with_no_answer_at_all_is_one_entry_and_the_next_answer_clears_it():
    outcomes = SignalOutcomes()
    outcomes.no_answer("signal clusterman.ForecastHeadroom (app __default__): timed out", T0)
    outcomes.no_answer("signal clusterman.ForecastHeadroom (app __default__): timed out", T0 + 60)
    [entry] = outcomes.outcomes
    assert (entry.app, entry.since) == (ALL_APPS, T0)
    assert entry.as_json()["outcome"] == "no answer"
    assert outcomes.degraded()[0].startswith("no signal answered since 2023-11-14T22:13:20Z, target kept: ")
    outcomes.observe([answered("web")], T0 + 120)
    assert outcomes.degraded() == [] and [o.app for o in outcomes.outcomes] == ["web"]


def test_the_healthz_body_reads_back_as_sent():
    outcomes = SignalOutcomes()
    outcomes.observe([answered("api"), fell_back("web")], T0)
    body = outcomes.health()
    assert [SignalOutcome.from_json(doc) for doc in body["signals"]] == list(outcomes.outcomes)
    assert body["degraded"] == outcomes.degraded()


def test_the_run_line_says_which_app_fell_back_and_why_in_a_few_words():
    decision = run(snapshot(nodes(2)), request(1.0))
    requests = Requests({"web": request(1.0), "api": request(0.0)}, (fell_back("web"), answered("api")))
    line = RunReport(T0, Outcome.ACTED, "", None, decision, None, requests).line()
    assert " (app web on the default signal: value() raised ZeroDivisionError: division by zero) | " in line
    assert "api" not in line
    long = fell_back("web", "signal ns.Broken (app web): the signal failed: " + "x" * 500)
    shown = RunReport(T0, Outcome.ACTED, "", None, decision, None, Requests({}, (long,))).line()
    assert "(app web on the default signal: " + "x" * 79 + "…) | " in shown


def test_status_without_the_event_api_shows_the_signals_it_asked_now():
    class Setup:
        policy = policy()

    class Asked:
        def requests(self, snapshot, now):
            return Requests({"web": request(2.0), "api": request(1.0)}, (fell_back("web"), answered("api")))

        def close(self):
            pass

    utilisation, signals = measured(Setup(), snapshot(nodes(2)), Asked)
    assert utilisation.source == signals.source == "measured now"
    assert [(o.app, o.ok, o.answered_by) for o in signals.outcomes] == [
        ("api", True, "ns.Queue"),
        ("web", False, "clusterman.ForecastHeadroom"),
    ]
    assert signals.as_json()["outcomes"][1]["cause"] == "value() raised ZeroDivisionError: division by zero"
