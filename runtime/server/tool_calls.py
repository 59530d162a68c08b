"""Tool calls for /v1/chat/completions: tool definitions, the grammar that guarantees a valid
call, and the parsing of the model's output back into OpenAI `tool_calls`.

How each `tool_choice` is served:

- `none` (or no `tools`): plain chat; the tools are not shown to the model.
- `required`: the output is constrained (the `json_schema` sampling parameter) to
  `{"name": <one tool>, "arguments": <that tool's parameters>}`, an anyOf over the tools; with
  `parallel_tool_calls` (the default) to a JSON array of one or more such objects.
- a named function: the same object, for that tool only.
- `auto`: the model writes text, or opens a call with the trigger `<tool_call>`; the
  `structural_tag` sampling parameter constrains everything from the trigger to
  `</tool_call>` to `<tool_call>{"name": <tool>, "arguments": <its parameters>}</tool_call>`.
  A `<tool_call>` block whose JSON names a tool becomes a call; anything else stays text.

The same text is parsed for streamed and for whole responses (`parse_output`), so a stream's
deltas add up to the whole response. The prompt side (the chat template, or a system-prompt
section for templates without tools) is in `runtime.server.tool_prompt`.

/generate and the offline Engine have no `tools` field: render the tools into the prompt (the
template's `tools=` argument, or a system message like the fallback's) and pass the grammar
yourself, `json_schema` = `ToolSpec.calls_schema()`'s shape for a forced call or
`structural_tag` = `ToolSpec.structural_tag()`'s shape for text that may call; then parse the
text as `ToolSpec.parse_output` does.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass

from runtime.sampling.params import MAX_CONSTRAINT_DEPTH, json_depth, short_repr
from runtime.server.tokenizer_manager import BadRequest

logger = logging.getLogger(__name__)

CALL_BEGIN, CALL_END = "<tool_call>", "</tool_call>"
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOLS = 128
# JSON levels, leaving room for the levels a call's schema wraps around its parameters
MAX_PARAMETERS_DEPTH = MAX_CONSTRAINT_DEPTH - 8
TOOL_KEYS = {"type", "function"}
FUNCTION_KEYS = {"name", "description", "parameters", "strict"}
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
# values of these keywords are data, not schemas: a "$ref" inside them is not a reference
_DATA_KEYWORDS = ("const", "enum", "default", "examples")
# keywords whose value maps names (which may be any string, "const" too) to schemas
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_DECODER = json.JSONDecoder()
JSON_ERRORS = (ValueError, RecursionError)  # what decoding text that is not (sane) JSON raises


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class Tool:
    """One function the model may call; `parameters` is an object JSON schema."""

    name: str
    description: str | None
    parameters: dict

    def as_openai(self) -> dict:
        """The definition in OpenAI's shape (what chat templates and the prompt show)."""
        function = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass
class ToolCall:
    """A parsed call: `arguments` is the JSON text of an object."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ParsedOutput:
    """What a generated text says: `content` (None when only calls) and the calls."""

    content: str | None
    calls: list[tuple[str, str]]  # (name, arguments JSON)


def _parse_tool(i: int, tool) -> Tool:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise BadRequest(f'{where} must be an object with "type": "function"', "tools")
    unknown = sorted(set(tool) - TOOL_KEYS)
    if unknown:
        raise BadRequest(f"{where}: unknown field(s) {short_repr(unknown)}", "tools")
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise BadRequest(f"{where}.function must be an object", "tools")
    unknown = sorted(set(fn) - FUNCTION_KEYS)
    if unknown:
        raise BadRequest(f"{where}.function: unknown field(s) {short_repr(unknown)}", "tools")
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise BadRequest(
            f"{where}.function.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {short_repr(name)}",
            "tools",
        )
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise BadRequest(f"{where}.function.description must be a string", "tools")
    if not isinstance(fn.get("strict", False), bool):
        raise BadRequest(f"{where}.function.strict must be true or false", "tools")
    parameters = fn.get("parameters", EMPTY_PARAMETERS)
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise BadRequest(
            f"{where}.function.parameters ({name!r}) must be a JSON schema with "
            f'"type": "object", got {short_repr(parameters)}',
            "tools",
        )
    if json_depth(parameters) > MAX_PARAMETERS_DEPTH:
        raise BadRequest(
            f"{where}.function.parameters ({name!r}) nest more than {MAX_PARAMETERS_DEPTH} "
            "levels deep",
            "tools",
        )
    return Tool(name, description, parameters)


def _choice_name(tool_choice) -> str | None:
    """The function a named tool_choice names (None for the string choices)."""
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise BadRequest(
                f"tool_choice must be none, auto, required or a named function, got "
                f"{short_repr(tool_choice)}",
                "tool_choice",
            )
        return None
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    if (
        not isinstance(fn, dict)
        or tool_choice.get("type") != "function"
        or set(tool_choice) != {"type", "function"}
        or set(fn) != {"name"}
        or not isinstance(fn["name"], str)
    ):
        raise BadRequest(
            'tool_choice must be {"type": "function", "function": {"name": ...}}, got '
            f"{short_repr(tool_choice)}",
            "tool_choice",
        )
    return fn["name"]


@dataclass
class ToolSpec:
    """The tools of one request and how they may be called: `choice` is "auto", "required"
    or "named" (then `tools` holds the named tool only; `offered` always holds them all)."""

    offered: list[Tool]
    tools: list[Tool]
    choice: str
    parallel: bool

    @classmethod
    def from_request(cls, tools, tool_choice, parallel_tool_calls) -> ToolSpec | None:
        """The spec of a request's tool fields; None when the model gets no tools."""
        if tools is None:
            if tool_choice not in (None, "none"):
                raise BadRequest("tool_choice needs tools", "tool_choice")
            return None
        if not isinstance(tools, list) or not 1 <= len(tools) <= MAX_TOOLS:
            raise BadRequest(f"tools must be a list of 1 to {MAX_TOOLS} tools", "tools")
        offered = [_parse_tool(i, t) for i, t in enumerate(tools)]
        names = [t.name for t in offered]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise BadRequest(f"tools: names must be unique, repeated: {repeated}", "tools")
        name = _choice_name("auto" if tool_choice is None else tool_choice)
        if tool_choice == "none":
            return None
        if name is not None:
            if name not in names:
                raise BadRequest(
                    f"tool_choice names {name!r}, which is not one of the tools {names}",
                    "tool_choice",
                )
            chosen = [offered[names.index(name)]]
            return cls(offered, chosen, "named", False)
        parallel = True if parallel_tool_calls is None else parallel_tool_calls
        return cls(offered, offered, tool_choice or "auto", parallel)

    @property
    def constrains_json(self) -> bool:
        """The whole output is the calls' JSON (required or named)."""
        return self.choice != "auto"

    @property
    def as_list(self) -> bool:
        return self.choice == "required" and self.parallel

    def constraint(self) -> dict:
        """The sampling parameters (field -> value) that keep the output a valid call."""
        if self.constrains_json:
            return {"json_schema": self.calls_schema()}
        return {"structural_tag": self.structural_tag()}

    def calls_schema(self) -> dict:
        """The JSON schema of required / named output: one call, or a list of them."""
        base = "#/items" if self.as_list else "#"
        if len(self.tools) == 1:
            one = _call_schema(self.tools[0], f"{base}/properties/arguments")
        else:
            one = {
                "anyOf": [
                    _call_schema(t, f"{base}/anyOf/{i}/properties/arguments")
                    for i, t in enumerate(self.tools)
                ]
            }
        return {"type": "array", "items": one, "minItems": 1} if self.as_list else one

    def structural_tag(self) -> dict:
        """auto: free text, and from the trigger on one call to one of the tools."""
        structures = [
            {
                "begin": f'{CALL_BEGIN}{{"name": {json.dumps(t.name)}, "arguments": ',
                "schema": t.parameters,
                "end": f"}}{CALL_END}",
            }
            for t in self.tools
        ]
        return {"structures": structures, "triggers": [CALL_BEGIN]}

    # ---- output ------------------------------------------------------------------------
    def parse_output(self, text: str, final: bool = True) -> ParsedOutput:
        """The content and calls in `text`. With `final` False, `text` may still grow: only
        calls already complete are returned, and only content that is sure to begin the final
        content (trailing whitespace and a tag that may be opening are held back)."""
        if self.constrains_json:
            return self._parse_json_calls(text, final)
        return self._parse_tagged_calls(text, final)

    def _call(self, value) -> tuple[str, str] | None:
        """(name, arguments JSON) if `value` is a call to one of the tools."""
        if not isinstance(value, dict) or set(value) != {"name", "arguments"}:
            return None
        name, arguments = value["name"], value["arguments"]
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except JSON_ERRORS:
                return None
        if not isinstance(arguments, dict) or name not in {t.name for t in self.tools}:
            return None
        if json_depth(arguments) > MAX_PARAMETERS_DEPTH:  # too deep to write back as JSON
            return None
        return name, json.dumps(arguments, ensure_ascii=False)

    def _parse_json_calls(self, text: str, final: bool) -> ParsedOutput:
        if not self.as_list:
            try:
                call = self._call(json.loads(text))
            except JSON_ERRORS:
                call = None
            if call is not None:
                return ParsedOutput(None, [call])
            return ParsedOutput(text if final else "", [])
        calls, pos = [], _skip_space(text, 0)
        if text.startswith("[", pos):  # the items complete so far, one at a time
            pos += 1
            while True:
                pos = _skip_space(text, pos)
                if calls and text.startswith(",", pos):
                    pos = _skip_space(text, pos + 1)
                try:
                    value, pos = _DECODER.raw_decode(text, pos)
                except JSON_ERRORS:
                    break
                call = self._call(value)
                if call is None:
                    break
                calls.append(call)
        if calls:
            return ParsedOutput(None, calls)
        return ParsedOutput(text if final else "", [])

    def _parse_tagged_calls(self, text: str, final: bool) -> ParsedOutput:
        start, calls = 0, []
        first = None  # where the text before the first call ends
        while True:
            at = text.find(CALL_BEGIN, start)
            if at < 0:
                if first is None and not final:  # hold back a trigger that may be starting
                    return ParsedOutput(_before_partial_trigger(text).rstrip(), [])
                break
            found = self._tagged_call(text, at + len(CALL_BEGIN), final)
            if found is None:  # still open: nothing from here on is settled
                if first is None:
                    return ParsedOutput(text[:at].rstrip(), [])
                break
            call, end = found
            if call is None:  # not a call: the tag is plain text
                start = at + len(CALL_BEGIN)
                continue
            if first is None:
                first = at
            calls.append(call)
            start = end
            if not self.parallel:
                break
        if not calls:
            return ParsedOutput(text, [])
        content = text[:first].rstrip()
        return ParsedOutput(content or None, calls)

    def _tagged_call(self, text: str, pos: int, final: bool):
        """After an opening tag at `pos`: None while undecided, else (call or None if this is
        no call, the position after the closing tag)."""
        pos = _skip_space(text, pos)
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except JSON_ERRORS:
            if final or CALL_END in text[pos:]:
                return None, pos
            return None
        end = _skip_space(text, end)
        if text.startswith(CALL_END, end):
            return self._call(value), end + len(CALL_END)
        if end == len(text):  # the closing tag may follow (or was cut off: still a call)
            return (self._call(value), end) if final else None
        if CALL_END.startswith(text[end:]) and not final:
            return None
        return None, pos


class ToolCallStream:
    """One streamed choice: turns its growing text into OpenAI chat deltas, content first,
    then for each call a delta with its index, id, type, name and empty arguments and one
    with the arguments."""

    def __init__(self, spec: ToolSpec):
        self.spec = spec
        self.sent_content = 0
        self.call_ids: list[str] = []

    def deltas(self, text: str, final: bool) -> list[dict]:
        parsed = self.spec.parse_output(text, final)
        out = []
        content = parsed.content or ""
        if len(content) > self.sent_content:
            out.append({"content": content[self.sent_content :]})
            self.sent_content = len(content)
        for index in range(len(self.call_ids), len(parsed.calls)):
            name, arguments = parsed.calls[index]
            self.call_ids.append(new_call_id())
            opening = ToolCall(self.call_ids[-1], name, "").as_openai()
            out.append({"tool_calls": [{"index": index, **opening}]})
            out.append({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        return out


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _before_partial_trigger(text: str) -> str:
    """`text` without a tail that could be the start of the trigger."""
    for k in range(min(len(CALL_BEGIN) - 1, len(text)), 0, -1):
        if CALL_BEGIN.startswith(text[-k:]):
            return text[:-k]
    return text


def _call_schema(tool: Tool, where: str) -> dict:
    """`{"name": tool, "arguments": parameters}`, the parameters' local references rebased
    to `where` (their place in the whole schema)."""
    return {
        "type": "object",
        "properties": {
            "name": {"const": tool.name},
            "arguments": _rebase_refs(tool.parameters, where),
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _rebase_refs(schema, where: str):
    """A copy of `schema` in which every local `$ref` "#..." reads `where`...: the schema is
    no longer the root of the document its references point into."""
    if isinstance(schema, list):
        return [_rebase_refs(x, where) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = where + value[1:]
        elif key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):  # names -> schemas
            out[key] = {name: _rebase_refs(sub, where) for name, sub in value.items()}
        else:
            out[key] = _rebase_refs(value, where)
    return out
