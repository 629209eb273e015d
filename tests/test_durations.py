"""One duration grammar, read the same by the srv-configs, metric designs and pauses."""

import pytest

from clusterman.core.durations import format_duration
from clusterman.core.durations import parse_duration
from clusterman.datastore.generate import whole_seconds as design_duration
from clusterman.state.pause import parse_until

NOW = 1_700_000_000


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("2m", 120), ("1h30m", 5400), ("1d 12h", 129600), ("2w", 1209600), (" 1.5h ", 5400),
     ("500ms", 0.5), ("1m30s", 90), ("3 minutes", 180), ("2 hours", 7200), ("1 day", 86400),
     ("1 hour 30 mins", 5400), ("30 secs", 30), ("1 week", 604800)],
)  # fmt: skip
def test_every_reader_understands_the_same_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)
    assert design_duration(text) == int(seconds)
    if seconds >= 1:
        assert parse_until(text, NOW) == int(NOW + seconds)


@pytest.mark.parametrize(
    "text", ["", "m", "2x", "1h 2", "-5m", "1e400", "nan", "two minutes", "2 hourz", "minutes", "5 mo"]
)
def test_every_reader_refuses_the_same_non_durations(text):
    for reader in (parse_duration, design_duration):
        with pytest.raises(ValueError, match="duration"):
            reader(text)


def test_a_pause_takes_an_iso_time_when_it_is_not_a_duration():
    assert parse_until("2023-11-15T00:00:00", NOW) == 1_700_006_400
    with pytest.raises(ValueError, match="expected a duration such as 30m"):
        parse_until("soon", NOW)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.4, "0s"), (59.6, "1m"), (90, "1m30s"), (3600, "1h"), (7260, "2h1m"), (93784, "1d2h3m4s"),
     (2592000, "30d"), (86401, "1d1s")],
)  # fmt: skip
def test_a_duration_is_printed_in_the_grammar_and_read_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == round(seconds)
