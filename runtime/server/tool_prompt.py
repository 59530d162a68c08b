"""The prompt side of tool calls: how tool definitions, earlier calls and tool results reach
the model, through the chat template where it renders them and through a fallback where not.

What the template is asked to do is found by rendering small probe conversations once
(`TemplateSupport.detect`):

- tool definitions: passed as `apply_chat_template(..., tools=[...])` when the template shows
  them; otherwise (SmolLM2's template, for one) a system-prompt section lists them as JSON and
  asks for `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. It is appended to the
  first system message, or is the first system message if there is none.
- an assistant message's `tool_calls`: passed as `tool_calls` (arguments as objects) when the
  template shows them; otherwise written into its content as `<tool_call>...</tool_call>` text.
- `tool` messages: kept as role "tool" when the template shows that role; otherwise a user
  message with each result in `<tool_response>...</tool_response>` (consecutive results share
  one message).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from runtime.sampling.params import json_depth
from runtime.server.tokenizer_manager import BadRequest
from runtime.server.tool_calls import (
    CALL_BEGIN,
    CALL_END,
    JSON_ERRORS,
    MAX_PARAMETERS_DEPTH,
    ToolCall,
    ToolSpec,
)

logger = logging.getLogger(__name__)

_PROBE_TOOL = "radixgen_probe_tool"
_PROBE_CALL = "radixgen_probe_call"
_PROBE_RESULT = "radixgen_probe_result"


@dataclass(frozen=True)
class TemplateSupport:
    """Which tool parts the tokenizer's chat template renders itself."""

    tools: bool
    tool_calls: bool
    tool_role: bool

    @classmethod
    def detect(cls, tokenizer) -> TemplateSupport:
        user = {"role": "user", "content": "hi"}
        call = {"id": "call_0", "type": "function"}
        call["function"] = {"name": _PROBE_CALL, "arguments": {}}
        caller = {"role": "assistant", "content": "", "tool_calls": [call]}
        result = {"role": "tool", "tool_call_id": "call_0", "name": _PROBE_CALL}
        result["content"] = _PROBE_RESULT
        tool = {"type": "function", "function": {"name": _PROBE_TOOL, "parameters": {}}}
        tool["function"]["description"] = "probe"
        support = cls(
            tools=_renders(tokenizer, [user], _PROBE_TOOL, tools=[tool]),
            tool_calls=_renders(tokenizer, [user, caller], _PROBE_CALL),
            tool_role=_renders(tokenizer, [user, caller, result], _PROBE_RESULT),
        )
        logger.info("chat template tool support: %s", support)
        return support


def _renders(tokenizer, messages: list[dict], marker: str, **kw) -> bool:
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kw
        )
    except Exception:  # a template that refuses the probe does not render it
        return False
    return marker in text


def request_tool_calls(i: int, value) -> list[ToolCall]:
    """messages[i].tool_calls of a request, validated."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a list", "messages")
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(fn, dict)
            or call.get("type", "function") != "function"
            or not isinstance(call.get("id"), str)
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)
        ):
            raise BadRequest(
                f'{where}[{j}] must be {{"id": str, "type": "function", "function": '
                '{"name": str, "arguments": str}}',
                "messages",
            )
        calls.append(ToolCall(call["id"], fn["name"], fn["arguments"]))
    return calls


def _arguments(call: ToolCall):
    """The arguments as an object, as templates expect them (the text if it is not one)."""
    try:
        value = json.loads(call.arguments)
    except JSON_ERRORS:
        return call.arguments
    if not isinstance(value, dict) or json_depth(value) > MAX_PARAMETERS_DEPTH:
        return call.arguments
    return value


def call_text(call: ToolCall) -> str:
    """A call written the way the fallback prompt asks the model to write one."""
    body = json.dumps({"name": call.name, "arguments": _arguments(call)}, ensure_ascii=False)
    return f"{CALL_BEGIN}{body}{CALL_END}"


def tools_system_prompt(spec: ToolSpec) -> str:
    """The system-prompt section that shows the tools to a template without tools."""
    listing = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in spec.offered)
    ask = {
        "auto": "If a tool helps to answer, call it; otherwise answer in plain text.",
        "required": "Answer by calling one or more tools.",
        "named": f"Answer by calling the tool {spec.tools[0].name}.",
    }[spec.choice]
    return (
        f"You can call these tools, each described as JSON:\n<tools>\n{listing}\n</tools>\n"
        f'To call a tool, write {CALL_BEGIN}{{"name": "<tool name>", "arguments": '
        f"{{<arguments as JSON>}}}}{CALL_END}, one such line per call. {ask}"
    )


def render_messages(
    messages: list[dict], spec: ToolSpec | None, support: TemplateSupport
) -> tuple[list[dict], list[dict] | None]:
    """The messages and the `tools` argument to give the chat template. `messages` hold
    role and content, `tool_calls` (ToolCall list) on assistant messages and `tool_call_id`
    on tool messages."""
    names = {c.id: c.name for m in messages for c in m.get("tool_calls", ())}
    out: list[dict] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if m.get("tool_calls"):
            if support.tool_calls:
                calls = [_template_call(c) for c in m["tool_calls"]]
                out.append({"role": role, "content": content, "tool_calls": calls})
            else:
                texts = ([content] if content else []) + [call_text(c) for c in m["tool_calls"]]
                out.append({"role": role, "content": "\n".join(texts)})
        elif role == "tool" and support.tool_role:
            rid = m.get("tool_call_id")
            out.append({"role": "tool", "content": content, "tool_call_id": rid})
            if rid in names:
                out[-1]["name"] = names[rid]
        elif role == "tool":
            response = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("tool_results"):
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "tool_results": True})
        else:
            out.append({"role": role, "content": content})
    for m in out:
        m.pop("tool_results", None)
    if spec is None:
        return out, None
    if support.tools:
        return out, [t.as_openai() for t in spec.offered]
    section = tools_system_prompt(spec)
    if out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{section}" if out[0]["content"] else section
    else:
        out.insert(0, {"role": "system", "content": section})
    return out, None


def _template_call(call: ToolCall) -> dict:
    function = {"name": call.name, "arguments": _arguments(call)}
    return {"id": call.id, "type": "function", "function": function}
