"""Role affixes read off Jinja chat templates, without a server."""

import pytest

from lang.chat_template import ChatTemplate

CHATML_WITH_DEFAULT_SYSTEM = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are SmolLM<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def test_chatml_affixes_and_default_system_prompt():
    template = ChatTemplate.from_jinja(CHATML_WITH_DEFAULT_SYSTEM)
    assert template.prefix_and_suffix("user") == ("<|im_start|>user\n", "<|im_end|>\n")
    assert template.prefix_and_suffix("assistant") == ("<|im_start|>assistant\n", "<|im_end|>\n")
    assert template.prefix_and_suffix("system") == ("<|im_start|>system\n", "<|im_end|>\n")
    assert template.default_system_prompt == "You are SmolLM"


def test_llama3_affixes_and_no_default_system_prompt():
    template = ChatTemplate.from_jinja(LLAMA3)
    header = "<|start_header_id|>user<|end_header_id|>\n\n"
    assert template.prefix_and_suffix("user") == (header, "<|eot_id|>")
    assert template.default_system_prompt is None


def test_plain_template_and_unknown_role():
    plain = ChatTemplate.plain()
    assert plain.prefix_and_suffix("assistant") == ("", "")
    with pytest.raises(ValueError, match="no role 'tool'"):
        plain.prefix_and_suffix("tool")
