"""Per-request sampling parameters, validated with errors that name the field."""

from __future__ import annotations

import dataclasses
import reprlib
from dataclasses import dataclass, field

CONSTRAINT_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")
_OBJECT_CONSTRAINTS = ("json_schema", "structural_tag")  # given as an object or JSON text
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 1024
MAX_STOP_TOKEN_IDS = 1024
# JSON levels of a constraint given as an object: deeper ones cannot be sent on (pickle recurses
# past ~490 levels) nor written as the text that is compiled (orjson stops at 254)
MAX_CONSTRAINT_DEPTH = 128
GREEDY_TEMPERATURE = 1e-5  # below this, sampling is greedy (dividing by it would overflow)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 6, 6
_SHORT.maxstring = _SHORT.maxother = 60


def short_repr(value, limit: int = 80) -> str:
    """repr() cut to `limit` characters and 3 levels of nesting, so an error never echoes a
    huge value back (nor recurses through a deeply nested one)."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_valid_text(value: str) -> bool:
    """False for strings that hold lone surrogates (not encodable as UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_LOGIT_BIAS = 1024


def json_depth(value) -> int:
    """How deeply objects and arrays nest in `value` (without recursion), counted up to
    MAX_CONSTRAINT_DEPTH + 1: a deeper value answers MAX_CONSTRAINT_DEPTH + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_CONSTRAINT_DEPTH:
                stack.extend(
                    (v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)
                )
    return deepest


def check_constraint_depth(name: str, value) -> None:
    """ValueError if the constraint `name` is an object nested deeper than MAX_CONSTRAINT_DEPTH.
    Checked once, where a request's values come in: validate() runs at every hop, and the walk
    costs ~15 ms for a 600 KB schema."""
    if isinstance(value, dict) and json_depth(value) > MAX_CONSTRAINT_DEPTH:
        raise ValueError(
            f"sampling_params.{name} nests more than {MAX_CONSTRAINT_DEPTH} levels deep"
        )


def _token_key(key) -> int | None:
    """A logit_bias key as a token id: an int, or a string of decimal digits (OpenAI's JSON)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key if key >= 0 else None
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 10:
        return int(key)
    return None


@dataclass
class SamplingParams:
    """The `sampling_params` of a /generate request (SGLang's field names and defaults)."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    json_schema: str | dict | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | dict | None = None
    logit_bias: dict | None = None  # token id (int or its decimal string) -> bias in [-100, 100]
    seed: int | None = None

    @classmethod
    def from_dict(cls, params: dict | None) -> SamplingParams:
        """Build from a request dict; unknown fields and bad values raise ValueError."""
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"sampling_params must be an object, got {short_repr(params)}")
        params = dict(params or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"sampling_params: unknown field(s) {short_repr(unknown)}")
        params = {
            k: v for k, v in params.items() if v is not None or k in ("seed", *CONSTRAINT_FIELDS)
        }
        if isinstance(params.get("stop"), str):
            params["stop"] = [params["stop"]]
        sp = cls(**params)
        sp.validate()
        for name in _OBJECT_CONSTRAINTS:
            check_constraint_depth(name, getattr(sp, name))
        return sp

    def validate(self, vocab_size: int | None = None) -> None:
        def check(ok: bool, name: str, want: str) -> None:
            if not ok:
                raise ValueError(
                    f"sampling_params.{name} must be {want}, got {short_repr(getattr(self, name))}"
                )

        def is_int(x) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        def is_num(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x

        check(
            is_int(self.max_new_tokens) and 0 <= self.max_new_tokens <= INT32_MAX,
            "max_new_tokens",
            f"an integer in [0, {INT32_MAX}]",
        )
        check(
            is_int(self.min_new_tokens) and 0 <= self.min_new_tokens <= INT32_MAX,
            "min_new_tokens",
            f"an integer in [0, {INT32_MAX}]",
        )
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError("sampling_params.min_new_tokens must not exceed max_new_tokens")
        check(
            is_num(self.temperature) and 0 <= self.temperature <= 100,
            "temperature",
            "a number in [0, 100]",
        )
        check(is_num(self.top_p) and 0 < self.top_p <= 1, "top_p", "a number in (0, 1]")
        check(
            is_int(self.top_k) and (self.top_k == -1 or 1 <= self.top_k <= INT32_MAX),
            "top_k",
            f"-1 (off) or an integer in [1, {INT32_MAX}]",
        )
        check(is_num(self.min_p) and 0 <= self.min_p <= 1, "min_p", "a number in [0, 1]")
        check(
            is_num(self.frequency_penalty) and -2 <= self.frequency_penalty <= 2,
            "frequency_penalty",
            "a number in [-2, 2]",
        )
        check(
            is_num(self.presence_penalty) and -2 <= self.presence_penalty <= 2,
            "presence_penalty",
            "a number in [-2, 2]",
        )
        check(
            self.logit_bias is None
            or (
                isinstance(self.logit_bias, dict)
                and len(self.logit_bias) <= MAX_LOGIT_BIAS
                and all(
                    _token_key(k) is not None
                    and (vocab_size is None or _token_key(k) < vocab_size)
                    and is_num(v)
                    and -100 <= v <= 100
                    for k, v in self.logit_bias.items()
                )
            ),
            "logit_bias",
            f"an object of at most {MAX_LOGIT_BIAS} token ids (below the vocabulary size) "
            "to biases in [-100, 100]",
        )
        check(
            is_num(self.repetition_penalty) and 0 < self.repetition_penalty <= 2,
            "repetition_penalty",
            "a number in (0, 2]",
        )
        check(
            isinstance(self.stop, list)
            and len(self.stop) <= MAX_STOP_STRINGS
            and all(
                isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS and is_valid_text(s)
                for s in self.stop
            ),
            "stop",
            f"a string of 1 to {MAX_STOP_CHARS} characters or a list of at most "
            f"{MAX_STOP_STRINGS} of them",
        )
        check(
            isinstance(self.stop_token_ids, list)
            and len(self.stop_token_ids) <= MAX_STOP_TOKEN_IDS
            and all(is_int(t) and 0 <= t <= INT32_MAX for t in self.stop_token_ids),
            "stop_token_ids",
            f"a list of at most {MAX_STOP_TOKEN_IDS} token ids",
        )
        if vocab_size is not None:
            check(
                all(t < vocab_size for t in self.stop_token_ids),
                "stop_token_ids",
                f"ids below the vocabulary size {vocab_size}",
            )
        check(is_int(self.n) and 1 <= self.n <= 128, "n", "an integer in [1, 128]")
        check(
            self.seed is None or (is_int(self.seed) and INT64_MIN <= self.seed <= INT64_MAX),
            "seed",
            f"an integer in [{INT64_MIN}, {INT64_MAX}]",
        )
        for name in CONSTRAINT_FIELDS:
            value = getattr(self, name)
            check(
                value is None
                or (isinstance(value, str) and is_valid_text(value))
                or (name in _OBJECT_CONSTRAINTS and isinstance(value, dict)),
                name,
                "a string" + (" or an object" if name in _OBJECT_CONSTRAINTS else ""),
            )
        for name in (
            "ignore_eos",
            "skip_special_tokens",
            "spaces_between_special_tokens",
            "no_stop_trim",
        ):
            check(isinstance(getattr(self, name), bool), name, "true or false")
        constraints = [n for n in CONSTRAINT_FIELDS if getattr(self, n) is not None]
        if len(constraints) > 1:
            raise ValueError(
                f"sampling_params: only one of {', '.join(CONSTRAINT_FIELDS)} may be set, "
                f"got {constraints}"
            )

    def for_copy(self, i: int) -> SamplingParams:
        """The parameters of the i-th of `n` samples of one prompt: a seeded request's copies
        draw with seeds seed, seed + 1, ... (wrapping in int64), so they differ from each other
        and the whole set is reproducible."""
        if self.seed is None or i == 0:
            return self
        seed = (self.seed + i - INT64_MIN) % 2**64 + INT64_MIN
        return dataclasses.replace(self, seed=seed)

    def bias_items(self) -> list[tuple[int, float]]:
        """logit_bias as (token id, bias) pairs."""
        return [(_token_key(k), float(v)) for k, v in (self.logit_bias or {}).items()]

    @property
    def is_constrained(self) -> bool:
        return any(getattr(self, n) is not None for n in CONSTRAINT_FIELDS)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return (
            self.frequency_penalty != 0
            or self.presence_penalty != 0
            or self.repetition_penalty != 1
        )
