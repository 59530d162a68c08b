"""Anchors inside patterns and lookaheads at their start (ECMA-262: ^ and $ only at the ends of
the text), against Python's re on random texts, and through a compiled schema token by token."""

import json
import random
import re

import pytest

from grammars import GrammarError
from grammars.automaton import EagerDFA
from grammars.regex import regex_to_node

PATTERNS = [
    "^([^,]|$)",
    r"^$|(^(?:\S+\s+){0,3}\S+$)",
    "(^[^5]*$)|7",
    r"^$|^\./((\.\./|[a-z_/\-])[^\.]*\.png)$",
    r'^(?!.*(\{Tr\}|["<>*?:/\\])).*\.[bB][lL][fF]$',
    "a$|b",
    "(a|^)b",
    "x(^|y)z",
    r"^(?=.*\d)[a-z0-9]{2,4}$",
    "^(?!ab)",
    "a(?:$)?b",
    "(^a|b$)c",
    r"^(?!.*\.exe$).*$",
    "(a$){0,2}",
    "$^",
    "^a*^b",
]
ALPHABET = 'ab5,7.xyz/ \\"01{}Tr\n'
EXTRA = ["./a.png", "ab", "b", "a", "c", "xz", "xyz", "ac", "bc", "a1", "ab1", "f.blf", "q.exe"]


def _python_search(pattern: str, text: str) -> bool:
    # ECMA-262's $ is the end of the text only; Python's also matches before a final newline
    return re.search(pattern.replace("$", r"(?![\s\S])"), text) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
def test_agrees_with_re(pattern):
    rng = random.Random(pattern)
    texts = [""] + EXTRA
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 7))) for _ in range(800)]
    dfa = EagerDFA.from_node(regex_to_node(pattern, json_mode=True, search=True))
    for text in texts:
        inside = json.dumps(text)[1:-1].encode()  # the string as JSON spells it
        assert dfa.accepts(inside) == _python_search(pattern, text), (pattern, text)


def test_through_a_schema(checker, compiler):
    grammar = compiler.compile_json_schema(
        {"type": "array", "items": {"type": "string", "pattern": r"^$|^[a-z]+(\.[a-z]+)*$|^#\d$"}}
    )
    assert checker.accepts(grammar, ["", "ab.cd", "#4", "x"])
    for bad in (["a..b"], [" "], ["#44"], ["ab."]):
        assert not checker.accepts(grammar, bad), bad
    grammar = compiler.compile_json_schema({"type": "string", "pattern": r"^(?!.*\.exe$).+$"})
    assert checker.accepts(grammar, '"setup.msi"')
    assert not checker.accepts(grammar, '"setup.exe"')


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("(?!a)b", "lookaheads"),
        ("a(?=b)", "lookaheads"),
        ("(^)*a", "unbounded"),
        (r"^a\b", "boundaries"),
        ("(?<=a)b", "lookbehind"),
    ],
)
def test_forms_not_enforced_raise(pattern, message):
    with pytest.raises(GrammarError, match=message):
        regex_to_node(pattern, json_mode=True, search=True)


def test_classes_python_may_read_otherwise_one_day_compile_without_warnings():
    """re's parser warns (FutureWarning) about "[[" and "--" in a class; the class is read as
    Python reads it today, exactly, and the warning is not passed on to the caller."""
    import warnings

    for pattern in ("[[x]+", "[%--]+"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dfa = EagerDFA.from_node(regex_to_node(pattern))
        assert not [w for w in caught if issubclass(w.category, FutureWarning)], pattern
        with warnings.catch_warnings(action="ignore", category=FutureWarning):
            reference = re.compile(pattern)
        for text in ("[", "x[x", "%", "+,-", "]", "a", "x]", "&'"):
            want = bool(reference.fullmatch(text))
            assert dfa.accepts(text.encode()) == want, (pattern, text)


def test_patterns_parsed_in_threads_leave_the_warning_filters_as_they_were():
    """The classes re's parser warns about are parsed with its FutureWarnings off; threads
    doing so at once must not leave the process's filters changed (each put back what it
    saw), nor pass a warning on."""
    import sys
    import threading
    import warnings

    from grammars.regex import _parse

    before = list(warnings.filters)
    errors = []

    def parse(k):
        try:
            for i in range(200):
                _parse(f"[[x{k}]{{{i}}}" if i % 2 else f"[%--{k}]+a{i}")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the parses
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            inside = list(warnings.filters)
            threads = [threading.Thread(target=parse, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert list(warnings.filters) == inside
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
    assert list(warnings.filters) == before


def test_a_condition_naming_a_group_by_sign_is_an_error_under_strict_warnings():
    """re's parser warns (DeprecationWarning) before it refuses "(?(+1)...)": with warnings
    made errors, the caller still gets a GrammarError, not the warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pattern in ("(?(+1)b|c)", "(?(\u0661)b|c)"):
            with pytest.raises(GrammarError, match="invalid regular expression"):
                regex_to_node(pattern)
