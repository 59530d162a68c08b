"""Role prefixes and suffixes, read off a model's Jinja chat template by rendering sample
conversations, so that `sgl.user(...)` produces exactly what the served template would."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
_MARK = "RADIXGEN_CONTENT_7F3A"  # stands for a message's content while rendering


@dataclass(frozen=True)
class ChatTemplate:
    """Text around each role's content, and the system prompt the template adds when a
    conversation starts without one (SmolLM2's does)."""

    name: str
    role_affixes: dict[str, tuple[str, str]] = field(default_factory=dict)
    default_system_prompt: str | None = None

    def prefix_and_suffix(self, role: str) -> tuple[str, str]:
        """(text before the content, text after it) for `role`."""
        if role not in self.role_affixes:
            raise ValueError(f"the {self.name} chat template has no role {role!r}")
        return self.role_affixes[role]

    @classmethod
    def plain(cls) -> ChatTemplate:
        """No text around contents: chat APIs keep the roles in their message list."""
        return cls("plain", {role: ("", "") for role in ROLES})

    @classmethod
    def from_jinja(cls, source: str, name: str = "served") -> ChatTemplate:
        """Derive the affixes of a Jinja chat template (as in tokenizer_config.json)."""
        render = _renderer(source)
        system = _affixes(render, [], "system")
        head = [{"role": "system", "content": "S"}]
        user = _affixes(render, head, "user")
        assistant = _affixes(render, [*head, {"role": "user", "content": "U"}], "assistant")
        affixes = {"system": system, "user": user, "assistant": assistant}
        return cls(name, affixes, _default_system_prompt(render, affixes))


def _renderer(source: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)

    def render(messages: list[dict]) -> str:
        return template.render(messages=messages, add_generation_prompt=False, bos_token="")

    return render


def _affixes(render, before: list[dict], role: str) -> tuple[str, str]:
    """What the template adds around a `role` message that follows `before`."""
    base = render(before) if before else ""
    full = render([*before, {"role": role, "content": _MARK}])
    if not full.startswith(base) or _MARK not in full:
        raise ValueError(f"cannot read the {role} role off the chat template")
    prefix, suffix = full[len(base) :].split(_MARK)
    return prefix, suffix


def _default_system_prompt(render, affixes: dict[str, tuple[str, str]]) -> str | None:
    """The system prompt the template inserts before a first user message, if any."""
    text = render([{"role": "user", "content": _MARK}]).split(_MARK)[0]
    lead = text.removesuffix(affixes["user"][0])
    sys_prefix, sys_suffix = affixes["system"]
    if lead and lead.startswith(sys_prefix) and lead.endswith(sys_suffix):
        return lead[len(sys_prefix) : len(lead) - len(sys_suffix)]
    return None
