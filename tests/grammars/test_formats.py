"""String formats accept only real values: calendar dates (days per month, 29 February in leap
years only), times (leap seconds only at 23:59:60 UTC), IPv4 octets, RFC 4291 IPv6 addresses,
RFC 1123 hostnames and RFC 5321 mailboxes (of at most 63 characters), RFC 3986 URIs (without
IP-literal hosts), UUIDs, RFC 6901 JSON pointers, relative JSON pointers, RFC 3339 durations, IRIs and IDN
mailboxes as their ASCII subsets; formats that cannot be enforced raise GrammarError. Values marked
"was accepted" are regressions: grammars before this file's format checks accepted them."""

import datetime
import ipaddress
import json

import pytest

from grammars.errors import GrammarError


def _accepts(grammar, value: str) -> bool:
    matcher = grammar.matcher()
    return matcher.accept_string(json.dumps(value)) and matcher.is_completed()


def _format(compiler, fmt: str, **keywords):
    return compiler.compile_json_schema({"type": "string", "format": fmt, **keywords})


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


_IPV6 = [
    ("::", True),
    ("::1", True),
    ("1::", True),
    ("::ffff:1.2.3.4", True),
    ("1::2:1.2.3.4", True),  # an embedded IPv4 after groups on both sides of "::"
    ("1:2:3:4:5:6:1.2.3.4", True),
    ("1:2:3:4:5:6:7::", True),
    ("::2:3:4:5:6:7:8", True),
    ("FE80::0202:B3FF:FE1E:8329", True),
    ("1::2::3", False),
    ("1:2:3:4:5:6:7:8:9", False),
    ("1:2:3:4:5:6:7:8::", False),
    ("12345::", False),
    ("::ffff:1.2.3.256", False),
    ("::1.2.3.04", False),
    ("1:2:3:4:5:6:7:1.2.3.4", False),
    (":1::", False),
    ("1:", False),
    ("fe80::1%eth0", False),
    ("::g", False),
]


@pytest.mark.parametrize("value, valid", _IPV6)
def test_ipv6(compiler, value, valid):
    assert _is_ipv6(value) == valid  # the table agrees with jsonschema's checker
    assert _accepts(_format(compiler, "ipv6"), value) == valid


def _is_ipv6(value: str) -> bool:
    try:
        return ipaddress.IPv6Address(value).scope_id is None
    except ValueError:
        return False


_LABEL_63 = "a" * 63


@pytest.mark.parametrize(
    "value, valid",
    [
        ("example.com", True),
        ("a.b-c.d", True),
        ("localhost", True),
        ("1host.9", True),
        ("xn4-a.com", True),
        (_LABEL_63, True),
        ("a" * 59 + ".com", True),  # 63 characters
        ("a" * 60 + ".com", False),  # over 63 characters in all: a sound restriction
        (".".join([_LABEL_63] * 3 + ["a" * 61]), False),  # 253 characters: the same
        (".".join([_LABEL_63] * 4), False),  # 255 characters: was accepted
        (".".join([_LABEL_63] * 3 + ["a" * 62]), False),  # 254 characters: was accepted
        ("a" * 64 + ".com", False),
        ("-a.com", False),
        ("a-.com", False),
        ("a.-b", False),
        ("a..b", False),
        ("a.", False),
        (".a", False),
        ("", False),
        ("a_b.com", False),
        ("a b", False),
        ("xn--bcher-kva.example", False),  # R-LDH label: a sound restriction
    ],
)
def test_hostname(compiler, value, valid):
    assert _accepts(_format(compiler, "hostname"), value) == valid


@pytest.mark.parametrize(
    "value, valid",
    [
        ("a@b.c", True),
        ("user@localhost", True),
        ("first.last+tag@sub.example-mail.org", True),
        ("!#$%&'*+-/=?^_`{|}~@x.org", True),
        ("a" * 57 + "@x.org", True),  # 63 characters
        ("a" * 58 + "@x.org", False),  # over 63 characters in all: a sound restriction
        ("a@" + ".".join([_LABEL_63] * 3 + ["a" * 60]), False),  # 254 characters: the same
        ("a" * 65 + "@x.org", False),  # local part over 64: was accepted
        ("a@" + "b" * 64 + ".c", False),  # label over 63: was accepted
        ("ab@" + ".".join([_LABEL_63] * 3 + ["a" * 60]), False),  # 255 characters: was accepted
        ("a@@b.c", False),
        ("a@b@c.d", False),
        ("@b.c", False),
        ("a@", False),
        (".a@b.c", False),
        ("a.@b.c", False),
        ("a..b@b.c", False),
        ("a@-b.c", False),
        ("a@b..c", False),
        ('"quoted local"@x.org', False),  # quoted local parts: a sound restriction
        ("a@[1.2.3.4]", False),  # address literals: a sound restriction
    ],
)
def test_email(compiler, value, valid):
    assert _accepts(_format(compiler, "email"), value) == valid


@pytest.mark.parametrize(
    "value, valid",
    [
        ("123e4567-e89b-12d3-a456-426614174000", True),
        ("123E4567-E89B-12D3-A456-426614174000", True),
        ("123e456-e89b-12d3-a456-426614174000", False),
        ("123e4567-e89b-12d3-a456-4266141740000", False),
        ("123e4567e89b12d3a456426614174000", False),
        ("123e4567-e89b-12d3-a456_426614174000", False),
        ("g23e4567-e89b-12d3-a456-426614174000", False),
    ],
)
def test_uuid(compiler, value, valid):
    assert _accepts(_format(compiler, "uuid"), value) == valid


_URIS = [
    ("http://example.com/a/b?c=d#e", True),
    ("urn:isbn:0451450523", True),
    ("mailto:a@b.org", True),
    ("file:///etc/hosts", True),
    ("http://user:pw@example.com:8080/", True),
    ("ftp://1.2.3.4/%41%2f", True),
    ("a:", True),
    ("tel:+1-816-555-1212", True),
    ("x-y.z+w:/p?q?r//s", True),
    ("a:%G1", False),  # was accepted
    ("abc", False),
    ("1a:b", False),
    ("a:%4", False),  # was accepted
    ("a:b#c#d", False),  # was accepted
    ("http://[::1", False),  # was accepted
    ("http://[1::2::3]/", False),  # was accepted
    ("a:[x]", False),  # was accepted
    ("http://a]b/", False),  # was accepted
    ("http://[::1]/", False),  # IP-literal hosts: a sound restriction
    ("a:\u00e9", False),  # was accepted
    ("a:\x01", False),  # was accepted
    ("a:b c", False),
    ("http://x:y:z/", False),  # was accepted
    ("http://a/{b}", False),
]


@pytest.mark.parametrize("value, valid", _URIS)
def test_uri(compiler, value, valid):
    assert _accepts(_format(compiler, "uri"), value) == valid


@pytest.mark.parametrize(
    "value, valid",
    [
        *[(v, True) for v, valid in _URIS if valid],
        ("", True),
        ("../a/b?c#d", True),
        ("//example.com", True),
        ("/a:b", True),
        ("a/b:c", True),
        ("?q", True),
        ("#f", True),
        ("%G1", False),  # was accepted
        ("1a:b", False),  # was accepted: a colon in a relative path's first segment
        ("a#b#c", False),  # was accepted
        ("\u00e9", False),  # was accepted
        ("\x01", False),  # was accepted
        ("[", False),  # was accepted
        ("a\\b", False),
        ("//[::1", False),  # was accepted
    ],
)
def test_uri_reference(compiler, value, valid):
    assert _accepts(_format(compiler, "uri-reference"), value) == valid


@pytest.mark.parametrize(
    "value, valid",
    [
        ("", True),
        ("/", True),
        ("/a~0b~1c", True),
        ("/a/0/", True),
        ('/ "\\\u00e9\n', True),
        ("a", False),
        ("/~2", False),
        ("/~", False),
        ("/a~", False),
    ],
)
def test_json_pointer(compiler, value, valid):
    assert _accepts(_format(compiler, "json-pointer"), value) == valid


_DURATIONS = [
    ("P1W", True),
    ("PT1H", True),
    ("P1Y2M3DT4H5M6S", True),
    ("P0D", True),
    ("PT36H", True),
    ("P1M2D", True),
    ("PT1M30S", True),
    ("P", False),
    ("PT", False),
    ("P1DT", False),
    ("PT1.5S", False),  # no fractions in RFC 3339's ABNF
    ("P1Y1W", False),  # weeks stand alone
    ("P1H", False),  # hours only after T
    ("PT1H1S", False),  # from the largest unit given, without gaps
    ("P1M1Y", False),
    ("1D", False),
]
_RELATIVE_POINTERS = [("0", True), ("1/a", True), ("0#", True), ("12/~0/b c", True), ("3/", True)]
_RELATIVE_POINTERS += [("01", False), ("#", False), ("1#/a", False), ("2/~2", False), ("-1", False)]


@pytest.mark.parametrize(
    "fmt, value, valid",
    [("duration", *case) for case in _DURATIONS]
    + [("relative-json-pointer", *case) for case in _RELATIVE_POINTERS],
)
def test_duration_and_relative_json_pointer(compiler, fmt, value, valid):
    assert _accepts(_format(compiler, fmt), value) == valid


@pytest.mark.parametrize(
    "fmt, valid, invalid",
    [
        ("iri", ["http://a.b/c?d#e", "urn:x:y"], ["http://é.com/", "a b", "/relative"]),
        ("iri-reference", ["/relative", "http://a/b"], ["a b", "http://é.com/"]),
        ("idn-email", ["a@b.c"], ["ü@b.c", "no"]),
    ],
)
def test_unicode_formats_match_their_ascii_subset(compiler, fmt, valid, invalid):
    """IRIs and internationalised addresses are matched as URIs and RFC 5321 mailboxes: a
    sound restriction (non-ASCII values, valid for these formats, are refused)."""
    grammar = _format(compiler, fmt)
    assert all(_accepts(grammar, v) for v in valid)
    assert not any(_accepts(grammar, v) for v in invalid)


_URI_TEMPLATES = [
    ("http://example.com/{id}", True),
    ("/users/{user_id}/repos{?page,per_page}", True),
    ("{+path:6}/here{#frag}", True),
    ("{list*}{.dom}{/a,b}{;p}{&q}", True),
    ("file:///{a.b}/%20", True),
    ("{%41b}", True),
    ("", True),
    ("{}", False),  # no variable
    ("{a", False),
    ("a}", False),
    ("x y", False),  # no spaces in literals
    ("{a:0}", False),  # a prefix length is 1 to 9999
    ("{a:10000}", False),
    ("{a..b}", False),
    ("{a b}", False),
    ("%zz", False),
    ('a"b', False),
    ("{$x}", False),  # not an operator
]


@pytest.mark.parametrize("value, valid", _URI_TEMPLATES)
def test_uri_template(compiler, value, valid):
    """RFC 6570 in ASCII: a value outside ASCII is refused (a sound restriction)."""
    assert _accepts(_format(compiler, "uri-template"), value) == valid


_REGEXES = [
    (r"^[a-z]+$", True),
    (r".*\.py$", True),
    (r"^(\d{3})-(\d{4})$", True),
    (r"[A-Za-z0-9_\-]+", True),
    (r"(?:ab|cd)*?x{1,64}|y{2}", True),
    (r"\bword\b\s*\u00e9\x41", True),
    (r'say "hi"|\\', True),  # a quote, and an escaped backslash
    ("", True),
    ("*.ts", False),  # nothing to repeat
    (r"x{9,3}", False),
    (r"[z-a]", False),
    (r"a**", False),
    ("(", False),
    ("[", False),
    ("a)", False),
    (r"\p", False),
    ("[]", False),
    (r"(?P<n>a)", False),  # valid in Python only: refused
    (r"^(a(b(c)))$", False),  # valid, groups nested three deep: refused (a restriction)
]


@pytest.mark.parametrize("value, valid", _REGEXES)
def test_regex(compiler, value, valid):
    """Expressions valid for both Python's re and ECMA-262 in a documented subset."""
    assert _accepts(_format(compiler, "regex"), value) == valid


def test_every_accepted_regex_compiles():
    # random strings over regex syntax: each one the format's automaton accepts compiles
    import random
    import re
    import warnings

    from grammars.json_schema.strings import _FORMATS

    meta = re.compile(_FORMATS["regex"])
    parts = list('ab0-9^$.|?*+()[]{}\\/,:dwsbBnxu"') + ["\\d", "[a-z]", "{2,5}", "(?:", "{3}"]
    rng = random.Random(0)
    accepted = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20_000):
            value = "".join(rng.choice(parts) for _ in range(rng.randint(0, 8)))
            if meta.fullmatch(json.dumps(value, ensure_ascii=False)[1:-1]):
                re.compile(value)
                accepted += 1
    assert accepted > 2_000


@pytest.mark.parametrize("fmt", ["idn-hostname"])
def test_formats_that_cannot_be_enforced_raise(compiler, fmt):
    with pytest.raises(GrammarError, match=fmt):
        _format(compiler, fmt)


@pytest.mark.parametrize(
    "fmt, keywords, valid, invalid",
    [
        ("hostname", {"maxLength": 100}, ["a.b-c.d"], ["a" * 64, "a.-b", "a" * 99]),
        ("hostname", {"pattern": "com$"}, ["example.com"], ["a" * 64 + ".com", "a.org"]),
        ("email", {"maxLength": 100}, ["a@b.c"], ["a..b@c.d", "a@" + "b" * 64 + ".c"]),
        ("email", {"minLength": 1}, ["a@" + "b" * 59 + ".c"], ["a" * 65 + "@b.c", "a@b..c"]),
        ("uri", {"maxLength": 30}, ["http://a/b"], ["a:%G1", "http://abcdefghijklmnopqrstuvwxyz/"]),
        ("ipv6", {"pattern": "^f"}, ["fe80::1"], ["f::1::2", "::1"]),
    ],
)
def test_formats_beside_pattern_or_length_stay_sound(compiler, fmt, keywords, valid, invalid):
    grammar = _format(compiler, fmt, **keywords)
    assert all(_accepts(grammar, value) for value in valid)
    assert not any(_accepts(grammar, value) for value in invalid)


@pytest.mark.parametrize(
    "pattern, accepted, refused",
    [
        ("ab", ["ab", "xaby"], ["a", "ba"]),  # search semantics: anywhere in the string
        ("^ab", ["ab", "abx"], ["xab"]),
        ("ab$", ["ab", "xab"], ["abx", "ab\n"]),
        ("^ab$", ["ab"], ["abab", "xab", "abx"]),
        ("^a|b$", ["ax", "xb"], ["xa", "bx"]),
        ("^(a|b)$", ["a", "b"], ["ab", ""]),
        ("^$", [""], ["a"]),
    ],
)
def test_pattern_anchors(compiler, pattern, accepted, refused):
    grammar = compiler.compile_json_schema({"type": "string", "pattern": pattern})
    assert all(_accepts(grammar, value) for value in accepted)
    assert not any(_accepts(grammar, value) for value in refused)


def test_lengths_count_code_points_not_bytes(compiler):
    grammar = compiler.compile_json_schema({"type": "string", "minLength": 2, "maxLength": 2})
    for value in ("ab", "\u20ac\u20ac", "a\U0001f600", "\U0001f600\U0001f600"):
        assert _accepts(grammar, value)  # escaped (json.dumps) and raw UTF-8 alike
        matcher = grammar.matcher()
        assert matcher.accept_string(json.dumps(value, ensure_ascii=False))
        assert matcher.is_completed()
    for value in ("\u20ac", "\u20ac\u20ac\u20ac", "\U0001f600"):  # 3, 9 and 4 bytes
        assert not _accepts(grammar, value)
