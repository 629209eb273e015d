"""A failing signal's traceback: its author's frames only, logged once per distinct error."""

import logging

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.serving import answer
from clusterman_signals.tracebacks import TracebackLog
from clusterman_signals.tracebacks import signal_traceback


class Broken(BaseSignal):
    def value(self, metrics, timestamp):
        return metrics["cpus"][0][1] / 0


def raised(metrics: dict) -> BaseException:
    caught: list[BaseException] = []
    reply = answer(Broken("c", "p", {}), metrics, 1.0, caught.append)
    assert reply == {"Error": "value() raised ZeroDivisionError: float division by zero"}
    return caught[0]


def test_the_traceback_shows_the_signals_file_and_line_not_the_sdks():
    text = signal_traceback(raised({"cpus": [[0, 1.0]]}))
    assert f'File "{__file__}", line 13, in value' in text
    assert "return metrics" in text and text.endswith("ZeroDivisionError: float division by zero\n")
    assert "serving.py" not in text and "base_signal.py" not in text


def test_logged_once_per_distinct_error_then_again_after_the_interval_with_a_count(caplog):
    now = [0.0]
    tracebacks = TracebackLog(logging.getLogger("test.tracebacks"), every_seconds=3600, clock=lambda: now[0])
    caplog.set_level(logging.ERROR, "test.tracebacks")
    same = [raised({"cpus": [[0, float(i)]]}) for i in range(3)]  # other values, same place
    assert [tracebacks.failed("ns.Broken for web", e) for e in same] == [True, False, False]
    other = KeyError("cpus")
    try:
        raise other
    except KeyError:
        pass
    assert tracebacks.failed("ns.Broken for web", other) is True  # another error: logged at once
    now[0] = 3600.0
    assert tracebacks.failed("ns.Broken for web", same[0]) is True
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert messages[0].startswith("ns.Broken for web: the signal's traceback; logged once every 3600 s")
    assert "(seen 2 more time(s) since it was last logged)" in messages[2]
