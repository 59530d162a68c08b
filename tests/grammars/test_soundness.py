"""Documents a schema refuses are never accepted, even where the automaton is built in a
restricted form (properties in one order, digit runs cut, keys spelled one way) or the pattern
dialects disagree; what cannot be enforced exactly raises GrammarError."""

import pytest

from grammars import GrammarError

AB = {"a": {"type": "integer"}, "b": {"type": "integer"}}
BA = {"b": {"type": "integer"}, "a": {"type": "integer"}}


def _closed(props: dict) -> dict:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


@pytest.mark.parametrize("order", ["schema", "any"])
def test_one_of_branches_that_differ_only_in_property_order_overlap(compiler, checker, order):
    # written in different orders, the two branches' automata share no text, yet every object
    # of one matches the other: enforcing the oneOf as an anyOf would accept it
    schema = {"oneOf": [_closed(AB), _closed(BA)]}
    try:
        grammar = compiler.compile_json_schema(schema, property_order=order)
    except GrammarError:
        return
    for doc in ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}'):
        assert not checker.accepts(grammar, doc), doc


def test_one_of_overlap_with_counted_members_in_any_order(compiler, checker):
    # maxProperties counts the members and the extras: every object of one branch matches the
    # other, so the oneOf admits nothing (a GrammarError) or at least not these
    counted = [
        {**_closed(props), "additionalProperties": {"const": 0}, "maxProperties": 2}
        for props in (AB, BA)
    ]
    try:
        grammar = compiler.compile_json_schema({"oneOf": counted}, property_order="any")
    except GrammarError:
        return
    for doc in ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}'):
        assert not checker.accepts(grammar, doc), doc


def test_one_of_overlap_hidden_by_cut_digit_runs(compiler, checker):
    # with 5 digits at most, an unbounded integer never reaches 10**20: the automata are
    # disjoint, the schemas are not
    schema = {
        "oneOf": [{"type": "integer", "minimum": 10**20, "maximum": 10**21}, {"type": "integer"}]
    }
    try:
        grammar = compiler.compile_json_schema(schema, max_number_digits=5)
    except GrammarError:
        return
    assert not checker.accepts(grammar, str(10**20))


def test_disjoint_one_of_branches_in_different_orders_stay_exact(checker):
    schema = {
        "oneOf": [
            {**_closed(AB), "properties": {**AB, "k": {"const": 1}}, "required": ["k"]},
            {**_closed(BA), "properties": {**BA, "k": {"const": 2}}, "required": ["k"]},
        ]
    }
    checker.check_schema("kinds", schema, [{"a": 1, "k": 1}, {"b": 1, "k": 2}], [{"k": 3}, {}])


def test_a_named_property_spelled_with_escapes_is_not_an_additional_one(compiler, checker):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    grammar = compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, '{"a": 1, "b": "x"}')
    assert not checker.accepts(grammar, '{"\\u0061": "x"}')  # "a", which must be an integer
    assert checker.accepts(grammar, '{"\\u00e9": "x"}')  # non-ASCII keys keep their escapes
    closed = {"patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}
    grammar = compiler.compile_json_schema({"type": "object", **closed})
    assert checker.accepts(grammar, '{"x1": 1}')
    assert not checker.accepts(grammar, '{"\\u0078": "s"}')


@pytest.mark.parametrize(
    "pattern,refused",
    [
        ("^.$", ["\r", "\u2028", "\n"]),  # ECMA-262: "." stops at every line end
        ("(?i)^[^a]$", ["a", "A"]),
    ],
)
def test_patterns_never_match_more_than_ecma_262(checker, pattern, refused):
    checker.check_schema(pattern, {"type": "string", "pattern": pattern}, ["b"], refused)


@pytest.mark.parametrize("pattern", ["^a*+a$", "^(?>a*)a$", "^a{,3}$", "a\\Z", "\\Aa"])
def test_patterns_read_differently_by_the_dialects_raise(compiler, pattern):
    with pytest.raises(GrammarError, match="pattern"):
        compiler.compile_json_schema({"type": "string", "pattern": pattern})


CONSTANTS_WITH_SIBLINGS = [
    # (schema, valid, invalid): const / enum never override the keywords beside them
    ({"enum": ["a", "bbbbbb", 3], "maxLength": 3}, ["a", 3], ["bbbbbb"]),
    ({"enum": [1, 2.5, 10, "x"], "minimum": 2}, [2.5, 10, "x"], [1]),
    ({"enum": [1, 2, 3, 4], "multipleOf": 2}, [2, 4], [1, 3]),
    ({"const": "x", "enum": ["x", "y"]}, ["x"], ["y"]),
    ({"enum": ["ab", "cd", "a1"], "pattern": "^[a-z]+$"}, ["ab", "cd"], ["a1"]),
    ({"enum": ["2024-02-29", "2023-02-29"], "format": "date"}, ["2024-02-29"], ["2023-02-29"]),
    (
        {
            "enum": [[1, 2], [1, 1], [1]],
            "items": {"enum": [1, 2]},
            "uniqueItems": True,
            "minItems": 2,
        },
        [[1, 2]],
        [[1, 1], [1]],
    ),
    (
        {"enum": [{"a": 1}, {"a": "s"}, {"b": 1}], "properties": {"a": {"type": "integer"}}},
        [{"a": 1}, {"b": 1}],
        [{"a": "s"}],
    ),
    (
        {"enum": [{"a": 1}, {}], "required": ["a"], "additionalProperties": {"type": "number"}},
        [{"a": 1}],
        [{}],
    ),
    ({"type": "integer", "enum": [1, "1", 2.0, 2.5]}, [1, 2], ["1", 2.5]),
]


@pytest.mark.parametrize("schema, valid, invalid", CONSTANTS_WITH_SIBLINGS)
def test_constants_are_checked_against_the_keywords_beside_them(checker, schema, valid, invalid):
    checker.check_schema("const/enum", schema, valid, invalid)


@pytest.mark.parametrize(
    "schema",
    [
        {"const": 5, "type": "string"},
        {"const": "x", "enum": ["y"]},
        {"const": 3, "multipleOf": 2},
        {"enum": ["abcd", "efgh"], "maxLength": 2},
    ],
)
def test_constants_none_of_which_match_their_siblings_admit_nothing(compiler, schema):
    with pytest.raises(GrammarError, match="admits no value"):
        compiler.compile_json_schema(schema)


def _accepts_text(grammar, text: str) -> bool:
    m = grammar.matcher()
    return m.accept_string(text) and m.is_completed()


@pytest.mark.parametrize("order", ["schema", "any"])
def test_a_key_written_twice_is_one_property_toward_min_properties(compiler, checker, order):
    # {"x": 1, "x": 2} is read as {"x": 2}: one property, whatever the count of members
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}
    grammar = compiler.compile_json_schema(schema, property_order=order)
    for text in ('{"x": 1, "x": 2}', '{"x": 1, "y": 2, "z": 3}', '{"a": 1}'):
        assert not _accepts_text(grammar, text), text
    for doc in ({"a": 1, "x": 2}, {"a": 1, "x": 2, "y": 3}):
        assert checker.accepts(grammar, doc), doc


_INT_EXTRAS = {"type": "object", "additionalProperties": {"type": "integer"}}
REPEATED_KEY_BRANCHES = [
    # {"x": 2, "x": 1} reads as {"x": 1}, which both branches take: the oneOf refuses it,
    # though only the second branch takes every member as written
    ({"type": "object", "additionalProperties": {"const": 1}}, _INT_EXTRAS, '{"x": 2, "x": 1}'),
    (
        {"type": "object", "patternProperties": {"^x": {"const": 1}}},
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        '{"x": 2, "x": 1}',
    ),
    # {"x": 1, "x": 1} has one property, as maxProperties 1 wants, yet two members
    ({**_INT_EXTRAS, "maxProperties": 1}, {**_INT_EXTRAS, "minProperties": 1}, '{"x": 1, "x": 1}'),
]


@pytest.mark.parametrize("order", ["schema", "any"])
@pytest.mark.parametrize("first, second, text", REPEATED_KEY_BRANCHES)
def test_one_of_is_not_separated_by_a_repeated_extra_key(compiler, order, first, second, text):
    try:
        grammar = compiler.compile_json_schema({"oneOf": [first, second]}, property_order=order)
    except GrammarError:
        return
    assert not _accepts_text(grammar, text)


def test_negation_is_not_widened_by_a_repeated_extra_key(compiler):
    schema = {"type": "object", "not": {"additionalProperties": {"const": 1}}}
    try:
        grammar = compiler.compile_json_schema(schema)
    except GrammarError:
        return
    assert not _accepts_text(grammar, '{"x": 2, "x": 1}')


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "minProperties": 2},
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3},
        {"type": "object", "properties": {"a": {}}, "minProperties": 3},
    ],
)
def test_min_properties_beyond_one_unnamed_key_is_refused(compiler, schema):
    with pytest.raises(GrammarError, match="distinct keys"):
        compiler.compile_json_schema(schema)


DRAFT7 = "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize(
    "schema, doc",
    [
        # draft 7 knows no maxContains: the `not` forbids every array holding a 1
        (
            {
                "$schema": DRAFT7,
                "enum": [[1], [2]],
                "not": {"contains": {"const": 1}, "maxContains": 0},
            },
            [1],
        ),
        # nor dependentRequired: the `not` of an empty constraint refuses everything
        (
            {"$schema": DRAFT7, "enum": [{"a": 1}], "not": {"dependentRequired": {"a": ["b"]}}},
            {"a": 1},
        ),
        # nor prefixItems
        (
            {"$schema": DRAFT7, "enum": [[1, "a"]], "not": {"prefixItems": [{"type": "string"}]}},
            [1, "a"],
        ),
        # draft 2020-12 knows no dependencies
        ({"enum": [{"a": 1}], "not": {"dependencies": {"a": ["b"]}}}, {"a": 1}),
    ],
)
def test_constants_beside_a_negated_keyword_of_another_draft(compiler, checker, schema, doc):
    # the engine reads such a keyword all the same (a restriction), which under `not` would
    # admit the constants it refuses
    try:
        grammar = compiler.compile_json_schema(schema)
    except GrammarError:
        return
    assert not checker.accepts(grammar, doc)


DRAFT4 = "http://json-schema.org/draft-04/schema#"


@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": DRAFT4, "type": "integer", "enum": [2, 1e20]},
        {"$schema": DRAFT4, "type": "integer", "enum": [*range(40), 1e20]},  # one DFA of all
        {"$schema": DRAFT4, "anyOf": [{"type": "integer", "enum": [2]}, {"enum": [1e20]}]},
        {"$schema": DRAFT4, "type": "array", "items": {"type": "integer"}, "const": [2]},
    ],
)
def test_draft4_integer_constants_are_written_without_a_fraction(compiler, checker, schema):
    # draft 4 counts 2.0 and 1e+20 as numbers that are no integers
    grammar = compiler.compile_json_schema(schema)
    for text in ("2.0", "1e+20", "[2.0]"):
        assert not _accepts_text(grammar, text), text
    assert _accepts_text(grammar, "[2]" if "items" in schema else "2")


@pytest.mark.parametrize(
    "schema, doc",
    [
        # the $ref is all of the first branch: it admits 1 as the second one does
        ({"oneOf": [{"$ref": "#/definitions/any", "type": "string"}, {"type": "integer"}]}, 1),
        (
            {
                "oneOf": [
                    {"$ref": "#/definitions/any", "required": ["a"], "properties": {"a": False}},
                    {"type": "object", "required": ["a"]},
                ]
            },
            {"a": 2},
        ),
        ({"not": {"$ref": "#/definitions/any", "type": "string"}}, 1),
    ],
)
def test_keywords_beside_a_draft7_ref_prove_nothing(compiler, checker, schema, doc):
    # before draft 2019-09 the keywords beside $ref are ignored
    schema = {"$schema": DRAFT7, "definitions": {"any": {}}, **schema}
    try:
        grammar = compiler.compile_json_schema(schema)
    except GrammarError:
        return
    assert not checker.accepts(grammar, doc)


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_keywords_beside_a_branch_ref_hold_where_the_branch_takes_keywords_beside_it(
    compiler, checker, key
):
    schema = {
        "$defs": {"any": {}},
        "type": "integer",
        key: [{"$ref": "#/$defs/any", "minimum": 5}, {"maximum": -5}],
    }
    grammar = compiler.compile_json_schema(schema)
    assert not checker.accepts(grammar, "0")
    assert checker.accepts(grammar, "6")


def test_a_local_ref_inside_a_subschema_with_its_own_id_is_refused(compiler):
    # "#/$defs/b" inside the subschema with $id names that subschema's own b (integers), not
    # the root's (strings)
    schema = {
        "$defs": {
            "b": {"type": "string"},
            "a": {
                "$id": "http://other/a.json",
                "$defs": {"b": {"type": "integer"}},
                "$ref": "#/$defs/b",
            },
        },
        "$ref": "#/$defs/a",
    }
    with pytest.raises(GrammarError, match="its own"):
        compiler.compile_json_schema(schema)


def test_strict_mode_does_not_widen_a_negated_schema(compiler):
    # {"b": 1} has no property a, so it matches the negated schema: strict mode must not read
    # the negated schema as closed to b
    schema = {"enum": [{"b": 1}, {"a": 1}], "not": {"properties": {"a": {}}}}
    with pytest.raises(GrammarError, match="no value"):
        compiler.compile_json_schema(schema, strict_mode=True)


@pytest.mark.parametrize(
    "schema",
    [
        '{"const": NaN}',
        '{"enum": [1, Infinity]}',
        {"const": float("nan")},
        {"enum": ["a", float("-inf")]},
        {"type": "object", "properties": {"a": {}}, "minProperties": -1},
        {"type": "array", "minItems": -2},
        {"type": "array", "maxItems": "3"},
    ],
)
def test_values_json_cannot_write_and_negative_counts_are_refused(compiler, schema):
    # NaN and Infinity are no JSON: a grammar of them would write text no parser reads
    with pytest.raises(GrammarError):
        compiler.compile_json_schema(schema)


# found by a randomised hunt for accepted documents that jsonschema refuses
HUNTED = [
    # items read after their own schema's prefix, also when merged with another schema's
    ({"allOf": [{"prefixItems": [{}], "items": False}, {"items": {"type": "string"}}]}, "[1]"),
    (
        {
            "$defs": {"t": {"prefixItems": [{"type": "integer"}]}},
            "$ref": "#/$defs/t",
            "items": False,
        },
        "[1]",
    ),
    ({"oneOf": [{"prefixItems": [{}]}], "items": {"type": "object"}}, "[[]]"),
    # minContains counts its own schema's contains
    ({"allOf": [{"contains": {"type": "string"}}, {"minContains": 0}]}, "[]"),
    (
        {"$defs": {"a": {"contains": {"type": "string"}}}, "$ref": "#/$defs/a", "minContains": 0},
        "[1]",
    ),
    # minItems above maxItems
    ({"type": "array", "minItems": 2, "maxItems": 0}, "[]"),
    ({"prefixItems": [{}], "minItems": 3, "maxItems": 1}, "[1]"),
    ({"maxItems": 0, "allOf": [{"minItems": 3}]}, "[]"),
    # types that cancel out leave no type, not every type
    ({"allOf": [{"type": "string"}, {"type": "number"}, {"not": {"type": "null"}}]}, "6"),
    ({"type": "string", "if": {"type": "array"}, "else": {"type": "number"}}, "650"),
    ({"type": "null", "if": {"type": "number"}, "else": {"type": "string"}}, "true"),
    # a constant item is checked against the type beside it
    ({"items": {"const": None, "type": "number"}, "uniqueItems": True}, "[null]"),
    ({"items": {"const": True, "type": "integer"}, "uniqueItems": True}, "[true]"),
]


@pytest.mark.parametrize("order", ["schema", "any"])
@pytest.mark.parametrize("schema, text", HUNTED)
def test_hunted_documents_are_refused(compiler, schema, text, order):
    try:
        grammar = compiler.compile_json_schema(schema, property_order=order)
    except GrammarError:
        return
    assert not _accepts_text(grammar, text)


@pytest.mark.parametrize(
    "schema, text",
    [
        ({"type": "object", "properties": {"a": {}}, "maxProperties": 0}, '{"x": 0}'),
        ({"type": "object", "maxProperties": 0, "dependentRequired": {"a": ["b"]}}, '{"x": 0}'),
    ],
)
def test_max_properties_zero_counts_extra_members_in_any_order(compiler, schema, text):
    grammar = compiler.compile_json_schema(schema, property_order="any")
    assert not _accepts_text(grammar, text)
    assert _accepts_text(grammar, "{}")


_D4 = "http://json-schema.org/draft-04/schema#"
_D7 = "http://json-schema.org/draft-07/schema#"
_D2019 = "https://json-schema.org/draft/2019-09/schema"


@pytest.mark.parametrize(
    "schema, text, valid",
    [
        # minContains is 2019-09's: draft 7 counts contains at least once
        ({"$schema": _D7, "contains": {"type": "string"}, "minContains": 0}, "[]", False),
        ({"$schema": _D7, "contains": {"type": "string"}, "minContains": 0}, '["a"]', True),
        # prefixItems is 2020-12's: before it, items applies to every item
        ({"$schema": _D2019, "prefixItems": [{}], "items": {"type": "string"}}, "[1]", False),
        ({"$schema": _D2019, "prefixItems": [{}], "items": {"type": "string"}}, '["a"]', True),
        # const is draft 6's: in draft 4 it asserts nothing
        ({"$schema": _D4, "type": "integer", "const": 1}, "2", True),
        ({"$schema": _D7, "type": "integer", "const": 1}, "2", False),
    ],
)
def test_keywords_a_draft_does_not_define_are_ignored(compiler, schema, text, valid):
    grammar = compiler.compile_json_schema(schema)
    assert _accepts_text(grammar, text) == valid


@pytest.mark.parametrize(
    "schema",
    [
        {"minLength": -1},
        {"not": {"minLength": True}},
        {"required": [1]},
        {"required": True},
        {"pattern": {}},
        {"allOf": None},
        {"patternProperties": [{}]},
        {"maximum": {}, "exclusiveMaximum": {}},
        {"then": "x", "if": -1, "minContains": {}},
        {"properties": ["foo"], "allOf": [{"properties": {}}]},
        {"prefixItems": [{"enum": [1, 2]}], "items": [True]},  # had let [3] through
        {"type": "object", "additionalProperties": None},
    ],
)
def test_malformed_keywords_raise_grammar_errors(compiler, schema):
    with pytest.raises(GrammarError):
        compiler.compile_json_schema(schema)
