"""String formats accept exactly the real values: calendar dates (days per month, 29 February
in leap years only), times (leap seconds only at 23:59:60 UTC), IPv4 octets."""

import datetime
import json

import pytest


def _accepts(grammar, value: str) -> bool:
    matcher = grammar.matcher()
    return matcher.accept_string(json.dumps(value)) and matcher.is_completed()


def _is_date(value: str) -> bool:
    try:
        datetime.date.fromisoformat(value)
        return True
    except ValueError:
        return False


@pytest.fixture(scope="module")
def date(compiler):
    return compiler.compile_json_schema({"type": "string", "format": "date"})


@pytest.fixture(scope="module")
def date_time(compiler):
    return compiler.compile_json_schema({"type": "string", "format": "date-time"})


@pytest.mark.parametrize("year", [1, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 9996])
def test_every_day_of_a_year_is_judged_as_the_calendar_does(date, year):
    for month in range(1, 13):
        for day in range(0, 33):
            value = f"{year:04d}-{month:02d}-{day:02d}"
            assert _accepts(date, value) == _is_date(value), value


@pytest.mark.parametrize(
    "value", ["2024-02-30", "2022-02-31", "2023-02-29", "1900-02-29", "0000-01-01", "2024-04-31"]
)
def test_impossible_dates_are_refused_in_dates_and_date_times(date, date_time, value):
    assert not _accepts(date, value)
    assert not _accepts(date_time, value + "T12:00:00Z")


def test_leap_days_and_valid_date_times_are_accepted(date, date_time):
    for value in ("2024-02-29", "2000-02-29", "1600-02-29", "0004-02-29"):
        assert _accepts(date, value)
    for value in ("2024-02-29T23:59:59.123+05:30", "1999-12-31t00:00:00z", "2016-12-31T23:59:60Z"):
        assert _accepts(date_time, value)


@pytest.mark.parametrize(
    "value, valid",
    [
        ("23:59:60Z", True),
        ("23:59:60+00:00", True),
        ("12:00:60Z", False),  # a leap second is 23:59:60 UTC
        ("23:59:60+01:00", False),
        ("24:00:00Z", False),
        ("12:60:00Z", False),
        ("12:00:00+24:00", False),
        ("12:00:00", False),  # RFC 3339 times carry an offset
        ("08:30:06.283185Z", True),
    ],
)
def test_times(compiler, value, valid):
    grammar = compiler.compile_json_schema({"type": "string", "format": "time"})
    assert _accepts(grammar, value) == valid


@pytest.mark.parametrize(
    "value, valid",
    [
        ("192.168.0.1", True),
        ("255.255.255.255", True),
        ("256.1.1.1", False),
        ("1.2.3", False),
        ("01.2.3.4", False),  # no leading zeros
        ("1.2.3.4.5", False),
    ],
)
def test_ipv4(compiler, value, valid):
    grammar = compiler.compile_json_schema({"type": "string", "format": "ipv4"})
    assert _accepts(grammar, value) == valid
